"""What ``tracecheck fix``'s tasks find, typed: the records of ``pipeline.FixOutcome`` that render/fix.py reads. A
task returns plain data (it comes back as JSON, model/tasks.ProcessTask.run); the parent reads it once through
these ``of``s, so no reader names its keys. A missing key is the field's default; a value of the wrong shape reads
as missing. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _texts(v: Any) -> tuple[str, ...]:
    """A list of text as a tuple; anything else (a string, a number) as none: never a string's characters."""
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else ()


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class MutatesArgs:
    """The arguments an autograd.Function's forward and backward were seen to mutate (the generated ops'
    ``mutates_args``)."""

    forward: tuple[str, ...] = ()
    backward: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.forward or self.backward)


@dataclass(frozen=True)
class FunctionFix:
    """One autograd.Function or custom op the analysis looked at (fix.analysis.analyze's ``functions``): what was
    done with it, and what is left to the user."""

    #: its qualname, and its module (``custom op`` for a custom op)
    function: str
    module: str = ""
    action: str = ""
    #: what the generated code leaves to finish (it is not verified while any is left)
    todo: tuple[str, ...] = ()
    #: what the generated code assumes and the user should review
    check: tuple[str, ...] = ()
    #: an autograd.Function's observed mutations; None for a custom op or a Function left alone
    mutates_args: MutatesArgs | None = None
    #: eager runs the inference took, and the perturbed inputs the op refused
    runs: int | None = None
    refused: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "FunctionFix":
        d = _dict(d)
        mutates = d.get("mutates_args")
        runs = d.get("runs")
        return cls(function=str(d.get("function") or "?"), module=str(d.get("module") or ""),
                   action=str(d.get("action") or ""), todo=_texts(d.get("todo")), check=_texts(d.get("check")),
                   mutates_args=MutatesArgs(_texts(mutates.get("forward")), _texts(mutates.get("backward")))
                   if isinstance(mutates, dict) else None,
                   runs=runs if isinstance(runs, int) and not isinstance(runs, bool) else None,
                   refused=_texts(d.get("refused")))


@dataclass(frozen=True)
class OpShapes:
    """What one op's generated fake was checked at, beyond the probe's shapes (fix.shape_check.check_op):
    ``checked`` (labels of shapes that passed), ``failed`` (label, test, first line of torch's error), ``refused``
    (shapes the eager op itself refuses)."""

    op: str
    checked: tuple[str, ...] = ()
    failed: tuple[tuple[str, str, str], ...] = ()
    refused: tuple[str, ...] = ()
    #: shapes the eager op accepts and the fake refuses on purpose: a rank check tracecheck wrote (a restriction
    #: the fake states, not a wrong shape)
    restricted: tuple[str, ...] = ()
    #: shapes the eager op accepts but its own backward (the autograd formula registered for it) refuses in eager:
    #: (label, the first line of its error). Not the fake's failure, and not checked
    own_refused: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, d: Any) -> "OpShapes":
        d = _dict(d)
        failed = d.get("failed") if isinstance(d.get("failed"), (list, tuple)) else ()
        own = d.get("own_refused") if isinstance(d.get("own_refused"), (list, tuple)) else ()
        return cls(op=str(d.get("op") or "?"), checked=_texts(d.get("checked")),
                   failed=tuple((str(f[0]), str(f[1]), str(f[2])) for f in failed
                                if isinstance(f, (list, tuple)) and len(f) == 3),
                   refused=_texts(d.get("refused")), restricted=_texts(d.get("restricted")),
                   own_refused=tuple((str(f[0]), str(f[1])) for f in own if isinstance(f, (list, tuple)) and len(f) == 2))


@dataclass(frozen=True)
class GradientCheck:
    """The patched probe's gradients against a central finite difference along a random direction v
    (fix.analysis.directional_check), where the original has no working backward to compare with."""

    #: ``<grad, v>`` and the finite difference; None where the check did not run
    analytic: float | None = None
    numeric: float | None = None
    ok: bool = False
    #: why no check was possible
    skip: str | None = None

    @classmethod
    def of(cls, d: Any) -> "GradientCheck":
        d = _dict(d)
        skip = d.get("skip")
        return cls(analytic=_number(d.get("analytic")), numeric=_number(d.get("numeric")), ok=d.get("ok") is True,
                   skip=str(skip) if skip else None)

    @property
    def ran(self) -> bool:
        return self.analytic is not None and self.numeric is not None
