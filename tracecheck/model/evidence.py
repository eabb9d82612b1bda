"""A finding's evidence, typed where it is made: a tagged union (``Evidence`` and one frozen subclass per kind of
evidence, the tag its ``what``). classify/ builds them from a stage's records; renderers read their fields; the report's
JSON is their ``to_json`` (with ``"what"``), read back by ``read`` (a report from before the tag is read by the keys
its kind writes). The kinds: an ``exception`` (type, chain, root cause, frames), a ``graph_break`` (gb_type, GB code,
Dynamo's reason), a ``numeric`` comparison (the worst tensor against its reference), a ``gradient`` check, a
``process`` that died (its stderr tail), a ``registration`` made twice, a ``specialization``, a ``recompile``, vmap's
per-sample ``fallback``, an ``opaque`` extern kernel, a ``draft_export`` failure, a ``message`` alone. Pure: no torch
import.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, TypeVar

from .frame import Frame
from .reportio import Json, finite, flag, integer, items, obj, text, texts

#: the kinds of evidence (``Evidence.what``, the JSON's ``"what"``)
EXCEPTION, GRAPH_BREAK, NUMERIC, GRADIENT, PROCESS = "exception", "graph_break", "numeric", "gradient", "process"
REGISTRATION, SPECIALIZATION, RECOMPILE, FALLBACK = "registration", "specialization", "recompile", "fallback"
OPAQUE, DRAFT_EXPORT, MESSAGE = "opaque", "draft_export", "message"


def first_line(text: Any) -> str:
    """The first line of a message that says something: past BackendCompilerFailed's ``backend='...' raised:``
    and Dynamo's ``Encountered graph break when attempting to trace ...`` headers."""
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return next((ln for ln in lines if not _GENERIC_FIRST.match(ln)), lines[0] if lines else "")


_GENERIC_FIRST = re.compile(r"^(Encountered graph break when attempting to trace|backend=\S+ raised:)")


def says_nothing(text: Any) -> bool:
    """A message whose every line is a wrapper's header (``backend='aot_eager' raised:``) or that is empty."""
    line = first_line(text)
    return not line or bool(_GENERIC_FIRST.match(line))


def headline(error: Any, limit: int = 200) -> str:
    """``Type: first line`` of an error record (a dict with ``type`` and ``message``, evidence/exceptions.error_record)
    or of an exception: the type's short name and the message's first line that says something (``first_line``),
    cut at ``limit``. The one spelling of a run's failure in a skip reason, a note or a finding's evidence."""
    if isinstance(error, BaseException):
        kind = type(error).__name__
        try:
            message: Any = str(error)
        except Exception:  # the probe's exception class may break __str__
            message = ""
    else:
        kind, message = str(error.get("type") or "error"), error.get("message")
    text = f"{kind.rsplit('.', 1)[-1]}: {first_line(message)}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class InnerException:
    """The exception an error comes down to (classify.facts.innermost), when it is not the outermost one."""

    type: str
    message: str


