"""The public probe API: ``@tracecheck.probe`` and ``tracecheck.Case``.

A probe is a zero-argument function that builds the call to diagnose. Two forms are accepted:

* ``@tracecheck.probe`` on a function returning ``tracecheck.Case(fn, args, kwargs=None, grad=None)``;
* a plain ``def probe()`` / ``def probe_<name>()`` returning ``(fn, args)`` or ``(fn, args, kwargs)``, so a
  model file needs no tracecheck import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

_MARK = "__tracecheck_probe__"


@dataclass
class Case:
    """One call to diagnose: ``fn(*args, **kwargs)``.

    ``grad``: ``None`` runs backward when any floating-point input requires grad; ``True``/``False`` force it. A callable is used as the
    loss: ``grad(outputs) -> scalar tensor`` instead of the default ``sum`` of the floating outputs.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: keyword arguments by name: whatever the probe passes (tensors, flags, modules)
    kwargs: dict[str, object] = field(default_factory=dict)
    grad: bool | Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kwargs is None:
            self.kwargs = {}
        if isinstance(self.args, list):
            self.args = tuple(self.args)


class ProbeShapeError(TypeError):
    """A probe function returned something other than a Case or ``(fn, args[, kwargs])``."""


def probe(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Mark a zero-argument function as a tracecheck probe; it must return a ``Case``."""
    setattr(fn, _MARK, True)
    return fn


def is_marked(obj: Any) -> bool:
    return callable(obj) and getattr(obj, _MARK, False) is True


def to_case(value: Any) -> Case:
    """Normalise what a probe function returned. Raises ProbeShapeError with what was wrong."""
    if isinstance(value, Case):
        case = value
    elif isinstance(value, tuple) and len(value) in (2, 3):
        case = Case(value[0], value[1], value[2] if len(value) == 3 else {})
    else:
        raise ProbeShapeError(
            f"probe returned {type(value).__name__}; expected tracecheck.Case or a tuple (fn, args[, kwargs])")
    if not callable(case.fn):
        raise ProbeShapeError(f"probe's fn is a {type(case.fn).__name__}, not a callable")
    if not isinstance(case.args, tuple):
        raise ProbeShapeError(f"probe's args is a {type(case.args).__name__}; expected a tuple of inputs")
    if not isinstance(case.kwargs, dict):
        raise ProbeShapeError(f"probe's kwargs is a {type(case.kwargs).__name__}; expected a dict")
    if case.grad is not None and not isinstance(case.grad, bool) and not callable(case.grad):
        raise ProbeShapeError(f"Case(grad=...) is a {type(case.grad).__name__}; expected None, True, False or a "
                              "callable loss(outputs)")
    return case
