"""The recorder's torch import hook, call signatures and where the package was imported from (collect/opsrecord.py
uses them; this module imports neither opsrecord nor torch at import: the recorder starts in every Python process of
the test command)."""
from __future__ import annotations

import importlib.abc
import os
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence


class TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds ``torch`` as the other finders do and hands back their spec with its loader wrapped: whichever spec
    imports torch runs ``then`` after it. Every ``find_spec`` wraps its own spec (``importlib.util.find_spec("torch")``
    before the import, as transformers' ``is_torch_available`` does, must not use the hook up)."""

    def __init__(self, then: Callable[[], None], failed: Callable[[BaseException], None]) -> None:
        self._then, self._failed = then, failed
        #: ``finding``: this thread is asking the other finders (they may ask ``sys.meta_path`` again)
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or getattr(self._local, "finding", False):
            return None
        self._local.finding = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None) if finder is not self else None
                if (spec := find(fullname, path, target) if find is not None else None) is not None:
                    if hasattr(spec.loader, "exec_module") and not isinstance(spec.loader, _ThenLoader):
                        spec.loader = _ThenLoader(spec.loader, self._then)
                    return spec
            return None
        except Exception as e:  # the import goes on as without the hook
            self._failed(e)
            return None
        finally:
            self._local.finding = False


class _ThenLoader(importlib.abc.Loader):
    """``loader``, which runs ``then`` once it has executed the module (put back where code looks: ``__loader__``,
    ``__spec__.loader``)."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader, self._then = loader, then

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface (``is_package``, ``get_code``)
        if name == "_loader":  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._then()


def describe(args: tuple[object, ...], kwargs: Mapping[str, Any]) -> tuple[str, tuple[tuple[int, ...], ...]]:
    """A call's signature (per argument leaf: ``f32[2d]@cpu+grad``, a plain value's or a dtype's repr, another's type;
    args, then kwargs by name as ``name=...``) and the sizes of its tensors, in the same order."""
    import torch

    from .. import compat

    parts: list[str] = []
    sizes: list[tuple[int, ...]] = []
    grad_on = torch.is_grad_enabled()  # "+grad" where the call can differentiate: not inside a Function's forward
    leaves = [("", a) for a in compat.pytree.tree_leaves(list(args))]
    leaves += [(f"{k}=", a) for k in sorted(kwargs) for a in compat.pytree.tree_leaves(kwargs[k])]
    for prefix, a in leaves:
        if isinstance(a, torch.Tensor):
            grad = "+grad" if a.requires_grad and grad_on else ""
            parts.append(f"{prefix}{compat.dtype_abbr(a.dtype)}[{a.dim()}d]@{a.device.type}{grad}")
            sizes.append(tuple(int(n) for n in a.shape))
        elif a is None or isinstance(a, (bool, int, float, str, torch.dtype, torch.device, torch.layout)):
            parts.append(f"{prefix}{a!r}")  # a dtype or device picks a kernel as much as a tensor's does
        else:
            parts.append(f"{prefix}{type(a).__name__}")
    return ", ".join(parts), tuple(sizes)


def import_roots(package: str) -> tuple[str, ...]:
    """The sys.path folders the package's top-level module was imported from, if it was."""
    top = sys.modules.get(package.partition(".")[0])
    file = getattr(top, "__file__", None)
    if not file:
        return ()
    up = 2 if os.path.basename(file) == "__init__.py" else 1  # a package's folder, or a module's file
    root = os.path.abspath(file)
    for _ in range(up):
        root = os.path.dirname(root)
    return (root,)
