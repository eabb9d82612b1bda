"""The four ``cann_ops_transformer::`` dispatcher operators, CPU reference edition.

Defines the operators with the exact CANN schemas (spec §3) through
``torch.library.Library("cann_ops_transformer", "DEF")``, a CPU kernel for each that calls the pybind11
extension (``csrc/mhc.cpp`` via :mod:`mhc.builder`), and a fake (meta) kernel for each that follows
the spec's shapes, including the ``(0,)`` padding of outputs 3-7 when ``outFlag=False``.

There is deliberately **no autograd** here: that is the job of :mod:`mhc.fixed`, which mirrors how
the real CANN torch extension defines its operators without autograd and wraps them elsewhere.

When the real package is importable (``torch_npu`` and ``cann_ops_transformer``), nothing is
defined: :func:`install` imports it so that its own NPU operators register, and :data:`BACKEND` /
:data:`DEVICE` say ``"npu"``. Otherwise :data:`BACKEND` is ``"reference"`` and :data:`DEVICE` ``"cpu"``.

Named dims: ``lead`` = ``(B, S)`` or ``(T,)``; ``n`` = hcMult; ``C`` (``D``) hidden size; ``K = n*C``;
``M = n*n + 2n``; ``I`` = numIters.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import torch
from torch import Tensor

from .builder import load

NAMESPACE = "cann_ops_transformer"

#: Exact CANN schemas (spec §3), camelCase argument names, no defaults.
SCHEMAS = {
    "mhc_pre_sinkhorn": (
        "mhc_pre_sinkhorn(Tensor x, Tensor phi, Tensor alpha, Tensor bias, int hcMult, "
        "int numIters, float hcEps, float normEps, bool outFlag) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"
    ),
    "mhc_pre_sinkhorn_backward": (
        "mhc_pre_sinkhorn_backward(Tensor gradHin, Tensor gradHPost, Tensor gradHRes, Tensor x, "
        "Tensor phi, Tensor alpha, Tensor bias, Tensor hPre, Tensor hcBeforeNorm, Tensor invRms, "
        "Tensor sumOut, Tensor normOut, float hcEps) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
    "mhc_post": "mhc_post(Tensor x, Tensor hRes, Tensor hOut, Tensor hPost) -> Tensor",
    "mhc_post_backward": (
        "mhc_post_backward(Tensor gradOutput, Tensor x, Tensor hRes, Tensor hOut, Tensor hPost) "
        "-> (Tensor, Tensor, Tensor, Tensor)"
    ),
}

#: "npu" when the real CANN package provides the operators, "reference" for this module's CPU ones.
BACKEND = "reference"
#: Device the probes should put their tensors on.
DEVICE = "cpu"

_X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_LIB: torch.library.Library | None = None


# --------------------------------------------------------------------------------------------
# CPU kernels: straight calls into the pybind11 extension.
# --------------------------------------------------------------------------------------------


def _pre_cpu(x, phi, alpha, bias, hcMult, numIters, hcEps, normEps, outFlag):  # noqa: N803
    return tuple(load().mhc_pre_sinkhorn(x, phi, alpha, bias, hcMult, numIters, hcEps, normEps, outFlag))


def _pre_backward_cpu(
    gradHin, gradHPost, gradHRes, x, phi, alpha, bias, hPre, hcBeforeNorm, invRms, sumOut, normOut, hcEps  # noqa: N803
):
    return tuple(
        load().mhc_pre_sinkhorn_backward(
            gradHin, gradHPost, gradHRes, x, phi, alpha, bias, hPre, hcBeforeNorm, invRms, sumOut, normOut, hcEps
        )
    )


def _post_cpu(x, hRes, hOut, hPost):  # noqa: N803
    return load().mhc_post(x, hRes, hOut, hPost)


def _post_backward_cpu(gradOutput, x, hRes, hOut, hPost):  # noqa: N803
    return tuple(load().mhc_post_backward(gradOutput, x, hRes, hOut, hPost))


# --------------------------------------------------------------------------------------------
# Fake (meta) kernels: shapes and dtypes only (spec §4.2, §6.1, §7, §8). Also reused by the
# broken custom ops in mhc.broken, so they are plain public functions.
# --------------------------------------------------------------------------------------------


def _check_pre(x: Tensor, phi: Tensor, alpha: Tensor, bias: Tensor, n: int) -> None:
    torch._check(
        x.dim() in (3, 4), lambda: f"mhc_pre_sinkhorn: x must be (B, S, n, C) or (T, n, C), got {tuple(x.shape)}"
    )
    torch._check(x.dtype in _X_DTYPES, lambda: f"mhc_pre_sinkhorn: x must be bf16/fp16/fp32, got {x.dtype}")
    torch._check(x.shape[-2] == n, lambda: f"mhc_pre_sinkhorn: hcMult ({n}) must equal x.size(-2) ({x.shape[-2]})")
    m = n * n + 2 * n
    torch._check(
        phi.dim() == 2 and phi.shape[0] == m and phi.shape[1] == n * x.shape[-1],
        lambda: f"mhc_pre_sinkhorn: phi must be (n*n+2n, n*C), got {tuple(phi.shape)}",
    )
    torch._check(alpha.dim() == 1 and alpha.shape[0] == 3, lambda: "mhc_pre_sinkhorn: alpha must be (3,)")
    torch._check(bias.dim() == 1 and bias.shape[0] == m, lambda: f"mhc_pre_sinkhorn: bias must be ({m},)")
    for name, t in (("phi", phi), ("alpha", alpha), ("bias", bias)):
        msg = f"mhc_pre_sinkhorn: {name} must be float32, got {t.dtype}"
        torch._check(t.dtype == torch.float32, lambda msg=msg: msg)


def mhc_pre_sinkhorn_fake(x, phi, alpha, bias, hcMult, numIters, hcEps, normEps, outFlag):  # noqa: N803
    """Fake of ``mhc_pre_sinkhorn``: the 8-tuple of spec §4.2 (outputs 3-7 ``(0,)`` if not outFlag)."""
    n = hcMult
    _check_pre(x, phi, alpha, bias, n)
    torch._check(numIters >= 1, lambda: f"mhc_pre_sinkhorn: numIters must be >= 1, got {numIters}")
    lead = tuple(x.shape[:-2])
    c = x.shape[-1]
    m = n * n + 2 * n
    f32 = phi.new_empty
    h_in = x.new_empty((*lead, c))
    h_post = f32((*lead, n))
    h_res = f32((*lead, n * n))
    if not outFlag:
        return (h_in, h_post, h_res, f32((0,)), f32((0,)), f32((0,)), f32((0,)), f32((0,)))
    slots = 2 * numIters
    return (
        h_in,
        h_post,
        h_res,
        f32((*lead, n)),
        f32((*lead, m)),
        f32((*lead, 1)),
        f32((slots, *lead, n)),
        f32((slots, *lead, n, n)),
    )


def mhc_pre_sinkhorn_backward_fake(
    gradHin, gradHPost, gradHRes, x, phi, alpha, bias, hPre, hcBeforeNorm, invRms, sumOut, normOut, hcEps  # noqa: N803
):
    """Fake of ``mhc_pre_sinkhorn_backward``: ``(like x, (M, K) f32, (3,) f32, (M,) f32)`` (spec §6.1)."""
    _check_pre(x, phi, alpha, bias, x.shape[-2])
    torch._check(
        hPre.numel() == x.numel() // x.shape[-1],
        lambda: "mhc_pre_sinkhorn_backward: hPre does not match x; pass outputs 3-7 of mhc_pre_sinkhorn(outFlag=True)",
    )
    return (x.new_empty(x.shape), phi.new_empty(phi.shape), phi.new_empty((3,)), phi.new_empty((phi.shape[0],)))


def _check_post(x: Tensor, hRes: Tensor, hOut: Tensor, hPost: Tensor) -> None:  # noqa: N803
    torch._check(x.dim() in (3, 4), lambda: f"mhc_post: x must be (B, S, n, D) or (T, n, D), got {tuple(x.shape)}")
    torch._check(x.dtype in _X_DTYPES, lambda: f"mhc_post: x must be bf16/fp16/fp32, got {x.dtype}")
    lead = tuple(x.shape[:-2])
    n, d = x.shape[-2], x.shape[-1]
    torch._check(tuple(hRes.shape) == (*lead, n, n), lambda: f"mhc_post: hRes must be (*lead, n, n), got {hRes.shape}")
    torch._check(tuple(hOut.shape) == (*lead, d), lambda: f"mhc_post: hOut must be (*lead, D), got {tuple(hOut.shape)}")
    torch._check(tuple(hPost.shape) == (*lead, n), lambda: f"mhc_post: hPost must be (*lead, n), got {hPost.shape}")
    torch._check(hOut.dtype == x.dtype, lambda: f"mhc_post: hOut must have x's dtype {x.dtype}, got {hOut.dtype}")
    torch._check(
        hRes.dtype == torch.float32 and hPost.dtype == torch.float32, lambda: "mhc_post: hRes, hPost must be float32"
    )


def mhc_post_fake(x, hRes, hOut, hPost):  # noqa: N803
    """Fake of ``mhc_post``: y like x (spec §7)."""
    _check_post(x, hRes, hOut, hPost)
    return x.new_empty(x.shape)


def mhc_post_backward_fake(gradOutput, x, hRes, hOut, hPost):  # noqa: N803
    """Fake of ``mhc_post_backward``: ``(like x, like hRes, like hOut, like hPost)`` (spec §8)."""
    _check_post(x, hRes, hOut, hPost)
    torch._check(tuple(gradOutput.shape) == tuple(x.shape), lambda: "mhc_post_backward: gradOutput must have x's shape")
    return (x.new_empty(x.shape), hRes.new_empty(hRes.shape), hOut.new_empty(hOut.shape), hPost.new_empty(hPost.shape))


_CPU_IMPLS = {
    "mhc_pre_sinkhorn": _pre_cpu,
    "mhc_pre_sinkhorn_backward": _pre_backward_cpu,
    "mhc_post": _post_cpu,
    "mhc_post_backward": _post_backward_cpu,
}
_FAKE_IMPLS = {
    "mhc_pre_sinkhorn": mhc_pre_sinkhorn_fake,
    "mhc_pre_sinkhorn_backward": mhc_pre_sinkhorn_backward_fake,
    "mhc_post": mhc_post_fake,
    "mhc_post_backward": mhc_post_backward_fake,
}


def real_package_available() -> bool:
    """True when both ``torch_npu`` and ``cann_ops_transformer`` can be found (not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch_npu", "cann_ops_transformer"))


def _op_defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"{NAMESPACE}::{name}", "")
    except RuntimeError:
        return False
    return True


