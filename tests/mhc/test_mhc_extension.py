"""The C++ kernels (through the cann_ops_transformer CPU dispatcher ops and directly through pybind11)
against the float64 golden, with the spec's tolerances.

Tolerances (spec §9, "suggested test tolerances"): float32 outputs rtol 1e-5 vs the fp64 golden;
bfloat16 outputs about 1 ulp (rtol 8e-3); float16 1 ulp = 2**-10 (rtol 1e-3). Because individual
entries can be near zero, the absolute tolerance is rtol times the largest magnitude of the golden
output (a norm-wise relative error).
"""

from __future__ import annotations

import pytest
import torch

import mhc
from mhc import golden

pytestmark = pytest.mark.slow

OPS = torch.ops.cann_ops_transformer
EPS = 1e-6
RTOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float16: 1e-3}
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
NAMES = ("h_in", "h_post", "h_res", "h_pre", "hc_before_norm", "inv_rms", "sum_out", "norm_out")


def assert_close_to_golden(got: torch.Tensor, expect: torch.Tensor, dtype: torch.dtype, what: str):
    """got: kernel output (any dtype); expect: float64 golden; dtype: the output's nominal dtype."""
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    assert got.shape == expect.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expect.shape)}"
    rtol = RTOL[dtype]
    atol = rtol * max(expect.abs().max().item(), 1e-30)
    torch.testing.assert_close(got.double(), expect, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module", autouse=True)
def extension():
    return mhc.load()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("out_flag", [True, False])
@pytest.mark.parametrize("lead3", [False, True], ids=["BSnC", "TnC"])
def test_pre_sinkhorn_every_output_matches_golden(pre_inputs, dtype, out_flag, lead3):
    n, iters = 4, 20
    x, phi, alpha, bias = pre_inputs(B=2, S=5, n=n, C=32, dtype=dtype, lead3=lead3)
    got = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS, out_flag)
    expect = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS, out_flag)
    assert isinstance(got, tuple) and len(got) == 8
    for i, (name, a, b) in enumerate(zip(NAMES, got, expect)):
        nominal = dtype if i == 0 else torch.float32
        if not out_flag and i >= 3:
            assert a.shape == (0,) and a.dtype == torch.float32, name
            continue
        assert_close_to_golden(a, b, nominal, f"{name} ({dtype}, outFlag={out_flag})")


def _spec_pre_sinkhorn_f64(x, phi, alpha, bias, n, iters, hc_eps, norm_eps):
    """mhc_pre_sinkhorn's 8 outputs from /work/shared/mhc_spec.md §4.3/§4.4, in float64 with plain torch; written
    here from the spec, independently of probes/mhc (golden.py, the C++ kernel). x: (..., n, C)."""
    x, phi, alpha, bias = (t.to(torch.float64) for t in (x, phi, alpha, bias))
    lead, C = x.shape[:-2], x.shape[-1]
    K = n * C
    xf = x.reshape(*lead, K)  # §1: x_flat[j*C + c] = x[j, c], stream-major
    inv_rms = 1.0 / torch.sqrt((xf * xf).sum(-1, keepdim=True) / K + norm_eps)  # step 2: mean, +eps, sqrt, 1/
    hbn = xf @ phi.T  # step 3: raw, no inv_rms/alpha/bias
    mix = hbn * inv_rms  # step 4
    z_pre = mix[..., :n] * alpha[0] + bias[:n]  # step 5
    z_post = mix[..., n:2 * n] * alpha[1] + bias[n:2 * n]
    z_res = (mix[..., 2 * n:] * alpha[2] + bias[2 * n:]).reshape(*lead, n, n)  # row-major (j, k)
    h_pre = torch.sigmoid(z_pre) + hc_eps  # step 6: eps included in the stored h_pre
    h_post = 2.0 * torch.sigmoid(z_post)  # no eps
    h_in = (h_pre.unsqueeze(-1) * x).sum(-2)  # step 7: sum_j h_pre[j] * x[j, :]
    # step 8 / §4.4: slot 0 row softmax (+eps) with the raw denominator stored; then (column, row)... ending on a
    # column step; every later slot stores the divisor it used, sum + eps
    e = torch.exp(z_res - z_res.amax(-1, keepdim=True))
    sums = [e.sum(-1)]
    norms = [e / sums[0].unsqueeze(-1) + hc_eps]
    for i in range(iters):
        if i > 0:  # row step, slot 2i
            sums.append(norms[-1].sum(-1) + hc_eps)
            norms.append(norms[-1] / sums[-1].unsqueeze(-1))
        sums.append(norms[-1].sum(-2) + hc_eps)  # column step, slot 2i+1
        norms.append(norms[-1] / sums[-1].unsqueeze(-2))
    h_res = norms[-1].reshape(*lead, n * n)
    return h_in, h_post, h_res, h_pre, hbn, inv_rms, torch.stack(sums), torch.stack(norms)


