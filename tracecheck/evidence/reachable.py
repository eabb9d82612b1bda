"""The ``nn.Module``s a probe's callable can reach: whose parameters train when the probe runs backward.

A probe hands over a module with integer token ids or images that do not require grad; its parameters do,
so the probe is a training check and backward must run. The callable reaches a module when it is one, when
it is a method bound to one, when it holds one in a closure cell, as an attribute (of a callable object or of
``functools.partial``), or names one as a global of its code (``lambda ids: model(ids)``). The walk is
bounded (``MAX_OBJECTS``) and never calls user code: it reads ``__dict__``, closures and code objects only.
"""
from __future__ import annotations

import dis
import functools
import types
from collections import deque
from typing import Any, Callable, Iterator

import torch

#: Objects (other than containers) visited at most: a callable that reaches a whole framework stops here, not
#: after a minute.
MAX_OBJECTS = 2000


def reachable_modules(fn: Callable[..., Any]) -> list[tuple[str, torch.nn.Module]]:
    """Top-level modules reachable from ``fn``, each once, with the path it was found by, e.g. ``self``,
    ``closure:model``, ``global:model``, ``holder.encoder``, ``global:MODELS[0]``, unique per module. A module
    inside another found module is not listed again: ``named_parameters`` of the outer one covers it."""
    found: list[tuple[str, torch.nn.Module]] = []
    seen: set[int] = set()
    queue: deque[tuple[str, Any]] = deque([("fn", fn)])
    visited = 0
    steps = 0
    while queue and visited < MAX_OBJECTS and steps < 50 * MAX_OBJECTS:
        path, obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        steps += 1
        # containers cost their elements, not themselves: a path through a list of 5,000 tuples stays open
        visited += not isinstance(obj, (list, tuple, set, frozenset, dict))
        if isinstance(obj, torch.nn.Module):
            found.append((path, obj))
            seen.update(id(m) for m in obj.modules())
            continue
        queue.extend((p, v) for p, v in _children(path, obj) if not isinstance(v, _LEAVES) and id(v) not in seen)
    return found


#: Objects that hold no module: never queued, so a list of 10,000 strings costs nothing of ``MAX_OBJECTS``.
_LEAVES = (str, bytes, int, float, complex, bool, type(None), torch.Tensor, torch.dtype, torch.device,
           types.ModuleType, types.BuiltinFunctionType)


def _join(path: str, part: str) -> str:
    if path == "fn":
        return part
    return f"{path}{part}" if part.startswith("[") else f"{path}.{part}"


def _children(path: str, obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, type):
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        yield from ((_join(path, f"[{i}]"), v) for i, v in enumerate(obj))
        return
    if isinstance(obj, dict):
        yield from ((_join(path, f"[{k!r}]"), v) for k, v in obj.items())
        return
    if isinstance(obj, types.MethodType):
        yield _join(path, "self") if path != "fn" else "self", obj.__self__
        yield path, obj.__func__
        return
    if isinstance(obj, functools.partial):
        yield path, obj.func
        yield from ((_join(path, f"args[{i}]"), v) for i, v in enumerate(obj.args))
        yield from ((_join(path, f"keywords[{k!r}]"), v) for k, v in obj.keywords.items())
        return
    if isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield _join(path, f"closure:{name}"), cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the function was made)
                pass
        g = obj.__globals__
        for name in _global_names(obj.__code__):
            if name in g:
                yield _join(path, f"global:{name}"), g[name]
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            yield path, wrapped
        return
    # any other object (a callable object, or an attribute of one): what its instance holds (``__dict__``,
    # ``__slots__``), what its class holds, and the code of its class's ``__call__``
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        yield from ((_join(path, str(k)), v) for k, v in attrs.items())
    cls = type(obj)
    for klass in cls.__mro__[:-1]:  # not object
        slots = getattr(klass, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if hasattr(obj, name):
                yield _join(path, name), getattr(obj, name)
        for name, value in vars(klass).items():
            if isinstance(value, (torch.nn.Module, list, tuple, dict)) and not name.startswith("__"):
                yield _join(path, name), value
    call = getattr(cls, "__call__", None)
    if isinstance(call, types.FunctionType):
        yield _join(path, "__call__"), call


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names the code (and the code of functions defined inside it) loads as globals: ``model`` in
    ``model(x)``, not the attribute ``model`` in ``other.model(x)``."""
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            yield ins.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def trainable_parameters(fn: Callable[..., Any]) -> list[tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` for every parameter that requires grad in the modules ``fn`` reaches; names are
    ``<path>.<parameter name>``, or the bare parameter name when the callable is the module itself."""
    out: list[tuple[str, torch.nn.Parameter]] = []
    seen: set[int] = set()
    for path, module in reachable_modules(fn):
        prefix = "" if path == "fn" else f"{path}."
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append((prefix + name, p))
    return out
