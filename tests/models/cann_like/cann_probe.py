"""Probes of the CANN-shaped mHC wrapper (cann_ops_like/), with S == n == 4 as in the issue that found a fake
tying them."""
import torch

from cann_ops_like.ops.mhc import mhc_pre_sinkhorn

B, S, N, C = 2, 4, 4, 16


def _inputs(grad: bool):
    g = torch.Generator().manual_seed(0)
    m, k = N * N + 2 * N, N * C
    x = torch.randn(B, S, N, C, generator=g)
    phi = torch.randn(m, k, generator=g) / k ** 0.5
    alpha = torch.tensor([0.5, 0.6, 0.7])
    bias = 0.1 * torch.randn(m, generator=g)
    return tuple(t.requires_grad_(grad) for t in (x, phi, alpha, bias))


def _pre(x, phi, alpha, bias):
    h_in, h_post, h_res = mhc_pre_sinkhorn(x, phi, alpha, bias, N, 20)
    return h_in.sum(-1) + (h_post * h_res[..., :N]).sum(-1)


def probe_train():
    """The autograd.Function path (gradients needed)."""
    return _pre, _inputs(True)


def probe_infer():
    """The wrapper's other path: no gradient, the pybind11 module called straight from the library's file."""
    return _pre, _inputs(False)
