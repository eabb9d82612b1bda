"""The fixed registration of the mHC operators: autograd on the dispatcher ops, no autograd.Function.

Self-contained on purpose: a CANN engineer can lift this file into
``cann_ops_transformer/ops/`` as is. It needs only that the four ``cann_ops_transformer::``
operators exist with their CANN schemas and have fake (Meta) kernels, which the real package
provides (and :mod:`mhc.ops` provides on CPU). It follows the package's ``compressor.py`` pattern:

* ``torch.library.register_autograd`` on the existing ``mhc_pre_sinkhorn`` and ``mhc_post`` operators,
  with ``setup_context`` saving what the CANN ``MhcPreSinkhornFunction`` / ``MhcPostFunction`` saved
  (spec §5) and a backward that calls the ``*_backward`` dispatcher operators;
* public wrappers that always call the dispatcher operator, so ``torch.compile`` sees one opaque
  graph node per call (its fake kernel gives the shapes) instead of tracing into Python that calls
  a pybind11 function;
* ``mhc_post_backward`` (and ``mhc_pre_sinkhorn_backward``) exported beside them;
* batching rules (``torch.library.register_vmap``) for the two forward operators, so that
  ``torch.func.vmap`` calls each kernel once for the batch instead of once per sample.

Named dims: ``lead`` = ``(B, S)`` (or ``(T,)``); ``n`` = hc_mult streams (4 on NPU); ``C`` hidden size;
``K = n*C``; ``M = n*n + 2n``; ``I`` = num_iters (20 on NPU).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "mhc_pre_sinkhorn",
    "mhc_pre_sinkhorn_backward",
    "mhc_post",
    "mhc_post_backward",
    "register",
]

_PRE = "cann_ops_transformer::mhc_pre_sinkhorn"
_POST = "cann_ops_transformer::mhc_post"
_PRE_BACKWARD = "cann_ops_transformer::mhc_pre_sinkhorn_backward"
_POST_BACKWARD = "cann_ops_transformer::mhc_post_backward"


def _ops():
    return torch.ops.cann_ops_transformer


# ---------------------------------------------------------------------------------------------
# mhc_pre_sinkhorn: autograd formula (spec §5, §6)
# ---------------------------------------------------------------------------------------------


def _pre_setup_context(ctx, inputs, output) -> None:
    x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag = inputs
    h_pre, hc_before_norm, inv_rms, sum_out, norm_out = output[3:]
    ctx.save_for_backward(x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out, norm_out)
    ctx.hc_eps = hc_eps
    # Only needed when the op was called with outFlag=False (intermediates are (0,) placeholders):
    # then the backward recomputes them, see _pre_backward.
    ctx.recompute_args = None if out_flag else (hc_mult, num_iters, norm_eps)
    # Outputs 3-7 are saved intermediates, not results: a gradient through them would be dropped
    # silently, so say they are not differentiable.
    ctx.mark_non_differentiable(*output[3:])


def _pre_backward(ctx, grad_h_in, grad_h_post, grad_h_res, *_grads_of_intermediates):
    x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out, norm_out = ctx.saved_tensors
    if ctx.recompute_args is not None:
        # Called with outFlag=False while an input required grad (only possible by calling the
        # operator directly; the wrapper below asks for the intermediates). Recompute them rather
        # than fail; spec §6.3 allows a backward to recompute.
        hc_mult, num_iters, norm_eps = ctx.recompute_args
        outs = _ops().mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, num_iters, ctx.hc_eps, norm_eps, True)
        h_pre, hc_before_norm, inv_rms, sum_out, norm_out = outs[3:]
    lead = x.shape[:-2]
    n, c = x.shape[-2], x.shape[-1]
    # Autograd may hand None for an output that did not reach the loss (spec §5 [INFER]).
    if grad_h_in is None:
        grad_h_in = x.new_zeros((*lead, c))
    if grad_h_post is None:
        grad_h_post = phi.new_zeros((*lead, n))
    if grad_h_res is None:
        grad_h_res = phi.new_zeros((*lead, n * n))
    grad_x, grad_phi, grad_alpha, grad_bias = _ops().mhc_pre_sinkhorn_backward(
        grad_h_in, grad_h_post, grad_h_res, x, phi, alpha, bias,
        h_pre, hc_before_norm, inv_rms, sum_out, norm_out, ctx.hc_eps,
    )  # fmt: skip
    # hcMult, numIters, hcEps, normEps, outFlag get no gradient.
    return grad_x, grad_phi, grad_alpha, grad_bias, None, None, None, None, None


# ---------------------------------------------------------------------------------------------
# mhc_post: autograd formula (spec §5, §8)
# ---------------------------------------------------------------------------------------------


def _post_setup_context(ctx, inputs, output) -> None:
    x, h_res, h_out, h_post = inputs
    ctx.save_for_backward(x, h_res, h_out, h_post)


def _post_backward(ctx, grad_output):
    x, h_res, h_out, h_post = ctx.saved_tensors
    if grad_output is None:
        grad_output = torch.zeros_like(x)
    grad_x, grad_h_res, grad_h_out, grad_h_post = _ops().mhc_post_backward(grad_output, x, h_res, h_out, h_post)
    return grad_x, grad_h_res, grad_h_out, grad_h_post


# ---------------------------------------------------------------------------------------------
# The backward operators: declared not differentiable (no double backward)
# ---------------------------------------------------------------------------------------------


def _backward_op_setup_context(ctx, inputs, output) -> None:
    # Without an Autograd kernel, torch's fallback marks these outputs as requiring grad and only
    # *warns* ("may lead to silently incorrect behavior") when something backprops through them.
    # Marking them non-differentiable makes double backward a loud error instead.
    ctx.mark_non_differentiable(*output)


def _backward_op_backward(ctx, *grads):
    raise RuntimeError("double backward through the mHC backward operators is not supported")


# ---------------------------------------------------------------------------------------------
# Batching rules (torch.func.vmap): the vmapped dim joins the kernel's leading (B, S) dims
# ---------------------------------------------------------------------------------------------
#
# Without them vmap runs each op once per sample through functorch's fallback. The kernels take any
# leading dims ``lead = (B, S)`` or ``(T,)``, so a vmapped dim V becomes part of ``lead``: ``(V, T)`` as it is,
# ``(V, B, S)`` merged to ``(V*B, S)`` and split again after the call. Only the weights of
# ``mhc_pre_sinkhorn`` (phi, alpha, bias) have no leading dims: when they are batched (an ensemble), the rule
# calls the op once per sample, as the fallback would.


def _merge_lead(t: Tensor, bdim: int | None, size: int, merge: bool) -> Tensor:
    """``t`` with its vmapped dim (``bdim``; None: unbatched, expanded) first; ``merge``: folded into the next
    dim, ``(V, B, S, ...) -> (V*B, S, ...)``."""
    t = t.movedim(bdim, 0) if bdim is not None else t.unsqueeze(0).expand(size, *t.shape)
    return t.flatten(0, 1) if merge else t


def _split_lead(t: Tensor, size: int, merge: bool, lead_at: int = 0) -> Tensor:
    """Undo ``_merge_lead`` on an output whose lead dims start at ``lead_at``."""
    return t.unflatten(lead_at, (size, -1)) if merge else t


def _per_sample(op, size: int, in_dims, args) -> tuple[Tensor, ...]:
    """One call per sample, results stacked on dim 0 (what functorch's fallback does)."""
    outs = [op(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims))) for i in range(size)]
    return tuple(torch.stack(o) for o in zip(*outs))


