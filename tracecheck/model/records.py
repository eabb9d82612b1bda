"""What a stage sends back to the classifier: one ``StageRecord``, its fields declared here, the single contract
between the stage processes (stages/) and ``classify.results.build_stage_result``; and the records it holds, one
frozen dataclass per kind, each typed where the stage makes it: an exception (model/errors.ErrorRecord), a graph
break (``BreakRecord``), a numeric comparison (``MismatchRecord``), a gradient check (``GradcheckOutcome``), a
recompile and a specialized dimension (``RecompileRecord``, ``SpecializedDimension``), draft_export's report
(``DraftExportReport``), an op vmap runs per sample (``FallbackOp``), an op Inductor calls as an extern kernel
(``OpaqueOp``); and one the file's survey sends, an op defined twice (``Redefinition``).

A stage's record crosses to the parent as JSON (isolate/protocol.Result): ``StageRecord.to_wire`` writes it, the
parent reads it with ``from_wire``; no other code reads a record's keys. ``from_raw`` reads a stage record written by
hand (a test's literal) as the wire is read, and refuses a key no field names: nothing is written that nobody reads.
Pure: no torch import.

Every field of ``StageRecord`` says what it holds in the comment above it (``tests/test_records.py`` checks that each
has one); what a stage keeps in ``extra`` goes into the report as it is, documented in docs/report-schema.md.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields, replace
from typing import Any, Callable, TypeVar

from .errors import ErrorRecord, frame_wire
from .evidence import NumericComparison, Specialization, numeric_comparison
from .frame import Frame
from .reportio import Json, integer, number, text, texts

__all__ = ["Frame", "StageRecord", "FIELDS", "END_TO_END"]  # Frame: read from here by most modules

#: a custom op's opcheck outcomes by test (``test_faketensor``...): "SUCCESS" (or opcheck's other word), or the error
OpTests = dict[str, str | ErrorRecord]


@dataclass
class StageRecord:
    #: the stage did not run, and why (every other field is then empty)
    skip_reason: str | None = None
    #: the exception that stopped the stage
    error: ErrorRecord | None = None
    #: graph breaks from the structured trace (evidence/tracelog.TraceCollector); None: this stage does not count them
    breaks: list[BreakRecord] | None = None
    #: warnings raised while the stage ran (Python and C++ TORCH_WARN)
    warnings: list[str] = field(default_factory=list)
    #: compiled-vs-eager (or transform-vs-loop) disagreements, one per phase (stages/_numerics.judge)
    mismatches: list[MismatchRecord] = field(default_factory=list)
    #: Dynamo graphs the compiled run made
    graph_count: int | None = None
    #: graph breaks as people count them, graphs - 1, where graph_count is one forward call's graphs (explain and
    #: the compile stages; not compiled autograd's, which holds backward graphs too); None where not
    graph_break_count: int | None = None
    #: Dynamo's own count, sum(counters["graph_break"].values()), as PyTorch's CI tracks it
    dynamo_graph_break_count: int | None = None
    #: explain()'s own break count, where the explain stage asked it
    explain_graph_break_count: int | None = None
    #: explain()'s break reasons, verbatim
    explain_reasons: list[str] = field(default_factory=list)
    #: "forward" and, where a backward ran and was compared, "backward"
    phases: list[str] | None = None
    #: the stage's own counts and notes, kept in the report as they are (StageResult.extra)
    extra: Json = field(default_factory=dict)
    #: the opcheck stage: {op: {test: "SUCCESS" or the error}}
    opcheck: dict[str, OpTests] = field(default_factory=dict)
    #: the opcheck stage: ops the probe calls only with gradients off (autograd never reaches them)
    grad_free_ops: list[str] = field(default_factory=list)
    #: the opcheck stage: ops called with gradients on whose outputs no gradient reached in the probe's backward
    grad_unused_ops: list[str] = field(default_factory=list)
    #: the opcheck stage: ops only the probe's backward calls (checked with the inputs the backward gave them)
    backward_only_ops: list[str] = field(default_factory=list)
    #: custom ops the probe's file registered (the opcheck stage is scheduled from them)
    registered_custom_ops: list[str] = field(default_factory=list)
    #: the gradcheck stage: one outcome per custom op or autograd.Function, and the probe's own (``END_TO_END``)
    gradcheck: list[GradcheckOutcome] = field(default_factory=list)
    #: the dynamic stage: fake impls checked at other batch sizes ({op: {test: outcome}}, as opcheck)
    fake_checks: dict[str, OpTests] = field(default_factory=dict)
    #: the dynamic stage: dimensions marked dynamic that a guard specialized
    dynamic_specializations: list[SpecializedDimension] = field(default_factory=list)
    #: the export stage: torch.export.draft_export's report; None where it did not run
    draft_export: DraftExportReport | None = None
    #: the vmap stage: torch.func transforms that raised
    transform_errors: list[ErrorRecord] = field(default_factory=list)
    #: the vmap stage: ops that ran through functorch's per-sample fallback (no batching rule)
    fallback_ops: list[FallbackOp] = field(default_factory=list)
    #: the inductor stage: custom ops Inductor called as opaque kernels
    opaque_ops: list[OpaqueOp] = field(default_factory=list)
    #: compiled autograd, dynamic: the recompiles that happen on every step after warm-up
    steady_state_recompiles: list[RecompileRecord] = field(default_factory=list)
    #: gradcheck, opcheck: the error is the eager forward's own (the probe's bug), run again
    same_as_eager: bool = False

    @classmethod
    def from_raw(cls, raw: "Json | StageRecord") -> "StageRecord":
        """The record of a stage record's fields written by hand (a test's literal: each field in its wire form, or
        typed). A key no field names raises ValueError (a stage writing what nobody reads); ``None`` for a field whose
        default is not None (a list, a dict, a flag) reads as that default."""
        if isinstance(raw, StageRecord):
            return raw
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise ValueError(f"a stage record with keys no field reads: {', '.join(unknown)} "
                             "(tracecheck/model/records.py)")
        return cls._read(raw)

    def to_wire(self) -> Json:
        """The record as it crosses to the parent (JSON): the fields that differ from their defaults, each record in
        its wire form."""
        defaults = StageRecord()
        return {f.name: _WRITE.get(f.name, _same)(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) != getattr(defaults, f.name)}

    @classmethod
    def from_wire(cls, d: Json) -> "StageRecord":
        """The record ``to_wire`` sent. A field this version does not have (a stage process of another tracecheck)
        raises ValueError, as from_raw."""
        unknown = sorted(set(d) - set(FIELDS))
        if unknown:
            raise ValueError(f"a stage record this tracecheck cannot read: unexpected field(s) {', '.join(unknown)}")
        return cls._read(d)

    @classmethod
    def _read(cls, d: Json) -> "StageRecord":
        defaults = cls()
        values = {k: (getattr(defaults, k) if v is None and getattr(defaults, k) is not None else v)
                  for k, v in d.items()}
        return cls(**{k: _READ[k](v) if k in _READ and v is not None else v for k, v in values.items()})


FIELDS = tuple(f.name for f in fields(StageRecord))
#: the gradcheck stage's outcome (``StageRecord.gradcheck``) for the probe's own gradient, beside one per call
END_TO_END = "the probe's gradient"

R = TypeVar("R")


def read_list(v: object, read: Callable[[Any], "R | None"]) -> list[R]:
    """A JSON list's records (an entry of the wrong shape is dropped); anything else as none."""
    return [x for x in map(read, v) if x is not None] if isinstance(v, (list, tuple)) else []


