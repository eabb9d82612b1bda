"""tcopslib: a small operator library, shaped like a vendor's (CANN's cann_ops_transformer, in miniature).

Every op is in the ``tcopslib`` namespace (``torch.ops.tcopslib.*``) except :class:`ScaledAdd`, an autograd.Function
over a pybind11 kernel. Some registrations are deliberately incomplete; see :mod:`tcopslib.ops`.
"""
from .ops import bias_gelu, l2_normalize, rms_norm, rope_rotate, swiglu
from .scaled import ScaledAdd, scaled_add

__all__ = ["ScaledAdd", "bias_gelu", "l2_normalize", "rms_norm", "rope_rotate", "scaled_add", "swiglu"]
