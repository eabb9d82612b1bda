"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Only imports: no tensor op runs here, so no OpenMP pool or compile worker exists before the fork.
"""
import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch._functorch.aot_autograd  # noqa: F401
import torch._inductor.compile_fx  # noqa: F401
import torch.library  # noqa: F401
import torch.testing._internal.optests  # noqa: F401  (torch.library.opcheck)

from . import capture, discover, stages, worker  # noqa: F401
from . import oprecorder  # noqa: F401
from .stages import _compiled_autograd, _execution  # noqa: F401


def _warm_inductor_cpu() -> None:
    """Inductor finds the CPU's vector ISA by compiling and running a probe program per candidate ISA (about
    1.3 s), cached per process: asked once here, every stage process inherits the answer. Subprocesses only:
    no tensor op, no thread left behind."""
    try:
        from torch._inductor import cpu_vec_isa

        cpu_vec_isa.pick_vec_isa()
    except Exception:  # no compiler, say: the stage that needs one reports it
        pass


_warm_inductor_cpu()
