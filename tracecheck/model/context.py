"""A finding's context read as typed fields (``Finding.cx``): what varies within a kind, which renderers and ``tracecheck
fix`` read. The report's JSON keeps the context as a dict (kinds.json's summaries and fixes are templates over its
keys); this is its one reader. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    #: the stage whose finding an ``unknown`` took its kind from (classify/attribute.unknowns)
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
    #: backend-error whose cause is ``suspect_code``: the other findings of the probe that can make a backend fail
    #: (classify/attribute.upstream_advice)
    suspect: str | None = None
    #: the autograd.Function(s) the finding is about (torch-internal-error with a classmethod, setup_context,
    #: vmap_rule), names joined by ", "
    function: str | None = None
    #: torch-internal-error: the frame in torch's own code that raised (``file:line in function``), and the
    #: exception's headline (``Type: message``)
    torch_frame: str | None = None
    exception: str | None = None

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
                   calls=count("calls"), kernels=count("kernels"), suspect=text("suspect"), function=text("function"),
                   torch_frame=text("torch_frame"), exception=text("exception"))
