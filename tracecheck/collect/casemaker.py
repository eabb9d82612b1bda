"""The ``Case`` a probe returns, built again in every stage process (``case_factory``): seeded, as leaves, on
the device, with a shared model's state put back; and what the probe's first call, made before the stage process
forked (isolate/template.py), warned and registered (``first_call``)."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from ..model.probe import Case, to_case
from .loadfile import find_probes, load_module


def call_probe(fn: Callable[[], Any]) -> Any:
    """Call a probe function, seeded: every call builds the same case."""
    import torch

    torch.manual_seed(0)
    return fn()


def to_device(case: Case, device: str) -> Case:
    """``case`` with its module and tensors on ``device`` (``requires_grad`` kept); the CPU case as is."""
    if device == "cpu":
        return case
    import torch
    from ..compat import pytree

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t

    fn = case.fn.to(device) if isinstance(case.fn, torch.nn.Module) else case.fn
    return Case(fn, pytree.tree_map(move, case.args), pytree.tree_map(move, case.kwargs), case.grad)


def as_leaves(case: Case) -> Case:
    """Inputs that require grad but are not leaves (``torch.randn(..., requires_grad=True) * 2``) become
    leaves: their ``.grad`` is what tracecheck compares, and only the callable is compiled, so the gradient
    at the callable's inputs is the whole check."""
    import torch
    from ..compat import pytree

    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
            return t.detach().requires_grad_(True)
        return t

    return Case(case.fn, pytree.tree_map(leaf, case.args), pytree.tree_map(leaf, case.kwargs), case.grad)


def load_case(path: str, probe: str) -> tuple[ModuleType, Case]:
    """Load the model file and build the named probe's case once (on the CPU)."""
    module = load_module(path)
    return module, as_leaves(to_case(call_probe(dict(find_probes(module))[probe])))


@dataclass(frozen=True)
class FirstCall:
    """The probe function's first call, made by the probe's template (isolate/template.py) before it forked this stage
    process: what it warned and the custom ops it registered, which the eager stage reports as if it had made that
    call itself (its own call is the probe's second in this process's history)."""

    warnings: tuple[str, ...]
    registered: tuple[str, ...]


_first: FirstCall | None = None


def record_first_call(warnings: list[str], registered: list[str]) -> None:
    """Remember, in the probe's template, what its call warned and registered (for the processes forked after it)."""
    global _first
    _first = FirstCall(tuple(warnings), tuple(registered))


def first_call() -> FirstCall | None:
    """The probe's first call, when the probe's template made it before this process forked."""
    return _first


def case_factory(path: str, probe: str, device: str = "cpu") -> Callable[[], Case]:
    """Load the model file once; the returned function builds a fresh, seeded case of the named probe on
    ``device`` at every call (stages call it once per run they compare).

    A probe may hand out the same module object on every call (a module-level model): its parameters and
    buffers are put back to what they were at the first call, so a model that updates a buffer in forward
    (a step counter, running statistics) starts every run from the same state.
    """
    module = load_module(path)
    fn = dict(find_probes(module))[probe]
    first: dict[int, tuple[Any, Any]] = {}

    def make() -> Case:
        try:
            case = to_case(call_probe(fn))
        except Exception as e:  # the probe's own code, called again in a stage: its failure, not tracecheck's
            raise ProbeCallError(e) from e
        case = as_leaves(to_device(case, device))
        _restore_state(case, first)
        return case

    return make


class ProbeCallError(Exception):
    """The probe function raised (or returned something other than a Case) when a stage called it again: a probe
    that fails on its second call (a global iterator, a counter). The stage reports it as the probe's failure."""


def _restore_state(case: Case, first: dict[int, tuple[Any, Any]]) -> None:
    """Record the tensors of the modules ``case.fn`` reaches on the first call; later, copy the recorded values
    back into the same tensor objects (a fresh module from the probe has other objects: nothing to do)."""
    import torch

    from ..evidence.reachable import reachable_modules

    if first.get(-1) is not None:
        return  # the probe builds fresh modules: nothing is shared between runs
    tensors = [t for _, m in reachable_modules(case.fn) for t in (*m.parameters(), *m.buffers())]
    if first and not any(id(t) in first for t in tensors):
        first.clear()
        first[-1] = (None, None)  # and stop holding the first call's module alive
        return
    with torch.no_grad():
        for t in tensors:
            seen = first.get(id(t))
            if seen is None:
                first[id(t)] = (t, t.detach().clone())
            elif seen[0] is t and t.shape == seen[1].shape and t.dtype == seen[1].dtype:
                t.copy_(seen[1])
