"""Report data classes: RunReport -> ProbeReport -> StageResult -> Finding / GraphBreak.

Plain data that crosses processes and files. Renderers only read these; `api.run` alone builds them.
The JSON layout is documented in docs/report-schema.md; bump SCHEMA_VERSION on any breaking change.
"""
from __future__ import annotations

import dataclasses
import os
import re

from dataclasses import asdict, dataclass, field
from typing import Any

from . import taxonomy
from .exitcodes import UsageError
from .reportio import Json, integer, is_baseline, number, read_json, string
from .taxonomy import K
from .errors import ErrorRecord
from .records import Frame
# a message's first line and an error's headline: the evidence's own spelling, used everywhere through this module
from .context import Context
from .evidence import Evidence, Owner, first_line, headline, says_nothing  # noqa: F401 - re-exported
from . import evidence as evidence_kinds
from .environment import Environment
from .ops import ID_PREFIX, OpsAudit
from .payloads import CompiledAutogradCounts, StageNotes
from .targets import DEFAULT_REQUIRE, TARGETS, Gate
# the statuses, the load pseudo-stage and the verdict decided from them (model/verdict.py), re-exported: the report's
# vocabulary
from .verdict import (CRASH, FAIL, FAILED, INTERNAL, LOAD_STAGE, PASS, SKIP, STATUSES, TIMEOUT,  # noqa: F401
                      StageOutcome, Verdict, decide)

#: 4: every finding's evidence says its kind (``"what"``: model/evidence.py's tagged union), a frame is written with
#: its four fields, a numeric record leaves out what it did not measure. 3: targets (``require``, each stage's
#: ``target``, per-target verdicts; a stage of a target not required fails no probe) and the ``internal-error`` status. 2: probe ids relative to ``rootdir``, ``phases``,
#: ``numeric-mismatch`` evidence per phase. Older reports still read: the fields added since are optional, and a
#: stage without a target gates as every stage did then.
SCHEMA_VERSION = 4
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)

#: the probe a file's import failure is reported under (``file.py::(import)``) when a kind explains it
IMPORT_PROBE = "(import)"



@dataclass
class Finding:
    """One classified failure or graph break.

    ``kind`` is a stable id from kinds.json; ``context`` holds what varies (op name, builtin, file:line: typed,
    model/context.py); ``evidence`` is the raw material the label was read from (exception type, gb_type, GB code,
    user frame, message excerpt), so a reader can check the label: one kind of model/evidence.py's typed union. A
    dict given as ``context`` or ``evidence`` (a report's JSON, a literal in a test) is read into it once
    (``Context.of``, ``evidence.read``).
    """

    kind: str
    summary: str
    #: made by classify/; kinds.json's templates are filled from its JSON (``Context.to_json``)
    context: Context = field(default_factory=Context)
    evidence: Evidence = field(default_factory=evidence_kinds.MessageEvidence)

    def __post_init__(self) -> None:
        if self.kind not in taxonomy.ids():
            raise ValueError(f"{self.kind!r} is not a kind of tracecheck/model/kinds.json")
        if not isinstance(self.context, Context):  # the JSON's dict: read at the boundary, typed from here on
            self.context = Context.of(self.context)
        if not isinstance(self.evidence, Evidence):  # the JSON's dict: read at the boundary, typed from here on
            self.evidence = evidence_kinds.read(self.evidence)

    @property
    def user_frame(self) -> Frame | None:
        """The line the finding points at, None where nothing placed it."""
        return self.evidence.user_frame

    def to_dict(self) -> Json:
        return {"kind": self.kind, "summary": self.summary, "context": self.context.to_json(),
                "evidence": self.evidence.to_json()}

    @classmethod
    def from_dict(cls, d: Json) -> "Finding":
        """A kind this version does not know (a report from a newer tracecheck) reads as ``unknown``, its own
        id kept in ``context.reported_kind``."""
        for key in ("context", "evidence"):
            if not isinstance(d.get(key) or {}, dict):
                raise ValueError(f"finding {d.get('kind')!r}: {key} must be an object")
        if not isinstance((d.get("evidence") or {}).get("gb_type") or "", str):
            raise ValueError(f"finding {d.get('kind')!r}: evidence.gb_type must be a string or null")
        kind, context = _known_kind(d["kind"], Context.of(d.get("context")))
        return cls(kind, str(d.get("summary", "")), context, evidence_kinds.read(d.get("evidence")))