def _pre_vmap(info, in_dims, x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag):
    size = info.batch_size
    if in_dims[0] is None or any(d is not None for d in in_dims[1:4]):  # batched weights: one call per sample
        args = (x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag)
        return _per_sample(_ops().mhc_pre_sinkhorn, size, (*in_dims[:4], *(None,) * 5), args), (0,) * 8
    merge = x.dim() == 5  # (V, B, S, n, C); (V, T, n, C) is already a (B, S) lead
    xm = _merge_lead(x, in_dims[0], size, merge)
    outs = _ops().mhc_pre_sinkhorn(xm, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag)
    if not out_flag:  # outputs 3-7 are (0,) placeholders, the same for every sample
        return (*(_split_lead(o, size, merge) for o in outs[:3]), *outs[3:]), (0, 0, 0, None, None, None, None, None)
    # outputs 6-7 are (slots, *lead, ...): their lead dims start at 1
    split = [_split_lead(o, size, merge) for o in outs[:6]] + [_split_lead(o, size, merge, 1) for o in outs[6:]]
    return tuple(split), (0, 0, 0, 0, 0, 0, 1, 1)


def _post_vmap(info, in_dims, x, h_res, h_out, h_post):
    size = info.batch_size
    # x (lead, n, D), h_res (lead, n, n), h_out (lead, D), h_post (lead, n): all four carry the lead dims
    merge = x.dim() + (in_dims[0] is None) == 5  # (V, B, S, n, D)
    merged = [_merge_lead(t, d, size, merge) for t, d in zip((x, h_res, h_out, h_post), in_dims)]
    return _split_lead(_ops().mhc_post(*merged), size, merge), 0


_REGISTERED = False


