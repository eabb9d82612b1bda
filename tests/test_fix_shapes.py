"""Shape-expression inference for generated fake impls: ``tracecheck.fix.shapes`` (pure) and
``tracecheck.fix.observe`` (runs real torch ops at perturbed shapes).

Every expected expression below is derived from the op's documented semantics (broadcasting, reduction, cat,
...) and the documented symbol preference order (tensor dims in argument order, then ints), not from the
module's output.
"""
from __future__ import annotations

import pytest
import torch

from tracecheck.fix import observe as ob
from tracecheck.fix.shapes import Runs, infer_dim


def _single(fn):
    """``call`` for observe(): one group whose inputs are the args and whose outputs are fn's tensor(s)."""

    def call(args):
        out = fn(**args)
        return [(args, list(out) if isinstance(out, (tuple, list)) else [out])]

    return call


def _codes(meta: ob.OutputMeta) -> list[str | None]:
    assert meta.shape is not None, meta.rank_note
    return [d.code for d in meta.shape]


@pytest.fixture(autouse=True)
def _seeded():
    # observe() resamples inputs with the global RNG: seed so every run sees the same data
    torch.manual_seed(0)


# ---------------------------------------------------------------------------------------------------------
# observe(): real ops
# ---------------------------------------------------------------------------------------------------------

def test_broadcasting_add():
    # (4, 1, 3) + (5, 3): align right -> (4, 1, 3) vs (1, 5, 3) -> (4, 5, 3).
    # dim 0 comes from a, dim 1 from b (a's size-1 axis broadcasts), dim 2 is shared and equal in both; the
    # op rejects changing either alone, so both stay candidates and argument order prefers a.size(2).
    obs = ob.observe(_single(lambda a, b: torch.add(a, b)),
                     {"a": torch.randn(4, 1, 3), "b": torch.randn(5, 3)})
    (meta,), = obs.groups
    assert _codes(meta) == ["a.size(0)", "b.size(0)", "a.size(2)"]
    assert all(d.confirmed for d in meta.shape)
    assert not any(d.data_dependent for d in meta.shape)
    assert meta.device == "a.device"
    # changing the shared size 3 on one side alone is not a valid broadcast: both refusals are recorded
    assert any(r.startswith("a.size(2)") for r in obs.refused)
    assert any(r.startswith("b.size(1)") for r in obs.refused)
    # the size-1 axis is never perturbed
    assert not any("a.size(1)" in r for r in obs.refused)


def test_reduction_sum():
    obs = ob.observe(_single(lambda x: x.sum(dim=1)), {"x": torch.randn(3, 5, 7)})
    (meta,), = obs.groups
    assert _codes(meta) == ["x.size(0)", "x.size(2)"]
    assert all(d.confirmed for d in meta.shape)
    assert meta.dtype == "x.dtype"
    assert meta.todo == []
    assert meta.unconfirmed == []


def test_reduction_sum_keepdim():
    obs = ob.observe(_single(lambda x: x.sum(dim=1, keepdim=True)), {"x": torch.randn(3, 5, 7)})
    (meta,), = obs.groups
    assert _codes(meta) == ["x.size(0)", "1", "x.size(2)"]
    # 1 is a literal (keepdim), not a guess
    assert meta.shape[1].confirmed
    assert meta.shape[1].alternatives == ()
    assert meta.todo == []


def test_cat_along_dim0():
    # cat along 0: out.size(0) = a.size(0) + b.size(0); the other dims must match, so dim 1 is a.size(1)
    # (a before b in argument order).
    obs = ob.observe(_single(lambda a, b: torch.cat([a, b], dim=0)),
                     {"a": torch.randn(3, 4), "b": torch.randn(5, 4)})
    (meta,), = obs.groups
    assert _codes(meta) == ["a.size(0) + b.size(0)", "a.size(1)"]
    assert all(d.confirmed for d in meta.shape)


def test_int_argument_scaled():
    def f(x, num_iters):
        return x.new_zeros(2 * num_iters, x.shape[0])

    obs = ob.observe(_single(f), {"x": torch.randn(5), "num_iters": 3})
    (meta,), = obs.groups
    assert _codes(meta) == ["2 * num_iters", "x.size(0)"]
    assert all(d.confirmed for d in meta.shape)
    assert meta.dtype == "x.dtype"
    assert meta.todo == []


def test_int_argument_equal_to_a_dim_is_told_apart():
    # num_iters == x.size(0) in the probe: the two are perturbed together, then each alone, so the dims
    # still resolve to the right symbol.
    def f(x, num_iters):
        return x.new_zeros(2 * num_iters, x.shape[0])

    obs = ob.observe(_single(f), {"x": torch.randn(3), "num_iters": 3})
    (meta,), = obs.groups
    assert _codes(meta) == ["2 * num_iters", "x.size(0)"]
    assert all(d.confirmed for d in meta.shape)


