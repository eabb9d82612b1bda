"""The batching rules of the fixed registration (probes/mhc/fixed.py, ``torch.library.register_vmap``): each
branch against the oracle of a loop that calls the operator once per sample, and stacks."""

from __future__ import annotations

import pytest
import torch

import mhc
from mhc import fixed  # noqa: F401  (registers the rules)

pytestmark = pytest.mark.slow

OPS = torch.ops.cann_ops_transformer
N, C, ITERS, EPS = 4, 8, 20, 1e-6


@pytest.fixture(scope="module", autouse=True)
def _extension():
    mhc.load()


def _weights(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    m, k = N * N + 2 * N, N * C
    return torch.randn(m, k, generator=g) / k**0.5, torch.tensor([0.5, 0.6, 0.7]), 0.1 * torch.randn(m, generator=g)


def _pre(x, phi, alpha, bias, out_flag):
    return OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, N, ITERS, EPS, EPS, out_flag)


def _loop(fn, size, *args, in_dims):
    outs = [fn(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims))) for i in range(size)]
    return tuple(torch.stack(o) for o in zip(*outs)) if isinstance(outs[0], tuple) else torch.stack(outs)


@pytest.mark.parametrize("lead", [(2, 3), (5,)], ids=["B,S", "T"])
@pytest.mark.parametrize("out_flag", [False, True])
def test_pre_sinkhorn_with_shared_weights_merges_the_batch(lead, out_flag):
    """The per-sample-gradient case: x batched, weights shared; outputs 6-7 carry the lead dims at 1."""
    x = torch.randn(3, *lead, N, C, generator=torch.Generator().manual_seed(1))
    phi, alpha, bias = _weights()
    got = torch.func.vmap(lambda t: _pre(t, phi, alpha, bias, out_flag))(x)
    want = _loop(lambda t: _pre(t, phi, alpha, bias, out_flag), 3, x, in_dims=(0,))
    for j, (g, w) in enumerate(zip(got, want)):
        if not out_flag and j >= 3:  # (0,) placeholders, the same for every sample
            assert g.numel() == 0
            continue
        torch.testing.assert_close(g, w, msg=f"output {j}")


def test_pre_sinkhorn_with_batched_weights_runs_per_sample():
    """An ensemble: phi batched too; the rule calls the kernel per sample."""
    x = torch.randn(3, 2, 3, N, C, generator=torch.Generator().manual_seed(2))
    phi, alpha, bias = _weights()
    phis = torch.stack([phi, phi * 1.01, phi * 0.99])
    got = torch.func.vmap(lambda t, p: _pre(t, p, alpha, bias, True))(x, phis)
    want = _loop(lambda t, p: _pre(t, p, alpha, bias, True), 3, x, phis, in_dims=(0, 0))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("lead", [(2, 3), (5,)], ids=["B,S", "T"])
def test_post_with_any_inputs_batched(lead):
    g = torch.Generator().manual_seed(3)
    x, h_res = torch.randn(3, *lead, N, C, generator=g), torch.randn(3, *lead, N, N, generator=g)
    h_out, h_post = torch.randn(*lead, C, generator=g), torch.randn(3, *lead, N, generator=g)   # h_out unbatched
    got = torch.func.vmap(OPS.mhc_post, in_dims=(0, 0, None, 0))(x, h_res, h_out, h_post)
    want = _loop(OPS.mhc_post, 3, x, h_res, h_out, h_post, in_dims=(0, 0, None, 0))
    torch.testing.assert_close(got, want)


def test_the_rules_are_kernels_at_the_batching_key():
    for op in ("mhc_pre_sinkhorn", "mhc_post"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"cann_ops_transformer::{op}", "FuncTorchBatched")