@dataclass
class GraphBreak:
    """One graph break, deduplicated by (gb_type, file, line)."""

    kind: str
    gb_type: str | None
    gb_code: str | None
    file: str | None
    line: int | None
    reason: str = ""
    doc: str | None = None
    #: what varies (``code``: the break's source line; ``caller``), as Finding.context; a dict is read once
    context: Context = field(default_factory=Context)
    #: whose code the break is (evidence/owner.py); None in a report from before owners
    owner: Owner | None = None

    def __post_init__(self) -> None:
        if self.kind not in taxonomy.ids():
            raise ValueError(f"{self.kind!r} is not a kind of tracecheck/model/kinds.json")
        if not isinstance(self.context, Context):  # a literal in a test: read as a report's would be
            self.context = Context.of(self.context)

    def to_dict(self) -> Json:
        return {**asdict(self), "context": self.context.to_json()}

    @classmethod
    def from_dict(cls, d: Json) -> "GraphBreak":
        kind, context = _known_kind(d["kind"], Context.of(d.get("context")))
        return cls(kind, d.get("gb_type"), d.get("gb_code"), d.get("file"), d.get("line"),
                   d.get("reason", ""), d.get("doc"), context, Owner.of(d.get("owner")))


def _known_kind(kind: str, context: Context) -> tuple[str, Context]:
    if kind in taxonomy.ids():
        return kind, context
    return K.UNKNOWN, dataclasses.replace(context, reported_kind=kind)


#: a stage's counts of graphs and graph breaks, in the JSON report
BREAK_COUNTS = ("graph_count", "graph_break_count", "graph_break_sites", "dynamo_graph_break_count",
                "explain_graph_break_count")


#: the stage whose graph_count holds backward graphs too (compiled autograd's): no graphs - 1 break count
GRAPHS_WITH_BACKWARD = "compiled_autograd"


def upgraded_break_counts(stage: str, d: Json) -> dict[str, int | None]:
    """A stage's break counts from a report or a baseline snapshot. One written before ``graph_break_sites``
    counted distinct breaks in ``graph_break_count``: that number is the sites, and the count is graphs - 1 from its
    recorded ``graph_count`` (the one rule for reports and baselines, so an unchanged probe compares equal)."""
    if "graph_break_sites" in d:
        return {k: d.get(k) for k in BREAK_COUNTS[1:]}
    graphs, old = d.get("graph_count"), d.get("graph_break_count")
    counted = old is not None and isinstance(graphs, int) and graphs > 0 and stage != GRAPHS_WITH_BACKWARD
    return {"graph_break_count": graphs - 1 if counted and isinstance(graphs, int) else None,
            "graph_break_sites": old, "dynamo_graph_break_count": None,
            "explain_graph_break_count": d.get("explain_graph_break_count")}