def test_pybind_function_called_directly_matches_the_spec_formulas(pre_inputs, extension):
    """The pybind11 function called directly (as the autograd.Function registration does), against a float64 golden
    written from the spec's formulas in this test (not the op, which calls the same kernel; not mhc.golden)."""
    n, iters = 4, 20
    x, phi, alpha, bias = pre_inputs(B=2, S=3, n=n, C=8, dtype=torch.bfloat16)
    direct = extension.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS, True)
    expect = _spec_pre_sinkhorn_f64(x, phi, alpha, bias, n, iters, EPS, EPS)
    assert isinstance(direct, tuple) and len(direct) == 8
    assert [tuple(t.shape) for t in expect] == [(2, 3, 8), (2, 3, 4), (2, 3, 16), (2, 3, 4), (2, 3, 24), (2, 3, 1),
                                                (40, 2, 3, 4), (40, 2, 3, 4, 4)]  # spec §4.2, by hand
    for i, (name, a, b) in enumerate(zip(NAMES, direct, expect)):
        assert_close_to_golden(a, b, torch.bfloat16 if i == 0 else torch.float32, f"{name} (pybind, bfloat16)")


def test_non_default_eps_values_are_used(pre_inputs):
    x, phi, alpha, bias = pre_inputs(dtype=torch.float32)
    got = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5, 1e-2, 0.5, True)
    expect = golden.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5, 1e-2, 0.5, True)
    for name, a, b in zip(NAMES, got, expect):
        assert_close_to_golden(a, b, a.dtype, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("square_grad_res", [False, True])
def test_pre_sinkhorn_backward_matches_autograd_of_golden(pre_inputs, dtype, square_grad_res):
    """Backward op fed the kernel's own intermediates vs autograd of the float64 golden forward."""
    n, iters = 4, 20
    x, phi, alpha, bias = pre_inputs(B=2, S=5, n=n, C=32, dtype=dtype)
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS, True)
    g = torch.Generator().manual_seed(7)
    g_in = torch.randn(outs[0].shape, generator=g).to(dtype)
    g_post = torch.randn(outs[1].shape, generator=g)
    g_res = torch.randn(outs[2].shape, generator=g)
    got = OPS.mhc_pre_sinkhorn_backward(
        g_in, g_post, g_res.reshape(2, 5, n, n) if square_grad_res else g_res,
        x, phi, alpha, bias, *outs[3:], EPS,
    )  # fmt: skip
    xd, pd, ad, bd = (t.double().requires_grad_() for t in (x, phi, alpha, bias))
    ref = golden.mhc_pre_sinkhorn(xd, pd, ad, bd, n, iters, EPS, EPS)
    expect = torch.autograd.grad(ref[:3], (xd, pd, ad, bd), (g_in.double(), g_post.double(), g_res.double()))
    nominal_dtypes = (dtype, torch.float32, torch.float32, torch.float32)
    for name, a, b, nominal in zip(("grad_x", "grad_phi", "grad_alpha", "grad_bias"), got, expect, nominal_dtypes):
        # grad_phi/alpha/bias sum over all tokens in float32: allow 1e-5 relative, like every fp32 output
        assert_close_to_golden(a, b, nominal, f"{name} ({dtype})")


def _post_inputs(dtype, lead=(2, 5), n=4, D=32, seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, n, D, generator=g).to(dtype)
    h_res = torch.rand(*lead, n, n, generator=g)
    h_out = torch.randn(*lead, D, generator=g).to(dtype)
    h_post = 2 * torch.rand(*lead, n, generator=g)
    return x, h_res, h_out, h_post


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lead", [(2, 5), (7,)], ids=["BS", "T"])
def test_post_matches_golden(dtype, lead):
    x, h_res, h_out, h_post = _post_inputs(dtype, lead)
    assert_close_to_golden(OPS.mhc_post(x, h_res, h_out, h_post), golden.mhc_post(x, h_res, h_out, h_post), dtype, "y")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_post_backward_matches_autograd_of_golden(dtype):
    x, h_res, h_out, h_post = _post_inputs(dtype)
    gy = torch.randn(x.shape, generator=torch.Generator().manual_seed(6)).to(dtype)
    got = OPS.mhc_post_backward(gy, x, h_res, h_out, h_post)
    args = tuple(t.double().requires_grad_() for t in (x, h_res, h_out, h_post))
    expect = torch.autograd.grad(golden.mhc_post(*args), args, gy.double())
    for name, a, b, nominal in zip(
        ("grad_x", "grad_h_res", "grad_h_out", "grad_h_post"), got, expect, (dtype, torch.float32, dtype, torch.float32)
    ):
        assert_close_to_golden(a, b, nominal, f"{name} ({dtype})")