def install() -> str:
    """Make the four ``cann_ops_transformer::`` operators available; returns :data:`BACKEND`.

    Idempotent. With the real package present it imports it and defines nothing; if that import
    fails, it warns and falls back to the reference operators. Operators that some other module
    already defined are left alone.
    """
    global BACKEND, DEVICE, _LIB
    if _LIB is not None or BACKEND == "npu":
        return BACKEND
    if real_package_available():
        try:
            importlib.import_module("torch_npu")
            importlib.import_module("cann_ops_transformer")
        except Exception as exc:  # noqa: BLE001 - any import failure means "use the reference"
            warnings.warn(
                f"mhc: cann_ops_transformer found but failed to import ({exc!r}); using the CPU reference ops",
                stacklevel=2,
            )
        else:
            if all(_op_defined(name) for name in SCHEMAS):
                BACKEND, DEVICE = "npu", "npu"
                return BACKEND
    missing = [name for name in SCHEMAS if not _op_defined(name)]
    if not missing:
        return BACKEND  # defined elsewhere in this process (e.g. this file imported twice)
    # "DEF" like the CANN extension; "FRAGMENT" only if some of the ops already exist.
    lib = torch.library.Library(NAMESPACE, "DEF" if len(missing) == len(SCHEMAS) else "FRAGMENT")
    # tracecheck's emulated NPU (torch.npu.emulated: PrivateUse1 named npu, on CPU memory) gets the
    # same kernels registered for its key, as CANN registers its own (TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)).
    on_npu = getattr(getattr(torch, "npu", None), "emulated", False)
    for name in missing:
        lib.define(SCHEMAS[name])
        lib.impl(name, _CPU_IMPLS[name], "CPU")
        if on_npu:
            lib.impl(name, _CPU_IMPLS[name], "PrivateUse1")
        torch.library.register_fake(f"{NAMESPACE}::{name}", _FAKE_IMPLS[name], lib=lib)
    _LIB = lib
    return BACKEND
