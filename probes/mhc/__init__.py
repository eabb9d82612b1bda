"""mHC reference operators for tracecheck's probes.

``import mhc`` (with ``probes/`` on ``sys.path``) does two things:

1. makes the four ``cann_ops_transformer::`` operators (``mhc_pre_sinkhorn``,
   ``mhc_pre_sinkhorn_backward``, ``mhc_post``, ``mhc_post_backward``) available: the real NPU ones
   when ``torch_npu`` and ``cann_ops_transformer`` import, otherwise the CPU reference defined in
   :mod:`mhc.ops` (exact CANN schemas, CPU kernels in the pybind11 extension, fake kernels);
2. applies the fixed autograd registration and exposes it, with the public wrappers, as
   :mod:`mhc.fixed`.

Other modules: :mod:`mhc.golden` (float64 reference), :mod:`mhc.builder` (builds/loads the
extension), :mod:`mhc.broken` (the three broken registrations), :mod:`mhc.model` (a small
DeepSeek-V4-style stack). See ``docs/mhc.md``.
"""

from . import ops

#: "npu" when the real CANN package provides the operators, else "reference".
BACKEND = ops.install()
#: Device probes put their tensors on: "npu" with the real package, else "cpu".
DEVICE = ops.DEVICE

from . import fixed  # noqa: E402 - must follow install(): it registers autograd on the ops
from .builder import load  # noqa: E402

__all__ = ["BACKEND", "DEVICE", "fixed", "load", "ops"]
