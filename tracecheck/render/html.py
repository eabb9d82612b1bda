"""The source view (``--html DIR``): static pages, as coverage.py's HTML report, that mark each source line.

One page per model file of the user's (a file under the run's rootdir that ran a torch call or holds a finding)
and per library file with a finding, each line marked from the report alone: inside a graph Dynamo captured,
run in eager (a torch call no captured graph has), or a finding's line (a graph break, with its kind, GB code and
fix in a ``<details>``); and ``index.html`` with each probe's compile coverage and the findings, the graph breaks
the explain stage timed first, costliest first, then the most widespread. Plain HTML and one stylesheet (jinja2 templates in templates/, shipped with the package): nothing is
fetched when a page is viewed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..gate.snapshot import package_relative
from ..model.evidence import YOURS
from ..model.report import RootCause, RunReport, root_causes
from . import cause, terminal, view
from .paths import PathScrubber

#: line marks, strongest first: a line with a finding, one that ran a torch call in eager, one inside a graph
BREAK, OTHER, EAGER, GRAPH = "break", "other", "eager", "graph"
#: a line shows its most pressing mark: a finding that gates, one of a target not required (○), eager, graph
_RANK = {BREAK: 0, OTHER: 1, EAGER: 2, GRAPH: 3}


@dataclass
class _Line:
    mark: str = ""
    #: probe label -> graph or eager (where the probes disagree, the page says which did what)
    states: dict[str, str] = field(default_factory=dict)
    causes: list[cause.CauseView] = field(default_factory=list)


@dataclass(frozen=True)
class _Page:
    """One source page: the file it shows, its name in the folder, how it is labelled, its counts in words."""

    file: str
    href: str
    label: str
    counts: str


def _page_name(label: str, taken: set[str]) -> str:
    """A file name for a page, unique in the folder (``a/b.py`` and ``a_b.py`` would clean to one name)."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    name, n = base + ".html", 1
    while name in taken:
        n += 1
        name = f"{base}.{n}.html"
    taken.add(name)
    return name


def _label(file: str, rootdir: str) -> str:
    """A file as the pages name it: relative to the rootdir, or from ``site-packages/`` on, else as it is."""
    if _under(file, rootdir):
        return os.path.relpath(file, rootdir)
    return package_relative(file) or file


def _under(file: str, rootdir: str) -> bool:
    """Is ``file`` the user's: under the rootdir and not in an installed package (a virtualenv kept in the project)."""
    if not rootdir or package_relative(file):
        return False
    return not os.path.relpath(os.path.realpath(file), os.path.realpath(rootdir)).startswith("..")


def _readable(file: str, rootdir: str) -> bool:
    """The source a page may show: the user's or an installed package's file, never another file a hand-made
    report names (``show --format html`` on a report from elsewhere)."""
    return (_under(file, rootdir) or package_relative(file) is not None) and os.path.isfile(file)


def _kind_label(v: cause.CauseView, long: bool) -> str:
    """The cause's kind as a page shows it: plain where it fails the run, else marked as gating nothing."""
    if v.standing == cause.GATES:
        return v.kind
    if v.standing == cause.NOT_REQUIRED:
        return f"○ {v.kind}" + (" (target not required: gates nothing)" if long else "")
    return v.kind + (" (advice: gates nothing)" if long else "")


def _finding_view(v: cause.CauseView, labels: dict[str, str]) -> dict[str, str]:
    ev = v.finding.evidence
    return {"kind": _kind_label(v, True), "code": ev.gb_code or "", "doc": ev.doc or "", "headline": ev.headline(),
            "summary": v.summary, "fix": v.fix or "", "more": v.more or "",
            "owner": view.owner_label(v.finding) or "not known",
            "cost": v.cost.text() if v.cost is not None else "",
            "seen": "; ".join(f"{labels[p.id]}: {', '.join(stages)}" for p, stages in v.cause.seen)}


def _reach(c: RootCause) -> tuple[int, int]:
    return len(c.seen), sum(len(stages) for _, stages in c.seen)


