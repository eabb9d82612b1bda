"""The float64 golden (probes/mhc/golden.py) against the spec formulas, finite differences and its own
closed-form backward. No C++ extension needed."""

from __future__ import annotations

import math

import pytest
import torch

from mhc import golden

EPS = 1e-6


def _spec_scalar_pre(x, phi, alpha, bias, n, iters, hc_eps, norm_eps):
    """Spec §4.3/§4.4 for ONE token, written with Python floats and loops (independent of golden.py).

    x: nested list [n][C]; phi: [M][K]; returns dict of plain lists.
    """
    C = len(x[0])
    K = n * C
    xf = [x[j][c] for j in range(n) for c in range(C)]  # stream-major flattening (spec §1)
    inv_rms = 1.0 / math.sqrt(sum(v * v for v in xf) / K + norm_eps)
    hbn = [sum(phi[m][k] * xf[k] for k in range(K)) for m in range(len(phi))]
    mix = [h * inv_rms for h in hbn]
    z_pre = [mix[j] * alpha[0] + bias[j] for j in range(n)]
    z_post = [mix[n + j] * alpha[1] + bias[n + j] for j in range(n)]
    z_res = [[mix[2 * n + j * n + k] * alpha[2] + bias[2 * n + j * n + k] for k in range(n)] for j in range(n)]
    sig = lambda v: 1.0 / (1.0 + math.exp(-v))  # noqa: E731
    h_pre = [sig(v) + hc_eps for v in z_pre]
    h_post = [2.0 * sig(v) for v in z_post]
    h_in = [sum(h_pre[j] * x[j][c] for j in range(n)) for c in range(C)]
    sums, norms = [], []
    e = [[math.exp(z_res[j][k] - max(z_res[j])) for k in range(n)] for j in range(n)]
    s0 = [sum(row) for row in e]
    P = [[e[j][k] / s0[j] + hc_eps for k in range(n)] for j in range(n)]
    sums.append(s0)
    norms.append(P)
    for i in range(iters):
        if i > 0:  # row step, slot 2i
            sr = [sum(P[j]) + hc_eps for j in range(n)]
            P = [[P[j][k] / sr[j] for k in range(n)] for j in range(n)]
            sums.append(sr)
            norms.append(P)
        sc = [sum(P[j][k] for j in range(n)) + hc_eps for k in range(n)]  # column step, slot 2i+1
        P = [[P[j][k] / sc[k] for k in range(n)] for j in range(n)]
        sums.append(sc)
        norms.append(P)
    return dict(h_in=h_in, h_post=h_post, h_res=[v for row in P for v in row], h_pre=h_pre, hbn=hbn,
                inv_rms=[inv_rms], sums=sums, norms=norms)  # fmt: skip


