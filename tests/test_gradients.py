"""The gradient check and the batch resizing of the readiness stages, on functions whose derivatives are known by
hand (no compile: fast)."""
import pytest
import torch

from tracecheck.stages import _batch as batch
from tracecheck.stages._directional import confirmed, directional
from tracecheck.stages._gradients import Call, check_call


class Cube(torch.autograd.Function):
    """x**3 with the right backward, 3x**2, or (``factor``) a scaled one."""

    factor = 1.0

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2 * Cube.factor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_directional_check_accepts_a_right_backward_and_refuses_one_off_by_two_percent(dtype):
    x = torch.linspace(-2, 2, 50, dtype=dtype)
    Cube.factor = 1.0
    assert directional(lambda t: [Cube.apply(t)], x, dtype).ok
    Cube.factor = 1.02  # the tolerance promises to refuse any constant factor >= 1.01
    try:
        m = directional(lambda t: [Cube.apply(t)], x, dtype)
    finally:
        Cube.factor = 1.0
    assert not m.ok
    assert m.analytical / m.numerical == pytest.approx(1.02, rel=2e-3)


def test_a_factor_of_1_05_is_refused_on_a_large_input_too():
    """The rounding allowance grows like the 2-norm of the summed terms, not their 1-norm: 1e5 elements."""
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    Cube.factor = 1.05
    try:
        m = confirmed(lambda t: [Cube.apply(t)], x, torch.float32, 0)
    finally:
        Cube.factor = 1.0
    assert not m.ok and not m.inconclusive
    assert m.analytical / m.numerical == pytest.approx(1.05, rel=1e-2)


class Relu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, g):
        return g


class DropoutScale(torch.autograd.Function):
    """Dropout inside the forward, with its mask saved: a right backward for a random forward."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype) * 2
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask


class NewStyle(torch.autograd.Function):
    """forward without ctx (setup_context overridden), backward off by 2 for ``w``."""

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x * 2


def test_no_false_alarm_on_a_kink_a_random_forward_or_a_straight_through_estimator():
    big = torch.randn(20_000, generator=torch.Generator().manual_seed(1), requires_grad=True)
    for seed in range(4):  # ReLU over 20k elements: many cross the kink at the step
        out = check_call(Call("Relu", Relu, (big,), {}, is_function=True), seed=seed)
        assert out.mismatch is None and out.error is None, out
    out = check_call(Call("DropoutScale", DropoutScale, (torch.randn(64, requires_grad=True),), {}, is_function=True))
    assert out.mismatch is None and out.error is None, out
    out = check_call(Call("STE", StraightThroughRound, (torch.randn(64, requires_grad=True) * 3,), {},
                          is_function=True))
    assert out.mismatch is None and out.inconclusive, out


def test_a_new_style_function_names_its_inputs_without_ctx():
    x, w = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    out = check_call(Call("NewStyle", NewStyle, (x, w), {}, is_function=True))
    assert list(out.inputs) == ["x", "w"] and out.mismatch.input == "w"


def test_check_call_names_the_input_and_uses_gradcheck_in_float64():
    x = torch.randn(4, requires_grad=True)
    Cube.factor = 0.5
    try:
        out = check_call(Call("Cube", Cube, (x,), {}, is_function=True))
    finally:
        Cube.factor = 1.0
    assert out.method.startswith("torch.autograd.gradcheck, float64")
    assert out.mismatch.input == "x" and out.mismatch.analytical / out.mismatch.numerical == pytest.approx(0.5, rel=1e-4)


def test_check_call_skips_a_call_with_no_input_that_requires_grad():
    out = check_call(Call("Cube", Cube, (torch.randn(3),), {}, is_function=True))
    assert out.skip == "no input of its recorded call requires grad"


def test_resize_grows_and_cuts_the_batch_and_keeps_the_other_inputs():
    ids = torch.tensor([[1, 2], [3, 4]])
    weight = torch.ones(3, 2)
    x = torch.zeros(2, 5, requires_grad=True)
    assert batch.batch_size((ids, weight), {"x": x}) == 2
    (a, w), kw = batch.resize((ids, weight), {"x": x}, 2, 3)
    assert a.tolist() == [[1, 2], [3, 4], [1, 2]]  # rows i % 2
    assert w is weight  # dim 0 is 3, not the batch
    assert kw["x"].shape == (3, 5) and kw["x"].requires_grad and kw["x"].is_leaf
    (a, _), _ = batch.resize((ids, weight), {}, 2, 1)
    assert a.tolist() == [[1, 2]]
    assert batch.sizes(1) == [1, 2, 3, 4] and batch.sizes(4) == [4, 5, 6, 7]
    assert batch.batch_size((torch.tensor(3.0), 2), {}) is None


def test_a_missing_term_is_found_at_a_size_where_gradchecks_fast_mode_passes():
    """SwiGLU whose d/da forgets the a*s*(1-s) term of d(silu(a))/da, on 2048 elements per input: torch's fast-mode
    tolerance grows with the input's size and lets it pass; the central difference does not."""

    class BadSwiGLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.nn.functional.silu(a) * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            s = torch.sigmoid(a)
            return g * b * s, g * a * s

    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2, 16, 64, generator=gen).requires_grad_() for _ in range(2))
    out = check_call(Call("BadSwiGLU", BadSwiGLU, (a, b), {}, is_function=True))
    assert out.mismatch is not None and out.mismatch.input == "a", out
    assert out.relative_errors.get("b") is None  # the check stops at the first input that fails