@dataclass
class StageResult:
    """Outcome of one (probe, stage) run in its own subprocess.

    ``failure`` is the first finding (the one the verdict table shows); ``findings`` holds all of them.
    ``graph_count`` is the Dynamo graphs of the stage's run; ``graph_break_count`` the graph breaks as people count
    them, ``graph_count - 1`` (as ``explain()`` and most users count: None where the stage's graphs are not one
    forward call's); ``graph_break_sites`` the distinct breaks (by gb_type and user location, ``breaks``);
    ``dynamo_graph_break_count`` Dynamo's ``counters["graph_break"]`` total. ``explain_graph_break_count`` is read
    from reports of tracecheck 0.x before the definition was one, never written.
    ``seconds`` is wall time of the stage process. ``phases`` is what the stage ran: ``["forward",
    "backward"]`` or ``["forward"]`` (None: it ran nothing, e.g. skipped or died). ``target`` is the stage's
    target (``targets.TARGETS``; None in a report from before targets). ``internal_error``: the traceback of
    tracecheck's own failure, with status ``internal-error``.
    """

    stage: str
    status: str
    failure: Finding | None = None
    findings: list[Finding] = field(default_factory=list)
    graph_count: int | None = None
    graph_break_count: int | None = None
    graph_break_sites: int | None = None
    dynamo_graph_break_count: int | None = None
    explain_graph_break_count: int | None = None
    breaks: list[GraphBreak] = field(default_factory=list)
    seconds: float = 0.0
    skip_reason: str | None = None
    #: the stage's payloads as the report writes them (docs/report-schema.md), read and written by model/payloads
    extra: Json = field(default_factory=dict)
    phases: list[str] | None = None
    target: str | None = None
    internal_error: str | None = None

    @property
    def recompile_count(self) -> int | None:
        """Recompiles the stage measured (compiled autograd's count); None when the stage counts none or stopped
        early, so its records are partial."""
        counts = CompiledAutogradCounts.of(self.extra)
        return integer(counts.recompile_count) if counts is not None else None

    @property
    def outcome(self) -> StageOutcome:
        """What of this stage decides its probe's verdict: status, target and the kinds found, in order."""
        found = self.findings or ([self.failure] if self.failure else [])
        return StageOutcome(self.stage, self.status, self.target, tuple(dict.fromkeys(f.kind for f in found)))

    @property
    def notes(self) -> StageNotes:
        """What the stage noted beside its payload (what was not checked, explain's reasons, ...)."""
        return StageNotes.of(self.extra) or StageNotes()

    def to_dict(self) -> Json:
        out = asdict(self)
        out["failure"] = self.failure.to_dict() if self.failure is not None else None
        out["findings"] = [f.to_dict() for f in self.findings]
        out["breaks"] = [b.to_dict() for b in self.breaks]
        return out

    @classmethod
    def from_dict(cls, d: Json) -> "StageResult":
        """Raises ValueError for a field of the wrong type (a hand-edited report), which readers turn into exit 2."""
        if d.get("status") not in STATUSES:
            raise ValueError(f"stage {d.get('stage')!r}: status {d.get('status')!r} is not one of {', '.join(STATUSES)}")
        for key in BREAK_COUNTS:
            value = d.get(key)
            if value is not None and integer(value) is None:
                raise ValueError(f"stage {d.get('stage')!r}: {key} must be a count or null, not {value!r}")
        if not isinstance(d.get("extra", {}), dict):
            raise ValueError(f"stage {d.get('stage')!r}: extra must be an object")
        failure = d.get("failure")
        return cls(
            stage=d["stage"],
            status=d["status"],
            failure=Finding.from_dict(failure) if failure else None,
            findings=[Finding.from_dict(f) for f in d.get("findings", [])],
            graph_count=d.get("graph_count"),
            **upgraded_break_counts(str(d.get("stage")), d),
            breaks=[GraphBreak.from_dict(b) for b in d.get("breaks", [])],
            seconds=d.get("seconds", 0.0),
            skip_reason=d.get("skip_reason"),
            extra=d.get("extra", {}),
            phases=d.get("phases"),
            target=d.get("target"),
            internal_error=d.get("internal_error"),
        )


@dataclass
class ProbeReport:
    """All stages of one probe. ``id`` is ``<file>::<name>`` with the file relative to the run's rootdir
    (``RunReport.rootdir``), so that it does not depend on the current directory. ``stages`` is in run order
    (``load`` first), as ``api.run`` and ``from_dict`` keep it."""

    id: str
    file: str
    name: str
    stages: dict[str, StageResult] = field(default_factory=dict)
    #: how the run is gated (set from ``RunReport``'s ``require`` and ``strict``; not serialized here)
    gate: Gate = field(default_factory=Gate)
    #: when the run whose results these are ended, for results reused from the cache (collect/cache.py), else None
    reused: str | None = None
    #: the verdict decided for ``gate`` (``verdict``)
    _decided: tuple[Gate, tuple[StageOutcome, ...], Verdict] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def id_file(self) -> str:
        """The file part of the id, relative to the rootdir; an ``ops::`` id names an op, not a file: the file name of
        its probe module (``ops_probes.py``, in the work dir)."""
        return os.path.basename(self.file) if self.id.startswith(ID_PREFIX) else self.id.split("::", 1)[0]

    @property
    def verdict(self) -> Verdict:
        """The probe's verdict (model/verdict.decide), decided once and kept; decided again only when the stages'
        outcomes or the gate changed since (``classify.settle`` changes them, and so may a test)."""
        outcomes = tuple(s.outcome for s in self.stages.values())
        if self._decided is None or self._decided[:2] != (self.gate, outcomes):
            self._decided = (self.gate, outcomes, decide(outcomes, self.gate))
        return self._decided[2]

    @property
    def graph_breaks(self) -> int | None:
        """tracecheck's forward graph-break count from the explain stage; None when explain did not count."""
        s = self.stages.get("explain")
        return None if s is None else s.graph_break_count

    def to_dict(self) -> Json:
        return {
            "id": self.id,
            "file": self.file,
            "name": self.name,
            "verdict": asdict(self.verdict),
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            **({"reused": self.reused} if self.reused else {}),
        }

    @classmethod
    def from_dict(cls, d: Json) -> "ProbeReport":
        if not all(isinstance(d.get(k), str) for k in ("id", "file", "name")):
            raise ValueError(f"probe {d.get('id')!r}: id, file and name must be strings")
        return cls(
            id=d["id"], file=d["file"], name=d["name"],
            stages={k: StageResult.from_dict(v) for k, v in d.get("stages", {}).items()},
            reused=string(d.get("reused")),
        )


