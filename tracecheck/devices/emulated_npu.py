"""An emulated NPU: the PrivateUse1 dispatch key renamed ``npu`` and backed by host memory.

torch_npu registers its operators as ``TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)`` kernels on the ``npu`` device;
this module gives a machine without Ascend hardware the same dispatch path, so vendor op registrations (a
kernel for PrivateUse1, a fake impl, autograd, opcheck) can be checked on the CPU. The C++ part
(``csrc/emulated_npu.cpp``) registers an allocator on host memory, the factory/copy/view kernels and ATen's
``cpu_fallback`` for every other aten op; the device guard, hooks and the ``torch.npu`` module come from
``torch.utils.backend_registration._setup_privateuseone_for_python_backend``.

What it is not: an NPU. No CANN kernel runs, Inductor has no code generator for it (as for a real NPU without
torch_npu's), and reports say "emulated NPU (PrivateUse1 on CPU memory)". Installed once per process
(``install``); a process whose PrivateUse1 key already belongs to another backend (the real torch_npu) refuses.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

from .. import compat
from ..machine import EMULATED_NPU as LABEL  # how every report names what ran
from ..evidence.wording import TORCH_NAMESPACES

#: the device name
DEVICE = "npu"

_SOURCE = Path(__file__).resolve().parent / "csrc" / "emulated_npu.cpp"
_NAME = "tracecheck_emulated_npu"
_FLAGS = ("-O1",)
_STAMP = "built.ok"
#: a build takes ~45 s on 2 cores: a ``lock`` older than this was left by one that was killed
_STALE_LOCK_S = 300
_installed: types.ModuleType | None = None


class EmulatedNpuModule:
    """``torch.npu`` of the emulated device: one device, always available. Random numbers are drawn on the host
    (every kernel but the copies runs there), so its RNG state is the CPU generator's."""

    emulated = True
    label = LABEL

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return False  # no runtime to break on fork (environment.initialised_device): the memory is the host's

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        pass

    def synchronize(self, device: Any = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        pass  # torch.manual_seed seeds the CPU generator, which this device draws from

    manual_seed_all = manual_seed

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]  # torch.autocast("npu") asks; no op casts (no autocast kernels)


def installed() -> bool:
    return _installed is not None


def install(verbose: bool = False) -> None:
    """Make ``npu`` an emulated device in this process (idempotent). Builds the extension on first use (~45 s,
    cached under ``$TORCH_EXTENSIONS_DIR``). Raises RuntimeError when PrivateUse1 already belongs to a backend.
    Call it before the process's first backward: the autograd engine sizes its per-device queues once, when it first
    runs, and a device registered later has none (an INTERNAL ASSERT in engine.cpp). Task processes install it first."""
    global _installed
    if _installed is not None:
        return
    owner = compat.privateuse1_backend_name()
    if owner != "privateuseone" or "torch_npu" in sys.modules:
        raise RuntimeError(f"cannot emulate an NPU: the PrivateUse1 device already belongs to {owner!r}"
                           + (" (torch_npu is imported)" if "torch_npu" in sys.modules else ""))
    module = _load(verbose)
    module.set_host_namespaces(sorted(TORCH_NAMESPACES))  # torch's own ops run on the host; a vendor's are refused
    compat.setup_privateuse1_backend(DEVICE, EmulatedNpuModule())
    _installed = module


def _load(verbose: bool) -> types.ModuleType:
    build_dir = _build_directory()
    library = build_dir / f"{_NAME}.so"
    if (build_dir / _STAMP).exists() and library.exists():
        spec = importlib.util.spec_from_file_location(_NAME, str(library))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)
    lock = build_dir / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
        lock.unlink(missing_ok=True)  # left by a killed build: cpp_extension's baton would wait on it for ever
    print(f"[tracecheck] building the emulated NPU extension in {build_dir} (first use only, ~45 s)",
          file=sys.stderr, flush=True)
    module = cpp_extension.load(name=_NAME, sources=[str(_SOURCE)], extra_cflags=list(_FLAGS),
                                build_directory=str(build_dir), verbose=verbose)
    tmp = build_dir / f"{_STAMP}.{os.getpid()}"
    tmp.write_text(f"built with torch {torch.__version__}\n")
    os.replace(tmp, build_dir / _STAMP)
    return module


def _build_directory() -> Path:
    """``$TORCH_EXTENSIONS_DIR`` (or torch's default) ``/tracecheck_emulated_npu_<hash>``: the hash covers the
    source, the flags, torch's and Python's versions, so an upgrade builds beside the old copy."""
    key = hashlib.sha256(_SOURCE.read_bytes() + repr((_FLAGS, torch.__version__, sys.version_info[:2],
                                                      sys.abiflags)).encode())
    return Path(compat.extensions_root()) / f"{_NAME}_{key.hexdigest()[:16]}"
