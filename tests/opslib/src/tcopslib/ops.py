"""The ``tcopslib::`` custom ops, each registered as a kernel team might (some of them incompletely, on purpose):

``swiglu``        autograd formula, **no fake**: eager forward and backward work; torch.compile cannot run it.
``rms_norm``      fake, **no autograd formula**: eager forward works; backward raises.
``l2_normalize``  ``mutates_args=()`` but its kernel **divides its input in place**: eager results look right.
``bias_gelu``     fake and autograd: correct.
``rope_rotate``   correct, but no test calls it.
"""
import torch
from torch import Tensor


# ---- swiglu: autograd, no fake ---------------------------------------------------------------------------------

@torch.library.custom_op("tcopslib::swiglu", mutates_args=())
def swiglu(x: Tensor, gate: Tensor) -> Tensor:
    return x * torch.nn.functional.silu(gate)


def _swiglu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward(ctx, grad):
    x, gate = ctx.saved_tensors
    s = torch.sigmoid(gate)
    return grad * gate * s, grad * x * s * (1 + gate * (1 - s))


swiglu.register_autograd(_swiglu_backward, setup_context=_swiglu_setup)
# (no register_fake)


# ---- rms_norm: fake, no autograd -------------------------------------------------------------------------------

@torch.library.custom_op("tcopslib::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x)
# (no register_autograd)


# ---- l2_normalize: declares no mutation, writes its input ------------------------------------------------------

@torch.library.custom_op("tcopslib::l2_normalize", mutates_args=())
def l2_normalize(x: Tensor) -> Tensor:
    x.div_(x.norm(dim=-1, keepdim=True))  # the bug: an in-place write the schema does not declare
    return x.clone()


@l2_normalize.register_fake
def _l2_normalize_fake(x):
    return torch.empty_like(x)


# ---- bias_gelu: correct ----------------------------------------------------------------------------------------

@torch.library.custom_op("tcopslib::bias_gelu", mutates_args=())
def bias_gelu(x: Tensor, bias: Tensor) -> Tensor:
    return torch.nn.functional.gelu(x + bias)


@bias_gelu.register_fake
def _bias_gelu_fake(x, bias):
    return torch.empty_like(x)


def _bias_gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _bias_gelu_backward(ctx, grad):
    x, bias = ctx.saved_tensors
    g = torch.ops.aten.gelu_backward(grad, x + bias)
    return g, g.sum_to_size(bias.shape)


bias_gelu.register_autograd(_bias_gelu_backward, setup_context=_bias_gelu_setup)


# ---- rope_rotate: correct, never called by the suite ------------------------------------------------------------

@torch.library.custom_op("tcopslib::rope_rotate", mutates_args=())
def rope_rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@rope_rotate.register_fake
def _rope_rotate_fake(x, cos, sin):
    return torch.empty_like(x)
