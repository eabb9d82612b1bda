"""Stage helpers: execute/compare semantics (gradients, the backward decision, numerics against float64)."""
import functools

import torch

from tracecheck.numerics import TOLERANCES
from tracecheck.probe import Case
from tracecheck.reachable import trainable_parameters
from tracecheck.stages._execution import Execution, compare, execute, float64_run, needs_grad


def test_shared_module_and_leaf_are_compared_by_this_backward_only():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)        # a probe that hands out the same module and leaf every call
    x = torch.randn(4, 3, requires_grad=True)
    case = Case(model, (x,))
    first, second = execute(case.fn, case), execute(case.fn, case)
    assert x.grad is not None and torch.allclose(x.grad, 2 * first.grads["input[0]"])  # .grad accumulated...
    assert compare(first, second) == []                                               # ...the comparison didn't


def test_compiled_run_that_loses_autograd_is_a_backward_mismatch():
    x = torch.randn(3, requires_grad=True)
    eager = execute(torch.sin, Case(torch.sin, (x,)))
    detached = execute(lambda t: torch.sin(t).detach(), Case(torch.sin, (x,)))
    assert eager.ran_backward and not detached.ran_backward
    [m] = compare(eager, detached)
    assert m["phase"] == "backward" and m["worst"]["what"] == "backward"


def test_plain_values_compared_objects_ignored():
    class Obj:  # compares by identity: never a meaningful mismatch
        pass

    assert compare(Execution(outputs=(torch.ones(1), Obj())), Execution(outputs=(torch.ones(1), Obj()))) == []
    [m] = compare(Execution(outputs=(torch.ones(1), "eager")), Execution(outputs=(torch.ones(1), "compiled")))
    assert m["worst"]["what"] == "output[1]"


# -- the backward decision -------------------------------------------------------------------------------


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.emb(ids).sum(-1)


GLOBAL_MODEL = Tiny()


class Holder:
    def __init__(self):
        self.model = Tiny()

    def __call__(self, ids):
        return self.model(ids)


def test_integer_inputs_with_trainable_parameters_run_backward_wherever_the_module_is_held():
    ids = torch.tensor([[1, 2, 3]])
    model = Tiny()
    callables = {
        "the module": model,
        "a bound method": model.forward,
        "a closure": (lambda m: (lambda t: m(t)))(model),
        "a global": lambda t: GLOBAL_MODEL(t),
        "an attribute of a callable object": Holder(),
        "functools.partial": functools.partial(lambda m, t: m(t), model),
    }
    for how, fn in callables.items():
        case = Case(fn, (ids,))
        assert needs_grad(case), how
        ex = execute(fn, case)
        assert ex.ran_backward, how
        # the embedding weight is the one trainable parameter: its gradient counts the ids (sum over dim 4)
        [(name, grad)] = list(ex.grads.items())
        assert name.startswith("param:") and name.endswith("emb.weight"), (how, name)
        expected = torch.zeros(10, 4)
        expected[[1, 2, 3]] = 1.0
        assert torch.equal(grad, expected), how


def test_frozen_parameters_and_grad_false_run_forward_only():
    model = Tiny().requires_grad_(False)
    ids = torch.tensor([[1, 2]])
    assert not needs_grad(Case(model, (ids,)))
    assert not execute(model, Case(model, (ids,))).ran_backward
    trainable = Tiny()
    assert not needs_grad(Case(trainable, (ids,), grad=False))
    assert trainable_parameters(lambda t: t + 1) == []


def test_a_module_reached_twice_is_counted_once():
    model = Tiny()
    names = [n for n, _ in trainable_parameters(lambda t: model(t) + model.emb(t).sum(-1))]
    assert names == ["closure:model.emb.weight"]


# -- numerics: torch._dynamo.utils.same with a float64 reference ---------------------------------------------


