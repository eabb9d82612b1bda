"""The environment section of a report, and the device probes run on.

torch_npu is optional: it is found with importlib and imported only if installed; without Ascend's CANN
runtime it fails to import and the report says so. tracecheck never claims an NPU ran when none did.
"""
from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from typing import Any

from .model.exitcodes import UsageError


def npu_status() -> dict[str, Any]:
    """``{"installed", "available", "version", "cann", "error"}`` for torch_npu."""
    status: dict[str, Any] = {"installed": importlib.util.find_spec("torch_npu") is not None, "available": False}
    if not status["installed"]:
        status["error"] = "torch_npu is not installed"
        return status
    try:
        torch_npu = importlib.import_module("torch_npu")
        status["version"] = getattr(torch_npu, "__version__", None)
        import torch

        status["available"] = bool(torch.npu.is_available())  # type: ignore[attr-defined]
        get_cann = getattr(getattr(torch_npu, "npu", None), "get_cann_version", None)
        status["cann"] = get_cann() if callable(get_cann) else None
    except Exception as e:  # typically: CANN runtime libraries missing
        status["error"] = f"torch_npu is installed but does not import: {type(e).__name__}: {e}".splitlines()[0]
    return status


def resolve_device(requested: str) -> str:
    """``auto`` -> npu when torch_npu works, else cpu. Raises UsageError for an unavailable device. Imports
    torch only to check CUDA (the CLI process need not load torch: stage processes do)."""
    if requested == "auto":
        return "npu" if npu_status()["available"] else "cpu"
    kind, _, index = requested.partition(":")
    if index and (not index.isdigit() or kind == "cpu"):
        raise UsageError(f"--device {requested}: malformed device (e.g. cpu, cuda, cuda:1, npu:0)")
    if kind == "cuda" and not _cuda_available():
        raise UsageError(f"--device {requested}: torch.cuda.is_available() is False on this machine")
    if kind == "npu" and not npu_status()["available"]:
        raise UsageError(f"--device {requested}: {npu_status().get('error') or 'no NPU available'}")
    if kind not in ("cpu", "cuda", "npu", "xpu"):
        raise UsageError(f"--device {requested}: unknown device (use auto, cpu, cuda or npu)")
    return requested


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def environment_task(task: dict[str, Any]) -> dict[str, Any]:
    """The task that records the environment in a stage-like process (torch already imported there), so the
    CLI process never imports torch: ``collect(device)``, and with ``collect_env`` the collect_env summary."""
    return {"environment": collect(task["device"]),
            "collect_env": collect_env_summary() if task.get("collect_env") else None}


def collect(device: str) -> dict[str, Any]:
    """Environment for the report: versions, platform, device; the full collect_env is left to torch."""
    import torch

    npu = npu_status()
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": device,
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "torch_npu": npu.get("version") if npu["installed"] else None,
        "npu_available": npu["available"],
        "cann": npu.get("cann"),
        "npu_note": npu.get("error"),
    }


#: Fields picked from ``torch.utils.collect_env.get_env_info()`` (label, field), in display order.
COLLECT_ENV_FIELDS = (
    ("torch", "torch_version"),
    ("Python", "python_version"),
    ("OS", "os"),
    ("platform", "python_platform"),
    ("libc", "libc_version"),
    ("GCC", "gcc_version"),
    ("Clang", "clang_version"),
    ("CUDA (torch built with)", "cuda_compiled_version"),
    ("CUDA runtime", "cuda_runtime_version"),
    ("CUDA available", "is_cuda_available"),
    ("GPU models", "nvidia_gpu_models"),
    ("NVIDIA driver", "nvidia_driver_version"),
    ("cuDNN", "cudnn_version"),
    ("HIP", "hip_compiled_version"),
    ("XPU available", "is_xpu_available"),
)


def collect_env_summary() -> dict[str, Any]:
    """The ``COLLECT_ENV_FIELDS`` of ``torch.utils.collect_env.get_env_info()`` (runs gcc/pip; ~1 s).

    Never raises: a failure is recorded under ``"error"``. Environment variables (e.g. the allocator
    config collect_env reads) are left out on purpose.
    """
    try:
        from torch.utils import collect_env

        info = collect_env.get_env_info()
    except Exception as e:  # collect_env shells out; a broken toolchain must not cost the report
        return {"error": f"torch.utils.collect_env failed: {type(e).__name__}: {e}".splitlines()[0]}
    out: dict[str, Any] = {}
    for _, name in COLLECT_ENV_FIELDS:
        value = getattr(info, name, None)
        if value not in (None, "", "N/A", "Could not collect"):
            out[name] = value
    return out


def initialised_device() -> str | None:
    """The device runtime this process has initialised (``"CUDA"``, ``"NPU"``, ``"XPU"``), or None. A process
    that has one must not fork: the child cannot use the parent's device context (torch raises "Cannot
    re-initialize CUDA in forked subprocess"), so a template that initialised one stops serving (isolate/template.py)."""
    import torch

    if torch.cuda.is_initialized():
        return "CUDA"
    for name in ("npu", "xpu"):  # torch.npu exists only once torch_npu is imported
        backend = getattr(torch, name, None)
        is_init = getattr(backend, "is_initialized", None)
        if callable(is_init) and is_init():
            return name.upper()
    return None
