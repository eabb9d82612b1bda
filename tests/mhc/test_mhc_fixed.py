"""The fixed registration (probes/mhc/fixed.py): schemas, opcheck, autograd vs the float64 golden,
torch.compile; and that the three broken registrations fail the way their probes promise."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

import mhc
from mhc import broken, fixed, golden

pytestmark = pytest.mark.slow

OPS = torch.ops.cann_ops_transformer
EPS = 1e-6

# Spec §3, copied from the spec text (not from mhc.ops).
SPEC_SCHEMAS = {
    "mhc_pre_sinkhorn": "cann_ops_transformer::mhc_pre_sinkhorn(Tensor x, Tensor phi, Tensor alpha, Tensor bias, int hcMult, int numIters, float hcEps, float normEps, bool outFlag) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",  # noqa: E501
    "mhc_pre_sinkhorn_backward": "cann_ops_transformer::mhc_pre_sinkhorn_backward(Tensor gradHin, Tensor gradHPost, Tensor gradHRes, Tensor x, Tensor phi, Tensor alpha, Tensor bias, Tensor hPre, Tensor hcBeforeNorm, Tensor invRms, Tensor sumOut, Tensor normOut, float hcEps) -> (Tensor, Tensor, Tensor, Tensor)",  # noqa: E501
    "mhc_post": "cann_ops_transformer::mhc_post(Tensor x, Tensor hRes, Tensor hOut, Tensor hPost) -> Tensor",
    "mhc_post_backward": "cann_ops_transformer::mhc_post_backward(Tensor gradOutput, Tensor x, Tensor hRes, Tensor hOut, Tensor hPost) -> (Tensor, Tensor, Tensor, Tensor)",  # noqa: E501
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_reference_backend_when_real_package_absent():
    assert mhc.BACKEND == "reference" and mhc.DEVICE == "cpu"


@pytest.mark.parametrize("name", sorted(SPEC_SCHEMAS))
def test_exact_cann_schema(name):
    assert str(getattr(OPS, name).default._schema) == SPEC_SCHEMAS[name]


def test_public_api_exports():
    for name in ("mhc_pre_sinkhorn", "mhc_post", "mhc_pre_sinkhorn_backward", "mhc_post_backward"):
        assert callable(getattr(fixed, name)) and name in fixed.__all__


# ---- opcheck ------------------------------------------------------------------------------------


def _opcheck(op, args):
    result = torch.library.opcheck(op, args)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"])
def test_opcheck_all_four_ops(pre_inputs, dtype, grad):
    n, iters = 4, 3
    x, phi, alpha, bias = (t.requires_grad_(grad) for t in pre_inputs(B=2, S=3, n=n, C=8, dtype=dtype))
    for out_flag in (True, False):
        _opcheck(OPS.mhc_pre_sinkhorn.default, (x, phi, alpha, bias, n, iters, EPS, EPS, out_flag))
    with torch.no_grad():
        outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, n, iters, EPS, EPS, True)
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs[:3]]
    bwd_args = [t.detach().clone().requires_grad_(grad) for t in (*grads, x, phi, alpha, bias, *outs[3:])]
    _opcheck(OPS.mhc_pre_sinkhorn_backward.default, (*bwd_args, EPS))
    x2 = x.detach().clone().requires_grad_(grad)
    h_res = outs[2].reshape(2, 3, n, n).detach().clone().requires_grad_(grad)
    h_out = torch.randn(2, 3, 8, generator=g).to(dtype).requires_grad_(grad)
    h_post = outs[1].detach().clone().requires_grad_(grad)
    _opcheck(OPS.mhc_post.default, (x2, h_res, h_out, h_post))
    g_y = torch.randn(x.shape, generator=g).to(dtype).requires_grad_(grad)
    _opcheck(OPS.mhc_post_backward.default, (g_y, x2, h_res, h_out, h_post))


# ---- autograd through the fixed wrappers ---------------------------------------------------------


def _layer(pre, post, x, phi, alpha, bias, n=4, iters=20):
    h_in, h_post, h_res = pre(x, phi, alpha, bias, n, iters, EPS, EPS)[:3]  # golden returns 8
    return post(x, h_res.reshape(*x.shape[:-2], n, n), h_in, h_post)


def test_fixed_wrappers_gradients_match_golden(pre_inputs):
    x, phi, alpha, bias = (t.requires_grad_() for t in pre_inputs(C=16))
    y = _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, x, phi, alpha, bias)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad(y, (x, phi, alpha, bias), gy)
    args = tuple(t.detach().double().requires_grad_() for t in (x, phi, alpha, bias))
    y_ref = _layer(golden.mhc_pre_sinkhorn, golden.mhc_post, *args)
    expect = torch.autograd.grad(y_ref, args, gy.double())
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-5 * y_ref.abs().max().item())
    for a, b in zip(got, expect):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


@pytest.mark.parametrize("used", [0, 1, 2])
def test_none_incoming_gradients_become_zeros(pre_inputs, used):
    """Only one of (h_in, h_post, h_res) reaches the loss; gradients still match the golden."""
    x, phi, alpha, bias = (t.requires_grad_() for t in pre_inputs())
    out = fixed.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20)
    w = torch.randn(out[used].shape, generator=torch.Generator().manual_seed(3))  # (h_res.sum() is ~constant)
    got = torch.autograd.grad((out[used] * w).sum(), (x, phi, alpha, bias))
    args = tuple(t.detach().double().requires_grad_() for t in (x, phi, alpha, bias))
    ref = golden.mhc_pre_sinkhorn(*args, 4, 20, EPS, EPS)
    expect = torch.autograd.grad((ref[used] * w.double()).sum(), args)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def test_backward_called_with_none_grads_directly(pre_inputs):
    """The formula itself turns None into zeros (autograd usually materialises them first)."""
    x, phi, alpha, bias = pre_inputs()
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5, EPS, EPS, True)

    class Ctx:
        saved_tensors = (x, phi, alpha, bias, *outs[3:])
        hc_eps = EPS
        recompute_args = None

    g_post = torch.ones(outs[1].shape)
    got = fixed._pre_backward(Ctx, None, g_post, None, *([None] * 5))
    expect = OPS.mhc_pre_sinkhorn_backward(
        torch.zeros(outs[0].shape), g_post, torch.zeros(outs[2].shape), x, phi, alpha, bias, *outs[3:], EPS
    )
    assert got[4:] == (None,) * 5
    for a, b in zip(got[:4], expect):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class _RecordOutFlag(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.flags = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is OPS.mhc_pre_sinkhorn.default:
            self.flags.append(args[8])
        return func(*args, **(kwargs or {}))


def test_wrapper_out_flag_follows_requires_grad(pre_inputs):
    x, phi, alpha, bias = pre_inputs()
    with _RecordOutFlag() as rec:
        fixed.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20)
        fixed.mhc_pre_sinkhorn(x, phi.requires_grad_(), alpha, bias, 4, 20)
        with torch.no_grad():
            fixed.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20)
    assert rec.flags == [False, True, False]


def test_intermediate_outputs_are_not_differentiable(pre_inputs):
    x, phi, alpha, bias = (t.requires_grad_() for t in pre_inputs())
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5, EPS, EPS, True)
    assert [o.requires_grad for o in outs] == [True] * 3 + [False] * 5


def test_op_called_with_out_flag_false_still_differentiates(pre_inputs):
    x, phi, alpha, bias = (t.requires_grad_() for t in pre_inputs())
    outs = OPS.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 20, EPS, EPS, False)
    got = torch.autograd.grad(outs[0].sum() + outs[2].square().sum(), (x, phi, alpha, bias))
    args = tuple(t.detach().double().requires_grad_() for t in (x, phi, alpha, bias))
    ref = golden.mhc_pre_sinkhorn(*args, 4, 20, EPS, EPS)
    expect = torch.autograd.grad(ref[0].sum() + ref[2].square().sum(), args)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5 * b.abs().max().item())


def test_double_backward_is_an_error_not_silent(pre_inputs):
    x, phi, alpha, bias = (t.requires_grad_() for t in pre_inputs())
    h_in, _, _ = fixed.mhc_pre_sinkhorn(x, phi, alpha, bias, 4, 5)
    (gx,) = torch.autograd.grad(h_in.sum(), (x,), create_graph=True)
    assert not gx.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad(gx.sum(), (phi,))


# ---- torch.compile --------------------------------------------------------------------------


def _fwd_bwd(fn, args):
    for a in args:
        a.grad = None
    out = fn(*args)
    out.sum().backward()
    return out.detach(), [a.grad.clone() for a in args]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fixed_compiles_fullgraph_and_matches_eager(pre_inputs, backend):
    args = tuple(t.requires_grad_() for t in pre_inputs(C=16))

    def layer(x, phi, alpha, bias):
        return _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, x, phi, alpha, bias)

    ref_out, ref_grads = _fwd_bwd(layer, args)
    out, grads = _fwd_bwd(torch.compile(layer, backend=backend, fullgraph=True), args)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fixed_explain_has_no_graph_break(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())

    def layer(x, phi, alpha, bias):
        return _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, x, phi, alpha, bias)

    explanation = torch._dynamo.explain(layer)(*args)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0


def test_fixed_under_compiled_autograd(pre_inputs):
    from torch._dynamo import compiled_autograd
    from torch._dynamo.utils import counters

    args = tuple(t.requires_grad_() for t in pre_inputs())

    def layer(x, phi, alpha, bias):
        return _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, x, phi, alpha, bias)

    ref_out, ref_grads = _fwd_bwd(layer, args)
    counters.clear()
    compiled = torch.compile(layer, backend="aot_eager")
    with compiled_autograd._enable(torch.compile(backend="aot_eager", fullgraph=True)):
        out, grads = _fwd_bwd(compiled, args)
    assert counters["compiled_autograd"]["captures"] == 1
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---- the broken registrations fail as documented --------------------------------------------------


def _broken_layer(variant):
    pre, post = broken.VARIANTS[variant]

    def layer(x, phi, alpha, bias):
        return _layer(pre, post, x, phi, alpha, bias)

    return layer


@pytest.mark.parametrize("variant", sorted(broken.VARIANTS))
def test_broken_variants_forward_matches_fixed_in_eager(pre_inputs, variant):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    expect = _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, *args)
    torch.testing.assert_close(_broken_layer(variant)(*args), expect, rtol=0, atol=0)


def test_autograd_function_eager_grads_match_fixed(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    _, expect = _fwd_bwd(_broken_layer("autograd_function"), args)
    _, got = _fwd_bwd(lambda *a: _layer(fixed.mhc_pre_sinkhorn, fixed.mhc_post, *a), args)
    for a, b in zip(got, expect):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_autograd_function_fullgraph_raises_pybind_unsupported(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    with pytest.raises(torch._dynamo.exc.Unsupported) as info:
        torch.compile(_broken_layer("autograd_function"), backend="eager", fullgraph=True)(*args)
    msg = str(info.value)
    assert "Attempted to call function marked as skipped" in msg
    assert "pybind11_detail_function_record" in msg and "mhc_pre_sinkhorn" in msg
    assert "autograd.Function" in msg


def test_missing_fake_raises_at_dynamo(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    _fwd_bwd(_broken_layer("missing_fake"), args)  # eager forward and backward are fine
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="There was no fake impl registered"):
        torch.compile(_broken_layer("missing_fake"), backend="eager")(*args)


def test_missing_autograd_fails_at_eager_backward(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    out = _broken_layer("missing_autograd")(*args)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        out.sum().backward()


def test_missing_autograd_fails_at_aot_forward(pre_inputs):
    args = tuple(t.requires_grad_() for t in pre_inputs())
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="no autograd formula was registered"):
        torch.compile(_broken_layer("missing_autograd"), backend="aot_eager")(*args)


def test_broken_ops_are_separate_from_the_fixed_ones():
    ops = (broken.nofake_pre_sinkhorn._opoverload, broken.noautograd_pre_sinkhorn._opoverload)
    names = {str(op._schema).split("(")[0] for op in ops}
    assert names == {"mhc_broken_nofake::mhc_pre_sinkhorn", "mhc_broken_noautograd::mhc_pre_sinkhorn"}
    # the fixed formula is still the one on the cann_ops_transformer op
    assert torch._C._dispatch_has_kernel_for_dispatch_key("cann_ops_transformer::mhc_pre_sinkhorn", "Autograd")