def test_data_dependent_boolean_mask():
    # the number of positive elements depends on the values, not the shape
    obs = ob.observe(_single(lambda x: x[x > 0]), {"x": torch.randn(1000)})
    (meta,), = obs.groups
    assert meta.shape is not None and len(meta.shape) == 1
    dim = meta.shape[0]
    assert dim.code is None
    assert dim.data_dependent
    assert "depends on the input values" in dim.reason
    assert meta.todo and meta.todo[0].startswith("dim 0:")
    assert meta.dtype == "x.dtype"


@pytest.mark.parametrize("in_dtype", [torch.float32, torch.float16])
def test_dtype_constant_when_output_ignores_input_dtype(in_dtype):
    # x.float() is float32 whatever x's dtype: observe varies x to float64 / bfloat16 and the output stays
    # float32, so x.dtype cannot explain it and the dtype is the constant.
    obs = ob.observe(_single(lambda x: x.float()), {"x": torch.randn(4, 6).to(in_dtype)})
    (meta,), = obs.groups
    assert meta.dtype == "torch.float32"
    assert _codes(meta) == ["x.size(0)", "x.size(1)"]
    assert meta.todo == []


def test_dtype_follows_input():
    obs = ob.observe(_single(lambda x: x * 2), {"x": torch.randn(4, 6)})
    (meta,), = obs.groups
    assert meta.dtype == "x.dtype"


# ---------------------------------------------------------------------------------------------------------
# infer_dim(): pure
# ---------------------------------------------------------------------------------------------------------


class _Sizes:
    """Stands in for a tensor ``x`` in an inferred expression: ``x.size(i)`` is the i-th given size."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = sizes

    def size(self, i: int) -> int:
        return self.sizes[i]


def value(code: str, x: tuple[int, ...] = (), **ints: int) -> int:
    """The inferred expression evaluated at sizes it was not inferred from: the oracle is the formula the
    test's op really follows, written by hand at the call."""
    return eval(code, {"__builtins__": {}}, {"x": _Sizes(*x), **ints})


def test_infer_square_of_one_symbol():
    # n*n with n varied over three sizes (a straight line through two points would fit any two)
    runs = Runs()
    for n in (3, 6, 12):
        runs.add({"n": n}, n * n)
    d = infer_dim(["n"], runs)
    assert [value(d.code, n=n) for n in (5, 20)] == [25, 400]
    assert d.confirmed
    assert not d.data_dependent


def test_infer_product_of_two_symbols():
    # a flattened n x n matrix: both dims of x are n and change together
    runs = Runs()
    for n in (3, 6):
        runs.add({"x.size(0)": n, "x.size(1)": n}, n * n)
    d = infer_dim(["x.size(0)", "x.size(1)"], runs)
    assert [value(d.code, x=(n, n)) for n in (5, 9)] == [25, 81]
    assert d.confirmed


def test_infer_floor_half():
    runs = Runs()
    runs.add({"x.size(0)": 6, "x.size(1)": 4}, 3)
    runs.add({"x.size(0)": 12, "x.size(1)": 4}, 6)
    runs.add({"x.size(0)": 6, "x.size(1)": 8}, 3)
    d = infer_dim(["x.size(0)", "x.size(1)"], runs)
    assert [value(d.code, x=(a, b)) for a, b in ((10, 3), (20, 7), (7, 2))] == [5, 10, 3]
    assert d.confirmed


def test_infer_plain_symbol_preferred_over_others():
    runs = Runs()
    runs.add({"x.size(0)": 4, "n": 3}, 4)
    runs.add({"x.size(0)": 8, "n": 3}, 8)
    runs.add({"x.size(0)": 4, "n": 6}, 4)
    d = infer_dim(["x.size(0)", "n"], runs)
    assert [value(d.code, x=(a,), n=n) for a, n in ((10, 3), (5, 9))] == [10, 5]
    assert d.confirmed


def test_infer_affine():
    runs = Runs()
    for n in (3, 6, 12):
        runs.add({"n": n}, 2 * n + 1)
    d = infer_dim(["n"], runs)
    assert [value(d.code, n=n) for n in (5, 20)] == [11, 41]
    assert d.confirmed


def test_affine_through_two_sizes_is_unconfirmed():
    # any curve passes a line through two points: n*n at n=3, 6 (9, 36) is also 9*n - 18 there, so a line
    # fitted from two sizes must not be called confirmed (s*s is tried first and wins here).
    runs = Runs()
    for n in (3, 6):
        runs.add({"n": n}, n * n)
    assert infer_dim(["n"], runs).code == "n * n"
    runs = Runs()
    for n in (3, 6):
        runs.add({"n": n}, 2 * n + 1)
    d = infer_dim(["n"], runs)
    assert d.code == "2 * n + 1" and not d.confirmed and "two sizes" in d.reason