@dataclass
class RunReport:
    """Top of the report tree; ``to_dict`` is the ``--json`` document."""

    probes: list[ProbeReport]
    #: the environment task's record as the report writes it (machine.collect), read through ``env``
    environment: Json
    stages: list[str]
    command: list[str] = field(default_factory=list)
    tracecheck_version: str = ""
    seconds: float = 0.0
    #: absolute folder the probe ids' file parts are relative to (collect/locate.rootdir); "" when unknown
    rootdir: str = ""
    #: ``--strict``: advice findings failed their stages (and so the probe and the exit code)
    strict: bool = False
    #: the targets that gate (``--require``; ``compile`` always): a failed stage of another target fails nothing
    require: tuple[str, ...] = DEFAULT_REQUIRE
    #: ``tracecheck ops``: the test command's own result, what was recorded and what no probe covers; None for a run
    ops: OpsAudit | None = None

    def __post_init__(self) -> None:
        self.require = self.gate.require
        for p in self.probes:
            p.gate = self.gate

    @property
    def gate(self) -> Gate:
        return Gate(tuple(self.require), self.strict)

    @property
    def env(self) -> Environment:
        """The environment read as typed fields (model/environment.Environment): what renderers read. Read anew
        each time: ``environment`` is the dict that is written, and it may change (a merge adds to it)."""
        return Environment.of(self.environment)

    def to_dict(self) -> Json:
        return {
            "schema_version": SCHEMA_VERSION,
            "tracecheck_version": self.tracecheck_version,
            "command": self.command,
            "rootdir": self.rootdir,
            "strict": self.strict,
            "require": list(self.require),
            "stages": self.stages,
            "seconds": self.seconds,
            "environment": self.environment,
            "probes": [p.to_dict() for p in self.probes],
            **({"ops": self.ops.to_json()} if self.ops is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Json) -> "RunReport":
        version = d.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(f"report schema_version {version!r} is not supported (this tracecheck reads "
                             f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})")
        if not isinstance(d.get("environment", {}), dict) or not isinstance(d.get("strict", False), bool):
            raise ValueError("environment must be an object and strict true or false")
        if not isinstance(d.get("command", []), list) or not isinstance(d.get("stages", []), list):
            raise ValueError("command and stages must be lists")
        seconds = d.get("seconds", 0.0)
        if number(seconds) is None:
            raise ValueError(f"seconds must be a number, not {seconds!r}")
        return cls(
            probes=[ProbeReport.from_dict(p) for p in d["probes"]],
            environment=d.get("environment", {}),
            stages=d.get("stages", []),
            command=d.get("command", []),
            tracecheck_version=d.get("tracecheck_version", ""),
            seconds=d.get("seconds", 0.0),
            rootdir=d.get("rootdir", ""),
            strict=bool(d.get("strict", False)),
            # before targets, every stage gated: an old report keeps its meaning
            require=_require(d.get("require"), version),
            ops=OpsAudit.of(d.get("ops")),
        )

    @property
    def passed(self) -> bool:
        return all(p.verdict.status == PASS for p in self.probes)

    @property
    def internal_errors(self) -> list[tuple[ProbeReport, StageResult]]:
        """Stages where tracecheck's own code failed (exit 3, whatever else the run found)."""
        return [(p, s) for p in self.probes for s in p.stages.values() if s.status == INTERNAL]


