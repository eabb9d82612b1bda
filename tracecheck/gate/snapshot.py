"""What a baseline keeps of one probe's run: typed snapshots of its stages, taken from a run report
(``ProbeSnapshot.of``), read from a baseline document's JSON once (``from_json``) and written back to it only when
the document is written (``to_json``). The document around them, its settings and loading: document.py.

A snapshot holds nothing that differs between machines: no timings, no absolute paths, no message text. Break files
are made relative the way the probe id is (``relative_location``). A stage's status is recorded as a plain run sees
it, and read under a gate by one rule (``stage_status``). Pure: no torch import.
"""
from __future__ import annotations

import io
import os
import tokenize
from dataclasses import dataclass, field
from typing import Mapping, Sequence, TypedDict

from ..model.evidence import LIBRARY
from ..model.payloads import PAYLOADS, Coverage
from ..model.reportio import Json, integer, string, string_items
from ..model.report import Finding, ProbeReport, StageResult
from ..model.targets import Gate
from ..model.verdict import FAIL, PASS, StageOutcome
from ..stages import REGISTRY, target_of

#: the stage that measures a probe's compile coverage (model/payloads.Coverage), and the counts a snapshot keeps:
#: torch's own counters, the ones PyTorch's CI gates on (benchmarks/dynamo/check_graph_breaks.py TRACKED_METRICS)
COVERAGE_STAGE = "explain"
COVERAGE_METRICS = ("calls_captured", "unique_graphs", "frames_eager", "torch_calls_eager")


class Location(TypedDict):
    """A place in the user's code, relative as probe ids are: what a change points CI annotations at."""

    file: str | None
    line: int | None


def package_relative(file: str) -> str | None:
    """``site-packages/pkg/mod.py`` for a file inside an installed package, else None."""
    norm = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in norm:
            return marker + norm.split(marker, 1)[1]
    return None


def relative_location(file: str | None, probe: ProbeReport) -> str | None:
    """A break's file, relative the way the probe id is, so that it is the same on every machine.

    ``probe.file`` is absolute and the id's file part is relative to the run's rootdir; the break's file
    is re-anchored on the id's directory (``/ci/repo/probes/mhc/model.py`` for the probe
    ``probes/mhc_probes.py::probe`` becomes ``probes/mhc/model.py``). Files inside an installed package keep
    the part after ``site-packages/``.
    """
    if not file:
        return None
    installed = package_relative(file)
    if installed or not os.path.isabs(file):
        return installed or file.replace("\\", "/")
    id_dir = os.path.dirname(probe.id.split("::", 1)[0])
    rel = os.path.relpath(file, os.path.dirname(probe.file))
    return os.path.normpath(os.path.join(id_dir, rel)).replace("\\", "/")


def source_text(code: str) -> str:
    """A break's source line as its identity and as shown: stripped, its comment dropped (``y = f(x)  # note`` is
    ``y = f(x)``), so that editing a comment changes nothing; a line that does not tokenize on its own (a piece of
    a longer statement) is only stripped."""
    line = code.strip()
    try:
        for t in tokenize.generate_tokens(io.StringIO(line).readline):
            if t.type == tokenize.COMMENT:
                return line[:t.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return line


def stage_status(status: str, kinds: Sequence[str], advice: Sequence[str], gated: frozenset[str]) -> str:
    """A stage's status under a gate, decided by one rule: a stage that passed, or failed on advice alone (as
    ``--strict`` fails one), fails exactly when one of its advice kinds is ``gated``, and passes otherwise; any other
    stage keeps the status it ran to.

    A snapshot records it with nothing gated, as a plain run sees the stage, so that a strict and a plain run of
    the same code record the same status; a comparison reads it with the advice its gate names
    (``StageSnapshot.outcome``). Read again with another ``gated``, the recorded status gives what the run's status
    would: the rule, not the order of its uses, decides."""
    if status == PASS or (status == FAIL and not kinds and advice):
        return FAIL if any(k in gated for k in advice) else PASS
    return status


@dataclass(frozen=True)
class BreakSnapshot:
    """One graph break as a baseline keeps it. Its identity is kind, gb_type, file and the line's source text
    (``code``); ``line`` places it; ``gb_code`` (informative: root causes name it) and ``owner`` (whose code, for a
    library's break: ``transformers 5.24.0``) are not compared."""

    kind: str
    gb_type: str | None = None
    file: str | None = None
    line: int | None = None
    gb_code: str | None = None
    code: str | None = None
    owner: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> BreakSnapshot:
        return cls(string(d.get("kind")) or "", string(d.get("gb_type")), string(d.get("file")), integer(d.get("line")),
                   string(d.get("gb_code")), string(d.get("code")), string(d.get("owner")))

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, "gb_type": self.gb_type, "file": self.file, "line": self.line}
        for key, value in (("gb_code", self.gb_code), ("code", self.code), ("owner", self.owner)):
            if value is not None:
                out[key] = value
        return out

    def sort_key(self) -> tuple[str, str, str, int]:
        """The order a snapshot lists its breaks in (kind, gb_type, file, line)."""
        return self.kind, self.gb_type or "", self.file or "", self.line or 0

    @property
    def location(self) -> Location:
        return Location(file=self.file, line=self.line)

    @property
    def described(self) -> str:
        """``graph-break (Failed to trace builtin operator) at model.py:5 `print("hi")```."""
        where = f" at {self.file}:{self.line}" if self.file else ""
        code = f" `{self.code}`" if self.code else ""
        return f"{self.kind} ({self.gb_type or 'no gb_type'}){where}{code}"