def write(directory: str, report: RunReport) -> list[str]:
    """Write the pages into ``directory`` (made if missing); the paths written, ``index.html`` first."""
    import jinja2  # torch's own dependency; imported here so that no other output pays for it

    env = jinja2.Environment(loader=jinja2.PackageLoader("tracecheck.render", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    labels = terminal.probe_labels(report)
    rootdir = report.rootdir or ""
    files: dict[str, dict[int, _Line]] = {}
    for p in report.probes:
        cov = view.coverage(p)
        for file, lines in ((cov.lines or {}) if cov is not None else {}).items():
            page = files.setdefault(file, {})
            for mark, numbers in ((GRAPH, lines.graph), (EAGER, lines.eager)):
                for n in numbers:
                    line = page.setdefault(n, _Line())
                    line.states[labels[p.id]] = mark
                    if not line.mark or _RANK[mark] < _RANK[line.mark]:
                        line.mark = mark
    # what fails the run first, then the costliest breaks (as measured), then the most widespread (view.rank)
    causes = [cause.of(report, c, labels) for c in view.rank(report, sorted(
        root_causes(report.probes), key=lambda c: tuple(-x for x in _reach(c))))]
    for v in causes:
        frame = v.finding.user_frame
        if frame is not None and frame.line and os.path.isabs(frame.file):  # on disk or not (a report from CI)
            line = files.setdefault(frame.file, {}).setdefault(frame.line, _Line())
            mark = BREAK if v.standing == cause.GATES else OTHER
            if not line.mark or _RANK[mark] < _RANK[line.mark]:
                line.mark = mark
            line.causes.append(v)
    # a page per file of the user's (under the rootdir), and per library file with a finding
    files = {f: marks for f, marks in files.items() if os.path.isabs(f) and not os.path.isdir(f)
             and (_under(f, rootdir) or any(x.mark in (BREAK, OTHER) for x in marks.values()))}
    written = [str(out / "index.html"), str(out / "style.css")]
    pages: list[_Page] = []
    taken: set[str] = {"index.html"}
    for file in sorted(files):
        label = _label(file, rootdir)
        name = _page_name(label, taken)
        marks = files[file]
        counts = {m: sum(1 for x in marks.values() if x.mark == m) for m in (GRAPH, EAGER, BREAK, OTHER)}
        summary = (f"{counts[GRAPH]} line(s) inside a graph, {counts[EAGER]} run in eager, "
                   f"{counts[BREAK]} with a finding" + (f", {counts[OTHER]} with a finding of a target not required "
                                                        "(○: gates nothing)" if counts[OTHER] else ""))
        try:
            if not _readable(file, rootdir):
                raise OSError
            source = Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            source = []
            summary += " (the source is not here to read: lines shown by number only)"
        # the file as it is now against the lines the run recorded: an edit since the run moves the marks
        frames = [c.finding.user_frame for x in marks.values() for c in x.causes]
        stale = [f for f in frames if f is not None and f.code and source and f.line
                 and (f.line > len(source) or source[f.line - 1].strip() != f.code.strip())]
        if stale:
            summary += (f" — the file changed since the run (line {stale[0].line} was `{stale[0].code}`): the marks "
                        "follow the run's line numbers; run again for a fresh view")
        n_lines = max([len(source), *marks.keys()]) if marks or source else 0
        rows = []
        for n in range(1, n_lines + 1):
            x = marks.get(n, _Line())
            mixed = len(set(x.states.values())) > 1
            rows.append({"n": n, "text": source[n - 1] if n <= len(source) else "", "mark": x.mark,
                         "findings": [_finding_view(v, labels) for v in x.causes],
                         "probes": "; ".join(f"{probe}: {state}" for probe, state in x.states.items()),
                         "note": ("in a graph in " + ", ".join(k for k, v in x.states.items() if v == GRAPH)
                                  + "; in eager in " + ", ".join(k for k, v in x.states.items() if v == EAGER))
                         if mixed else ""})
        (out / name).write_text(env.get_template("source.html.j2").render(label=label, lines=rows, counts=summary),
                                encoding="utf-8")
        written.append(str(out / name))
        pages.append(_Page(file, name, label, summary))
    href = {page.file: page.href for page in pages}
    probes = []
    for p in report.probes:
        cov = view.coverage(p)
        breaks = view.probe_breaks_cell(p)

        def dash(v: object) -> str:
            return "-" if v is None else str(v)
        probes.append({"id": p.id, "label": labels[p.id], "verdict": p.verdict.status,
                       "calls_captured": dash(cov.calls_captured if cov else None),
                       "graphs": dash(cov.unique_graphs if cov else None),
                       "frames_eager": dash(cov.frames_eager if cov else None),
                       "share": f"~{cov.captured_share:.0%}" if cov and cov.captured_share is not None else "-",
                       "breaks": breaks})
    rows = []
    for v in causes:
        f, frame = v.finding, v.finding.user_frame
        n_probes, n_stages = _reach(v.cause)
        rows.append({"id": f.kind, "kind": _kind_label(v, False), "code": f.evidence.gb_code or "",
                     "where": f"{_label(frame.file, rootdir)}:{frame.line}" if frame else (f.context.op or "-"),
                     "href": f"{href[frame.file]}#L{frame.line}" if frame and frame.file in href else "",
                     "owner": view.owner_label(f) or (YOURS if frame and _under(
                         frame.file, rootdir) else "not known"),
                     "reach": f"{n_probes} probe(s), {n_stages} stage(s)", "cost": v.cost.text() if v.cost is not None else "-",
                     "fix": v.fix or ""})
    env_line = f"torch {report.env.torch or '?'} · Python {report.env.python or '?'}"
    (out / "index.html").write_text(env.get_template("index.html.j2").render(
        environment=env_line, probes=probes, breaks_defined=view.BREAKS_DEFINED, causes=rows, files=pages, command=PathScrubber(root=rootdir or None)(" ".join(report.command)) or "tracecheck"),
        encoding="utf-8")
    loader = env.loader
    assert loader is not None  # set above (PackageLoader)
    (out / "style.css").write_text(loader.get_source(env, "style.css")[0], encoding="utf-8")
    return written