@dataclass(frozen=True)
class BreakRecord:
    """One graph break from the structured trace's ``dynamo_graph_break_reason`` (evidence/tracelog.TraceCollector),
    for classify.detect.classify_break."""

    #: Dynamo's reason, verbatim (its gb_type, explanation, hints, debug context)
    reason: str = ""
    #: the graph-break type read from the reason (None when unparsable: never invented), its GB code and page
    gb_type: str | None = None
    gb_code: str | None = None
    doc: str | None = None
    #: where Dynamo placed the break
    file: str | None = None
    line: int | None = None
    #: the user's or a library's line that led there, when the break sits inside torch or generated code
    caller: Frame | None = None
    #: the source line at ``file:line`` ("" when there is none)
    code: str | None = None
    debug_context: str | None = None
    #: the user code traceback Dynamo logged (its last 6,000 characters)
    user_stack: str = ""

    @property
    def site(self) -> tuple[str | None, str | None, int | None]:
        """What tells one break from another: Dynamo retries a frame and logs the same break again."""
        return self.gb_type, self.file, self.line

    def to_wire(self) -> Json:
        return {"gb_type": self.gb_type, "gb_code": self.gb_code, "doc": self.doc, "file": self.file,
                "line": self.line, "reason": self.reason, "caller": frame_wire(self.caller), "code": self.code,
                "debug_context": self.debug_context, "user_stack": self.user_stack}

    @classmethod
    def of(cls, d: Any) -> "BreakRecord | None":
        if isinstance(d, BreakRecord) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        code = d.get("code")
        return cls(reason=str(d.get("reason") or ""), gb_type=text(d.get("gb_type")), gb_code=text(d.get("gb_code")),
                   doc=text(d.get("doc")), file=text(d.get("file")), line=integer(d.get("line")),
                   caller=Frame.from_dict(d.get("caller")), code=code if isinstance(code, str) else None,
                   debug_context=text(d.get("debug_context")), user_stack=str(d.get("user_stack") or ""))


