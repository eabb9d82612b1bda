"""A finding's context (``Finding.context``, ``GraphBreak.context``): what varies within a kind, typed where the
classifier makes it (classify/), read as fields by renderers and ``tracecheck fix``. The report's JSON keeps it as an
object whose keys are the fields set (``to_json``; kinds.json's summaries and fixes are templates over those keys);
``of`` is its one reader: of a report's object, of any schema version, and of the named groups of the pattern a
classifier rule matched (classify/detect._matches), read alike. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Callable, Mapping, TypeVar

from .frame import Frame
from .reportio import Json, flag, integer, obj, string, strings

T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    """What varies within a kind: kinds.json's named groups and the classifier's facts, one optional field per key
    the report writes. Unset is None (False for a flag, ``()`` for a list), and an unset field is no key of the JSON
    (docs/report-schema.md, "context"): as the dict it replaced had none, but for two keys that dict wrote unset, an
    uncounted ``kernels`` (``"?"``) and a break finding's missing ``gb_type`` (``null``). Text is kept as it was made
    (``""`` included: ``by`` fills a summary with nothing)."""

    # --- what the finding is about
    #: the custom op (``ns::name``) the finding is about; wrong-gradient: the Function(s) or calls it names
    op: str | None = None
    #: ``op`` is a label (an autograd.Function's qualified name, the probe's calls), not an op spelling
    #: (model/report.finding_key takes it as it is)
    op_is_label: bool = False
    #: pybind-builtin: the C++/pybind11 builtin as Dynamo names it
    builtin: str | None = None
    #: pybind-builtin: the builtin is a pybind11 function record
    pybind11: bool = False
    #: pybind-builtin: the builtin is called inside a torch.autograd.Function's forward or backward
    in_autograd_function: bool = False
    #: pybind-builtin, cause ``constant_args``: the constant arguments the builtin was called with
    args: str | None = None
    #: the argument a refusal names (mutates-args-mismatch: a mutated input the schema does not declare)
    argument: str | None = None
    #: the autograd.Function(s) the finding is about (torch-internal-error with a classmethod, setup_context,
    #: vmap_rule, a classmethod forward a graph break names), names joined by ", "
    function: str | None = None
    #: functorch-incompatible, cause ``hop``: the higher-order op without a rule for the transform
    hop: str | None = None
    #: the torch.func transform (vmap, grad, ...) the finding was made under
    transform: str | None = None
    #: functorch-incompatible: both transforms that refused for one cause at one frame
    #: (classify/measured.merge_refusals)
    transforms: tuple[str, ...] = ()
    #: the graph break's gb_type (Dynamo's registry), where the finding has one
    gb_type: str | None = None
    #: graph-break, cause ``hints``: Dynamo's own hints for the gb_type, less its stock ones
    hints: str | None = None
    #: a graph break's source line
    code: str | None = None
    #: a graph break inside torch: the user's line that led there (evidence/tracelog's caller_outside_torch)
    caller: Frame | None = None
    #: a break in code torch generated (compiled autograd's graph): its ``file:line``
    generated: str | None = None

    # --- which cause, where
    #: which of the kind's causes the evidence names (kinds.json ``fix_by_cause``, ``summary_by_cause``)
    cause: str | None = None
    #: numeric-mismatch: what was compared ("forward outputs", "backward gradients"); functorch-incompatible: what
    #: was refused
    what: str | None = None
    #: the stage the fix names (``tracecheck repro ... --stage``)
    stage: str | None = None
    #: a warning, not a failure: no failure's cause
    warning: bool = False

    # --- attributed across stages (classify/attribute.py, classify/results.py)
    #: an id this version does not know (a report from a newer tracecheck), read as ``unknown``
    reported_kind: str | None = None
    #: the stage whose finding an attributed one took its kind from
    first_seen_at: str | None = None
    #: the kind the finding had before it was attributed
    attributed_from: str | None = None
    #: backend-error whose cause is ``suspect_code``: the other findings of the probe that can make a backend fail
    #: (classify/attribute.upstream_advice)
    suspect: str | None = None
    #: graph-break, cause ``named_by_transform``: the torch.func stage that named the construct, the construct in its
    #: words and the fix for Dynamo (classify/attribute.named_by_transform)
    named_by: str | None = None
    construct: str | None = None
    dynamo_fix: str | None = None
    #: fake-mismatch attributed to a shape (classify/attribute.backward_shapes, downstream_shapes): the shapes that
    #: disagree, who found the fake's mismatch, and the line that tripped on the made-up shape
    mismatch: str | None = None
    found_by: str | None = None
    tripped_at: str | None = None

    # --- torch-internal-error, fake-mismatch
    #: the exception's headline (``Type: message``): torch's own, or what a fake impl raised
    exception: str | None = None
    #: torch-internal-error: the frame in torch's own code that raised (``file:line in function``)
    torch_frame: str | None = None

    # --- numeric-mismatch
    #: the phase compared (forward, backward) and its worst tensor
    phase: str | None = None
    tensor: str | None = None
    #: the custom ops and the random ATen ops one eager forward called
    custom_ops: tuple[str, ...] = ()
    random_ops: tuple[str, ...] = ()

    # --- wrong-gradient: numbers as the summary writes them
    input: str | None = None
    output: str | None = None
    numerical: str | None = None
    analytical: str | None = None
    relative_error: str | None = None
    #: cause ``end_to_end``: autograd's value over the numerical one ("?" when not measured)
    ratio: str | None = None

    # --- dynamic-shape and recompile
    #: dynamic-shape: the dimension specialized; recompile: who recompiled (Dynamo, compiled autograd)
    source: str | None = None
    #: dynamic-shape: the constant the dimension became
    value: str | None = None
    #: Dynamo's guard-failure reason
    reason: str | None = None
    #: dynamic-shape: the guard (less its comment), where a subclass's guard sits, the sizes tried, and the user's
    #: line that forced the constant (`` by `code` (file:line)``; "" where none)
    guard: str | None = None
    guard_at: str | None = None
    sizes: str | None = None
    by: str | None = None
    #: the symbolic expression a data-dependent or dynamic-shape failure names
    expr: str | None = None
    #: compile-semantics: the symbol Dynamo could not resolve
    symbol: str | None = None

    # --- named by the message (kinds.json's patterns)
    #: the type the message names (a non-pytree output's, a data-dependent or fake failure's exception type)
    type: str | None = None
    #: missing-device-kernel: the dispatch key without a kernel
    key: str | None = None
    #: untraceable-tensor-state: the attribute, the tensor subclass and its wrapper
    attribute: str | None = None
    subclass: str | None = None
    wrapper: str | None = None
    #: device-mismatch: the gradient's and the parameter's devices
    grad_device: str | None = None
    param_device: str | None = None

    # --- opaque-op
    #: extern calls of the op, and the kernels Inductor generated for the rest (None: not counted)
    calls: int | None = None
    kernels: int | None = None

    # --- the run
    #: the training step (eager's later step) and the batch size (the dynamic stage's other size) it failed at
    step: int | None = None
    batch_size: int | None = None
    #: compiled_autograd: the backend that failed, and the other one the failing steps were rerun with
    backend: str | None = None
    other_backend: str | None = None

    #: keys this version does not know (a report from a newer tracecheck, a named group kinds.json added) and values
    #: of another shape than their field's (a hand-edited report), as read: written back as they were, so a report
    #: read and written again keeps them. No code reads them by name, compares or hashes them; through ``to_json``
    #: they fill kinds.json's templates (model/taxonomy._fill: a named group with no field). JSON values, read-only
    other: Mapping[str, object] = field(default_factory=dict, compare=False)

    def to_json(self) -> Json:
        """The report's ``context`` object: the fields set (module docstring), lists for tuples, a frame as its dict;
        then ``other``."""
        out: dict[str, object] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "other" or not _set(v):
                continue
            out[f.name] = v.to_dict() if isinstance(v, Frame) else list(v) if isinstance(v, tuple) else v
        for k, v in self.other.items():
            out.setdefault(k, v)
        return out

    def __repr__(self) -> str:
        """The fields set (as ``to_json`` writes them) and ``other``: not every field, most of them unset."""
        shown = [f"{f.name}={v!r}" for f in fields(self) if f.name != "other" and _set(v := getattr(self, f.name))]
        return f"Context({', '.join(shown + ([f'other={dict(self.other)!r}'] if self.other else []))})"

    def merged(self, over: "Context") -> "Context":
        """This context with the fields ``over`` sets put over its own (a report's keys over another's)."""
        changes = {f.name: getattr(over, f.name) for f in fields(over)
                   if f.name != "other" and _set(getattr(over, f.name))}
        return replace(self, **changes, other={**self.other, **over.other})

    @classmethod
    def of(cls, d: object) -> "Context":
        """A report's ``context`` object (any schema version); anything but an object reads as empty. A value of
        another shape than its field's reads as unset (kept in ``other``)."""
        r = _Reader(obj(d))
        return cls(
            op=r("op", string), op_is_label=r("op_is_label", flag) is True, builtin=r("builtin", string),
            pybind11=r("pybind11", flag) is True, in_autograd_function=r("in_autograd_function", flag) is True,
            args=r("args", string), argument=r("argument", string), function=r("function", string),
            hop=r("hop", string), transform=r("transform", string), transforms=r("transforms", strings) or (),
            gb_type=r("gb_type", string), hints=r("hints", string), code=r("code", string),
            caller=r("caller", Frame.from_dict), generated=r("generated", string),
            cause=r("cause", string), what=r("what", string), stage=r("stage", string),
            warning=r("warning", flag) is True,
            reported_kind=r("reported_kind", string), first_seen_at=r("first_seen_at", string),
            attributed_from=r("attributed_from", string), suspect=r("suspect", string),
            named_by=r("named_by", string), construct=r("construct", string), dynamo_fix=r("dynamo_fix", string),
            mismatch=r("mismatch", string), found_by=r("found_by", string), tripped_at=r("tripped_at", string),
            exception=r("exception", string), torch_frame=r("torch_frame", string),
            phase=r("phase", string), tensor=r("tensor", string), custom_ops=r("custom_ops", strings) or (),
            random_ops=r("random_ops", strings) or (),
            input=r("input", string), output=r("output", string), numerical=r("numerical", string),
            analytical=r("analytical", string), relative_error=r("relative_error", string), ratio=r("ratio", string),
            source=r("source", string), value=r("value", string), reason=r("reason", string),
            guard=r("guard", string), guard_at=r("guard_at", string), sizes=r("sizes", string), by=r("by", string),
            expr=r("expr", string), symbol=r("symbol", string),
            type=r("type", string), key=r("key", string), attribute=r("attribute", string),
            subclass=r("subclass", string), wrapper=r("wrapper", string), grad_device=r("grad_device", string),
            param_device=r("param_device", string),
            # any whole number, a negative one too: read as the report holds it
            calls=r("calls", integer), kernels=r("kernels", integer),
            step=r("step", integer), batch_size=r("batch_size", integer),
            backend=r("backend", string), other_backend=r("other_backend", string),
            other=r.rest())  # last: keyword arguments are evaluated in order, so it holds what none above took


def _set(value: object) -> bool:
    """A field's value the JSON writes: not None, False or ``()`` (the defaults)."""
    return value is not None and value is not False and value != ()


class _Reader:
    """Reads a JSON object's keys with reportio's readers, remembering which it took: the rest is ``other``."""

    def __init__(self, d: Json) -> None:
        self.d = d
        self.used: set[str] = set()

    def __call__(self, key: str, read: Callable[[object], T | None]) -> T | None:
        """``read``'s value of ``key``; a key it reads as None (missing, or of another shape) is not taken."""
        v = read(self.d.get(key))
        if v is not None:
            self.used.add(key)
        return v

    def rest(self) -> dict[str, object]:
        # a null is an absent key (the old dict's ``"cause": None``): nothing to keep
        return {str(k): v for k, v in self.d.items() if k not in self.used and v is not None}
