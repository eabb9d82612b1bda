"""tracecheck probes for the mHC operators: three broken registrations and the fix, op and model level.

Each ``probe_<name>()`` returns ``(fn, args)``; tracecheck calls ``fn(*args)`` and then backward on
the sum of the floating outputs. Expected verdicts (torch 2.13 CPU, see docs/mhc.md):

=============================  ====================  ==================================================
probe                          kind                  first failing stage
=============================  ====================  ==================================================
autograd_function              pybind-builtin        explain / fullgraph (Dynamo, inside the Function)
missing_fake                   missing-fake          explain (Dynamo's fake-tensor pass)
missing_autograd               missing-autograd      eager backward
fixed                          (passes)              none
model_<same four names>        as above              as above
=============================  ====================  ==================================================

Sizes: ``MHC_PROBE_SIZE=small`` (default; seconds per stage on a laptop CPU) or ``large`` (spec scale:
B=1, S=128, n=4, C=4096 for the op probes; the model probes use the same B, S, n and C with
2 layers). ``MHC_PROBE_DTYPE`` (``float32`` default on CPU, ``bfloat16`` on NPU; also ``float16``)
sets the dtype of x. With the real CANN package (torch_npu + cann_ops_transformer) importable,
tensors go to ``npu`` and the real operators are used.

tracecheck puts this file's folder on ``sys.path`` before importing it, so ``import mhc`` finds
the package next to it.
"""

from __future__ import annotations

import os

import torch

import mhc
from mhc import broken, fixed
from mhc.model import MhcStack

#: Per-size settings: op probes use (B, S, n, C); model probes add hidden width and layer count.
SIZES = {
    "small": dict(B=2, S=8, n=4, C=16, hidden=32, layers=2),
    "large": dict(B=1, S=128, n=4, C=4096, hidden=4096, layers=2),
}
NUM_ITERS = 20  # the only value the NPU kernels support (spec §1)
HC_EPS = 1e-6
NORM_EPS = 1e-6


def _size() -> dict:
    name = os.environ.get("MHC_PROBE_SIZE", "small")
    if name not in SIZES:
        raise ValueError(f"MHC_PROBE_SIZE must be one of {sorted(SIZES)}, got {name!r}")
    return SIZES[name]


def _dtype() -> torch.dtype:
    default = "bfloat16" if mhc.DEVICE == "npu" else "float32"
    name = os.environ.get("MHC_PROBE_DTYPE", default)
    if name not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"MHC_PROBE_DTYPE must be float32, bfloat16 or float16, got {name!r}")
    return getattr(torch, name)


def _prepare() -> None:
    # Build/load the extension now, in eager code: broken.MhcPreSinkhornFunction.forward calls
    # load() inside code Dynamo traces, and that must be the cheap cached path.
    if mhc.BACKEND == "reference":
        mhc.load()


def _op_inputs() -> tuple[torch.Tensor, ...]:
    """x (B, S, n, C), phi (M, n*C), alpha (3,), bias (M,); all require grad."""
    s = _size()
    n, C = s["n"], s["C"]
    m, k = n * n + 2 * n, n * C
    g = torch.Generator().manual_seed(0)
    x = torch.randn(s["B"], s["S"], n, C, generator=g).to(_dtype())
    phi = torch.randn(m, k, generator=g) / k**0.5
    alpha = torch.tensor([0.5, 0.6, 0.7])
    bias = 0.1 * torch.randn(m, generator=g)
    return tuple(t.to(mhc.DEVICE).requires_grad_() for t in (x, phi, alpha, bias))


def _op_probe(pre, post):
    """The original issue's call pair: pre -> post with h_in standing in for the sublayer output."""
    _prepare()
    n = _size()["n"]

    def mhc_pre_then_post(x, phi, alpha, bias):
        h_in, h_post, h_res = pre(x, phi, alpha, bias, n, NUM_ITERS, HC_EPS, NORM_EPS)
        return post(x, h_res.reshape(*x.shape[:-2], n, n), h_in, h_post)

    return mhc_pre_then_post, _op_inputs()


def _model_probe(registration: str):
    _prepare()
    s = _size()
    torch.manual_seed(0)
    model = MhcStack(dim=s["C"], hidden=s["hidden"], n=s["n"], layers=s["layers"], num_iters=NUM_ITERS,
                     registration=registration, dtype=_dtype(), device=mhc.DEVICE)  # fmt: skip
    h = torch.randn(s["B"], s["S"], s["C"], dtype=_dtype(), device=mhc.DEVICE, requires_grad=True)
    return model, (h,)


# ---- op level -------------------------------------------------------------------------------


def probe_autograd_function():
    """CANN wrapper: autograd.Function whose forward calls load() then the pybind11 function."""
    return _op_probe(*broken.VARIANTS["autograd_function"])


def probe_missing_fake():
    """custom_op around the pybind11 call, with autograd but no register_fake."""
    return _op_probe(*broken.VARIANTS["missing_fake"])


def probe_missing_autograd():
    """custom_op with register_fake but no register_autograd."""
    return _op_probe(*broken.VARIANTS["missing_autograd"])


def probe_fixed():
    """The fix: register_autograd on the cann_ops_transformer dispatcher ops, wrappers call them."""
    return _op_probe(fixed.mhc_pre_sinkhorn, fixed.mhc_post)


# ---- model level ----------------------------------------------------------------------------


def probe_model_autograd_function():
    """MhcStack (hc_pre -> RMSNorm+MLP -> hc_post per layer) on the autograd.Function wrapper."""
    return _model_probe("autograd_function")


def probe_model_missing_fake():
    """MhcStack on the custom_op without a fake kernel."""
    return _model_probe("missing_fake")


def probe_model_missing_autograd():
    """MhcStack on the custom_op without an autograd formula."""
    return _model_probe("missing_autograd")


def probe_model_fixed():
    """MhcStack on the fixed registration."""
    return _model_probe("fixed")