@dataclass(frozen=True)
class MismatchRecord(NumericComparison):
    """One phase's disagreement of a compiled (or transformed) run with eager, as the stage made it
    (stages/_numerics.judge): the comparison (model/evidence.NumericComparison), its phase, and its counts, which a
    stage always gives (a record read from the wire without them: ``of``)."""

    _: KW_ONLY
    # field(): required here too, where a bare annotation would inherit the base's default, None
    disagreeing: int = field()
    compared: int = field()
    #: "forward" (outputs) or "backward" (gradients)
    phase: str

    def to_wire(self) -> Json:
        return {"phase": self.phase, **self.comparison_json()}

    @classmethod
    def of(cls, d: Any) -> "MismatchRecord | None":
        if isinstance(d, MismatchRecord) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        read = numeric_comparison(d)
        # a record written without its counts (an old report's): one tensor, compared
        counted = replace(read, disagreeing=1 if read.disagreeing is None else read.disagreeing,
                          compared=1 if read.compared is None else read.compared)
        return cls.carrying(counted, phase=str(d.get("phase") or "forward"))


@dataclass(frozen=True)
class Derivative:
    """A derivative along one random direction, numerically (a central difference) and by autograd
    (stages/_directional.directional), and the tolerance they are held to."""

    numerical: float
    analytical: float
    #: |numerical - analytical| / max(|numerical|, |analytical|)
    relative_error: float
    #: atol + rtol * max(|numerical|, |analytical|), and its rounding part
    tolerance: float
    atol: float
    #: the central difference's step
    step: float


@dataclass(frozen=True)
class GradientMismatch(Derivative):
    """A backward that disagrees with the numerical derivative along a random direction (stages/_gradients): the
    derivative, and where it was taken."""

    _: KW_ONLY
    #: the input (or leaves) the derivative is taken along
    input: str
    #: the output whose gradient is wrong, when one alone is
    output: str | None = None
    #: end to end: the autograd value over the numerical one (2.0: accumulated twice)
    ratio: float | None = None

    @classmethod
    def along(cls, d: Derivative, input: str, output: str | None = None,
              ratio: float | None = None) -> "GradientMismatch":
        """The mismatch of a measured derivative (a stage's ``Directional``): its measures as they are."""
        return cls(**{f.name: getattr(d, f.name) for f in fields(Derivative)}, input=input, output=output,
                   ratio=ratio)

    def to_wire(self) -> Json:
        out: Json = {"input": self.input}
        if self.output is not None:
            out["output"] = self.output
        if self.ratio is not None:
            out["ratio"] = self.ratio
        return {**out, **{f.name: getattr(self, f.name) for f in fields(Derivative)}}

    @classmethod
    def of(cls, d: Any) -> "GradientMismatch | None":
        if isinstance(d, GradientMismatch) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        def measure(key: str) -> float:  # a measure the wire lost reads as NaN, never as 0
            value = number(d.get(key))
            return value if value is not None else float("nan")

        return cls(**{f.name: measure(f.name) for f in fields(Derivative)},
                   input=str(d.get("input") or "?"), output=text(d.get("output")), ratio=number(d.get("ratio")))


