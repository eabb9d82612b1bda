"""Root causes of a comparison's changes: one new graph break shows up as ~5 changes per probe and stage (status,
kind, graphs, breaks, the break); the diff table, the summary line and the annotations count causes
(``group_changes``), the JSON keeps both. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ..model.reportio import Json
from ..model.verdict import FAILED, PASS
from ..stages import order as stage_order
from .changes import (CAME_WITH, CAPTURED, CHANGED, COUNT_NOUNS, IMPROVED, LOWER_IS_BETTER_ASPECTS, NOT_REQUIRED,
                      REGRESSED, SOFTENED_SUFFIX, Change)
from .snapshot import BreakSnapshot, Location

_WORSE, _BETTER = "worse", "better"


@dataclass(frozen=True)
class ChangeCause:
    """One root cause of a comparison's changes, with every per-stage change it accounts for (``group_changes``).

    A new (gone, moved) graph break at one place, a new (gone) failure or advice kind, or a change nothing else
    explains (more graphs with no new break or kind). ``what`` says it without where, ``new graph break at
    model.py:14 (data-dependent, GB0124)``; ``description`` adds the probes and stages it covers.
    """

    #: regressed when any of its changes regressed (the exit code's rule), improved when all improved, else changed
    effect: str
    #: the explaining change's aspect: break, kind, advice, status, graph_count, ..., probe, stage
    aspect: str
    what: str
    #: ``{"file", "line"}`` (relative) of a graph break, else None
    location: Location | None
    #: the per-stage changes, in the comparison's order
    changes: tuple[Change, ...]

    @property
    def file(self) -> str | None:
        """Where it points (relative, as probe ids are): a break's file, or the file a kind's findings point at."""
        return self.location["file"] if self.location else None

    @property
    def line(self) -> int | None:
        return self.location["line"] if self.location else None

    @property
    def failure_kind(self) -> str | None:
        """The failure kind it is: a break's kind, or the new (gone) kind of a kind or advice cause; else None."""
        if self.aspect == "break":
            return self.graph_break.kind if self.graph_break else None
        if self.aspect in ("kind", "advice"):
            return _kind_of(self.changes[0])
        return None

    @property
    def gb_type(self) -> str | None:
        return self.graph_break.gb_type if self.graph_break else None

    @property
    def gating(self) -> tuple[Change, ...]:
        """The changes that make its effect: for a cause that regressed, those that regressed (a stage of a target
        the gate does not require changed, and is named apart: ``also``); else all of them."""
        if self.effect != REGRESSED:
            return self.changes
        return tuple(c for c in self.changes if c.effect == REGRESSED)

    @property
    def probes(self) -> list[str]:
        return list(dict.fromkeys(c.probe for c in self.gating))

    @property
    def stages(self) -> list[str]:
        return sorted({c.stage for c in self.gating if c.stage}, key=stage_order)

    @property
    def covers(self) -> list[tuple[str, str | None]]:
        """The (probe, stage) pairs it changed where it gates; stage None for a probe-level change (missing, new)."""
        return list(dict.fromkeys((c.probe, c.stage) for c in self.gating))

    @property
    def also(self) -> list[str]:
        """The stages where a cause that regressed only changed something, in no probe regressing (a target not
        required, mostly): shown beside it, never counted as where it regressed."""
        where = set(self.stages)
        return sorted({c.stage for c in self.changes if c.stage and c.stage not in where}, key=stage_order)

    @property
    def also_text(self) -> str:
        """``also in vmap, export (targets not required)``, or ``""``; ``(changed, not regressed)`` where one of
        them is a required target's (a break outweighed there)."""
        also = self.also
        if not also:
            return ""
        required = any(c.stage in also and not NOT_REQUIRED.search(c.detail) for c in self.changes)
        return f"also in {', '.join(also)}" + (" (changed, not regressed)" if required else
                                               f" ({'target' if len(also) == 1 else 'targets'} not required)")

    @property
    def scope(self) -> str:
        """``2 probes × 6 stages``, with ``(9 of 12 probe × stage pairs)`` when not every probe has every stage."""
        probes, stages = self.probes, self.stages
        if not stages:
            return _count(len(probes), "probe")
        pairs, full = len({ps for ps in self.covers if ps[1]}), len(probes) * len(stages)
        text = f"{_count(len(probes), 'probe')} × {_count(len(stages), 'stage')}"
        return text if pairs == full else f"{text} ({pairs} of {full} probe × stage pairs)"

    @property
    def description(self) -> str:
        return f"{self.what} in {self.scope}" + (f"; {self.also_text}" if self.also else "")

    @property
    def graph_break(self) -> BreakSnapshot | None:
        """A break cause's break (its GB code the first its changes name), else None."""
        if self.aspect != "break":
            return None
        brk = next((c.graph_break for c in self.changes if c.aspect == "break" and c.graph_break), None)
        if brk is None:
            return None
        code = next((c.graph_break.gb_code for c in self.changes if c.graph_break and c.graph_break.gb_code), None)
        return replace(brk, gb_code=code)

    def to_dict(self, index: dict[int, int]) -> Json:
        """``index``: ``id(change)`` -> its position in ``Comparison.changes``, which ``changes`` lists."""
        return {"effect": self.effect, "aspect": self.aspect, "what": self.what, "description": self.description,
                "location": self.location, "probes": self.probes, "stages": self.stages, "also": self.also,
                "changes": [index[id(c)] for c in self.changes]}


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _kind_of(c: Change) -> str | None:
    """A kind or advice change's kind: the new one, or the one gone."""
    kind = c.after or c.before
    return kind if isinstance(kind, str) else None


