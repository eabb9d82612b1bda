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