@dataclass(frozen=True)
class CoverageCounts:
    """The explain stage's compile coverage (``COVERAGE_METRICS``); ``unread``: keys a newer tracecheck wrote, kept
    as they are and not read."""

    calls_captured: int | None = None
    unique_graphs: int | None = None
    frames_eager: int | None = None
    torch_calls_eager: int | None = None
    unread: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> CoverageCounts:
        return cls(integer(d.get("calls_captured")), integer(d.get("unique_graphs")), integer(d.get("frames_eager")),
                   integer(d.get("torch_calls_eager")), {k: v for k, v in d.items() if k not in COVERAGE_METRICS})

    def to_json(self) -> Json:
        counts = zip(COVERAGE_METRICS, (self.calls_captured, self.unique_graphs, self.frames_eager,
                                        self.torch_calls_eager))
        return {**{k: v for k, v in counts if v is not None}, **self.unread}


@dataclass(frozen=True)
class StageSnapshot:
    """One stage of a probe as a baseline keeps it.

    ``status``: as a plain run decides it (``stage_status`` with nothing gated); ``kinds`` the error kinds found,
    ``advice`` the advice kinds (taxonomy severity), each sorted; ``sites`` where each error kind's findings point
    (grouped by, not compared); ``compiled_autograd`` the counts its stage declares (``StageSpec.counts``), as
    recorded; ``coverage`` the explain stage's. ``target`` is None in a snapshot written without one.
    """

    status: str
    kinds: tuple[str, ...] = ()
    graph_count: int | None = None
    graph_break_count: int | None = None
    graph_break_sites: int | None = None
    breaks: tuple[BreakSnapshot, ...] = ()
    recompiles: int | None = None
    phases: tuple[str, ...] | None = None
    target: str | None = None
    advice: tuple[str, ...] = ()
    sites: Mapping[str, tuple[Location, ...]] = field(default_factory=dict)
    compiled_autograd: Mapping[str, object] = field(default_factory=dict)
    coverage: CoverageCounts | None = None
    #: keys a newer tracecheck wrote: kept as they are and not read
    unread: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, s: StageResult, probe: ProbeReport) -> StageSnapshot:
        """The snapshot of a report's stage (its files relative to ``probe``'s id, ``relative_location``)."""
        found = s.findings or ([s.failure] if s.failure else [])
        plain = Gate()  # recorded as a plain run sees them (--strict aside)
        kinds = tuple(sorted(k for k in {f.kind for f in found} if plain.fails_on(k)))
        advice = tuple(sorted(k for k in {f.kind for f in found} if not plain.fails_on(k)))
        breaks = sorted((BreakSnapshot(b.kind, b.gb_type, relative_location(b.file, probe), b.line,
                                       b.gb_code or None, _break_code(b.context.code),
                                       b.owner.label if b.owner is not None and b.owner.who == LIBRARY else None)
                         for b in s.breaks), key=BreakSnapshot.sort_key)
        spec, payload_type = REGISTRY.get(s.stage), PAYLOADS.get(s.stage)
        declared = spec.counts if spec is not None else {}  # the counts the stage's payload holds, by name
        payload = payload_type.of(s.extra) if declared and payload_type else None
        counts = {k: getattr(payload, k) for k in declared if payload.written(k)} if payload is not None else {}
        cov = Coverage.of(s.extra) if s.stage == COVERAGE_STAGE else None
        coverage = CoverageCounts(cov.calls_captured, cov.unique_graphs, cov.frames_eager, cov.torch_calls_eager) \
            if cov is not None else None
        return cls(
            status=stage_status(s.status, kinds, advice, frozenset()),
            kinds=kinds, graph_count=s.graph_count, graph_break_count=s.graph_break_count,
            graph_break_sites=s.graph_break_sites, breaks=tuple(breaks), recompiles=s.recompile_count,
            phases=tuple(s.phases) if s.phases is not None else None, target=s.target or target_of(s.stage),
            advice=advice, sites=_sites(found, kinds, probe), compiled_autograd=counts,
            coverage=coverage if coverage is not None and coverage.to_json() else None)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> StageSnapshot:
        """A snapshot as written; a field of another type reads as absent (load checks them first: document.py)."""
        sites = d.get("sites")
        ca, cov, breaks = d.get("compiled_autograd"), d.get("coverage"), d.get("breaks")
        phases = d.get("phases")
        return cls(
            status=string(d.get("status")) or "", kinds=string_items(d.get("kinds")),
            graph_count=integer(d.get("graph_count")), graph_break_count=integer(d.get("graph_break_count")),
            graph_break_sites=integer(d.get("graph_break_sites")),
            breaks=tuple(BreakSnapshot.from_json(b) for b in breaks if isinstance(b, dict))
            if isinstance(breaks, list) else (),
            recompiles=integer(d.get("recompiles")), phases=string_items(phases) if isinstance(phases, list) else None,
            target=string(d.get("target")), advice=string_items(d.get("advice")),
            sites={k: tuple(Location(file=string(x.get("file")), line=integer(x.get("line")))
                            for x in v if isinstance(x, dict))
                   for k, v in sites.items() if isinstance(v, list)} if isinstance(sites, dict) else {},
            compiled_autograd=dict(ca) if isinstance(ca, dict) else {},
            coverage=CoverageCounts.from_json(cov) if isinstance(cov, dict) else None,
            unread={k: v for k, v in d.items() if k not in _STAGE_KEYS})

    def to_json(self) -> Json:
        out: Json = {
            "status": self.status,
            "kinds": list(self.kinds),
            "graph_count": self.graph_count,
            "graph_break_count": self.graph_break_count,
            "graph_break_sites": self.graph_break_sites,
            "breaks": [b.to_json() for b in self.breaks],
            "recompiles": self.recompiles,
            "phases": list(self.phases) if self.phases is not None else None,
        }
        if self.target is not None:
            out["target"] = self.target
        if self.advice:
            out["advice"] = list(self.advice)
        if self.sites:
            out["sites"] = {k: [dict(x) for x in v] for k, v in self.sites.items()}
        if self.compiled_autograd:
            out["compiled_autograd"] = dict(self.compiled_autograd)
        if self.coverage is not None:
            out["coverage"] = self.coverage.to_json()
        return {**out, **self.unread}

    def status_under(self, gated: frozenset[str]) -> str:
        """The stage's status where the advice kinds ``gated`` fail like errors (``stage_status``)."""
        return stage_status(self.status, self.kinds, self.advice, gated)

    def outcome(self, stage: str, gated: frozenset[str]) -> StageOutcome:
        """The stage as the verdict reads it (model/verdict.decide), under the advice ``gated``."""
        return StageOutcome(stage, self.status_under(gated), stage_target(stage, self), self.kinds + self.advice)

    def site_of(self, kind: str) -> Location | None:
        """Where a kind's findings point (its first ``sites`` entry), None where nothing placed them (or a
        baseline from before sites)."""
        found = self.sites.get(kind) or ()
        return Location(file=found[0]["file"], line=found[0]["line"]) if found and found[0]["file"] else None


