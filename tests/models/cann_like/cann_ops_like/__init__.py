"""A package shaped like Huawei's ``cann_ops_transformer`` torch_extension, on the CPU reference kernels of
``probes/mhc`` (the pybind11 extension): the mHC wrapper as CANN ships it, in its package layout.

Two features of CANN's code that tracecheck fix has to survive: ``ops/mhc/__init__.py`` re-exports each wrapper
*function* under its module's name (so ``import cann_ops_like.ops.mhc.mhc_pre_sinkhorn as m`` binds the function),
and the wrapper calls the pybind11 module straight from its own file when no gradient is needed."""
import os
import sys

# the reference kernels (probes/mhc): this package is never copied, so its own path finds them
_PROBES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4, "probes")
if _PROBES not in sys.path:
    sys.path.insert(0, os.path.normpath(_PROBES))
