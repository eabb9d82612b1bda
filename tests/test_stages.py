"""Stage helpers: execute/compare semantics (gradients, tolerances, lost autograd)."""
import torch

from tracecheck.probe import Case
from tracecheck.stages import TOLERANCES, Execution, compare, execute


def test_shared_module_and_leaf_are_compared_by_this_backward_only():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)        # a probe that hands out the same module and leaf every call
    x = torch.randn(4, 3, requires_grad=True)
    case = Case(model, (x,))
    first, second = execute(case.fn, case), execute(case.fn, case)
    assert x.grad is not None and torch.allclose(x.grad, 2 * first.grads["input[0]"])  # .grad accumulated...
    assert compare(first, second) == []                                               # ...the comparison didn't


def test_compiled_run_that_loses_autograd_is_a_mismatch():
    x = torch.randn(3, requires_grad=True)
    eager = execute(torch.sin, Case(torch.sin, (x,)))
    detached = execute(lambda t: torch.sin(t).detach(), Case(torch.sin, (x,)))
    assert eager.ran_backward and not detached.ran_backward
    assert [m["what"] for m in compare(eager, detached)] == ["backward"]


def test_float32_tolerance_catches_real_differences_only():
    rtol, atol = TOLERANCES[torch.float32]
    a = torch.ones(8)
    assert compare(Execution(outputs=a), Execution(outputs=a + atol / 10)) == []
    m = compare(Execution(outputs=a), Execution(outputs=a + 1e-2))
    assert len(m) == 1 and abs(m[0]["max_abs_diff"] - 1e-2) < 1e-6


def test_plain_values_compared_objects_ignored():
    class Obj:  # compares by identity: never a meaningful mismatch
        pass

    assert compare(Execution(outputs=(torch.ones(1), Obj())), Execution(outputs=(torch.ones(1), Obj()))) == []
    m = compare(Execution(outputs=(torch.ones(1), "eager")), Execution(outputs=(torch.ones(1), "compiled")))
    assert m[0]["what"] == "output[1]"
