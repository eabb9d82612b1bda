"""A finding's evidence read as typed fields (``Finding.ev``): what every renderer reads, so none of them knows the
evidence dict's keys. The report's JSON keeps the dict as it is (docs/report-schema.md); this is its one reader.

``what`` tags the evidence by what made it: an ``exception`` (type, chain, root cause, frames), a ``graph_break``
(gb_type, GB code, Dynamo's reason), a ``numeric`` comparison (the worst tensor against its reference), a
``process`` that died (its stderr tail) or a ``measurement`` (counts a stage took: opaque-op's graphs). Pure: no
torch import.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .records import Frame

EXCEPTION, GRAPH_BREAK, NUMERIC, PROCESS, MEASUREMENT = "exception", "graph_break", "numeric", "process", "measurement"


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
class RootCause:
    """The exception an error comes down to (classify.detect.root_cause), when it is not the outermost one."""

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

    @classmethod
    def of(cls, d: Any) -> "WorstTensor":
        d = d if isinstance(d, dict) else {}
        shape = d.get("shape")
        return cls(**{k: d.get(k) for k in ("what", "dtype", "reference_dtype", "rmse_compiled_vs_fp64",
                                             "rmse_eager_vs_fp64", "error_ratio", "relative_rmse_vs_eager",
                                             "relative_rmse_bound", "cos_threshold", "tol", "max_abs_diff",
                                             "cos_similarity", "detail")},
                   shape=tuple(shape) if isinstance(shape, (list, tuple)) else None,
                   failed=tuple(map(str, _seq(d.get("failed")))))

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
        d = d if isinstance(d, dict) else {}
        compared, disagreeing = d.get("compared"), d.get("disagreeing")
        return cls(phase=str(d.get("phase") or ""),
                   compared=compared if isinstance(compared, int) and not isinstance(compared, bool) else None,
                   disagreeing=disagreeing if isinstance(disagreeing, int) and not isinstance(disagreeing, bool)
                   else None,
                   worst=WorstTensor.of(d.get("worst")),
                   disagreeing_tensors=tuple(map(str, _seq(d.get("disagreeing_tensors")))))


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
    """The evidence of one finding, typed (module docstring). Every field is optional: which are set depends on
    ``what``."""

    what: str
    exception_type: str | None = None
    #: the types of the exception and what it wraps, outermost first
    exception_chain: tuple[str, ...] = ()
    #: the outermost exception's message (trimmed), or Dynamo's reason for a break
    message: str = ""
    root: RootCause | None = None
    traceback: str = ""
    #: "setup" | "forward" | "backward" | an opcheck test name
    phase: str | None = None
    user_frame: Frame | None = None
    #: where in code torch generated (compiled autograd's graph) a finding sits with no user frame under it
    generated_frame: Frame | None = None
    gb_type: str | None = None
    gb_code: str | None = None
    #: the gb_type's page
    doc: str | None = None
    opcheck_test: str | None = None
    #: compiled_autograd: what each backend did with the failing steps
    backends: dict[str, str] = field(default_factory=dict)
    #: op-redefined: the two schemas
    first_schema: str | None = None
    second_schema: str | None = None
    #: a process that died: why, and its stderr's tail
    cause: str | None = None
    stderr_tail: str = ""
    #: numeric-mismatch
    compared: int | None = None
    disagreeing: int | None = None
    worst: WorstTensor = field(default_factory=WorstTensor)
    fp64_reference: bool | None = None
    fp64_unavailable: str | None = None
    random_ops: tuple[str, ...] = ()
    #: the custom ops the probe called; None where the stage did not record them
    custom_ops: tuple[str, ...] | None = None
    #: opaque-op: the compiled graphs that call the op
    graphs: tuple[Any, ...] = ()
    #: whose code ``user_frame`` is (evidence/owner.py); None in a report from before owners
    owner: Owner | None = None

    @classmethod
    def of(cls, d: Any) -> "Evidence":
        """Read a finding's evidence dict (any report version's: a missing key is the field's default; a value of the
        wrong shape, from a hand-edited report, reads as missing)."""
        d = d if isinstance(d, dict) else {}
        root = d.get("root")
        backends = d.get("backends")
        custom = d.get("custom_ops")
        return cls(
            what=_what(d),
            exception_type=d.get("exception_type") or None,
            exception_chain=tuple(str(t) for t in _seq(d.get("exception_chain")) if t),
            message=str(d.get("message") or ""),
            root=RootCause(str(root.get("type") or ""), str(root.get("message") or ""))
            if isinstance(root, dict) else None,
            traceback=str(d.get("traceback") or ""),
            phase=d.get("phase"),
            user_frame=Frame.from_dict(d.get("user_frame")),
            generated_frame=Frame.from_dict(d.get("generated_frame")),
            gb_type=d.get("gb_type") or None,
            gb_code=d.get("gb_code") or None,
            doc=d.get("doc") or None,
            opcheck_test=d.get("opcheck_test") or None,
            backends={str(k): str(v) for k, v in backends.items()} if isinstance(backends, dict) else {},
            first_schema=d.get("first_schema"),
            second_schema=d.get("second_schema"),
            cause=str(d["cause"]) if d.get("cause") else None,
            stderr_tail=str(d.get("stderr_tail") or ""),
            compared=d.get("compared"),
            disagreeing=d.get("disagreeing"),
            worst=WorstTensor.of(d.get("worst")),
            fp64_reference=d.get("fp64_reference"),
            fp64_unavailable=d.get("fp64_unavailable"),
            random_ops=tuple(map(str, _seq(d.get("random_ops")))),
            custom_ops=tuple(map(str, custom)) if isinstance(custom, (list, tuple)) else None,
            graphs=_seq(d.get("graphs")),
            owner=Owner.of(d.get("owner")),
        )

    def headline(self) -> str:
        """The message a finding shows: the root cause's first line that says something, as ``Type: line``; the
        outermost exception's own first line when it already quotes that line (a richer form: Dynamo's
        ``call_function aten.div(...): got TypeError('...')``) or when there is no deeper cause. ``first_line`` skips
        wrapper headers (``backend='aot_eager' raised:``), so a wrapper's prefix alone is never shown."""
        outer = first_line(self.message)
        if self.root is None:
            return outer
        line = first_line(self.root.message)
        if len(line) >= _QUOTED_MIN and line in outer:  # a short line ("0", "a") is in any text by chance
            return outer
        return headline({"type": self.root.type, "message": self.root.message}, 300) if line else outer

    def detail(self) -> str:
        """The longest account there is: the traceback, else the message, else a dead process's stderr."""
        return self.traceback or self.message or self.stderr_tail


