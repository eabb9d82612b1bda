"""Five small pybind11 ops (a load_inline extension, built once in the temp folder), each
called inside an old-style torch.autograd.Function, as kernel teams wrap theirs: an elementwise op, a matmul-like
op, a reduction, an op returning several outputs of different shapes, and one whose int argument sets an output
dim. tracecheck's fixer was not written for any of them (tests/test_fix_generic_ops.py)."""
import os
import tempfile
import time
import torch
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
torch::Tensor swish(torch::Tensor x) { return x * torch::sigmoid(x); }
torch::Tensor linear(torch::Tensor x, torch::Tensor w) { return torch::matmul(x, w.t()); }
torch::Tensor rowsum(torch::Tensor x) { return x.sum(-1); }
std::vector<torch::Tensor> stats(torch::Tensor x) {
  return {x.mean(-1), x.pow(2).sum(-1, true), torch::cat({x, x}, -1)};
}
torch::Tensor repeat_last(torch::Tensor x, int64_t k) {
  auto sizes = x.sizes().vec(); sizes.push_back(k);
  return x.unsqueeze(-1).expand(sizes).contiguous();
}
"""
# one fixed folder per torch version (not an environment variable: tracecheck's stage processes keep the environment
# their fork server started with); cpp_extension rebuilds only when the source changes
_BUILD = os.path.join(tempfile.gettempdir(), f"tc_generic_ops_build-{torch.__version__}")
os.makedirs(_BUILD, exist_ok=True)
# a build killed mid-way leaves cpp_extension's lock behind, and the next load would wait on it for ever (the mHC
# builder does the same: probes/mhc/builder.py); a real build takes well under this
_LOCK = os.path.join(_BUILD, "lock")
if os.path.exists(_LOCK) and time.time() - os.path.getmtime(_LOCK) > 300:
    os.remove(_LOCK)
ext = load_inline("tc_generic_ops_ext", cpp_sources=_SRC,
                  functions=["swish", "linear", "rowsum", "stats", "repeat_last"], build_directory=_BUILD)


class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ext.swish(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))


class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return ext.linear(x, w)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.reshape(-1, g.size(-1)).t() @ x.reshape(-1, x.size(-1))


class RowSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ext.rowsum(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.unsqueeze(-1).expand_as(x).contiguous()


class Stats(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        mean, sq, doubled = ext.stats(x)
        return mean, sq, doubled

    @staticmethod
    def backward(ctx, g_mean, g_sq, g_doubled):
        (x,) = ctx.saved_tensors
        c = x.size(-1)
        return g_mean.unsqueeze(-1).expand_as(x) / c + 2 * x * g_sq + g_doubled[..., :c] + g_doubled[..., c:]


class RepeatLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        return ext.repeat_last(x, k)

    @staticmethod
    def backward(ctx, g):
        return g.sum(-1), None


def model(x, w):
    a = Swish.apply(x)
    b = Linear.apply(a, w)
    c = RowSum.apply(b)
    mean, sq, doubled = Stats.apply(b)
    r = RepeatLast.apply(b, 3)
    return c, mean, sq, doubled, r


def probe_ops():
    return model, (torch.randn(4, 16, requires_grad=True), torch.randn(32, 16, requires_grad=True))