@dataclass(frozen=True)
class GradcheckOutcome:
    """The gradient check of one call (a custom op, an autograd.Function) or of the probe's own gradient
    (``name`` ``END_TO_END``): how it was checked, the inputs checked, and at most one mismatch, or the error the
    forward or backward raised, or why it was skipped (stages/_gradients)."""

    name: str
    #: the call is an autograd.Function's (``name`` is its class), not a custom op's
    function: bool = False
    method: str = ""
    inputs: tuple[str, ...] = ()
    mismatch: GradientMismatch | None = None
    error: ErrorRecord | None = None
    skip: str = ""
    note: str = ""
    #: per input whose check could not decide: why (no finding is made)
    inconclusive: dict[str, str] = field(default_factory=dict)
    #: per input checked by the directional check: |numerical - analytical| / max(|numerical|, |analytical|)
    relative_errors: dict[str, float] = field(default_factory=dict)

    def to_wire(self) -> Json:
        """The fields that hold something."""
        out: Json = {"name": self.name}
        for name, value in (("function", self.function), ("method", self.method), ("inputs", list(self.inputs)),
                            ("mismatch", self.mismatch.to_wire() if self.mismatch else None),
                            ("error", self.error.to_wire() if self.error else None), ("skip", self.skip),
                            ("note", self.note), ("inconclusive", dict(self.inconclusive)),
                            ("relative_errors", dict(self.relative_errors))):
            if value not in ("", None, [], {}, False):
                out[name] = value
        return out

    @classmethod
    def of(cls, d: Any) -> "GradcheckOutcome | None":
        if isinstance(d, GradcheckOutcome) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        inconclusive, errors = d.get("inconclusive"), d.get("relative_errors")
        return cls(name=str(d.get("name") or ""), function=d.get("function") is True,
                   method=str(d.get("method") or ""), inputs=texts(d.get("inputs")),
                   mismatch=GradientMismatch.of(d.get("mismatch")), error=ErrorRecord.of(d.get("error")),
                   skip=str(d.get("skip") or ""), note=str(d.get("note") or ""),
                   inconclusive={str(k): str(v) for k, v in inconclusive.items()}
                   if isinstance(inconclusive, dict) else {},
                   relative_errors={str(k): float(v) for k, v in errors.items() if number(v) is not None}
                   if isinstance(errors, dict) else {})


#: ``RecompileRecord.source``: a Dynamo guard failure, or a compiled-autograd capture (a cache miss)
DYNAMO, COMPILED_AUTOGRAD = "dynamo", "compiled_autograd"


@dataclass(frozen=True)
class RecompileRecord:
    """One recompile from the structured trace (evidence/tracelog.RecompileCollector), tagged with the step that
    was running."""

    #: the reason's first line, without the compile id
    reason: str
    step: int
    #: ``DYNAMO`` or ``COMPILED_AUTOGRAD``
    source: str
    #: "backward" when the recompiled frame is a captured backward graph, else "forward"
    graph: str = "forward"
    #: the user line the guard came from
    user_frame: Frame | None = None
    #: where the user frame was read from, when not the guard's own (stages/_compiled_autograd._recompile_records)
    user_frame_from: str | None = None

    def to_wire(self) -> Json:
        out: Json = {"reason": self.reason, "step": self.step, "source": self.source,
                     "user_frame": frame_wire(self.user_frame), "graph": self.graph}
        if self.user_frame_from is not None:
            out["user_frame_from"] = self.user_frame_from
        return out

    @classmethod
    def of(cls, d: Any) -> "RecompileRecord | None":
        if isinstance(d, RecompileRecord) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        return cls(reason=str(d.get("reason") or ""), step=integer(d.get("step")) or 0,
                   source=str(d.get("source") or "?"), graph=str(d.get("graph") or "forward"),
                   user_frame=Frame.from_dict(d.get("user_frame")), user_frame_from=text(d.get("user_frame_from")))


