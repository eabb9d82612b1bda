"""Float64 pure-PyTorch golden of the four mHC operators.

Written from the operator specification (``docs/mhc.md`` summarises it; section numbers below are the
spec's). Every function upcasts its tensor inputs to float64, computes in float64 and returns
float64 tensors, whatever the input dtypes: the caller rounds to the kernel's output dtype when it
compares. The forward functions are differentiable with ordinary autograd (used for
``torch.autograd.gradcheck``); the backward functions are the closed-form formulas of spec §6.2 and
§8, written independently of the forward so that the two can check each other.

Named dims: ``lead`` is ``(B, S)`` or ``(T,)``; ``n`` = hcMult streams; ``C`` hidden size (``D`` in
``mhc_post``); ``K = n*C``; ``M = n*n + 2n``; ``I`` = numIters.
"""

from __future__ import annotations

import torch
from torch import Tensor

F64 = torch.float64


def _split_logits(mix: Tensor, alpha: Tensor, bias: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    z_pre = mix[..., :n] * alpha[0] + bias[:n]
    z_post = mix[..., n : 2 * n] * alpha[1] + bias[n : 2 * n]
    z_res = mix[..., 2 * n :] * alpha[2] + bias[2 * n :]
    return z_pre, z_post, z_res.reshape(*mix.shape[:-1], n, n)


def mhc_pre_sinkhorn(
    x: Tensor,
    phi: Tensor,
    alpha: Tensor,
    bias: Tensor,
    hc_mult: int,
    num_iters: int,
    hc_eps: float,
    norm_eps: float,
    out_flag: bool = True,
) -> tuple[Tensor, ...]:
    """Golden of ``cann_ops_transformer::mhc_pre_sinkhorn`` (spec §4.2-§4.4, §10).

    Args:
        x: ``(*lead, n, C)``, any floating dtype (upcast exactly).
        phi: ``(M, K)`` (nn.Linear layout), alpha: ``(3,)``, bias: ``(M,)``.
        hc_mult: n, must equal ``x.size(-2)``. num_iters: I >= 1.
        hc_eps: eps of ``h_pre`` and of every Sinkhorn divisor. norm_eps: eps inside the RMS.
        out_flag: when False, outputs 3-7 are empty ``(0,)`` tensors.

    Returns:
        8 float64 tensors ``(h_in (*lead, C), h_post (*lead, n), h_res (*lead, n*n), h_pre (*lead, n),
        hc_before_norm (*lead, M), inv_rms (*lead, 1), sum_out (2I, *lead, n),
        norm_out (2I, *lead, n, n))``. ``sum_out[0]`` is the raw softmax denominator, every later
        slot the divisor actually used (sum + eps): the spec §4.4 recommendation, chosen here.

    Raises:
        ValueError: on a shape that contradicts ``hc_mult`` or ``num_iters < 1``.
    """
    n = hc_mult
    if x.size(-2) != n:
        raise ValueError(f"hc_mult={n} but x.size(-2)={x.size(-2)}")
    if num_iters < 1:
        raise ValueError(f"num_iters must be >= 1, got {num_iters}")
    lead = x.shape[:-2]
    C = x.size(-1)
    K = n * C
    xf = x.to(F64).reshape(*lead, K)
    inv_rms = 1.0 / torch.sqrt((xf * xf).mean(-1, keepdim=True) + norm_eps)  # (*lead, 1)
    hbn = xf @ phi.to(F64).T  # (*lead, M)
    mix = hbn * inv_rms
    z_pre, z_post, z_res = _split_logits(mix, alpha.to(F64), bias.to(F64), n)
    h_pre = torch.sigmoid(z_pre) + hc_eps
    h_post = 2.0 * torch.sigmoid(z_post)
    h_in = (h_pre.unsqueeze(-1) * x.to(F64)).sum(-2)

    # Softmax is shift invariant, so the max carries no gradient (detach keeps autograd exact).
    e = torch.exp(z_res - z_res.amax(-1, keepdim=True).detach())
    s = e.sum(-1)
    p = e / s.unsqueeze(-1) + hc_eps
    sums, norms = [s], [p]
    s = p.sum(-2) + hc_eps
    p = p / s.unsqueeze(-2)
    sums.append(s)
    norms.append(p)
    for _ in range(1, num_iters):
        s = p.sum(-1) + hc_eps
        p = p / s.unsqueeze(-1)
        sums.append(s)
        norms.append(p)
        s = p.sum(-2) + hc_eps
        p = p / s.unsqueeze(-2)
        sums.append(s)
        norms.append(p)
    h_res = p.reshape(*lead, n * n)
    if not out_flag:
        empty = [x.new_empty((0,), dtype=F64) for _ in range(5)]
        return (h_in, h_post, h_res, *empty)
    return (h_in, h_post, h_res, h_pre, hbn, inv_rms, torch.stack(sums), torch.stack(norms))


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
    hc_eps: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Golden of ``cann_ops_transformer::mhc_pre_sinkhorn_backward``: spec §6.2 steps 1-9.

    Args:
        grad_h_in ``(*lead, C)``, grad_h_post ``(*lead, n)``, grad_h_res ``(*lead, n*n)`` or
        ``(*lead, n, n)``; x, phi, alpha, bias as in the forward; h_pre .. norm_out: forward
        outputs 3-7 (``out_flag=True``); hc_eps: the forward's ``hc_eps``.

    Returns:
        float64 ``(grad_x (*lead, n, C), grad_phi (M, K), grad_alpha (3,), grad_bias (M,))``.
    """
    n = x.size(-2)
    C = x.size(-1)
    K = n * C
    lead = x.shape[:-2]
    xf = x.to(F64).reshape(*lead, n, C)
    r = inv_rms.to(F64).reshape(*lead, 1)
    hbn = hc_before_norm.to(F64)
    a = alpha.to(F64)
    b = bias.to(F64)
    mix = hbn * r
    _, z_post, _ = _split_logits(mix, a, b, n)
    g_in = grad_h_in.to(F64).unsqueeze(-2)  # (*lead, 1, C)
    hp = h_pre.to(F64)
    # step 2
    gx_a = g_in * hp.unsqueeze(-1)
    g_hpre = (g_in * xf).sum(-1)
    # step 3
    sp = hp - hc_eps
    g_zpre = g_hpre * sp * (1 - sp)
    # step 4
    sq = torch.sigmoid(z_post)
    g_zpost = grad_h_post.to(F64) * 2 * sq * (1 - sq)
    # step 5
    S = sum_out.to(F64)
    P = norm_out.to(F64)
    G = grad_h_res.to(F64).reshape(*lead, n, n)
    for t in range(S.size(0) - 1, 0, -1):
        if t % 2 == 1:
            G = (G - (G * P[t]).sum(-2, keepdim=True)) / S[t].unsqueeze(-2)
        else:
            G = (G - (G * P[t]).sum(-1, keepdim=True)) / S[t].unsqueeze(-1)
    p0 = P[0] - hc_eps
    g_zres = (p0 * (G - (G * p0).sum(-1, keepdim=True))).reshape(*lead, n * n)
    # step 6
    g_z = torch.cat([g_zpre, g_zpost, g_zres], -1)
    token_dims = tuple(range(len(lead)))
    grad_bias = g_z.sum(token_dims)
    grad_alpha = torch.stack(
        [
            (mix[..., :n] * g_zpre).sum(),
            (mix[..., n : 2 * n] * g_zpost).sum(),
            (mix[..., 2 * n :] * g_zres).sum(),
        ]
    )
    alpha_exp = torch.cat([a[0].expand(n), a[1].expand(n), a[2].expand(n * n)])
    g_mix = g_z * alpha_exp
    # step 7
    g_hbn = g_mix * r
    g_r = (g_mix * hbn).sum(-1, keepdim=True)
    xk = xf.reshape(*lead, K)
    gx_b = -g_r * r**3 * xk / K
    # step 8
    gx_c = g_hbn @ phi.to(F64)
    grad_phi = g_hbn.reshape(-1, g_hbn.size(-1)).T @ xk.reshape(-1, K)
    # step 9
    grad_x = gx_a + (gx_b + gx_c).reshape(*lead, n, C)
    return grad_x, grad_phi, grad_alpha, grad_bias


def mhc_post(x: Tensor, h_res: Tensor, h_out: Tensor, h_post: Tensor) -> Tensor:
    """Golden of ``cann_ops_transformer::mhc_post`` (spec §7).

    ``y[..., k, :] = h_post[..., k] * h_out + sum_j h_res[..., j, k] * x[..., j, :]``.

    Args: x ``(*lead, n, D)``, h_res ``(*lead, n, n)``, h_out ``(*lead, D)``, h_post ``(*lead, n)``.
    Returns: y ``(*lead, n, D)`` float64.
    """
    return h_post.to(F64).unsqueeze(-1) * h_out.to(F64).unsqueeze(-2) + torch.einsum(
        "...jk,...jd->...kd", h_res.to(F64), x.to(F64)
    )


def mhc_post_backward(
    grad_output: Tensor, x: Tensor, h_res: Tensor, h_out: Tensor, h_post: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Golden of ``cann_ops_transformer::mhc_post_backward`` (spec §8).

    Returns float64 ``(grad_x (*lead, n, D), grad_h_res (*lead, n, n), grad_h_out (*lead, D),
    grad_h_post (*lead, n))``.
    """
    g = grad_output.to(F64)
    grad_x = torch.einsum("...jk,...kd->...jd", h_res.to(F64), g)
    grad_h_res = torch.einsum("...jd,...kd->...jk", x.to(F64), g)
    grad_h_out = torch.einsum("...k,...kd->...d", h_post.to(F64), g)
    grad_h_post = torch.einsum("...kd,...d->...k", g, h_out.to(F64))
    return grad_x, grad_h_res, grad_h_out, grad_h_post
