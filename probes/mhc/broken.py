"""Three broken registrations of the mHC operators, each reproducing one field failure on CPU.

Each variant has its own operators or path, so none of them touches the dispatcher operators that
:mod:`mhc.fixed` registers autograd on (and the fix cannot make them pass by accident):

``autograd_function`` -> tracecheck kind ``pybind-builtin``
    :class:`MhcPreSinkhornFunction` / :class:`MhcPostFunction`: ``torch.autograd.Function`` whose
    ``forward`` calls ``MhcOpBuilder().load()`` and then the pybind11 function, like the CANN Python
    wrapper's grad path. Eager works; Dynamo traces into ``forward`` (it inlines autograd.Function
    bodies) and cannot trace the pybind11 builtin: graph break, ``Unsupported`` under fullgraph.

``missing_fake`` -> kind ``missing-fake``
    ``torch.library.custom_op`` operators ``mhc_broken_nofake::*`` around the pybind11 calls, with
    autograd but **no** ``register_fake``. Eager forward and backward work; Dynamo's fake-tensor pass
    raises ``TorchRuntimeError`` ("There was no fake impl registered ...").

``missing_autograd`` -> kind ``missing-autograd``
    ``custom_op`` operators ``mhc_broken_noautograd::*`` with ``register_fake`` but **no**
    ``register_autograd``. Eager forward works and eager backward raises ``RuntimeError``
    ("Trying to backward through ... but no autograd formula was registered"); under
    aot_eager/inductor the forward compile fails already.

:data:`VARIANTS` maps each name to ``(pre, post)`` wrappers with the public signatures of
:func:`mhc.fixed.mhc_pre_sinkhorn` and :func:`mhc.fixed.mhc_post`.
"""

from __future__ import annotations

import types

import torch
from torch import Tensor

from . import ops as _ops
from .builder import MhcOpBuilder


def _needs_grad(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# =============================================================================================
# (a) autograd.Function calling the pybind11 module directly (the CANN wrapper's grad path)
# =============================================================================================


class MhcPreSinkhornFunction(torch.autograd.Function):
    """CANN-style autograd.Function for mhc_pre_sinkhorn; returns ``(h_in, h_post, h_res)``."""

    @staticmethod
    def forward(ctx, x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps):
        ext = MhcOpBuilder().load()
        h_in, h_post, h_res, h_pre, hc_before_norm, inv_rms, sum_out, norm_out = ext.mhc_pre_sinkhorn(
            x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, True
        )
        ctx.save_for_backward(x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out, norm_out)
        ctx.hc_eps = hc_eps
        return h_in, h_post, h_res

    @staticmethod
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res):
        ext = MhcOpBuilder().load()
        grad_x, grad_phi, grad_alpha, grad_bias = ext.mhc_pre_sinkhorn_backward(
            grad_h_in, grad_h_post, grad_h_res, *ctx.saved_tensors, ctx.hc_eps
        )
        return grad_x, grad_phi, grad_alpha, grad_bias, None, None, None, None


class MhcPostFunction(torch.autograd.Function):
    """CANN-style autograd.Function for mhc_post."""

    @staticmethod
    def forward(ctx, x, h_res, h_out, h_post):
        ext = MhcOpBuilder().load()
        y = ext.mhc_post(x, h_res, h_out, h_post)
        ctx.save_for_backward(x, h_res, h_out, h_post)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        ext = MhcOpBuilder().load()
        return tuple(ext.mhc_post_backward(grad_output, *ctx.saved_tensors))


def autograd_function_pre(x, phi, alpha, bias, hc_mult, num_iters, hc_eps=1e-6, norm_eps=1e-6):
    """The CANN wrapper: autograd.Function when an input needs grad, else the dispatcher op."""
    if _needs_grad(x, phi, alpha, bias):
        return MhcPreSinkhornFunction.apply(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps)
    outs = torch.ops.cann_ops_transformer.mhc_pre_sinkhorn(
        x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, False
    )
    return outs[0], outs[1], outs[2]


def autograd_function_post(x, h_res, h_out, h_post):
    """The CANN wrapper for mhc_post: autograd.Function when an input needs grad."""
    if _needs_grad(x, h_res, h_out, h_post):
        return MhcPostFunction.apply(x, h_res, h_out, h_post)
    return torch.ops.cann_ops_transformer.mhc_post(x, h_res, h_out, h_post)


# =============================================================================================
# Shared pieces of the two custom_op variants
# =============================================================================================


def _signature(name: str) -> str:
    """The CANN schema of ``name`` without the operator name: ``(Tensor x, ...) -> ...``."""
    schema = _ops.SCHEMAS[name]
    return schema[len(name) :]


def _pre_pybind(x, phi, alpha, bias, hcMult, numIters, hcEps, normEps, outFlag):  # noqa: N803
    return tuple(MhcOpBuilder().load().mhc_pre_sinkhorn(x, phi, alpha, bias, hcMult, numIters, hcEps, normEps, outFlag))


