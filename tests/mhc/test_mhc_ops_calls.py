"""Each mHC op of probes/ called the way an operator library's own tests call its ops: eager, with inputs that
require grad, forward and (where eager allows) backward, checked against the float64 golden (probes/mhc/golden.py).

It is the test command `tracecheck ops --package mhc` audits (tests/test_ops_audit.py): the fixed
``cann_ops_transformer::`` ops, the broken custom ops (``mhc_broken_nofake::``, ``mhc_broken_noautograd::``) and the
CANN-style autograd.Functions of probes/mhc/broken.py. Every test here passes in eager: what torch.compile makes of
these ops is the audit's question, not this file's."""

from __future__ import annotations

import pytest
import torch

from mhc import broken, golden

pytestmark = pytest.mark.slow  # loads (first time: builds) the pybind11 extension

OPS = torch.ops.cann_ops_transformer
N, ITERS, EPS = 4, 3, 1e-6


def _close(got: torch.Tensor, ref: torch.Tensor) -> None:
    """float32 kernels against the float64 golden: tolerance relative to the reference's largest value."""
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5 * max(ref.abs().max().item(), 1e-12))


def _inputs(pre_inputs) -> tuple[torch.Tensor, ...]:
    return tuple(t.requires_grad_() for t in pre_inputs(B=2, S=3, n=N, C=8))


def _golden_layer(x, phi, alpha, bias):
    """Golden pre -> post (h_in standing in for the sublayer output), its inputs' float64 gradients."""
    args = tuple(t.detach().double().requires_grad_() for t in (x, phi, alpha, bias))
    h_in, h_post, h_res = golden.mhc_pre_sinkhorn(*args, N, ITERS, EPS, EPS)[:3]
    y = golden.mhc_post(args[0], h_res.reshape(*x.shape[:-2], N, N), h_in, h_post)
    return y, args


def _op(op):
    """The 9-argument pre op called with outFlag=True (the eight outputs, as the kernel returns them)."""
    def pre(x, phi, alpha, bias):
        outs = op(x, phi, alpha, bias, N, ITERS, EPS, EPS, True)
        assert len(outs) == 8 and all(o.requires_grad for o in outs[:3])
        return outs

    return pre


def _check_layer(pre, post, pre_inputs) -> None:
    """``pre(x, phi, alpha, bias)`` -> (h_in, h_post, h_res, ...) then ``post``; forward and every input's gradient
    vs the golden."""
    x, phi, alpha, bias = _inputs(pre_inputs)
    outs = pre(x, phi, alpha, bias)
    y = post(x, outs[2].reshape(2, 3, N, N), outs[0], outs[1])
    y_ref, args = _golden_layer(x, phi, alpha, bias)
    _close(y, y_ref)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad(y, (x, phi, alpha, bias), gy)
    expect = torch.autograd.grad(y_ref, args, gy.double())
    for a, b in zip(got, expect):
        _close(a, b)


# ---- cann_ops_transformer:: (the fixed registration: fake, autograd from mhc.fixed) -----------------------------


def test_fixed_ops_forward_and_backward_match_golden(pre_inputs):
    _check_layer(_op(OPS.mhc_pre_sinkhorn), OPS.mhc_post, pre_inputs)  # backward calls the two *_backward ops


def test_fixed_backward_ops_match_golden_formulas(pre_inputs):
    x, phi, alpha, bias = _inputs(pre_inputs)
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, N, ITERS, EPS, EPS, True)
    g = torch.Generator().manual_seed(3)
    grads = [torch.randn(o.shape, generator=g) for o in outs[:3]]
    saved = [o.detach() for o in outs[3:]]
    got = OPS.mhc_pre_sinkhorn_backward(*grads, x, phi, alpha, bias, *saved, EPS)
    for a, b in zip(got, golden.mhc_pre_sinkhorn_backward(*grads, x, phi, alpha, bias, *saved, EPS)):
        _close(a, b)
    h_res, h_out, h_post = outs[2].reshape(2, 3, N, N), torch.randn(2, 3, 8, generator=g), outs[1]
    g_y = torch.randn(x.shape, generator=g)
    got = OPS.mhc_post_backward(g_y, x, h_res, h_out, h_post)
    for a, b in zip(got, golden.mhc_post_backward(g_y, x, h_res, h_out, h_post)):
        _close(a, b)


# ---- mhc_broken_nofake:: (autograd, no fake: eager works) --------------------------------------------------------


def test_nofake_ops_forward_and_backward_match_golden(pre_inputs):
    # the backward calls mhc_broken_nofake::mhc_pre_sinkhorn_backward and ::mhc_post_backward
    _check_layer(_op(broken.nofake_pre_sinkhorn), broken.nofake_post, pre_inputs)


# ---- mhc_broken_noautograd:: (fake, no autograd: eager forward works, backward raises) --------------------------


def test_noautograd_ops_forward_matches_golden(pre_inputs):
    x, phi, alpha, bias = _inputs(pre_inputs)
    outs = broken.noautograd_pre_sinkhorn(x, phi, alpha, bias, N, ITERS, EPS, EPS, True)
    ref = golden.mhc_pre_sinkhorn(x.detach(), phi.detach(), alpha.detach(), bias.detach(), N, ITERS, EPS, EPS)
    for a, b in zip(outs, ref):
        _close(a, b)
    y = broken.noautograd_post(x, outs[2].reshape(2, 3, N, N), outs[0], outs[1])
    y_ref, _ = _golden_layer(x, phi, alpha, bias)
    _close(y, y_ref)


def test_noautograd_backward_raises(pre_inputs):
    # documented behaviour of a torch.library.custom_op without register_autograd called with inputs that require
    # grad: the forward runs, the backward raises (probes/mhc/broken.py, variant c)
    x, phi, alpha, bias = _inputs(pre_inputs)
    outs = broken.noautograd_pre_sinkhorn(x, phi, alpha, bias, N, ITERS, EPS, EPS, True)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        outs[0].sum().backward()
    y = broken.noautograd_post(x, torch.rand(2, 3, N, N), torch.randn(2, 3, 8), torch.rand(2, 3, N))
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        y.sum().backward()


# ---- the CANN-style autograd.Functions over the pybind11 kernels --------------------------------------------------


def test_autograd_functions_forward_and_backward_match_golden(pre_inputs):
    def pre(x, phi, alpha, bias):
        outs = broken.MhcPreSinkhornFunction.apply(x, phi, alpha, bias, N, ITERS, EPS, EPS)
        assert len(outs) == 3  # (h_in, h_post, h_res): the Function keeps the intermediates in its ctx
        return outs

    _check_layer(pre, broken.MhcPostFunction.apply, pre_inputs)