def specialization_wire(s: Specialization) -> Json:
    """A specialization (evidence/tracelog.SpecializationCollector) as the wire writes it."""
    return {"symbol": s.symbol, "sources": list(s.sources), "value": s.value, "reason": s.reason, "step": s.step,
            "frame": frame_wire(s.frame), "user_frame": frame_wire(s.user_frame)}


@dataclass(frozen=True)
class SpecializedDimension:
    """A dimension marked dynamic that still recompiles at every new size (stages/dynamic.py): the guard that failed,
    and the specialization that pinned it, when the trace saw one."""

    guard: RecompileRecord
    specialization: Specialization | None = None
    #: the batch sizes the stage called the probe at
    batch_sizes: tuple[int, ...] = ()

    def to_wire(self) -> Json:
        return {**self.guard.to_wire(), "batch_sizes": list(self.batch_sizes),
                "specialization": specialization_wire(self.specialization) if self.specialization else None}

    @classmethod
    def of(cls, d: Any) -> "SpecializedDimension | None":
        if isinstance(d, SpecializedDimension) or d is None:
            return d
        guard = RecompileRecord.of(d)
        if guard is None or not isinstance(d, dict):
            return None
        sizes = d.get("batch_sizes")
        return cls(guard, Specialization.of(d.get("specialization")),
                   tuple(n for n in sizes if integer(n) is not None) if isinstance(sizes, list) else ())


@dataclass(frozen=True)
class DraftFailure:
    """One failure of torch.export.draft_export's report (stages/export.py)."""

    #: draft_export's FailureType name, and the kind it maps to (model/taxonomy.draft_kind)
    type: str
    kind: str | None = None
    op: str | None = None
    expr: str | None = None
    reason: str = ""
    #: the source line draft_export names
    code: str | None = None
    #: the innermost user frame of its user stack
    user_frame: Frame | None = None

    def to_wire(self) -> Json:
        return {"type": self.type, "kind": self.kind, "op": self.op, "expr": self.expr, "reason": self.reason,
                "code": self.code, "user_frame": frame_wire(self.user_frame)}

    @classmethod
    def of(cls, d: Any) -> "DraftFailure | None":
        if isinstance(d, DraftFailure) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        return cls(type=str(d.get("type") or "?"), kind=text(d.get("kind")), op=text(d.get("op")),
                   expr=text(d.get("expr")), reason=str(d.get("reason") or ""), code=text(d.get("code")),
                   user_frame=Frame.from_dict(d.get("user_frame")))


@dataclass(frozen=True)
class DraftExportReport:
    """What torch.export.draft_export said after export failed: its failures, or the error it raised, or that it
    ran past the time left (``ran_out``)."""

    failures: tuple[DraftFailure, ...] = ()
    error: ErrorRecord | None = None
    ran_out: bool = False

    def to_wire(self) -> Json:
        if self.ran_out:
            return {"ran_out": True}
        if self.error is not None:
            return {"error": self.error.to_wire()}
        return {"failures": [f.to_wire() for f in self.failures]}

    @classmethod
    def of(cls, d: Any) -> "DraftExportReport | None":
        if isinstance(d, DraftExportReport) or d is None:
            return d
        if not isinstance(d, dict) or not d:
            return None
        return cls(tuple(read_list(d.get("failures"), DraftFailure.of)), ErrorRecord.of(d.get("error")),
                   d.get("ran_out") is True)


@dataclass(frozen=True)
class FallbackOp:
    """A custom op without a batching rule that vmap runs per sample (stages/_torchfunc.fallback_ops): ``confirmed``
    when vmap stopped at it with the fallback turned off."""

    op: str
    confirmed: bool = False

    def to_wire(self) -> Json:
        return {"op": self.op, "confirmed": self.confirmed}

    @classmethod
    def of(cls, d: Any) -> "FallbackOp | None":
        if isinstance(d, FallbackOp) or d is None:
            return d
        return cls(str(d["op"]), d.get("confirmed") is True) if isinstance(d, dict) and d.get("op") else None