def _matmul_runs():
    """eager float32, a float32 run that sums the reduction in another order (what a compiler does), float64"""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 4096, generator=g) * 100, torch.randn(4096, 32, generator=g)  # outputs ~6e3
    eager = a @ b
    reordered = sum(a[:, k:k + 512] @ b[k:k + 512] for k in range(0, 4096, 512))
    fp64 = a.double() @ b.double()
    return eager, reordered, fp64


def test_reduction_order_noise_is_not_a_mismatch():
    eager, reordered, fp64 = _matmul_runs()
    tol = TOLERANCES[torch.float32]
    # the precondition that makes this test mean something: a plain allclose at the tolerance cries wolf
    assert not torch.allclose(eager, reordered, rtol=tol, atol=tol)
    assert compare(Execution(outputs=eager), Execution(outputs=reordered),
                   fp64=lambda: Execution(outputs=fp64)) == []


def test_a_wrong_compiled_result_is_flagged_with_its_errors_against_float64():
    eager, _, fp64 = _matmul_runs()
    wrong = eager * 1.01                                        # a 1% error: far beyond fp32 noise
    [m] = compare(Execution(outputs=(eager, eager)), Execution(outputs=(eager, wrong)),
                  fp64=lambda: Execution(outputs=(fp64, fp64)))
    assert m["phase"] == "forward" and m["disagreeing"] == 1 and m["compared"] == 2
    worst = m["worst"]
    assert worst["what"] == "output[1]" and m["fp64_reference"] is True
    expected_rmse = torch.sqrt(torch.mean((fp64 - wrong.double()) ** 2)).item()   # computed here, by hand
    assert abs(worst["rmse_compiled_vs_fp64"] - expected_rmse) < 1e-6 * expected_rmse
    assert worst["rmse_compiled_vs_fp64"] > 2 * worst["rmse_eager_vs_fp64"]


def test_without_a_float64_reference_the_verdict_is_allclose_and_says_so():
    a = torch.ones(8)
    assert compare(Execution(outputs=a), Execution(outputs=a + 1e-6), fp64=lambda: "refuses float64") == []
    [m] = compare(Execution(outputs=a), Execution(outputs=a + 1e-2), fp64=lambda: "refuses float64")
    assert m["fp64_reference"] is False and m["fp64_unavailable"] == "refuses float64"
    assert abs(m["worst"]["max_abs_diff"] - 1e-2) < 1e-6


def test_one_record_per_phase_with_the_count_of_disagreeing_tensors():
    x = torch.ones(4)
    ref = Execution(outputs=x, grads={"param:a": x, "param:b": x, "param:c": x}, ran_backward=True)
    got = Execution(outputs=x + 1, grads={"param:a": x * 2, "param:b": x * 3, "param:c": x},
                    ran_backward=True)
    records = compare(ref, got, fp64=lambda: "no reference")
    assert [(r["phase"], r["disagreeing"], r["compared"]) for r in records] == [("forward", 1, 1),
                                                                                ("backward", 2, 4)]
    assert records[1]["worst"]["what"] == "grad param:b"      # the larger difference (2 vs 1)


def test_float64_run_casts_the_module_and_restores_it():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)                               # the same module on every call
    before = model.weight.detach().clone()
    x = torch.randn(2, 4)
    ex = float64_run(lambda: Case(model, (x,)))()
    assert isinstance(ex, Execution) and ex.outputs.dtype == torch.float64
    assert torch.allclose(ex.outputs, x.double() @ before.double().T + model.bias.double())
    assert model.weight.dtype == torch.float32 and torch.equal(model.weight, before) and model.weight.grad is None
    assert ex.grads["param:weight"].dtype == torch.float64


def test_float64_run_reports_why_not():
    def fp32_only(t):
        if t.dtype != torch.float32:
            raise TypeError("expected float32")
        return t * 2

    why = float64_run(lambda: Case(fp32_only, (torch.ones(2),)))()
    assert isinstance(why, str) and "TypeError" in why and "expected float32" in why
