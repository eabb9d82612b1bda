"""The ``nn.Module``s a probe's callable can reach: whose parameters train when the probe runs backward.

A probe hands over a module with integer token ids or images that do not require grad; its parameters do,
so the probe is a training check and backward must run. The callable reaches a module when it is one, when
it is a method bound to one, when it holds one in a closure cell, as an attribute (of a callable object or of
``functools.partial``), or names one as a global of its code (``lambda ids: model(ids)``). The walk is
bounded (``MAX_OBJECTS``) and never calls user code: it reads ``__dict__``, closures and code objects only.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable, Iterator

import torch

#: Objects visited at most: a callable that reaches a whole framework stops here, not after a minute.
MAX_OBJECTS = 2000


def reachable_modules(fn: Callable[..., Any]) -> list[tuple[str, torch.nn.Module]]:
    """Top-level modules reachable from ``fn``, each once, with the path it was found by (``self``,
    ``closure:model``, ``global:model``, ``attr:encoder``). A module inside another found module is not
    listed again: ``named_parameters`` of the outer one covers it."""
    found: list[tuple[str, torch.nn.Module]] = []
    seen: set[int] = set()
    queue: list[tuple[str, Any]] = [("fn", fn)]
    visited = 0
    while queue and visited < MAX_OBJECTS:
        path, obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, torch.nn.Module):
            found.append((path, obj))
            seen.update(id(m) for m in obj.modules())
            continue
        queue += list(_children(path, obj))
    return found


def _children(path: str, obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, (str, bytes, int, float, bool, type(None), torch.Tensor, types.ModuleType, type)):
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        yield from ((f"{path}[{i}]", v) for i, v in enumerate(obj))
        return
    if isinstance(obj, dict):
        yield from ((f"{path}[{k!r}]", v) for k, v in obj.items())
        return
    if isinstance(obj, types.MethodType):
        yield "self", obj.__self__
        yield path, obj.__func__
        return
    if isinstance(obj, functools.partial):
        yield path, obj.func
        yield from ((f"{path}.args[{i}]", v) for i, v in enumerate(obj.args))
        yield from ((f"{path}.keywords[{k!r}]", v) for k, v in obj.keywords.items())
        return
    if isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield f"closure:{name}", cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the function was made)
                pass
        g = obj.__globals__
        for name in _global_names(obj.__code__):
            if name in g:
                yield f"global:{name}", g[name]
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            yield path, wrapped
        return
    # a callable object (or an attribute of one): its instance attributes
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        yield from ((f"attr:{k}", v) for k, v in attrs.items())


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names the code (and the code of functions defined inside it) loads; globals among them are looked up."""
    yield from code.co_names
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
