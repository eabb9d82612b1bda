"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Imports, and answers to questions Inductor asks once per process (_warm_inductor_cpu). No tensor op runs here,
so no OpenMP pool or compile worker exists before the fork.
"""
import os

import torch
import torch._dynamo  # noqa: F401
import torch._functorch.aot_autograd  # noqa: F401
import torch._inductor.compile_fx  # noqa: F401
import torch.library  # noqa: F401
import torch.testing._internal.optests  # noqa: F401  (torch.library.opcheck)

from . import capture, discover, stages, worker  # noqa: F401
from . import oprecorder  # noqa: F401
from .stages import _compiled_autograd, _execution  # noqa: F401


def _warm_inductor_cpu() -> None:
    """Answer, once in the fork server, what every Inductor stage process would otherwise work out for itself
    on its first compile. Only files and subprocesses: no tensor op, no thread left behind."""
    try:
        from torch._inductor import codecache, cpu_vec_isa
    except Exception:  # a torch without Inductor: the stage that needs it reports it
        return
    try:
        _pick_vec_isa(cpu_vec_isa)
    except Exception:  # no compiler, say: the stage that needs one reports it
        pass
    try:
        codecache.torch_key()  # the FX graph cache's hash of torch's sources (about 0.2 s per process)
    except Exception:
        pass
    try:  # imported by Dynamo's first look at a higher-order op (about 0.07 s per process)
        import torch.distributed.tensor.experimental  # noqa: F401
    except Exception:
        pass


def _pick_vec_isa(cpu_vec_isa) -> None:
    """Inductor finds the CPU's vector ISAs by compiling and loading a probe library per candidate, each load
    in a fresh Python (about 1.3 s on x86). The verdict is kept beside Inductor's cache: when every ISA the CPU
    flags allow passed before, with this torch and compiler, only the ISA Inductor picks is probed again.
    Inductor's config is left as it was, so compiled code and cache keys are those of a plain torch.compile."""
    import json

    from torch._inductor import config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    path = os.path.join(cache_dir(), "tracecheck_vec_isa.json")
    key = _vec_isa_key()
    try:
        with open(path) as f:
            verdicts = json.load(f)
    except (OSError, ValueError):
        verdicts = {}
    passed = verdicts.get(key)
    if passed is not None and config.cpp.vec_isa_ok is None:
        config.cpp.vec_isa_ok = True  # the CPU-flag filter alone: no probe
        try:
            allowed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
            if sorted(allowed) == sorted(passed):
                cpu_vec_isa.valid_vec_isa_list()  # cached for the process and every fork
        finally:
            config.cpp.vec_isa_ok = None
    bool(cpu_vec_isa.pick_vec_isa())  # on a miss or a stale verdict, every candidate is probed here
    found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    if found != passed:  # new, or stale: keep what was found
        verdicts[key] = found
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(verdicts, f)
        os.replace(tmp, path)


def _vec_isa_key() -> str:
    """What the ISA verdict depends on: this torch, the CPU's flags and the C++ compiler Inductor calls."""
    import hashlib
    import platform
    import shutil

    from torch._inductor import config

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    cxx = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    compilers = [shutil.which(c) for c in cxx if c]
    stamps = [(c, os.stat(c).st_mtime_ns) for c in compilers if c]
    raw = repr((torch.__version__, torch.__file__, platform.machine(), flags, os.environ.get("CXX"), stamps))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


_warm_inductor_cpu()
