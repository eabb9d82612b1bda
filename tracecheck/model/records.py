"""What a stage sends back to the classifier: one record, its fields declared here, the single contract between the stage processes
(stages/) and ``classify.results.build_stage_result``. A stage function returns the record's fields as a plain dict (it
crosses the process boundary as JSON, isolate/protocol.Result); ``StageRecord.from_raw`` is where it becomes typed, in the
stage process, and a key no field names is refused there: nothing is written that nobody reads. The parent reads what
arrives (``to_wire``) with ``from_wire``, unchecked: the record is checked once. Pure: no torch import.

Every field says what it holds in the comment above it (``tests/test_records.py`` checks that each has one);
what a stage keeps in ``extra`` goes into the report as it is, documented in docs/report-schema.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class StageRecord:
    #: the stage did not run, and why (every other field is then empty)
    skip_reason: str | None = None
    #: the exception that stopped the stage (evidence/exceptions.error_record: type, message, chain, gb_type, user_frame, ...)
    error: dict[str, Any] | None = None
    #: graph breaks from the structured trace (evidence/tracelog.TraceCollector records); None: this stage does not count them
    breaks: list[dict[str, Any]] | None = None
    #: warnings raised while the stage ran (Python and C++ TORCH_WARN)
    warnings: list[str] = field(default_factory=list)
    #: compiled-vs-eager (or transform-vs-loop) disagreements, one per phase (stages/_numerics.judge records)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
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
    extra: dict[str, Any] = field(default_factory=dict)
    #: the opcheck stage: {op: {test: "SUCCESS" or an error record}}
    opcheck: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the opcheck stage: ops the probe calls only with gradients off (autograd never reaches them)
    grad_free_ops: list[str] = field(default_factory=list)
    #: the opcheck stage: ops called with gradients on whose outputs no gradient reached in the probe's backward
    grad_unused_ops: list[str] = field(default_factory=list)
    #: the opcheck stage: ops only the probe's backward calls (checked with the inputs the backward gave them)
    backward_only_ops: list[str] = field(default_factory=list)
    #: custom ops the probe's file registered (the opcheck stage is scheduled from them)
    registered_custom_ops: list[str] = field(default_factory=list)
    #: the gradcheck stage: one outcome per custom op or autograd.Function
    gradcheck: list[dict[str, Any]] = field(default_factory=list)
    #: the dynamic stage: fake impls checked at other batch sizes ({op: {test: outcome}}, as opcheck)
    fake_checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the dynamic stage: dimensions marked dynamic that a guard specialized
    dynamic_specializations: list[dict[str, Any]] = field(default_factory=list)
    #: the export stage: torch.export.draft_export's report (failures)
    draft_export: dict[str, Any] = field(default_factory=dict)
    #: the vmap stage: torch.func transforms that raised
    transform_errors: list[dict[str, Any]] = field(default_factory=list)
    #: the vmap stage: ops that ran through functorch's per-sample fallback (no batching rule)
    fallback_ops: list[dict[str, Any]] = field(default_factory=list)
    #: the inductor stage: custom ops Inductor called as opaque kernels
    opaque_ops: list[dict[str, Any]] = field(default_factory=list)
    #: compiled autograd: the recompiles that happen on every step after warm-up
    steady_state_recompiles: list[dict[str, Any]] = field(default_factory=list)
    #: gradcheck, opcheck: the error is the eager forward's own (the probe's bug), run again
    same_as_eager: bool = False

    @classmethod
    def from_raw(cls, raw: "dict[str, Any] | StageRecord") -> "StageRecord":
        """The record of a stage's dict. A key no field names raises ValueError (a stage writing what nobody
        reads); ``None`` for a field whose default is not None (a list, a dict, a flag) reads as that default.
        Values are not type-checked: the field annotations say what each stage writes."""
        if isinstance(raw, StageRecord):
            return raw
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ValueError(f"a stage record with keys no field reads: {', '.join(unknown)} (tracecheck/model/records.py)")
        defaults = cls()
        return cls(**{k: (getattr(defaults, k) if v is None and getattr(defaults, k) is not None else v)
                      for k, v in raw.items()})


    def to_wire(self) -> dict[str, Any]:
        """The record as it crosses to the parent (JSON): the fields that differ from their defaults."""
        defaults = StageRecord()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(defaults, f.name)}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> "StageRecord":
        """The record ``to_wire`` sent: checked once, by ``from_raw`` in the stage process, so read as it is. A
        field this version does not have (a stage process of another tracecheck) raises ValueError, as from_raw."""
        try:
            return cls(**d)
        except TypeError as e:
            raise ValueError(f"a stage record this tracecheck cannot read: {e}") from None


@dataclass(frozen=True)
class Frame:
    """A source location: where a finding points (the user's line, a fake impl's raise, a library's call). On the
    wire and in a report it is a plain dict (an error record's ``user_frame``, ``evidence["user_frame"]``); code
    reads it as a ``Frame`` through ``Frame.from_dict`` or ``Finding.user_frame``, never by its keys."""

    file: str
    line: int | None = None
    function: str | None = None
    #: the source line, stripped
    code: str | None = None

    @classmethod
    def from_dict(cls, d: Any) -> "Frame | None":
        """The frame of a report's or a record's dict; None for a missing one or one without a file (what any
        version's report may hold where nothing placed the failure)."""
        if not isinstance(d, dict) or not d.get("file"):
            return None
        line = d.get("line")
        return cls(str(d["file"]), int(line) if isinstance(line, (int, str)) and str(line).isdigit() else None,
                   d.get("function") or None, d.get("code") or None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def location(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"


FIELDS = tuple(f.name for f in fields(StageRecord))
#: the gradcheck stage's outcome (``StageRecord.gradcheck``) for the probe's own gradient, beside one per call
END_TO_END = "the probe's gradient"
