"""Stage helpers: execute/compare semantics (gradients, the backward decision, numerics against float64)."""
import functools

import torch

from tracecheck.stages import _numerics as numerics
from tracecheck.stages._numerics import TOLERANCES
from tracecheck.model.probe import Case
from tracecheck.evidence.reachable import trainable_parameters
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
    assert m.phase == "backward" and m.worst.what == "backward"


def test_plain_values_compared_objects_ignored():
    class Obj:  # compares by identity: never a meaningful mismatch
        pass

    assert compare(Execution(outputs=(torch.ones(1), Obj())), Execution(outputs=(torch.ones(1), Obj()))) == []
    [m] = compare(Execution(outputs=(torch.ones(1), "eager")), Execution(outputs=(torch.ones(1), "compiled")))
    assert m.worst.what == "output[1]"


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
    assert m.phase == "forward" and m.disagreeing == 1 and m.compared == 2
    worst = m.worst
    assert worst.what == "output[1]" and m.fp64_reference is True
    expected_rmse = torch.sqrt(torch.mean((fp64 - wrong.double()) ** 2)).item()   # computed here, by hand
    assert abs(worst.rmse_compiled_vs_fp64 - expected_rmse) < 1e-6 * expected_rmse
    assert worst.rmse_compiled_vs_fp64 > 2 * worst.rmse_eager_vs_fp64


def test_without_a_float64_reference_the_verdict_is_allclose_and_says_so():
    a = torch.ones(8)
    assert compare(Execution(outputs=a), Execution(outputs=a + 1e-6), fp64=lambda: "refuses float64") == []
    [m] = compare(Execution(outputs=a), Execution(outputs=a + 1e-2), fp64=lambda: "refuses float64")
    assert m.fp64_reference is False and m.fp64_unavailable == "refuses float64"
    assert abs(m.worst.max_abs_diff - 1e-2) < 1e-6


def test_one_record_per_phase_with_the_count_of_disagreeing_tensors():
    x = torch.ones(4)
    ref = Execution(outputs=x, grads={"param:a": x, "param:b": x, "param:c": x}, ran_backward=True)
    got = Execution(outputs=x + 1, grads={"param:a": x * 2, "param:b": x * 3, "param:c": x},
                    ran_backward=True)
    records = compare(ref, got, fp64=lambda: "no reference")
    assert [(r.phase, r.disagreeing, r.compared) for r in records] == [("forward", 1, 1),
                                                                                ("backward", 2, 4)]
    assert records[1].worst.what == "grad param:b"      # the larger difference (2 vs 1)


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


# -- found by breaking it on purpose ----------------------------------------------------------------------


class _Slots:
    __slots__ = ("m",)

    def __init__(self):
        self.m = torch.nn.Linear(2, 2)

    def __call__(self, x):
        return self.m(x)


class _ClassAttr:
    net = torch.nn.Linear(2, 2)

    def __call__(self, x):
        return self.net(x)


GLOBAL_NET = torch.nn.Linear(2, 2)


class _CallsAGlobal:
    def __call__(self, x):
        return GLOBAL_NET(x)


class _Box:
    def __init__(self, m):
        self.model = m


class _BigVocab:
    def __init__(self):
        self.vocab = [str(i) for i in range(5000)]    # more objects than the walk visits
        self.inner = _Box(torch.nn.Linear(2, 2))

    def __call__(self, x):
        return self.inner.model(x)


class _TwoBoxes:
    def __init__(self):
        self.a, self.b = _Box(torch.nn.Linear(2, 2)), _Box(torch.nn.Linear(2, 2))

    def __call__(self, x):
        return self.a.model(x) + self.b.model(x)


def test_modules_in_slots_class_attributes_call_globals_and_behind_big_lists_are_reached():
    names = {type(obj).__name__: [n for n, _ in trainable_parameters(obj)]
             for obj in (_Slots(), _ClassAttr(), _CallsAGlobal(), _BigVocab(), _TwoBoxes())}
    assert names == {
        "_Slots": ["m.weight", "m.bias"],
        "_ClassAttr": ["net.weight", "net.bias"],
        "_CallsAGlobal": ["__call__.global:GLOBAL_NET.weight", "__call__.global:GLOBAL_NET.bias"],
        "_BigVocab": ["inner.model.weight", "inner.model.bias"],
        "_TwoBoxes": ["a.model.weight", "a.model.bias", "b.model.weight", "b.model.bias"],  # one name each
    }


