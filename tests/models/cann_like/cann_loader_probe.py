"""Probes of the mHC wrappers laid out as CANN ships them with its OpBuilder (cann_ops_like/ops/loaded): the
pybind11 module is a local of each Function's forward and backward, returned by a loader whose first call (in a
stage process, under torch.compile) looks at the disk with os.path.isdir. S == n == 4, as in the issue that found a
fake tying them."""
import torch

from cann_ops_like.ops.loaded import mhc_post, mhc_pre_sinkhorn

B, S, N, C = 2, 4, 4, 16


def _pre_inputs():
    g = torch.Generator().manual_seed(0)
    m, k = N * N + 2 * N, N * C
    x = torch.randn(B, S, N, C, generator=g)
    phi = torch.randn(m, k, generator=g) / k ** 0.5
    alpha = torch.tensor([0.5, 0.6, 0.7])
    bias = 0.1 * torch.randn(m, generator=g)
    return tuple(t.requires_grad_() for t in (x, phi, alpha, bias))


def _pre(x, phi, alpha, bias):
    h_in, h_post, h_res = mhc_pre_sinkhorn(x, phi, alpha, bias, N, 20)
    return h_in.sum(-1) + (h_post * h_res[..., :N]).sum(-1)


def probe_pre():
    return _pre, _pre_inputs()


def probe_post():
    g = torch.Generator().manual_seed(1)
    return mhc_post, (torch.randn(B, S, N, C, generator=g).requires_grad_(),
                      torch.randn(B, S, N, N, generator=g).requires_grad_(),
                      torch.randn(B, S, C, generator=g).requires_grad_(),
                      torch.randn(B, S, N, generator=g).requires_grad_())


class MhcLayer(torch.nn.Module):
    """hc_pre -> a mixing layer -> hc_post, as DeepSeek-V4's block does around its sublayer."""

    def __init__(self):
        super().__init__()
        m, k = N * N + 2 * N, N * C
        self.phi = torch.nn.Parameter(torch.randn(m, k) / k ** 0.5)
        self.alpha = torch.nn.Parameter(torch.tensor([0.5, 0.6, 0.7]))
        self.bias = torch.nn.Parameter(0.1 * torch.randn(m))
        self.mix = torch.nn.Linear(C, C)

    def forward(self, x):
        h_in, h_post, h_res = mhc_pre_sinkhorn(x, self.phi, self.alpha, self.bias, N, 20)
        return mhc_post(x, h_res.reshape(*x.shape[:-2], N, N), torch.tanh(self.mix(h_in)), h_post)


def probe_stack():
    """A 2-layer stack that trains through both ops."""
    torch.manual_seed(0)
    return torch.nn.Sequential(MhcLayer(), MhcLayer()), (torch.randn(B, S, N, C, requires_grad=True),)