#: the keys a stage snapshot is written with (any other is a newer tracecheck's: kept, not read)
_STAGE_KEYS = frozenset(("status", "kinds", "graph_count", "graph_break_count", "graph_break_sites", "breaks",
                         "recompiles", "phases", "target", "advice", "sites", "compiled_autograd", "coverage"))


def _break_code(code: str | None) -> str | None:
    """A report break's ``context.code`` as the snapshot keeps it (``source_text``), None where there is none."""
    return (source_text(code) or None) if code is not None else None


def _sites(found: list[Finding], kinds: tuple[str, ...], probe: ProbeReport) -> dict[str, tuple[Location, ...]]:
    """Where each error kind points (the user frames of its findings): not compared, only grouped by, so that one
    line's failure in a stage that records no breaks (vmap, export) is one root cause across probes."""
    sites: dict[str, list[Location]] = {}
    for f in found:
        frame = f.user_frame
        if f.kind in kinds and frame is not None and frame.file:
            site = Location(file=relative_location(frame.file, probe), line=frame.line)
            if site not in sites.setdefault(f.kind, []):
                sites[f.kind].append(site)
    return {k: tuple(sorted(v, key=lambda x: (x["file"] or "", x["line"] or 0))) for k, v in sorted(sites.items())}


def stage_target(stage: str, *snaps: StageSnapshot | None) -> str:
    """A stage's target: the registry's (a hand-edited snapshot cannot move a stage out of compile); a stage this
    tracecheck does not know takes its snapshot's."""
    if stage in REGISTRY:
        return target_of(stage)
    return next((s.target for s in snaps if s is not None and s.target is not None), target_of(stage))


@dataclass(frozen=True)
class ProbeSnapshot:
    """One probe as a baseline keeps it: its stages' snapshots, in run order."""

    stages: Mapping[str, StageSnapshot]

    @classmethod
    def of(cls, p: ProbeReport) -> ProbeSnapshot:
        return cls({name: StageSnapshot.of(s, p) for name, s in p.stages.items()})

    @classmethod
    def from_json(cls, d: object) -> ProbeSnapshot:
        stages = d.get("stages") if isinstance(d, dict) else None
        return cls({name: StageSnapshot.from_json(s) for name, s in stages.items() if isinstance(s, dict)}
                   if isinstance(stages, dict) else {})

    def to_json(self) -> Json:
        return {"stages": {name: s.to_json() for name, s in self.stages.items()}}