def test_a_gradient_of_one_of_two_same_named_modules_is_compared():
    obj = _TwoBoxes()
    x = torch.ones(1, 2)
    ref = execute(obj, Case(obj, (x,)))
    got = Execution(outputs=ref.outputs, ran_backward=True,
                    grads={k: (g * 2 if k == "param:a.model.weight" else g) for k, g in ref.grads.items()})
    [m] = compare(ref, got, fp64=lambda: "no reference")
    assert m.phase == "backward" and m.worst.what == "grad param:a.model.weight"


def test_a_dataclass_output_is_compared_field_by_field_and_trains():
    import dataclasses

    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        note: str

    lin = torch.nn.Linear(3, 2)
    fn = (lambda x: Out(lin(x), "ok"))
    ex = execute(fn, Case(fn, (torch.ones(1, 3),)))
    assert ex.ran_backward and torch.equal(ex.grads["param:closure:lin.bias"], torch.ones(2))
    off = Execution(outputs=Out(ex.outputs.logits + 1.0, "ok"), grads=ex.grads, ran_backward=True)
    [m] = compare(ex, off, fp64=lambda: "no reference")
    assert m.worst.what == "output[0]"


def test_nan_in_the_same_places_is_agreement_and_in_other_places_is_not():
    eager, reordered, fp64 = _matmul_runs()                     # noise that passes against float64
    nan = torch.tensor([float("nan")])
    with_nan = lambda t: torch.cat([t.flatten(), nan.to(t.dtype)])  # noqa: E731
    assert compare(Execution(outputs=with_nan(eager)), Execution(outputs=with_nan(reordered)),
                   fp64=lambda: Execution(outputs=with_nan(fp64))) == []
    moved = with_nan(reordered).roll(1)
    [m] = compare(Execution(outputs=with_nan(eager)), Execution(outputs=moved), fp64=lambda: "no reference")
    assert "NaN or Inf" in m.worst.detail


def test_complex_outputs_are_judged_against_the_complex_float64_reference():
    eager, reordered, fp64 = _matmul_runs()
    c = lambda re, im: torch.complex(re, im)  # noqa: E731
    assert compare(Execution(outputs=c(eager, eager)), Execution(outputs=c(reordered, reordered)),
                   fp64=lambda: Execution(outputs=c(fp64, fp64))) == []


def test_a_result_that_is_mathematically_zero_passes_on_noise():
    g = torch.Generator().manual_seed(1)
    truth = torch.zeros(4096, dtype=torch.float64)                # e.g. the input gradient of a sum of a norm
    eager, compiled = torch.randn(4096, generator=g) * 1e-3, torch.randn(4096, generator=g) * 1e-3
    assert compare(Execution(outputs=eager), Execution(outputs=compiled), fp64=lambda: Execution(outputs=truth)) == []


def test_a_custom_loss_that_does_not_depend_on_trainable_values_runs_forward_only():
    frozen = torch.nn.Linear(3, 2).requires_grad_(False)
    case = Case(frozen, (torch.ones(1, 3),), grad=lambda o: o.pow(2).mean())
    ex = execute(frozen, case)
    assert ex.error is None and not ex.ran_backward