def test_issue_public_snippet_runs_verbatim_on_cpu():
    """The call pair from the original issue, at its shapes: B=1, S=128, n=4, C=4096, bf16 x."""
    g = torch.Generator().manual_seed(0)
    C = 4096
    x = torch.randn(1, 128, 4, C, generator=g).to(torch.bfloat16)
    phi = torch.randn(24, 4 * C, generator=g) / (4 * C) ** 0.5
    alpha = torch.rand(3, generator=g)
    bias = 0.1 * torch.randn(24, generator=g)
    # fmt: off
    h_in, h_post, h_res = torch.ops.cann_ops_transformer.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20, 1e-6, 1e-6, True)[:3]  # noqa: E501
    # fmt: on
    y = torch.ops.cann_ops_transformer.mhc_post(x, h_res.reshape(1, 128, 4, 4), h_in, h_post)
    assert y.shape == (1, 128, 4, C) and y.dtype == torch.bfloat16
    assert_close_to_golden(y, golden.mhc_post(x, h_res.reshape(1, 128, 4, 4), h_in, h_post), torch.bfloat16, "y")


def test_keyword_call_with_camel_case_names(pre_inputs):
    x, phi, alpha, bias = pre_inputs()
    outs = OPS.mhc_pre_sinkhorn(
        x=x, phi=phi, alpha=alpha, bias=bias, hcMult=4, numIters=20, hcEps=1e-6, normEps=1e-6, outFlag=False
    )
    assert outs[3].shape == (0,)
    y = OPS.mhc_post(x=x, hRes=outs[2].reshape(2, 3, 4, 4), hOut=outs[0], hPost=outs[1])
    assert y.shape == x.shape


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: (a[0], a[1], a[2], a[3], 3), "hcMult"),
        (lambda a: (a[0], a[1][:, :-1], a[2], a[3], 4), "phi"),
        (lambda a: (a[0], a[1], a[2][:2], a[3], 4), "alpha"),
        (lambda a: (a[0], a[1].double(), a[2], a[3], 4), "float32"),
        (lambda a: (a[0].double(), a[1], a[2], a[3], 4), "bfloat16, float16 or float32"),
    ],
)
def test_pre_sinkhorn_rejects_bad_arguments(pre_inputs, mutate, match):
    x, phi, alpha, bias, n = mutate(pre_inputs())
    with pytest.raises(RuntimeError, match=match):
        OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, n, 20, EPS, EPS, True)


def test_post_rejects_mismatched_h_out_dtype():
    x, h_res, h_out, h_post = _post_inputs(torch.bfloat16)
    with pytest.raises(RuntimeError, match="hOut must have x's dtype"):
        OPS.mhc_post(x, h_res, h_out.float(), h_post)


def test_backward_results_do_not_depend_on_gradient_strides(pre_inputs):
    """Eager autograd passes expanded (stride-0) gradients where a compiled graph passes contiguous ones;
    the kernels must give bitwise the same result for both (otherwise compiled grads drift at C=4096)."""
    x, h_res, h_out, h_post = _post_inputs(torch.float32, D=512)
    ones = torch.ones(()).expand(x.shape)
    for a, b in zip(OPS.mhc_post_backward(ones, x, h_res, h_out, h_post),
                    OPS.mhc_post_backward(ones.contiguous(), x, h_res, h_out, h_post)):  # fmt: skip
        assert torch.equal(a, b)
    x, phi, alpha, bias = pre_inputs(B=1, S=4, C=512)
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20, EPS, EPS, True)
    grads = [torch.ones(()).expand(o.shape) for o in outs[:3]]
    expanded = OPS.mhc_pre_sinkhorn_backward(*grads, x, phi, alpha, bias, *outs[3:], EPS)
    contiguous = OPS.mhc_pre_sinkhorn_backward(*(g.contiguous() for g in grads), x, phi, alpha, bias, *outs[3:], EPS)
    for a, b in zip(expanded, contiguous):
        assert torch.equal(a, b)