@dataclass(frozen=True)
class WorstTensor:
    """A numeric comparison's worst tensor (stages/_numerics.judge): what it is and how far it is off."""

    what: str | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    reference_dtype: str | None = None
    rmse_compiled_vs_fp64: float | None = None
    rmse_eager_vs_fp64: float | None = None
    error_ratio: float | None = None
    #: half precision with no higher-precision reference: judged against eager for a gross error only
    relative_rmse_vs_eager: float | None = None
    relative_rmse_bound: float | None = None
    cos_threshold: float | None = None
    #: no float64 reference: allclose at this tolerance
    tol: float | None = None
    max_abs_diff: float | None = None
    cos_similarity: float | None = None
    #: torch._dynamo.utils.same's failed checks
    failed: tuple[str, ...] = ()
    detail: str | None = None
    #: whether a float64 reference judged it, the jittered runs' worst error, and which rule decided, in words
    fp64_used: bool | None = None
    rmse_jittered_vs_fp64: float | None = None
    rule: str | None = None

    @classmethod
    def of(cls, d: Any) -> "WorstTensor":
        d = obj(d)
        shape = d.get("shape")
        return cls(**{k: d.get(k) for k in ("what", "dtype", "reference_dtype", "rmse_compiled_vs_fp64",
                                             "rmse_eager_vs_fp64", "error_ratio", "relative_rmse_vs_eager",
                                             "relative_rmse_bound", "cos_threshold", "tol", "max_abs_diff",
                                             "cos_similarity", "detail", "rmse_jittered_vs_fp64", "rule")},
                   shape=tuple(shape) if isinstance(shape, (list, tuple)) else None,
                   failed=texts(d.get("failed")), fp64_used=flag(d.get("fp64_used")))

    def to_json(self) -> Json:
        """The fields measured (a field left None was not: it is not written)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if not _empty(v)}

    @property
    def gross_error_only(self) -> bool:
        return self.relative_rmse_vs_eager is not None


@dataclass(frozen=True)
class NumericMismatch:
    """One phase's record of a numeric comparison (stages/_numerics.judge): how many tensors disagree, of how
    many, and the worst. ``tracecheck fix`` reads its eager comparison of the patched probe through it."""

    #: "forward" | "backward"
    phase: str = ""
    compared: int | None = None
    disagreeing: int | None = None
    worst: WorstTensor = field(default_factory=WorstTensor)
    #: what the disagreeing tensors are (the first 20)
    disagreeing_tensors: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "NumericMismatch":
        d = obj(d)
        return cls(phase=str(d.get("phase") or ""), compared=integer(d.get("compared")),
                   disagreeing=integer(d.get("disagreeing")), worst=WorstTensor.of(d.get("worst")),
                   disagreeing_tensors=texts(d.get("disagreeing_tensors")))


#: whose code a frame is (evidence/owner.py): the user's, an installed library's, torch's, or not known
YOURS, LIBRARY, TORCH, UNKNOWN = "yours", "library", "torch", "unknown"


@dataclass(frozen=True)
class Owner:
    """Whose code a finding's frame or a graph break is (``evidence["owner"]``, ``GraphBreak.owner``): ``who`` is
    ``yours`` (under the run's rootdir), ``library`` or ``torch`` (an installed distribution: ``name``, ``version``)
    or ``unknown`` (a file outside the rootdir in no distribution)."""

    who: str
    name: str | None = None
    version: str | None = None

    @classmethod
    def of(cls, d: Any) -> "Owner | None":
        """Read an owner record; None for none (a report from before owners) or one of the wrong shape."""
        if isinstance(d, Owner):
            return d
        if not isinstance(d, dict) or d.get("who") not in (YOURS, LIBRARY, TORCH, UNKNOWN):
            return None
        name, version = d.get("name"), d.get("version")
        return cls(str(d["who"]), str(name) if name else None, str(version) if version else None)

    @property
    def label(self) -> str:
        """What a renderer shows: ``yours``, ``transformers 5.24.0``, ``torch 2.13.0``, ``unknown``."""
        if self.who in (YOURS, UNKNOWN) or not self.name:
            return self.who
        return f"{self.name} {self.version}" if self.version else self.name


@dataclass(frozen=True)
class Evidence:
    """What a finding's label was read from, typed where it is made (module docstring). This base is the header every
    kind of evidence shares (the message, the line it points at, whose code that is, and the facts a one-line summary
    of any finding reads); each subclass adds its own body and says which fields it writes (``_writes``: the JSON
    keys, in order; ``_always``: those written even when empty). The tag is the class's ``what``."""

    what: ClassVar[str] = ""
    _writes: ClassVar[tuple[str, ...]] = ()
    _always: ClassVar[tuple[str, ...]] = ()

    #: the outermost exception's message (trimmed), Dynamo's reason for a break, or a warning's text
    message: str = ""
    user_frame: Frame | None = None
    #: whose code ``user_frame`` is (evidence/owner.py); None in a report from before owners
    owner: Owner | None = None
    traceback: str = ""
    #: "setup" | "forward" | "backward" | an opcheck test name
    phase: str | None = None
    exception_type: str | None = None
    #: Dynamo's graph-break type, its GB code and the code's page (graph-break registry)
    gb_type: str | None = None
    gb_code: str | None = None
    doc: str | None = None

    def headline(self) -> str:
        """The message a finding shows: its first line that says something (``first_line``: never a wrapper's
        header alone)."""
        return first_line(self.message)

    def detail(self) -> str:
        """The longest account there is: the traceback, else the message."""
        return self.traceback or self.message

    def to_json(self) -> Json:
        """The report's JSON of this evidence (docs/report-schema.md): ``what``, then the fields the kind writes."""
        out: Json = {"what": self.what}
        for name in self._writes:
            value = getattr(self, name)
            if name in self._always or not _empty(value):
                out[name] = _json(value)
        for name in _HEADER:  # a header field this kind does not write itself is kept where it was given
            value = getattr(self, name)
            if name not in out and not _empty(value):
                out[name] = _json(value)
        return out


#: the fields every kind of evidence has (``Evidence``'s own)
_HEADER = tuple(f.name for f in fields(Evidence))


@dataclass(frozen=True)
class ExceptionEvidence(Evidence):
    """An exception a stage caught (classify.detect.classify_error): its type and chain, the root cause, the frames."""

    what: ClassVar[str] = EXCEPTION
    _writes: ClassVar[tuple[str, ...]] = (
        "exception_type", "exception_chain", "gb_type", "gb_code", "user_frame", "phase", "message", "traceback", "root",
        "torch_frame", "opcheck_test", "batch_size", "step", "backends", "rerun_of", "transform")
    _always: ClassVar[tuple[str, ...]] = ("exception_type", "exception_chain", "gb_type", "gb_code", "user_frame",
                                          "phase", "message", "traceback")

    #: the types of the exception and what it wraps, outermost first
    exception_chain: tuple[str, ...] = ()
    root: InnerException | None = None
    #: torch-internal-error: the frame of torch's own code (or graph) that raised, never the user's
    torch_frame: Frame | None = None
    opcheck_test: str | None = None
    #: the dynamic stage's fake check at another batch size
    batch_size: int | None = None
    #: the eager stage's training step that failed (2: the first step ran)
    step: int | None = None
    #: compiled_autograd: what each backend did with the failing steps
    backends: dict[str, str] = field(default_factory=dict)
    #: the op opcheck re-ran when this is the eager stage's error again (classify/attribute.unknowns)
    rerun_of: str | None = None
    #: the torch.func transform the error was raised under
    transform: str | None = None

    def headline(self) -> str:
        """The root cause's first line that says something, as ``Type: line``; the outermost exception's own first
        line when it already quotes that line (a richer form: Dynamo's ``call_function aten.div(...): got
        TypeError('...')``) or when there is no deeper cause."""
        outer = first_line(self.message)
        if self.root is None:
            return outer
        line = first_line(self.root.message)
        if len(line) >= _QUOTED_MIN and line in outer:  # a short line ("0", "a") is in any text by chance
            return outer
        return headline({"type": self.root.type, "message": self.root.message}, 300) if line else outer


@dataclass(frozen=True)
class BreakEvidence(Evidence):
    """A graph break from the structured trace (classify.detect.break_finding): Dynamo's gb_type, GB code, page and
    reason; a break in code torch generated has a ``generated_frame`` and no user frame."""

    what: ClassVar[str] = GRAPH_BREAK
    _writes: ClassVar[tuple[str, ...]] = ("gb_type", "gb_code", "doc", "user_frame", "message", "generated_frame")
    _always: ClassVar[tuple[str, ...]] = ("gb_type", "gb_code", "doc", "user_frame", "message")

    #: where in code torch generated (compiled autograd's graph) the break sits, with no user frame under it
    generated_frame: Frame | None = None


C = TypeVar("C", bound="NumericComparison")


@dataclass(frozen=True)
class NumericComparison:
    """One phase's compiled-vs-eager (or transform-vs-reference) comparison (stages/_numerics.judge): how many tensors
    disagree of how many, the worst, the reference it was judged against, and what the probe called. Declared once:
    the stage's record (model/records.MismatchRecord) and the finding's evidence (``NumericEvidence``) are this, each
    built from one by ``carrying``. (Not gate/comparison.Comparison, a report against its baseline.)"""

    disagreeing: int | None = None
    compared: int | None = None
    worst: WorstTensor = field(default_factory=WorstTensor)
    #: what the disagreeing tensors are (the first 20)
    disagreeing_tensors: tuple[str, ...] = ()
    #: whether a float64 (or float32, for half precision: ``reference_dtype``) run judged it, and why not
    fp64_reference: bool | None = None
    reference_dtype: str | None = None
    fp64_unavailable: str | None = None
    #: the custom ops and random ops one eager forward called (stages/_execution.with_causes); None: not recorded
    custom_ops: tuple[str, ...] | None = None
    random_ops: tuple[str, ...] = ()
    #: the torch.func transform compared against its reference (vmap: an eager loop over the batch)
    transform: str | None = None
    #: the dynamic stage: the batch size the comparison was made at
    batch_size: int | None = None

    @classmethod
    def carrying(cls: type[C], comparison: NumericComparison, **own: Any) -> C:
        """A ``cls`` (the stage's record, the finding's evidence) holding ``comparison``'s fields as they are
        (``asdict`` would copy ``worst`` into a dict), and its own fields ``own`` (a phase, an evidence's header)."""
        return cls(**{f.name: getattr(comparison, f.name) for f in fields(NumericComparison)}, **own)

    def comparison_json(self) -> Json:
        """The comparison's fields as JSON writes them: those that hold something, and ``COMPARISON_ALWAYS``."""
        return {name: _json(getattr(self, name)) for name in COMPARISON_FIELDS
                if name in COMPARISON_ALWAYS or not _empty(getattr(self, name))}


#: the fields of a comparison, in the order JSON writes them
COMPARISON_FIELDS = tuple(f.name for f in fields(NumericComparison))
#: written even when empty; custom_ops: [] is "none called", null "not recorded"
COMPARISON_ALWAYS = ("disagreeing", "compared", "worst", "custom_ops")


def numeric_comparison(d: Json) -> NumericComparison:
    """A comparison read from a record's or a report's JSON: a missing key is the field's default, a value of the
    wrong shape reads as missing."""
    custom = d.get("custom_ops")
    return NumericComparison(
        disagreeing=integer(d.get("disagreeing")), compared=integer(d.get("compared")),
        worst=WorstTensor.of(d.get("worst")), disagreeing_tensors=texts(d.get("disagreeing_tensors")),
        fp64_reference=flag(d.get("fp64_reference")), reference_dtype=text(d.get("reference_dtype")),
        fp64_unavailable=text(d.get("fp64_unavailable")),
        custom_ops=texts(custom) if isinstance(custom, (list, tuple)) else None,
        random_ops=texts(d.get("random_ops")), transform=text(d.get("transform")),
        batch_size=integer(d.get("batch_size")))


@dataclass(frozen=True)
class NumericEvidence(Evidence, NumericComparison):
    """A numeric comparison's evidence: the stage's comparison (``NumericComparison``) with the header every evidence
    has."""

    what: ClassVar[str] = NUMERIC
    _writes: ClassVar[tuple[str, ...]] = ("phase", *COMPARISON_FIELDS)
    _always: ClassVar[tuple[str, ...]] = ("phase", *COMPARISON_ALWAYS)


@dataclass(frozen=True)
class GradientEvidence(Evidence):
    """A backward that disagrees with the numerical derivative (stages/_gradients: one call's, or the probe's own
    end to end): the input and output, both derivatives, the tolerance and step of the central difference."""

    what: ClassVar[str] = GRADIENT
    _writes: ClassVar[tuple[str, ...]] = ("method", "note", "input", "output", "ratio", "numerical", "analytical",
                                          "relative_error", "tolerance", "atol", "step")
    _always: ClassVar[tuple[str, ...]] = ("method", "note")

    method: str | None = None
    note: str | None = None
    input: str | None = None
    output: str | None = None
    #: the probe's gradient over the numerical one (2.0: accumulated twice)
    ratio: float | None = None
    numerical: float | None = None
    analytical: float | None = None
    relative_error: float | None = None
    tolerance: float | None = None
    atol: float | None = None
    step: float | None = None


@dataclass(frozen=True)
class ProcessEvidence(Evidence):
    """A stage process that never reported (timeout, crash): why, and its stderr's tail (the faulthandler stack)."""

    what: ClassVar[str] = PROCESS
    _writes: ClassVar[tuple[str, ...]] = ("stderr_tail", "cause", "phase")
    _always: ClassVar[tuple[str, ...]] = ("stderr_tail", "cause")

    cause: str | None = None
    stderr_tail: str = ""

    def detail(self) -> str:
        return self.traceback or self.message or self.stderr_tail


@dataclass(frozen=True)
class RegistrationEvidence(Evidence):
    """One op name registered twice with different schemas (op-redefined): both schemas and both frames."""

    what: ClassVar[str] = REGISTRATION
    _writes: ClassVar[tuple[str, ...]] = ("first_schema", "second_schema", "first_frame", "user_frame")
    _always: ClassVar[tuple[str, ...]] = _writes

    first_schema: str | None = None
    second_schema: str | None = None
    first_frame: Frame | None = None


@dataclass(frozen=True)
class Specialization:
    """A dimension the shape environment replaced by a constant (evidence/tracelog.SpecializationCollector)."""

    symbol: str | None = None
    sources: tuple[str, ...] = ()
    value: str | None = None
    reason: str | None = None
    step: int | None = None
    #: the innermost frame outside torch and tracecheck that forced it (a fake impl's line, model code)
    frame: Frame | None = None
    user_frame: Frame | None = None

    @classmethod
    def of(cls, d: Any) -> "Specialization | None":
        if not isinstance(d, dict):
            return None
        return cls(text(d.get("symbol")), texts(d.get("sources")), text(d.get("value")), text(d.get("reason")),
                   integer(d.get("step")), Frame.from_dict(d.get("frame")), Frame.from_dict(d.get("user_frame")))


@dataclass(frozen=True)
class SpecializationEvidence(Evidence):
    """A dynamic dimension that still recompiles at every new size (stages/dynamic.py): the guard that failed, at
    ``guard_user_frame``, and the specialization that pinned it, when the trace saw one."""

    what: ClassVar[str] = SPECIALIZATION
    _writes: ClassVar[tuple[str, ...]] = ("reason", "user_frame", "guard_user_frame", "specialization", "step")
    _always: ClassVar[tuple[str, ...]] = _writes

    reason: str = ""
    guard_user_frame: Frame | None = None
    specialization: Specialization | None = None
    step: int | None = None


@dataclass(frozen=True)
class RecompileEvidence(Evidence):
    """Steady-state recompiles of one cause (classify.results.recompile_findings): the first reason, the steps, the
    distinct reasons."""

    what: ClassVar[str] = RECOMPILE
    _writes: ClassVar[tuple[str, ...]] = ("user_frame", "reason", "steps", "reasons", "user_frame_from")
    _always: ClassVar[tuple[str, ...]] = ("user_frame", "reason", "steps")

    reason: str = ""
    steps: tuple[int | None, ...] = ()
    reasons: tuple[str, ...] = ()
    #: where the user frame was read from, when not the guard's own
    user_frame_from: str | None = None


@dataclass(frozen=True)
class FallbackEvidence(Evidence):
    """A custom op vmap runs through its per-sample fallback (stages/_torchfunc.fallback_ops)."""

    what: ClassVar[str] = FALLBACK
    _writes: ClassVar[tuple[str, ...]] = ("dispatch_keys", "confirmed", "confirmation")
    _always: ClassVar[tuple[str, ...]] = _writes

    dispatch_keys: str = ""
    confirmed: bool = False
    confirmation: str = ""


@dataclass(frozen=True)
class OpaqueEvidence(Evidence):
    """A custom op Inductor's generated code calls as an extern kernel (evidence/tracelog.OutputCodeCollector): the
    lines that call it, the graphs, and how many kernels Inductor generated for the rest."""

    what: ClassVar[str] = OPAQUE
    _writes: ClassVar[tuple[str, ...]] = ("output_code", "graphs", "generated_kernels")
    _always: ClassVar[tuple[str, ...]] = _writes

    output_code: tuple[str, ...] = ()
    graphs: tuple[Any, ...] = ()
    generated_kernels: int | None = None


@dataclass(frozen=True)
class DraftExportEvidence(Evidence):
    """One failure of torch.export.draft_export's report, with what torch.export.export raised."""

    what: ClassVar[str] = DRAFT_EXPORT
    _writes: ClassVar[tuple[str, ...]] = ("draft_export_type", "user_frame", "reason", "exception_type", "message")
    _always: ClassVar[tuple[str, ...]] = _writes

    draft_export_type: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class MessageEvidence(Evidence):
    """A message alone (a warning torch printed: the autograd-not-implemented fallback)."""

    what: ClassVar[str] = MESSAGE
    _writes: ClassVar[tuple[str, ...]] = ("message",)
    _always: ClassVar[tuple[str, ...]] = _writes


#: every kind of evidence by its tag (the JSON's ``what``)
KINDS: dict[str, type[Evidence]] = {c.what: c for c in (
    ExceptionEvidence, BreakEvidence, NumericEvidence, GradientEvidence, ProcessEvidence, RegistrationEvidence,
    SpecializationEvidence, RecompileEvidence, FallbackEvidence, OpaqueEvidence, DraftExportEvidence, MessageEvidence)}


def opcheck_test(ev: Evidence) -> str | None:
    """The opcheck test that raised, when opcheck found it (an exception's evidence)."""
    return ev.opcheck_test if isinstance(ev, ExceptionEvidence) else None


def read(d: Any) -> Evidence:
    """A finding's evidence from a report's JSON (any version's: a missing key is the field's default; a value of the
    wrong shape, from a hand-edited report, reads as missing). The tag is ``what``; a report from before it is read by
    the keys its kind writes."""
    d = obj(d)
    return of_record(KINDS.get(str(d.get("what") or "")) or _guess(d), d)


E = TypeVar("E", bound=Evidence)


def of_record(cls: type[E], d: Json) -> E:
    """Evidence of kind ``cls`` from a record that crossed a process boundary as a dict (a stage's numeric comparison,
    a gradient check's mismatch) or a report's JSON: the record's keys as the kind's typed fields."""
    common: Json = dict(
        message=str(d.get("message") or ""), user_frame=Frame.from_dict(d.get("user_frame")),
        owner=Owner.of(d.get("owner")), traceback=str(d.get("traceback") or ""), phase=text(d.get("phase")),
        exception_type=text(d.get("exception_type")), gb_type=text(d.get("gb_type")), gb_code=text(d.get("gb_code")),
        doc=text(d.get("doc")))
    if issubclass(cls, NumericComparison):
        return cls.carrying(numeric_comparison(d), **common)
    return cls(**common, **_BODY[cls](d))


def _guess(d: Json) -> type[Evidence]:
    """The kind of an untagged evidence dict (a report from before ``what``), by the keys only that kind writes."""
    for key, cls in (("stderr_tail", ProcessEvidence), ("generated_frame", BreakEvidence), ("worst", NumericEvidence), ("compared", NumericEvidence),
                     ("dispatch_keys", FallbackEvidence), ("output_code", OpaqueEvidence),
                     ("draft_export_type", DraftExportEvidence), ("first_schema", RegistrationEvidence),
                     ("analytical", GradientEvidence), ("guard_user_frame", SpecializationEvidence),
                     ("steps", RecompileEvidence)):
        if key in d:
            return cls
    if d.get("cause") is not None and not d.get("exception_type"):
        return ProcessEvidence
    if d.get("exception_type") or d.get("exception_chain"):
        return ExceptionEvidence
    return BreakEvidence if d.get("gb_type") or d.get("gb_code") or d.get("doc") else MessageEvidence


#: each kind's own fields (keyword arguments) read from its JSON; a numeric comparison's: ``numeric_comparison``
_BODY: dict[type[Evidence], Callable[[Json], Json]] = {
    ExceptionEvidence: lambda d: dict(
        exception_chain=tuple(str(t) for t in items(d.get("exception_chain")) if t),
        root=InnerException(str(d["root"].get("type") or ""), str(d["root"].get("message") or ""))
        if isinstance(d.get("root"), dict) else None,
        torch_frame=Frame.from_dict(d.get("torch_frame")), opcheck_test=text(d.get("opcheck_test")),
        batch_size=integer(d.get("batch_size")), step=integer(d.get("step")),
        backends={str(k): str(v) for k, v in d["backends"].items()} if isinstance(d.get("backends"), dict) else {},
        rerun_of=text(d.get("rerun_of")), transform=text(d.get("transform"))),
    BreakEvidence: lambda d: dict(generated_frame=Frame.from_dict(d.get("generated_frame"))),
    GradientEvidence: lambda d: dict(
        method=text(d.get("method")), note=text(d.get("note")), input=text(d.get("input")),
        output=text(d.get("output")),
        **{k: finite(d.get(k)) for k in ("ratio", "numerical", "analytical", "relative_error", "tolerance", "atol",
                                         "step")}),
    ProcessEvidence: lambda d: dict(cause=text(d.get("cause")), stderr_tail=str(d.get("stderr_tail") or "")),
    RegistrationEvidence: lambda d: dict(first_schema=text(d.get("first_schema")),
                                         second_schema=text(d.get("second_schema")),
                                         first_frame=Frame.from_dict(d.get("first_frame"))),
    SpecializationEvidence: lambda d: dict(reason=str(d.get("reason") or ""),
                                           guard_user_frame=Frame.from_dict(d.get("guard_user_frame")),
                                           specialization=Specialization.of(d.get("specialization")),
                                           step=integer(d.get("step"))),
    RecompileEvidence: lambda d: dict(reason=str(d.get("reason") or ""), steps=tuple(map(integer, items(d.get("steps")))),
                                      reasons=texts(d.get("reasons")), user_frame_from=text(d.get("user_frame_from"))),
    FallbackEvidence: lambda d: dict(dispatch_keys=str(d.get("dispatch_keys") or ""),
                                     confirmed=d.get("confirmed") is True,
                                     confirmation=str(d.get("confirmation") or "")),
    OpaqueEvidence: lambda d: dict(output_code=texts(d.get("output_code")), graphs=items(d.get("graphs")),
                                   generated_kernels=integer(d.get("generated_kernels"))),
    DraftExportEvidence: lambda d: dict(draft_export_type=text(d.get("draft_export_type")),
                                        reason=text(d.get("reason"))),
    MessageEvidence: lambda d: {},
}


#: the shortest root line taken as quoted when the outer line contains it
_QUOTED_MIN = 12


def _empty(v: Any) -> bool:
    return v is None or v == "" or v == () or v == {}


def _json(v: Any) -> Any:
    """A field's value as the report's JSON writes it: frames, owners and records as objects, tuples as lists."""
    if isinstance(v, WorstTensor):
        return v.to_json()
    if isinstance(v, (Frame, Owner, InnerException, Specialization)):
        return {k: _json(x) for k, x in asdict(v).items()}
    if isinstance(v, tuple):
        return [_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    return v
