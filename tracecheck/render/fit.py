"""Fitting a Markdown document under a size limit (GitHub's 65,536 characters): collapsed ``<details>``
blocks shrink, then go; then sections lose detail (per-probe sections first, then findings from the end);
whole finding sections go only when even one line each does not fit."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

#: A shrunk ``<details>`` body keeps at least this many characters before it is dropped altogether.
DETAIL_FLOOR = 600


@dataclass
class Details:
    """A collapsed ``<details>`` block whose body may be shortened to fit the size limit."""

    summary: str
    body: str
    lang: str = "text"
    keep: str = "head"  # "head" keeps the start when shortened, "tail" the end (tracebacks end at the error)
    original: int = 0
    dropped: bool = False
    shrunk: bool = False

    def __post_init__(self) -> None:
        self.original = len(self.body)
        self._source = self.body

    def render(self) -> str:
        if self.dropped:
            return (f"<details><summary>{self.summary}</summary>\n\n_Removed to fit GitHub's comment limit "
                    f"({self.original:,} characters); see the JSON report._\n\n</details>\n")
        fence_ = fence(self.body)
        return (f"<details><summary>{self.summary}</summary>\n\n{fence_}{self.lang}\n{self.body}\n{fence_}\n\n"
                "</details>\n")

    def shrink_to(self, n: int) -> None:
        """Keep ``n`` characters of the original body (its start or its end) and say how much was cut."""
        marker = f"[... {self.original - n:,} characters cut to fit GitHub's comment limit ...]"
        if self.keep == "tail":
            self.body = marker + "\n" + self._source[-n:]
        else:
            self.body = self._source[:n] + "\n" + marker
        self.shrunk = True


@dataclass
class Section:
    """A piece of the document: text and details, in order. ``droppable`` sections go last-first.

    ``short`` and ``line`` are the same section with less detail (evidence bullets and fix; one line): the
    fitter uses them before it drops anything, so every root cause stays in the document.
    """

    parts: list[str | Details] = field(default_factory=list)
    droppable: bool = False
    is_finding: bool = False
    short: list[str | Details] | None = None
    line: str | None = None
    level: int = 0  # 0: parts, 1: short, 2: line

    def render(self) -> str:
        if self.level == 2 and self.line is not None:
            return self.line
        parts = self.short if self.level >= 1 and self.short is not None else self.parts
        return "".join(p.render() if isinstance(p, Details) else p for p in parts)

    def details(self) -> list[Details]:
        return [p for p in self.parts if isinstance(p, Details)]


def fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    return "`" * max(3, longest + 1)



@dataclass
class FitStats:
    shrunk: int = 0
    dropped: int = 0
    probes_to_lines: int = 0
    findings_short: int = 0
    findings_to_lines: int = 0
    sections_dropped: int = 0

    @property
    def any(self) -> bool:
        return bool(self.shrunk or self.dropped or self.probes_to_lines or self.findings_short
                    or self.findings_to_lines or self.sections_dropped)

    def describe(self) -> str:
        bits = []
        if self.shrunk:
            bits.append(f"{self.shrunk} collapsed detail(s) shortened, largest first")
        if self.dropped:
            bits.append(f"{self.dropped} detail(s) removed")
        if self.probes_to_lines:
            bits.append(f"{self.probes_to_lines} per-probe section(s) cut to one line (graph counts and "
                        "explain() output left out)")
        if self.findings_short:
            bits.append(f"{self.findings_short} finding section(s) cut to their evidence and fix (message, "
                        "source line, fix snippet and traceback left out)")
        if self.findings_to_lines:
            bits.append(f"{self.findings_to_lines} finding section(s) cut to their heading and location")
        if self.sections_dropped:
            bits.append(f"the last {self.sections_dropped} finding section(s) left out")
        elif self.findings_short or self.findings_to_lines:
            bits.append("every root cause is still listed")
        return "; ".join(bits)


def fit(sections: list[Section], budget: int) -> FitStats:
    """Shrink ``sections`` in place until they render within ``budget`` characters.

    Order: shorten the largest ``<details>`` body first (down to ``DETAIL_FLOOR``), then remove details
    (largest first), then render sections with less detail (``Section.short``, ``Section.line``), then drop
    droppable sections from the end.
    """
    stats = FitStats()
    sizes = [len(s.render()) for s in sections]
    total = sum(sizes)
    if total <= budget:
        return stats
    details = [d for s in sections for d in s.details()]
    owner = {id(d): i for i, s in enumerate(sections) for d in s.details()}

    def resize(d: Details, fn: Callable[[], None]) -> None:
        nonlocal total
        i = owner[id(d)]
        before = len(d.render())
        fn()
        after = len(d.render())
        total += after - before
        sizes[i] += after - before

    # 1. shorten the largest bodies, one at a time, just enough or down to the floor
    while total > budget:
        candidates = [d for d in details if not d.dropped and len(d.body) > DETAIL_FLOOR + 100]
        if not candidates:
            break
        d = max(candidates, key=lambda x: len(x.body))
        target = max(DETAIL_FLOOR, len(d.body) - (total - budget) - 80)
        if target >= len(d.body):
            break
        resize(d, lambda: d.shrink_to(target))
    # 2. remove details entirely, largest first
    for d in sorted(details, key=lambda x: len(x.body), reverse=True):
        if total <= budget:
            break
        if not d.dropped:
            resize(d, lambda: setattr(d, "dropped", True))
            stats.dropped += 1
    stats.shrunk = sum(1 for d in details if d.shrunk and not d.dropped)

    def relevel(indices: list[int], level: int) -> None:
        nonlocal total
        for i in indices:
            if total <= budget:
                break
            s = sections[i]
            if s.level >= level or (level == 1 and s.short is None) or (level == 2 and s.line is None):
                continue
            before, old = sizes[i], s.level
            s.level = level
            size = len(s.render())
            if size >= before:  # a short form that says more than the full one ("as in finding N" spelt out)
                s.level = old
                continue
            sizes[i] = size
            total += size - before

    # 3. less detail before fewer sections: per-probe sections to a line, then finding sections to their
    #    evidence and fix, then to a line, each from the end (the first findings keep the most)
    last_first = [i for i in range(len(sections) - 1, -1, -1) if sections[i].droppable]
    findings = [i for i in last_first if sections[i].is_finding]
    relevel([i for i in last_first if not sections[i].is_finding], 2)
    relevel(findings, 1)
    relevel(findings, 2)
    # 4. last resort: drop whole sections from the end
    i = len(sections) - 1
    while total > budget and i > 0:
        if sections[i].droppable:
            total -= sizes[i]
            stats.sections_dropped += sections[i].is_finding
            del sections[i]
            del sizes[i]
        i -= 1
    stats.probes_to_lines = sum(1 for s in sections if s.droppable and not s.is_finding and s.level == 2)
    stats.findings_short = sum(1 for s in sections if s.is_finding and s.level == 1)
    stats.findings_to_lines = sum(1 for s in sections if s.is_finding and s.level == 2)
    if stats.sections_dropped:
        sections.append(Section([f"_{stats.sections_dropped} further finding section(s) left out for size; "
                                 "the JSON report lists them all (`tracecheck show`)._\n\n"]))
    return stats
