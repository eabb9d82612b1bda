"""The environment section of a report, and the device probes run on.

torch_npu is optional: it is found with importlib and imported only if installed; without Ascend's CANN
runtime it fails to import and the report says so. tracecheck never claims an NPU ran when none did.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Required, TypedDict

from .model.exitcodes import UsageError
from .model.reportio import Json
from .model.tasks import ProcessTask


#: torch_npu's import, run apart: torch imports an installed torch_npu itself (its device-backend entry point), and
#: one that fails leaves torch half set up, so the check never runs in a process that goes on to run probes
_NPU_CHECK = """
import json, torch_npu, torch
out = {"version": getattr(torch_npu, "__version__", None), "available": bool(torch.npu.is_available())}
get_cann = getattr(getattr(torch_npu, "npu", None), "get_cann_version", None)
out["cann"] = get_cann() if callable(get_cann) else None
print("@tracecheck-npu " + json.dumps(out))
"""
_SENTINEL = "@tracecheck-npu "
#: what a torch_npu that does not import needs, said with its error
NPU_HOW = ("torch_npu needs Ascend's CANN toolkit: install it and `source <cann>/set_env.sh`, then "
           "`pip install torch_npu` of torch's minor version; to check the NPU path without an NPU, --emulate-npu")
#: torch's switch for importing an installed device backend (torch_npu) at ``import torch``
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


class NpuStatus(TypedDict, total=False):
    """torch_npu on this machine (``npu_status``). A TypedDict, not a dataclass: part of it is the JSON line the
    check's subprocess prints, and callers of ``collect`` pass one as a literal."""

    installed: Required[bool]
    available: Required[bool]
    #: torch_npu's ``__version__`` and CANN's, where it imports
    version: str | None
    cann: str | None
    #: one line: why there is no NPU (the import's error and what to install)
    error: str
    #: installed, but ``import torch_npu`` fails (then ``import torch`` fails too, through its entry point)
    import_failed: bool


def npu_status() -> NpuStatus:
    """torch_npu's status, checked in a subprocess (~3 s, once per process, only when it is installed). ``error``
    is one line: the exception the import ended with (its first line) and what to install."""
    return _npu_status().copy()