def load_report(path: str, what: str = "report") -> RunReport:
    """Read a full ``--json`` report. Raises UsageError."""
    doc = read_json(path, what)
    if is_baseline(doc):
        raise UsageError(f"{what} {path}: this is a baseline, not a full report (use the --json output)")
    try:
        return RunReport.from_dict(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{what} {path}: not a valid tracecheck report ({type(e).__name__}: {e})") from e


def _require(value: Any, version: Any) -> tuple[str, ...]:
    """A report's ``require``: a list of targets; absent from a report from before targets (every stage gated then)."""
    if value is None:
        return TARGETS if version in (1, 2) else DEFAULT_REQUIRE
    if not isinstance(value, list) or any(t not in TARGETS for t in value):
        raise ValueError(f"require must be a list of targets ({', '.join(TARGETS)}), not {value!r}")
    return tuple(value)


def is_generated(path: str) -> bool:
    """Code torch generated: ``<eval_with_key>.9``, an FX GraphModule's forward (compiled autograd's graph)."""
    return path.startswith("<eval_with_key>")


def later_step(step: int, error: ErrorRecord | None = None, after: str | None = None) -> str:
    """``training step N fails in <phase> (<headline>) after step 1 ran on the same model and inputs``: a training
    step that fails only after earlier ones ran on the same model (the eager stage's second step, the eager
    reference steps of compiled_autograd and dynamic). ``after``: what ran before, when not steps 1 to N-1 on the same
    model and inputs."""
    where = f" in {error.phase}" if error and error.phase in ("forward", "backward") else ""
    what = f" ({error.headline()})" if error else ""
    ran = "step 1 ran" if step == 2 else f"steps 1 to {step - 1} ran"
    return f"training step {step} fails{where}{what} after {after or ran + ' on the same model and inputs'}"


def op_name(op: str) -> str:
    """One spelling for an op: ``ns::name`` (``ns.name.default`` -> ``ns::name``; other overloads kept)."""
    if "::" in op:
        return op
    parts = op.split(".")
    if len(parts) >= 2:
        overload = f".{parts[2]}" if len(parts) > 2 and parts[2] != "default" else ""
        return f"{parts[0]}::{parts[1]}{overload}"
    return op


def finding_key(f: Finding) -> tuple[Any, ...]:
    """Findings equal under this key are the same problem seen by several stages.

    An op-level finding is identified by kind and op (opcheck sees no user frame, compile stages do);
    any other by kind and user location (gb_type where there is none). An ``unknown`` with neither a frame nor a gb_type (raised deep
    in torch) is also told apart by its exception type and first message line (numbers masked): two different
    errors that only share "no location" are two problems.
    """
    op = f.context.op
    if op:  # a label (an autograd.Function's qualified name) as it is: op_name would read ns.op.overload
        return (f.kind, op if f.context.op_is_label else op_name(op))
    frame = f.user_frame
    # at one user line, one kind is one problem whichever stage saw it: fullgraph's error and explain's break of the
    # same .item() carry different gb_types (or none); only where no frame places it does the gb_type tell apart
    key: tuple[Any, ...] = (f.kind, None if frame else f.evidence.gb_type, frame and frame.file,
                            frame and frame.line, f.context.builtin, f.context.what)
    if f.kind == K.UNKNOWN and frame is None and not f.evidence.gb_type:
        words = re.sub(r"0x[0-9a-fA-F]+|\d+", "N", first_line(f.evidence.message))[:200]
        key += (f.evidence.exception_type, words)
    return key


def group_findings(p: ProbeReport) -> list[tuple[list[str], Finding]]:
    """Each distinct finding once, with the stages that saw it (the first stage's evidence is kept)."""
    groups: dict[tuple[Any, ...], tuple[list[str], Finding]] = {}
    for stage, s in p.stages.items():
        for f in s.findings:
            stages, _ = groups.setdefault(finding_key(f), ([], f))
            if stage not in stages:
                stages.append(stage)
    return list(groups.values())


@dataclass
class RootCause:
    """One problem (``finding_key``: kind with user frame, or kind with op) and every probe and stage that saw
    it; ``finding`` is the first sighting's, evidence included."""

    finding: Finding
    seen: list[tuple[ProbeReport, list[str]]]


def root_causes(probes: list[ProbeReport]) -> list[RootCause]:
    """The distinct findings of ``probes``, each once, in the order first seen (probe order, then stage)."""
    causes: dict[tuple[Any, ...], RootCause] = {}
    for p in probes:
        for stages, f in group_findings(p):
            key = finding_key(f)
            if not f.context.op and f.user_frame is None:
                key += (p.id,)  # nothing places it (a crash, a timeout): the same kind elsewhere is another cause
            cause = causes.setdefault(key, RootCause(f, []))
            cause.seen.append((p, stages))
    return list(causes.values())