def group_changes(changes: Iterable[Change]) -> list[ChangeCause]:
    """Group per-stage changes by root cause, in the order each cause first appears.

    In each probe and stage, a new failure kind folds into a new break of that kind there; the status going
    pass -> fail, more graphs, recompiles and compiled-autograd counts fold into the first new break, else the
    first new kind (more graph breaks: into a new break only); gone breaks and kinds take the improvements the same
    way. A new kind left with no break of its own (fullgraph and export raise at the break; they record none) folds
    into the probe's new break of that kind in another stage when the probe has exactly one. What is left explains
    itself: a graph count that rises with no new break or kind is its own cause, "more graphs". Causes are then
    keyed across probes and stages: a break by (kind, gb_type, file, line) and whether it is new, gone or moved,
    a kind by its name, a count by its direction, anything else by what it says.
    """
    changes = list(changes)
    head: dict[int, Change] = {}  # id(change) -> the change that explains it, when another one does
    by_stage: dict[tuple[str, str | None], list[Change]] = {}
    for c in changes:
        by_stage.setdefault((c.probe, c.stage), []).append(c)
    for cs in by_stage.values():
        roots: dict[str, list[Change]] = {_WORSE: [], _BETTER: []}
        for c in cs:
            d = _direction(c)
            if c.aspect == "break" and d:
                roots[d].append(c)
        for c in cs:
            d = _direction(c)
            if c.aspect == "kind" and d:
                same = [b for b in roots[d] if b.aspect == "break" and _break_kind(b) == _kind_of(c)]
                if same:
                    head[id(c)] = same[0]
                else:
                    roots[d].append(c)
        for c in cs:
            d = _direction(c)
            if d and (c.aspect in ("status", CAPTURED) or c.aspect in LOWER_IS_BETTER_ASPECTS):
                pool = [r for r in roots[d] if (r.aspect == "break" or c.aspect != "graph_break_count")
                        and (r.aspect != CAPTURED or r.effect == c.effect)]
                if c.aspect == CAPTURED and c.why.startswith(CAME_WITH):  # _with_new_breaks: the break's own
                    pool = [r for r in roots[_WORSE] if r.aspect == "break" and r.effect == REGRESSED]
                if pool:
                    head[id(c)] = pool[0]
                elif c.aspect == CAPTURED:  # ops captured with no break or kind to explain it: frames in eager join it
                    roots[d].append(c)
    _fold_kinds_into_the_probes_break(changes, head)
    groups: dict[tuple[object, ...], list[Change]] = {}
    members: dict[tuple[object, ...], list[Change]] = {}
    for c in changes:
        root = c
        while id(root) in head:
            root = head[id(root)]
        key = _cause_key(root)
        members.setdefault(key, []).append(c)
        if root is c:
            groups.setdefault(key, []).append(c)
    return [_cause(explaining, tuple(members[key])) for key, explaining in groups.items()]


def _direction(c: Change) -> str | None:
    """Whether a change makes its stage worse or better, whatever its effect (in a stage of a target that is not
    required a new break regresses nothing, but is still worse); None for neither (moved, neutral, skipped)."""
    if c.aspect in ("break", "kind"):
        return _WORSE if c.before is None else _BETTER if c.after is None else None
    if c.aspect == "status":
        return _WORSE if c.before == PASS and c.after in FAILED else \
            _BETTER if c.before in FAILED and c.after == PASS else None
    before, after = c.before, c.after
    if c.aspect in (*LOWER_IS_BETTER_ASPECTS, CAPTURED) and isinstance(before, (int, float)) \
            and isinstance(after, (int, float)) and before != after:
        return _WORSE if (after > before) == (c.aspect != CAPTURED) else _BETTER
    return None


def _break_kind(c: Change) -> str | None:
    return c.graph_break.kind if c.graph_break else None