@dataclass(frozen=True)
class OpaqueOp:
    """A custom op Inductor's generated code calls as an extern kernel (evidence/tracelog.OutputCodeCollector)."""

    #: ``ns::op``
    op: str
    calls: int = 0
    #: the compiled graphs that call it, by index
    graphs: tuple[int, ...] = ()
    #: the wrapper code's lines that call it
    lines: tuple[str, ...] = ()
    #: the kernels Inductor generated over every compiled graph (None: not counted)
    kernels: int | None = None

    def to_wire(self) -> Json:
        out: Json = {"op": self.op, "calls": self.calls, "graphs": list(self.graphs),
                     "lines": list(self.lines)}
        if self.kernels is not None:
            out["kernels"] = self.kernels
        return out

    @classmethod
    def of(cls, d: Any) -> "OpaqueOp | None":
        if isinstance(d, OpaqueOp) or d is None:
            return d
        if not isinstance(d, dict) or not d.get("op"):
            return None
        graphs = d.get("graphs")
        return cls(str(d["op"]), integer(d.get("calls")) or 0,
                   tuple(g for g in graphs if integer(g) is not None) if isinstance(graphs, list) else (),
                   texts(d.get("lines")), integer(d.get("kernels")))


@dataclass(frozen=True)
class Redefinition:
    """An op name defined again with a different schema (evidence/opwatch: an ``op-redefined`` event), as the file's
    survey sends it to the parent (collect/survey.ProbeEntry.registrations): both schemas, both frames."""

    #: ``ns::name``
    op: str
    first_schema: str
    second_schema: str
    first_frame: Frame | None = None
    second_frame: Frame | None = None

    def to_wire(self) -> Json:
        return {"op": self.op, "first_schema": self.first_schema, "second_schema": self.second_schema,
                "first_frame": frame_wire(self.first_frame), "second_frame": frame_wire(self.second_frame)}

    @classmethod
    def of(cls, d: Any) -> "Redefinition | None":
        """The event read back; one without its op or either schema is dropped."""
        if isinstance(d, Redefinition) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        op, first, second = text(d.get("op")), text(d.get("first_schema")), text(d.get("second_schema"))
        if op is None or first is None or second is None:
            return None
        return cls(op, first, second, Frame.from_dict(d.get("first_frame")), Frame.from_dict(d.get("second_frame")))


def _op_tests(v: Any) -> dict[str, OpTests]:
    """``{op: {test: "SUCCESS" or an error record}}``."""
    if not isinstance(v, dict):
        return {}
    out: dict[str, OpTests] = {}
    for op, tests in v.items():
        if isinstance(tests, dict):
            out[str(op)] = {str(t): (r if isinstance(r, str) else ErrorRecord.of(r) or ErrorRecord())
                            for t, r in tests.items()}
    return out


def _op_tests_wire(v: dict[str, OpTests]) -> dict[str, Json]:
    return {op: {t: r if isinstance(r, str) else r.to_wire() for t, r in tests.items()} for op, tests in v.items()}


def _same(v: Any) -> Any:
    return v


def _wire_list(v: list[Any]) -> list[Json]:
    return [x.to_wire() for x in v]


#: how each field of records reads from the wire (a typed record is read as it is), and writes to it
_READ: dict[str, Callable[[Any], Any]] = {
    "error": ErrorRecord.of, "breaks": lambda v: read_list(v, BreakRecord.of),
    "mismatches": lambda v: read_list(v, MismatchRecord.of), "opcheck": _op_tests, "fake_checks": _op_tests,
    "gradcheck": lambda v: read_list(v, GradcheckOutcome.of),
    "dynamic_specializations": lambda v: read_list(v, SpecializedDimension.of), "draft_export": DraftExportReport.of,
    "transform_errors": lambda v: read_list(v, ErrorRecord.of), "fallback_ops": lambda v: read_list(v, FallbackOp.of),
    "opaque_ops": lambda v: read_list(v, OpaqueOp.of),
    "steady_state_recompiles": lambda v: read_list(v, RecompileRecord.of)}
_WRITE: dict[str, Callable[[Any], Any]] = {
    "error": lambda e: e.to_wire(), "breaks": _wire_list, "mismatches": _wire_list, "opcheck": _op_tests_wire,
    "fake_checks": _op_tests_wire, "gradcheck": _wire_list, "dynamic_specializations": _wire_list,
    "draft_export": lambda d: d.to_wire(), "transform_errors": _wire_list, "fallback_ops": _wire_list,
    "opaque_ops": _wire_list, "steady_state_recompiles": _wire_list}