def _pre_backward_pybind(
    gradHin, gradHPost, gradHRes, x, phi, alpha, bias, hPre, hcBeforeNorm, invRms, sumOut, normOut, hcEps  # noqa: N803
):
    return tuple(
        MhcOpBuilder().load().mhc_pre_sinkhorn_backward(
            gradHin, gradHPost, gradHRes, x, phi, alpha, bias, hPre, hcBeforeNorm, invRms, sumOut, normOut, hcEps
        )
    )


def _post_pybind(x, hRes, hOut, hPost):  # noqa: N803
    return MhcOpBuilder().load().mhc_post(x, hRes, hOut, hPost)


def _post_backward_pybind(gradOutput, x, hRes, hOut, hPost):  # noqa: N803
    return tuple(MhcOpBuilder().load().mhc_post_backward(gradOutput, x, hRes, hOut, hPost))


def _custom_op(namespace: str, name: str, impl):
    # A copy of impl named like the op, so torch's messages say "mhc_post.register_fake", as they
    # would for a custom_op written with the decorator on a function of that name.
    named = types.FunctionType(impl.__code__, impl.__globals__, name, impl.__defaults__, impl.__closure__)
    named.__qualname__ = name
    return torch.library.custom_op(f"{namespace}::{name}", named, mutates_args=(), schema=_signature(name))


def _make_pre_wrapper(op):
    def pre(x, phi, alpha, bias, hc_mult, num_iters, hc_eps=1e-6, norm_eps=1e-6):
        outs = op(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, _needs_grad(x, phi, alpha, bias))
        return outs[0], outs[1], outs[2]

    return pre


# =============================================================================================
# (b) custom_op with autograd but NO register_fake
# =============================================================================================

NOFAKE_NAMESPACE = "mhc_broken_nofake"

nofake_pre_sinkhorn = _custom_op(NOFAKE_NAMESPACE, "mhc_pre_sinkhorn", _pre_pybind)
nofake_pre_sinkhorn_backward = _custom_op(NOFAKE_NAMESPACE, "mhc_pre_sinkhorn_backward", _pre_backward_pybind)
nofake_post = _custom_op(NOFAKE_NAMESPACE, "mhc_post", _post_pybind)
nofake_post_backward = _custom_op(NOFAKE_NAMESPACE, "mhc_post_backward", _post_backward_pybind)
# (no register_fake for any of them: this is the bug)


def _nofake_pre_setup(ctx, inputs, output):
    x, phi, alpha, bias, _n, _i, hc_eps, _ne, _flag = inputs
    ctx.save_for_backward(x, phi, alpha, bias, *output[3:])
    ctx.hc_eps = hc_eps


def _nofake_pre_backward(ctx, grad_h_in, grad_h_post, grad_h_res, *_rest):
    grads = nofake_pre_sinkhorn_backward(grad_h_in, grad_h_post, grad_h_res, *ctx.saved_tensors, ctx.hc_eps)
    return (*grads, None, None, None, None, None)


def _nofake_post_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _nofake_post_backward(ctx, grad_output):
    return nofake_post_backward(grad_output, *ctx.saved_tensors)


nofake_pre_sinkhorn.register_autograd(_nofake_pre_backward, setup_context=_nofake_pre_setup)
nofake_post.register_autograd(_nofake_post_backward, setup_context=_nofake_post_setup)

missing_fake_pre = _make_pre_wrapper(nofake_pre_sinkhorn)


def missing_fake_post(x, h_res, h_out, h_post):
    return nofake_post(x, h_res, h_out, h_post)


# =============================================================================================
# (c) custom_op with register_fake but NO register_autograd
# =============================================================================================

NOAUTOGRAD_NAMESPACE = "mhc_broken_noautograd"

noautograd_pre_sinkhorn = _custom_op(NOAUTOGRAD_NAMESPACE, "mhc_pre_sinkhorn", _pre_pybind)
noautograd_post = _custom_op(NOAUTOGRAD_NAMESPACE, "mhc_post", _post_pybind)
noautograd_pre_sinkhorn.register_fake(_ops.mhc_pre_sinkhorn_fake)
noautograd_post.register_fake(_ops.mhc_post_fake)
# (no register_autograd: the backward kernels exist in the extension but were never wired up)

missing_autograd_pre = _make_pre_wrapper(noautograd_pre_sinkhorn)


def missing_autograd_post(x, h_res, h_out, h_post):
    return noautograd_post(x, h_res, h_out, h_post)


#: variant name -> (pre wrapper, post wrapper), signatures as in mhc.fixed.
VARIANTS = {
    "autograd_function": (autograd_function_pre, autograd_function_post),
    "missing_fake": (missing_fake_pre, missing_fake_post),
    "missing_autograd": (missing_autograd_pre, missing_autograd_post),
}