def _break_identity(c: Change) -> tuple[str | None, str | None, str | None, int | None]:
    b = c.graph_break
    return (b.kind, b.gb_type, b.file, b.line) if b else (None, None, None, None)


def _fold_kinds_into_the_probes_break(changes: list[Change], head: dict[int, Change]) -> None:
    """A new (gone) kind that no break of its own stage explains, in a probe whose stages have exactly one new
    (gone) break of that kind: the same root cause, seen by a stage that records no breaks."""
    # (probe, direction, kind) -> the probe's breaks of that kind, by identity
    breaks: dict[tuple[str, str, str | None], dict[tuple[object, ...], Change]] = {}
    at: dict[tuple[str, str, str, int | None], Change] = {}  # (probe, direction, file, line) -> the first break there
    for c in changes:
        d = _direction(c)
        if c.aspect == "break" and d:
            breaks.setdefault((c.probe, d, _break_kind(c)), {}).setdefault(_break_identity(c), c)
            if c.location and c.location["file"]:
                at.setdefault((c.probe, d, c.location["file"], c.location["line"]), c)
    for c in changes:
        d = _direction(c)
        if c.aspect == "kind" and d and id(c) not in head:
            found = breaks.get((c.probe, d, _kind_of(c)), {})
            if len(found) == 1:
                head[id(c)] = next(iter(found.values()))
            elif c.location and c.location["file"]:
                # another kind at the line of the probe's new break (vmap refusing the .item() that breaks the
                # graph): the same line, the same root cause
                brk = at.get((c.probe, d, c.location["file"], c.location["line"]))
                if brk is not None:
                    head[id(c)] = brk


def _plain(detail: str) -> str:
    """A change's detail without the "(target ... not required ...)" or "(outweighed: ...)" at its end."""
    return SOFTENED_SUFFIX.sub("", detail)


def _cause_key(c: Change) -> tuple[object, ...]:
    d = _direction(c)
    if c.aspect == "break":
        return ("break", d or "moved", *_break_identity(c), None if d else c.before)
    if c.aspect in ("kind", "advice"):
        # a kind no break explains, at a user line (its snapshot's ``sites``): one cause across probes; with no
        # place of its own, per probe, so that two probes' unrelated failures of one kind (two ops without a fake,
        # two crashes) are two causes, never one
        side = "new" if c.before is None else "gone"
        if c.location and c.location["file"]:
            return (c.aspect, side, _kind_of(c), c.location["file"], c.location["line"])
        return (c.aspect, side, _kind_of(c), c.probe)
    if c.aspect in COUNT_NOUNS:
        return (c.aspect, d or "changed")
    return (c.aspect, str(c.before), str(c.after), _plain(c.detail))


def _cause(roots: list[Change], changes: tuple[Change, ...]) -> ChangeCause:
    """The cause of ``roots`` (the changes of one key that nothing else explains) and all it accounts for."""
    first = roots[0]
    effects = {c.effect for c in changes}
    effect = REGRESSED if REGRESSED in effects else IMPROVED if effects == {IMPROVED} else CHANGED
    cause = ChangeCause(effect, first.aspect, _plain(first.detail), first.location, changes)
    d = _direction(first)
    b = cause.graph_break
    if first.aspect == "break" and b is not None:
        where = (f" in {b.owner}" if b.owner else "") + (f" at {b.file}:{b.line}" if b.file else "") + \
            (f" `{b.code}`" if b.code else "")
        what = f"new graph break{where}" if d == _WORSE else f"graph break gone{where}" if d == _BETTER else \
            f"graph break moved to {b.file}:{b.line} from {first.before}"
        cause = replace(cause, what=f"{what} ({b.kind}, {b.gb_code or b.gb_type or 'no gb_type'})")
    elif first.aspect in ("kind", "advice") and first.location and first.location["file"]:
        kind, loc = _kind_of(first), first.location
        cause = replace(cause, what=cause.what.replace(f" {kind}", f" {kind} at {loc['file']}:{loc['line']}", 1))
    elif first.aspect in COUNT_NOUNS:
        noun = COUNT_NOUNS[first.aspect]
        more, fewer = ("fewer", "more") if first.aspect == CAPTURED else ("more", "fewer")
        what = f"{more} {noun}" if d == _WORSE else f"{fewer} {noun}" if d == _BETTER else f"{noun} changed"
        moves = {(r.before, r.after) for r in roots}
        cause = replace(cause, what=what + (" ({} -> {})".format(*moves.pop()) if len(moves) == 1 else ""),
                        location=None)
    # worse only in stages of targets the gate does not require, or outweighed by more ops captured: say so, as
    # each change does
    softened = next((m for m in (SOFTENED_SUFFIX.search(c.detail) for c in changes) if m), None)
    if effect == CHANGED and softened:
        cause = replace(cause, what=cause.what + softened.group(0))
    return cause