def register() -> None:
    """Register autograd on the four dispatcher operators (idempotent).

    ``mhc_pre_sinkhorn`` and ``mhc_post`` get their formulas; the two ``*_backward`` operators are
    declared not differentiable (their outputs never require grad, so double backward is an error).

    Called when this module is imported. Raises ``RuntimeError`` (from torch.library) if an
    operator is missing. An Autograd kernel registered earlier for the same operator is replaced,
    with torch's "Overriding a previously registered kernel" warning (observed on torch 2.13).
    """
    global _REGISTERED
    if _REGISTERED:
        return
    torch.library.register_autograd(_PRE, _pre_backward, setup_context=_pre_setup_context)
    torch.library.register_autograd(_POST, _post_backward, setup_context=_post_setup_context)
    for op in (_PRE_BACKWARD, _POST_BACKWARD):
        torch.library.register_autograd(op, _backward_op_backward, setup_context=_backward_op_setup_context)
    torch.library.register_vmap(_PRE, _pre_vmap)
    torch.library.register_vmap(_POST, _post_vmap)
    _REGISTERED = True


# ---------------------------------------------------------------------------------------------
# Public wrappers (the CANN Python API, minus its autograd.Function branch)
# ---------------------------------------------------------------------------------------------


def mhc_pre_sinkhorn(
    x: Tensor,
    phi: Tensor,
    alpha: Tensor,
    bias: Tensor,
    hc_mult: int,
    num_iters: int,
    hc_eps: float = 1e-6,
    norm_eps: float = 1e-6,
) -> tuple[Tensor, Tensor, Tensor]:
    """mHC pre-mixing and Sinkhorn: ``(h_in, h_post, h_res)`` (spec §4).

    Always calls ``torch.ops.cann_ops_transformer.mhc_pre_sinkhorn``; asks for the five backward
    intermediates (``outFlag=True``) only when grad mode is on and an input requires grad.

    Args:
        x: residual streams ``(B, S, n, C)`` (or ``(T, n, C)``), bfloat16/float16 (float32 also on CPU).
        phi: ``(M, K)`` float32, nn.Linear layout. alpha: ``(3,)`` float32 gates (pre, post, res).
        bias: ``(M,)`` float32. hc_mult: n (must equal ``x.size(-2)``). num_iters: Sinkhorn iterations.
        hc_eps: eps added to ``h_pre`` and to every Sinkhorn divisor. norm_eps: eps in the RMS.

    Returns:
        ``h_in (*lead, C)`` x.dtype, ``h_post (*lead, n)`` float32 (``2*sigmoid``), ``h_res (*lead, n*n)``
        float32 (row-major, reshape to ``(*lead, n, n)`` for :func:`mhc_post`).

    Raises:
        RuntimeError: shape/dtype violations (from the kernel or its fake).
    """
    out_flag = torch.is_grad_enabled() and (
        x.requires_grad or phi.requires_grad or alpha.requires_grad or bias.requires_grad
    )
    outs = _ops().mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, out_flag)
    return outs[0], outs[1], outs[2]


def mhc_post(x: Tensor, h_res: Tensor, h_out: Tensor, h_post: Tensor) -> Tensor:
    """mHC post: ``y[..., k, :] = h_post[..., k] * h_out + sum_j h_res[..., j, k] * x[..., j, :]`` (spec §7).

    Args:
        x: ``(*lead, n, D)`` bf16/fp16 (fp32 on CPU). h_res: ``(*lead, n, n)`` float32.
        h_out: ``(*lead, D)`` x.dtype (the sublayer output). h_post: ``(*lead, n)`` float32.

    Returns: y ``(*lead, n, D)`` x.dtype. Raises RuntimeError on shape/dtype violations.
    """
    return _ops().mhc_post(x, h_res, h_out, h_post)


def mhc_pre_sinkhorn_backward(
    grad_h_in: Tensor,
    grad_h_post: Tensor,
    grad_h_res: Tensor,
    x: Tensor,
    phi: Tensor,
    alpha: Tensor,
    bias: Tensor,
    h_pre: Tensor,
    hc_before_norm: Tensor,
    inv_rms: Tensor,
    sum_out: Tensor,
    norm_out: Tensor,
    hc_eps: float = 1e-6,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Backward of :func:`mhc_pre_sinkhorn` (spec §6): ``(grad_x, grad_phi, grad_alpha, grad_bias)``.

    ``h_pre`` .. ``norm_out`` are outputs 3-7 of the operator called with ``outFlag=True``.
    """
    return _ops().mhc_pre_sinkhorn_backward(
        grad_h_in, grad_h_post, grad_h_res, x, phi, alpha, bias,
        h_pre, hc_before_norm, inv_rms, sum_out, norm_out, hc_eps,
    )  # fmt: skip


def mhc_post_backward(
    grad_output: Tensor, x: Tensor, h_res: Tensor, h_out: Tensor, h_post: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Backward of :func:`mhc_post` (spec §8): ``(grad_x, grad_h_res, grad_h_out, grad_h_post)``."""
    return _ops().mhc_post_backward(grad_output, x, h_res, h_out, h_post)


register()