def test_a_probe_that_adds_noise_is_judged_against_a_reference_that_drew_the_same_noise():
    """torch draws other numbers in float64 than in float32 from one seed: the float64 reference draws in
    float32 (numerics.Float32Draws), so a 5% error is caught and noise-level differences are not."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    fn = (lambda t: lin(t + 0.1 * torch.randn_like(t)) + torch.rand_like(t).bernoulli())
    make = (lambda: Case(fn, (x,)))
    ref = execute(fn, make())
    reference = float64_run(make)()
    assert reference.outputs.dtype == torch.float64
    assert (reference.outputs - ref.outputs.double()).abs().max() < 1e-4   # the same draws, more precise math
    wrong = Execution(outputs=ref.outputs * 1.05, grads=ref.grads, ran_backward=True)
    [m] = compare(ref, wrong, float64_run(make))
    assert m.phase == "forward" and m.worst.rmse_compiled_vs_fp64 > 2 * m.worst.rmse_eager_vs_fp64
    noisy = Execution(outputs=ref.outputs + 1e-6 * torch.ones_like(ref.outputs), grads=ref.grads, ran_backward=True)
    assert compare(ref, noisy, float64_run(make)) == []


model = torch.nn.Linear(5, 5)   # a global named like the attribute the callable below reads


def test_an_attribute_named_like_a_global_does_not_reach_that_global():
    box = _Box(torch.nn.Linear(2, 2))
    names = [n for n, _ in trainable_parameters(lambda x: box.model(x))]
    assert names == ["closure:box.model.weight", "closure:box.model.bias"]


# --- fp32 decision flips, the jitter cap and the BatchNorm floor (issue 22) ------------------------------------------

def _flip_runs():
    """A ReLU whose input has one element at rounding distance from zero: eager and float64 agree that it is
    (just) positive; a compiled run that rounds it to the other side drops that element's gradient."""
    x = torch.linspace(-1, 1, 4096, dtype=torch.float64)
    x[3000] = 1e-12                                   # the kink
    fp64 = (x > 0).double() * 3.0                     # d/dx of relu(x) * 3, where x[3000] counts as positive
    eager = fp64.float()
    compiled = eager.clone()
    compiled[3000] = 0.0                              # the flipped decision: 1 element of 2048 positives, 2% RMS
    jittered = compiled.clone()                       # a 1e-6 jitter flips it too
    return eager, compiled, jittered, fp64


def test_a_decision_that_rounding_flips_is_noise_when_the_jittered_runs_flip_it_too():
    eager, compiled, jittered, fp64 = _flip_runs()
    grads = lambda g: Execution(grads={"input[0]": g}, ran_backward=True)  # noqa: E731
    assert compare(grads(eager), grads(compiled), fp64=lambda: grads(fp64)) != []   # flagged without jitter
    assert compare(grads(eager), grads(compiled), fp64=lambda: grads(fp64),
                   jittered=lambda: [grads(jittered)]) == []


def test_the_jittered_runs_never_excuse_more_than_the_cap():
    """A discrete decision (MoE routing) that the jitter flips moves the jittered run far: a compiled result off
    by 30% must not hide behind it."""
    eager = torch.ones(256)
    fp64 = eager.double()
    wrong = eager * 1.3
    far_jitter = eager * 1.5                          # the jittered run routed elsewhere
    grads = lambda g: Execution(grads={"input[0]": g}, ran_backward=True)  # noqa: E731
    [m] = compare(grads(eager), grads(wrong), fp64=lambda: grads(fp64), jittered=lambda: [grads(far_jitter)])
    assert m.worst.what == "grad input[0]"
    assert 0.3 > numerics.JITTER_CAP   # the premise: 30% is beyond what the jitter may excuse


def test_the_batchnorm_floor_passes_a_tenth_of_a_percent_and_not_one_percent():
    torch.manual_seed(0)
    fp64 = torch.randn(4096, dtype=torch.float64)
    eager = fp64.float()                               # eager: exact to fp32 rounding
    noisy = (fp64 + 1e-3 * fp64.pow(2).mean().sqrt() * torch.randn(4096, dtype=torch.float64)).float()  # 0.1%
    scaled = eager * 1.01                              # 1%
    grads = lambda g: Execution(grads={"param:bn.weight": g}, ran_backward=True)  # noqa: E731
    assert compare(grads(eager), grads(noisy), fp64=lambda: grads(fp64)) != []          # no floor: flagged
    assert compare(grads(eager), grads(noisy), fp64=lambda: grads(fp64), batchnorm=True) == []
    [m] = compare(grads(eager), grads(scaled), fp64=lambda: grads(fp64), batchnorm=True)
    assert "per-model tolerance" in m.worst.rule and "BatchNorm" in m.worst.rule


def test_jittered_runs_jitter_inputs_and_weights_and_restore_them():
    from tracecheck.stages._execution import jittered_runs

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    before = model.weight.detach().clone()
    x = torch.randn(2, 4)
    [a, b] = jittered_runs(lambda: Case(model, (x,)))()
    assert torch.equal(model.weight, before) and model.weight.grad is None          # restored
    plain = model(x)
    for ex in (a, b):
        rel = ((ex.outputs - plain).norm() / plain.norm()).item()
        assert 0 < rel < 1e-5                                                         # jittered, by about 1e-6
    assert not torch.equal(a.outputs, b.outputs)                                      # two different jitters