def test_forward_matches_scalar_spec_formulas(pre_inputs):
    n, C, iters = 3, 2, 3
    x, phi, alpha, bias = pre_inputs(B=1, S=2, n=n, C=C, dtype=torch.float64)
    out = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, 1e-3, 1e-4)
    for s in range(2):
        ref = _spec_scalar_pre(x[0, s].tolist(), phi.tolist(), alpha.tolist(), bias.tolist(), n, iters, 1e-3, 1e-4)
        t = torch.tensor
        torch.testing.assert_close(out[0][0, s], t(ref["h_in"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[1][0, s], t(ref["h_post"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[2][0, s], t(ref["h_res"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[3][0, s], t(ref["h_pre"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[4][0, s], t(ref["hbn"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[5][0, s], t(ref["inv_rms"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[6][:, 0, s], t(ref["sums"], dtype=torch.float64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[7][:, 0, s], t(ref["norms"], dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_forward_shapes_and_sinkhorn_properties(pre_inputs):
    B, S, n, C, iters = 2, 3, 4, 5, 20
    x, phi, alpha, bias = pre_inputs(B, S, n, C, dtype=torch.float64)
    h_in, h_post, h_res, h_pre, hbn, inv_rms, sum_out, norm_out = golden.mhc_pre_sinkhorn(
        x, phi, alpha, bias, n, iters, EPS, EPS
    )
    assert h_in.shape == (B, S, C) and h_post.shape == (B, S, n) and h_res.shape == (B, S, n * n)
    assert h_pre.shape == (B, S, n) and hbn.shape == (B, S, n * n + 2 * n) and inv_rms.shape == (B, S, 1)
    assert sum_out.shape == (2 * iters, B, S, n) and norm_out.shape == (2 * iters, B, S, n, n)
    # last step is a column normalisation by (sum + eps): columns sum to 1 - eps/(sum+eps)
    cols = h_res.reshape(B, S, n, n).sum(-2)
    torch.testing.assert_close(cols, torch.ones_like(cols), rtol=0, atol=1e-5)
    assert bool((h_post > 0).all() and (h_post < 2).all())
    assert bool((h_pre > EPS).all() and (h_pre < 1 + EPS).all())
    torch.testing.assert_close(h_res, norm_out[-1].reshape(B, S, n * n), rtol=0, atol=0)


def test_out_flag_false_pads_with_empty_tensors(pre_inputs):
    x, phi, alpha, bias = pre_inputs()
    out = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5, EPS, EPS, out_flag=False)
    assert len(out) == 8
    assert [tuple(t.shape) for t in out[3:]] == [(0,)] * 5


def test_rejects_wrong_hc_mult(pre_inputs):
    x, phi, alpha, bias = pre_inputs()
    with pytest.raises(ValueError, match="hc_mult"):
        golden.mhc_pre_sinkhorn(x, phi, alpha, bias, 3, 5, EPS, EPS)


@pytest.mark.parametrize("iters", [1, 20])
def test_pre_forward_gradcheck(pre_inputs, iters):
    """Golden forward vs central finite differences (torch.autograd.gradcheck, float64)."""
    x, phi, alpha, bias = (t.double().requires_grad_() for t in pre_inputs(B=1, S=2, n=4, C=3))

    def f(x, phi, alpha, bias):
        return golden.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, iters, EPS, EPS)[:3]

    assert torch.autograd.gradcheck(f, (x, phi, alpha, bias), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_post_forward_gradcheck():
    g = torch.Generator().manual_seed(1)
    shapes = [(2, 3, 4, 5), (2, 3, 4, 4), (2, 3, 5), (2, 3, 4)]
    args = tuple(torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    assert torch.autograd.gradcheck(golden.mhc_post, args, eps=1e-6, atol=1e-8)


def test_post_forward_formula():
    """Spec §7 written per element: y[k] = hPost[k] * hOut + sum_j hRes[j, k] * x[j]."""
    g = torch.Generator().manual_seed(2)
    n, D = 3, 4
    shapes = ((1, n, D), (1, n, n), (1, D), (1, n))
    x, h_res, h_out, h_post = (torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes)
    y = golden.mhc_post(x, h_res, h_out, h_post)
    for k in range(n):
        expect = h_post[0, k] * h_out[0] + sum(h_res[0, j, k] * x[0, j] for j in range(n))
        torch.testing.assert_close(y[0, k], expect, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("lead3", [False, True])
def test_pre_backward_formulas_match_autograd(pre_inputs, lead3):
    """Spec §6.2 closed form (golden.mhc_pre_sinkhorn_backward) vs autograd of the golden forward."""
    n, iters = 4, 20
    x, phi, alpha, bias = (t.double().requires_grad_() for t in pre_inputs(B=2, S=3, n=n, C=5, lead3=lead3))
    outs = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS)
    g = torch.Generator().manual_seed(3)
    cot = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in outs[:3]]
    expect = torch.autograd.grad(outs[:3], (x, phi, alpha, bias), cot)
    got = golden.mhc_pre_sinkhorn_backward(*cot, x, phi, alpha, bias, *(o.detach() for o in outs[3:]), EPS)
    for name, a, b in zip(("grad_x", "grad_phi", "grad_alpha", "grad_bias"), got, expect):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10, msg=name)


def test_pre_backward_accepts_square_grad_h_res(pre_inputs):
    x, phi, alpha, bias = pre_inputs(dtype=torch.float64)
    outs = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 3, EPS, EPS)
    g_res = torch.randn(2, 3, 16, dtype=torch.float64)
    g_in, g_post = torch.ones(2, 3, 8), torch.ones(2, 3, 4)
    a = golden.mhc_pre_sinkhorn_backward(g_in, g_post, g_res, x, phi, alpha, bias, *outs[3:], EPS)
    b = golden.mhc_pre_sinkhorn_backward(g_in, g_post, g_res.reshape(2, 3, 4, 4), x, phi, alpha, bias, *outs[3:], EPS)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


def test_post_backward_formulas_match_autograd():
    g = torch.Generator().manual_seed(4)
    shapes = [(2, 3, 4, 5), (2, 3, 4, 4), (2, 3, 5), (2, 3, 4)]
    args = tuple(torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes)
    y = golden.mhc_post(*args)
    gy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    expect = torch.autograd.grad(y, args, gy)
    got = golden.mhc_post_backward(gy, *args)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
