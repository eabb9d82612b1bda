"""Build-once, load-many access to the mHC pybind11 extension (``csrc/mhc.cpp``).

Shaped like the CANN / DeepSpeed ``OpBuilder``: ``MhcOpBuilder().load()`` returns the compiled Python
module whose functions are the raw kernels. The first call in a machine's life builds it with
``torch.utils.cpp_extension.load`` (about 25-40 s on 2 cores); later calls, in this or any other
process, import the cached shared library directly and never run the compiler or ninja.

Cache location: ``$TORCH_EXTENSIONS_DIR`` (or torch's default, ``~/.cache/torch_extensions/<py>_<accel>``)
``/tracecheck_mhc_<hash>``, where ``<hash>`` covers the C++ source, the compiler flags, the torch
version and the Python version, so an edit or a torch upgrade builds a fresh copy beside the old one.

Concurrency: two processes that load at the same time are serialised by cpp_extension's file
baton (a ``lock`` file in the build folder): one builds, the other waits and then imports. A
``built.ok`` stamp, written only after a successful build and import, marks the fast path, so a
process never imports a half-written library. A build killed mid-way leaves the ``lock`` file behind;
one older than ``STALE_LOCK_S`` is removed before the next build (torch would wait on it for ever).

``load()`` is deliberately cheap once the module is cached (one attribute read), because
``broken.MhcPreSinkhornFunction.forward`` calls it inside code that Dynamo traces, exactly like the
CANN wrapper; the expensive first build must have happened before, in eager code (probes call
:func:`load` while building their inputs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
import types
from pathlib import Path

#: Name of the Python extension module (``PyInit_<name>``) and prefix of its build folder.
EXTENSION_NAME = "tracecheck_mhc"
#: C++ sources compiled into the extension.
SOURCES = (Path(__file__).resolve().parent / "csrc" / "mhc.cpp",)
#: Extra compiler flags; part of the cache key.
EXTRA_CFLAGS = ("-O2",)
_STAMP = "built.ok"


def _cache_key() -> str:
    import torch

    h = hashlib.sha256()
    for src in SOURCES:
        h.update(src.read_bytes())
    h.update(repr((EXTRA_CFLAGS, torch.__version__, sys.version_info[:2], sys.abiflags)).encode())
    return h.hexdigest()[:16]


def build_directory() -> Path:
    """Folder holding this source version's build (created on demand); never raises."""
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        root = cpp_extension._get_build_directory(EXTENSION_NAME, verbose=False)
        root = str(Path(root).parent)
    return Path(root) / f"{EXTENSION_NAME}_{_cache_key()}"


class MhcOpBuilder:
    """OpBuilder-style loader of the ``tracecheck_mhc`` pybind11 module.

    ``load()`` returns the module with the four kernels ``mhc_pre_sinkhorn``,
    ``mhc_pre_sinkhorn_backward``, ``mhc_post`` and ``mhc_post_backward``. The loaded module is
    cached on the class, so every builder instance in the process shares it.
    """

    _loaded_op: types.ModuleType | None = None
    #: Seconds the last uncached load took (build or import), for benchmarks and reports.
    last_load_s: float | None = None
    #: True when the last uncached load had to compile (no usable cache).
    last_load_built: bool | None = None

    def load(self, verbose: bool = False) -> types.ModuleType:
        """Return the compiled module, building it first if no cached build exists.

        Raises ``RuntimeError`` (from cpp_extension) when no C++ compiler is available or the
        build fails; the compiler output is in the message.
        """
        if MhcOpBuilder._loaded_op is not None:
            return MhcOpBuilder._loaded_op
        return self._load_uncached(verbose)

    def _load_uncached(self, verbose: bool) -> types.ModuleType:
        start = time.perf_counter()
        build_dir = build_directory()
        library = build_dir / f"{EXTENSION_NAME}.so"
        built = False
        if (build_dir / _STAMP).exists() and library.exists():
            module = _import_library(library)
        else:
            from torch.utils import cpp_extension

            build_dir.mkdir(parents=True, exist_ok=True)
            _clear_stale_lock(build_dir)
            print(
                f"[mhc] building the {EXTENSION_NAME} extension in {build_dir} "
                "(first use only, ~30 s)",
                file=sys.stderr,
                flush=True,
            )
            module = cpp_extension.load(
                name=EXTENSION_NAME,
                sources=[str(s) for s in SOURCES],
                extra_cflags=list(EXTRA_CFLAGS),
                build_directory=str(build_dir),
                verbose=verbose,
            )
            built = True
            tmp = build_dir / f"{_STAMP}.{os.getpid()}"
            tmp.write_text(f"{EXTENSION_NAME} built with torch {_torch_version()}\n")
            os.replace(tmp, build_dir / _STAMP)
        MhcOpBuilder._loaded_op = module
        MhcOpBuilder.last_load_s = time.perf_counter() - start
        MhcOpBuilder.last_load_built = built
        return module


#: a build takes 25-40 s on 2 cores; a ``lock`` older than this was left by a build that was killed
STALE_LOCK_S = 300


def _clear_stale_lock(build_dir: Path) -> None:
    """cpp_extension's baton waits, silently and for ever, while a ``lock`` file exists. One left by a killed
    build (Ctrl-C during the first build) is removed, and said; a fresh one is another process building now."""
    lock = build_dir / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > STALE_LOCK_S:
        print(f"[mhc] removing {lock}: left {age:.0f} s ago by a build that did not finish", file=sys.stderr,
              flush=True)
        lock.unlink(missing_ok=True)
    else:
        print(f"[mhc] another process is building the extension (since {age:.0f} s); waiting for it",
              file=sys.stderr, flush=True)


def _torch_version() -> str:
    import torch

    return torch.__version__


def _import_library(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(EXTENSION_NAME, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BUILDER = MhcOpBuilder()


def load(verbose: bool = False) -> types.ModuleType:
    """Module-level shortcut for ``MhcOpBuilder().load()``; see :class:`MhcOpBuilder`."""
    return _BUILDER.load(verbose)