def test_infer_unconfirmed_pick_lists_alternatives():
    # the dim is 5 in every run; x.size(0) and k are 5 and never changed (x.size(1) did, and the dim did not
    # follow it). Preference: tensor dims before ints, so x.size(0), with k and the literal as alternatives.
    runs = Runs()
    runs.add({"x.size(0)": 5, "x.size(1)": 3, "k": 5}, 5)
    runs.add({"x.size(0)": 5, "x.size(1)": 6, "k": 5}, 5)
    d = infer_dim(["x.size(0)", "x.size(1)", "k"], runs)
    assert d.code == "x.size(0)"
    assert not d.confirmed
    assert set(d.alternatives) == {"k", "5"}
    assert "x.size(0)" in d.reason and "never changed" in d.reason
    assert not d.data_dependent


def test_infer_constant_one_is_literal():
    # a size-1 dim is a literal (keepdim / broadcast axis) even when a symbol is also 1
    runs = Runs()
    runs.add({"x.size(0)": 1, "x.size(1)": 4}, 1)
    runs.add({"x.size(0)": 1, "x.size(1)": 8}, 1)
    d = infer_dim(["x.size(0)", "x.size(1)"], runs)
    assert [value(d.code, x=(1, b)) for b in (3, 16)] == [1, 1] and "x.size" not in d.code
    assert d.confirmed


def test_infer_constant_without_matching_symbol():
    runs = Runs()
    runs.add({"x.size(0)": 4}, 7)
    runs.add({"x.size(0)": 8}, 7)
    d = infer_dim(["x.size(0)"], runs)
    assert [value(d.code, x=(a,)) for a in (3, 16)] == [7, 7]
    assert d.confirmed


def test_infer_no_expression_fits():
    # 2**n: not linear in n over three points, not n*n
    runs = Runs()
    for n in (3, 6, 12):
        runs.add({"n": n}, 2 ** n)
    d = infer_dim(["n"], runs)
    assert d.code is None
    assert not d.data_dependent
    assert not d.confirmed
    assert "observed sizes" in d.reason
    for n in (3, 6, 12):
        assert f"{2 ** n} at (n={n})" in d.reason


def test_infer_data_dependent():
    runs = Runs()
    runs.add({"x.size(0)": 10}, 4)
    runs.add({"x.size(0)": 10}, 6)
    d = infer_dim(["x.size(0)"], runs)
    assert d.code is None
    assert d.data_dependent
    assert "4" in d.reason and "6" in d.reason


def test_infer_empty_runs_raises():
    with pytest.raises(ValueError):
        infer_dim(["x.size(0)"], Runs())


def test_runs_add_copies_symbols():
    sym = {"n": 3}
    runs = Runs()
    runs.add(sym, 9)
    sym["n"] = 4
    assert runs.symbols == [{"n": 3}]
    assert runs.values == [9]


# ---------------------------------------------------------------------------------------------------------
# Fakes that hold beyond the probe: other sizes, other ranks (issue 37). The oracle is the real op run at
# shapes observe() never used; the fake is the code codegen.fake_lines writes, executed.
# ---------------------------------------------------------------------------------------------------------

def _fake_of(fn, args):
    """The fake impl tracecheck would write for ``fn`` at ``args``, as a callable (the generated source, exec'd)."""
    from tracecheck.fix.codegen import fake_lines

    obs = ob.observe(_single(fn), args)
    outs = [f"out{i}" for i in range(len(obs.groups[0]))]
    ranks = {n: v.dim() for n, v in args.items() if isinstance(v, torch.Tensor)}
    src = f"def fake({', '.join(args)}):\n" + "\n".join(fake_lines(outs, obs.groups[0], ranks))
    ns = {"torch": torch}
    exec(src, ns)  # noqa: S102 - the generated fake, as a user would import it
    return ns["fake"], src


def _shapes(result):
    return [tuple(t.shape) for t in (result if isinstance(result, tuple) else (result,))]