@functools.lru_cache(maxsize=1)
def _npu_status() -> NpuStatus:
    status = NpuStatus(installed=importlib.util.find_spec("torch_npu") is not None, available=False)
    if not status["installed"]:
        status["error"] = "torch_npu is not installed"
        return status
    env = {**os.environ, AUTOLOAD: "0"}  # import it by name, so its own error is the one raised
    try:
        proc = subprocess.run([sys.executable, "-c", _NPU_CHECK], capture_output=True, text=True, env=env,
                              timeout=120)
    except subprocess.TimeoutExpired:
        status["error"] = "torch_npu is installed but `import torch_npu` did not finish in 120 s"
        return status
    found = [ln[len(_SENTINEL):] for ln in proc.stdout.splitlines() if ln.startswith(_SENTINEL)]
    if proc.returncode == 0 and found:
        status.update(json.loads(found[-1]))
        if not status["available"]:
            status["error"] = "torch_npu imports but torch.npu.is_available() is False (no NPU or driver)"
        return status
    # the exception the import ended with: its type and the first line of its message
    raised = [ln for ln in proc.stderr.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    status["import_failed"] = True
    status["error"] = (f"torch_npu {_installed_version('torch_npu')} is installed but does not import "
                       f"({raised[-1].strip() if raised else f'exit {proc.returncode}'}): {NPU_HOW}")
    return status


def _installed_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def keep_torch_importable() -> None:
    """An installed torch_npu that cannot import makes ``import torch`` itself fail (torch loads device backends
    through their entry point). Unless the user set it, turn that off for this process and the stage processes
    it starts, so a CPU run works; a torch_npu that imports is left to load as usual."""
    if AUTOLOAD not in os.environ and npu_status().get("import_failed"):
        os.environ[AUTOLOAD] = "0"


def resolve_device(requested: str, emulate_npu: bool = False) -> str:
    """``auto`` -> npu when torch_npu works (or is emulated), else cpu. Raises UsageError for an unavailable
    device. Imports torch only to check CUDA (the CLI process need not load torch: stage processes do)."""
    keep_torch_importable()
    if emulate_npu:
        if requested not in ("auto", "npu", "npu:0"):
            raise UsageError(f"--emulate-npu emulates the npu device; --device {requested} asks for another")
        if npu_status()["available"]:
            raise UsageError("--emulate-npu: torch_npu works on this machine (a real NPU); drop --emulate-npu")
        return "npu"
    if requested == "auto":
        return "npu" if npu_status()["available"] else "cpu"
    kind, _, index = requested.partition(":")
    if index and (not index.isdigit() or kind == "cpu"):
        raise UsageError(f"--device {requested}: malformed device (e.g. cpu, cuda, cuda:1, npu:0)")
    if kind == "cuda" and not _cuda_available():
        raise UsageError(f"--device {requested}: torch.cuda.is_available() is False on this machine")
    if kind == "npu" and not npu_status()["available"]:
        why = npu_status().get("error") or "no NPU available"
        raise UsageError(f"--device {requested}: {why}" + ("" if NPU_HOW in why else f" ({NPU_HOW})"))
    if kind not in ("cpu", "cuda", "npu", "xpu"):
        raise UsageError(f"--device {requested}: unknown device (use auto, cpu, cuda or npu)")
    return requested


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass(frozen=True, kw_only=True)
class EnvironmentTask(ProcessTask):
    """The task that records the environment in a stage-like process (torch already imported there), so the
    CLI process never imports torch: ``collect(device)``, and with ``collect_env`` the collect_env summary."""

    device: str
    collect_env: bool = False
    #: the run's ``npu_status()`` (it costs a subprocess where torch_npu is installed: asked once, by the parent)
    npu: NpuStatus | None = None

    def run(self) -> Json:
        return MachineRecord(collect(self.device, self.emulate_npu, self.npu),
                             collect_env_summary() if self.collect_env else None).to_json()


@dataclass(frozen=True)
class MachineRecord:
    """What the environment task recorded (``EnvironmentTask``), as the run keeps it and its cache stores it: the
    report's environment section (``collect``) and, when asked, collect_env's summary, each the JSON the report
    writes (model/environment.py reads them)."""

    environment: Json
    collect_env: Json | None = None

    def to_json(self) -> Json:
        return {"environment": self.environment, "collect_env": self.collect_env}

    @classmethod
    def from_json(cls, d: object) -> "MachineRecord":
        """Raises ValueError for anything the environment task does not write (a damaged cache entry)."""
        env = d.get("environment") if isinstance(d, dict) else None
        summary = d.get("collect_env") if isinstance(d, dict) else None
        if not isinstance(env, dict) or not (summary is None or isinstance(summary, dict)):
            raise ValueError(f"not an environment record: {str(d)[:200]}")
        return cls(env, summary)

    @property
    def report_environment(self) -> Json:
        """The report's environment section: collect_env's summary inside it, where there is one."""
        return self.environment if self.collect_env is None else {**self.environment, "collect_env": self.collect_env}


#: how a report names the emulated device (devices/emulated_npu.py says what it is)
EMULATED_NPU = "emulated NPU (PrivateUse1 on CPU memory)"


def collect(device: str, emulated: bool = False, npu: NpuStatus | None = None) -> Json:
    """Environment for the report (its JSON section, as written): versions, platform, device; the full collect_env
    is left to torch. ``npu``: the run's ``npu_status()`` when the caller has it (it costs a subprocess where
    torch_npu is installed)."""
    import torch

    npu = npu or npu_status()
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "device": device,
        # never a real NPU: the PrivateUse1 key renamed npu, on host memory (tracecheck/devices/emulated_npu.py)
        "emulated": emulated,
        **({"device_label": EMULATED_NPU} if emulated else {}),
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


def collect_env_summary() -> Json:
    """The ``COLLECT_ENV_FIELDS`` of ``torch.utils.collect_env.get_env_info()`` (runs gcc/pip; ~1 s).

    Never raises: a failure is recorded under ``"error"``. Environment variables (e.g. the allocator
    config collect_env reads) are left out on purpose.
    """
    try:
        from torch.utils import collect_env

        info = collect_env.get_env_info()
    except Exception as e:  # collect_env shells out; a broken toolchain must not cost the report
        return {"error": f"torch.utils.collect_env failed: {type(e).__name__}: {e}".splitlines()[0]}
    out: Json = {}  # the report's collect_env section, as written
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