#: the shortest root line taken as quoted when the outer line contains it
_QUOTED_MIN = 12


def _seq(v: Any) -> tuple[Any, ...]:
    """A list in the report as a tuple; anything else (a string, a number) as none: never a string's characters."""
    return tuple(v) if isinstance(v, (list, tuple)) else ()


def _what(d: dict[str, Any]) -> str:
    if d.get("worst") is not None or d.get("compared") is not None:
        return NUMERIC
    if d.get("stderr_tail") is not None or d.get("cause") is not None and not d.get("exception_type"):
        return PROCESS
    if d.get("exception_type") or d.get("exception_chain"):
        return EXCEPTION
    if d.get("gb_type"):
        return GRAPH_BREAK
    return MEASUREMENT


@dataclass(frozen=True)
class Context:
    """What varies within a kind (``Finding.context``, kinds.json's named groups and the classifier's facts), typed:
    what renderers and ``tracecheck fix`` read. A missing key is None; a value of another shape (a hand-edited
    report) reads as missing."""

    #: the custom op (``ns::name``) or the C++/pybind builtin the finding is about
    op: str | None = None
    builtin: str | None = None
    #: which of the kind's causes the evidence names (kinds.json ``fix_by_cause``)
    cause: str | None = None
    #: numeric-mismatch: what was compared ("outputs", "gradients"); functorch-incompatible: what was refused
    what: str | None = None
    #: the torch.func transform (vmap, grad, ...) the finding was made under
    transform: str | None = None
    #: recompile: Dynamo's guard-failure reason
    reason: str | None = None
    #: an id this version does not know (a report from a newer tracecheck), read as ``unknown``
    reported_kind: str | None = None
    #: the stage whose finding an ``unknown`` took its kind from (classify/results.attribute_unknowns)
    first_seen_at: str | None = None
    #: a warning, not a failure: no failure's cause
    warning: bool = False
    #: pybind-builtin: the builtin is called inside a torch.autograd.Function's forward or backward
    in_autograd_function: bool = False
    #: the argument a refusal names (a non-tensor output, a mutated input)
    argument: str | None = None
    #: opaque-op: extern calls of the op and the kernels Inductor generated for the rest
    calls: int | None = None
    kernels: int | None = None

    @classmethod
    def of(cls, d: Any) -> "Context":
        d = d if isinstance(d, dict) else {}

        def text(key: str) -> str | None:
            v = d.get(key)
            return str(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "" else None

        def count(key: str) -> int | None:
            v = d.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(op=text("op"), builtin=text("builtin"), cause=text("cause"), what=text("what"),
                   transform=text("transform"), reason=text("reason"), reported_kind=text("reported_kind"),
                   first_seen_at=text("first_seen_at"), warning=d.get("warning") is True,
                   in_autograd_function=d.get("in_autograd_function") is True, argument=text("argument"),
                   calls=count("calls"), kernels=count("kernels"))