_OPS = {
    # name: (op, probe inputs, inputs at shapes and ranks the probe never used)
    "elementwise": (lambda x: x * torch.sigmoid(x), {"x": torch.randn(4, 16)},
                    [{"x": torch.randn(2, 8, 16)}, {"x": torch.randn(7)}, {"x": torch.randn(3, 5, 2, 9)}]),
    "matmul": (lambda x, w: x @ w.t(), {"x": torch.randn(4, 16), "w": torch.randn(32, 16)},
               [{"x": torch.randn(2, 3, 16), "w": torch.randn(5, 16)}, {"x": torch.randn(9, 7), "w": torch.randn(3, 7)}]),
    "reduction": (lambda x: x.sum(-1), {"x": torch.randn(4, 16)},
                  [{"x": torch.randn(2, 3, 5)}, {"x": torch.randn(11)}]),
    "several outputs": (lambda x, w: (x @ w, x.mean(-1, keepdim=True), torch.cat([x, x], -1)),
                        {"x": torch.randn(4, 6), "w": torch.randn(6, 10)},
                        [{"x": torch.randn(2, 5, 3), "w": torch.randn(3, 7)}, {"x": torch.randn(9, 2), "w": torch.randn(2, 2)}]),
    "int argument": (lambda x, k: x.unsqueeze(-1).expand(*x.shape, k).contiguous(), {"x": torch.randn(4, 6), "k": 3},
                     [{"x": torch.randn(2, 5, 7), "k": 9}, {"x": torch.randn(8), "k": 1}]),
}


@pytest.mark.parametrize("name", list(_OPS))
def test_the_written_fake_holds_at_sizes_and_ranks_the_probe_never_used(name):
    fn, probe, unseen = _OPS[name]
    fake, src = _fake_of(fn, probe)
    for args in unseen:
        assert _shapes(fake(**args)) == _shapes(fn(**args)), (args, src)


def test_an_elementwise_fake_is_written_over_the_inputs_shape():
    fake, src = _fake_of(lambda x: x * torch.sigmoid(x), {"x": torch.randn(4, 16)})
    assert "torch.empty(x.shape," in src and "x.dim() == 2" not in src


def test_a_fake_that_holds_at_one_rank_only_refuses_the_others():
    # sum over dim 0 of a 2-D x: at rank 3 dim 0 is another axis, so the fake keeps x at rank 2, clearly
    fn = lambda x: x.sum(0)  # noqa: E731
    fake, src = _fake_of(fn, {"x": torch.randn(4, 16)})
    assert _shapes(fake(torch.randn(5, 9))) == _shapes(fn(torch.randn(5, 9)))
    with pytest.raises(RuntimeError, match="inferred at rank 2"):
        fake(torch.randn(3, 5, 9))


def test_equal_sizes_the_op_refuses_to_change_together_are_told_apart():
    # mHC's shape: x (B, S, n, C) with n fixed at 4 by the kernel; the probe has S == n == 4, so changing the
    # class {S, n} together is refused. S alone changes: h_post is (B, S, n), never (B, S, S).
    def h_post(x):
        if x.size(-2) != 4:
            raise RuntimeError("n must be 4")
        return x.sum(-1)

    fake, src = _fake_of(h_post, {"x": torch.randn(2, 4, 4, 16)})
    for shape in [(2, 8, 4, 16), (3, 1, 4, 5), (6, 4, 16)]:
        x = torch.randn(*shape)
        assert _shapes(fake(x)) == _shapes(h_post(x)), src


# ---------------------------------------------------------------------------------------------------------
# fix.shape_check: opcheck at shapes beyond the probe's finds a fake that only held there
# ---------------------------------------------------------------------------------------------------------

def _linear_op(ns: str, tied: bool):
    @torch.library.custom_op(f"{ns}::lin", mutates_args=())
    def lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.t()

    @lin.register_fake
    def _(x, w):
        # the tied fake: at the probe, w.size(0) == 8 * x.size(0) (32 == 8 * 4)
        return x.new_empty(x.size(0), 8 * x.size(0)) if tied else x.new_empty(*x.shape[:-1], w.size(0))

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.reshape(-1, g.size(-1)).t() @ x.reshape(-1, x.size(-1))

    lin.register_autograd(backward, setup_context=setup)
    return lin


@pytest.mark.parametrize("tied", [True, False])
def test_shape_check_finds_a_fake_that_only_held_at_the_probes_sizes(tied):
    from tracecheck.fix import shape_check

    ns = f"tc_shape_check_{'tied' if tied else 'right'}"
    _linear_op(ns, tied)
    op = getattr(torch.ops, ns).lin.default
    x, w = torch.randn(4, 16, requires_grad=True), torch.randn(32, 16, requires_grad=True)
    res = shape_check.check_op(op, (x, w), {})
    if tied:
        assert res.failed and all(test == "test_faketensor" for _, test, _ in res.failed)
        assert any(label.startswith("x.size(0) 4->") for label, _, _ in res.failed)
    else:
        assert res.failed == () and len(res.checked) >= 2
        assert any("at rank 3" in label for label in res.checked)  # x at rank 3: x @ w.t() takes it
    assert any(label.startswith("x.size(1)") for label in res.refused)  # x @ w.t() needs x.size(1) == w.size(1)
