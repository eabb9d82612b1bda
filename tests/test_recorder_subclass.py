"""tracecheck's op recorder (evidence/oprecorder.py) on tensor subclasses with their own ``__torch_dispatch__``, its
own failures, and skip reasons that name the run that failed (issue 38, item 5: found on optimum-quanto, whose
packed weights call the ``quanto::unpack`` custom op inside ``__torch_dispatch__`` and dequantize through an
autograd.Function, and whose calibration leaves buffers attached to the autograd graph).

The oracles are plain torch, run in the test: the custom op's kernel counting its own calls, and two eager training
steps, the second raising torch's own message."""
import sys
import types

import pytest
import torch

#: a minimal quantized weight: packed 4-bit data in a wrapper subclass whose ``__torch_dispatch__`` dequantizes
#: (through an autograd.Function) by calling a custom op, as optimum-quanto's packed weights do
SUBCLASS = '''
import torch
from torch.utils import _pytree as pytree

KERNEL_CALLS = [0]


@torch.library.custom_op("tc_recsub::unpack", mutates_args=())
def unpack(packed: torch.Tensor) -> torch.Tensor:
    KERNEL_CALLS[0] += 1
    return torch.cat([packed & 15, packed >> 4]).to(torch.uint8)


@unpack.register_fake
def _(packed):
    return packed.new_empty((packed.shape[0] * 2,) + tuple(packed.shape[1:]))


class Dequantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return (torch.ops.tc_recsub.unpack(t._data).float() - 8) * t._scale

    @staticmethod
    def backward(ctx, g):
        return None


class QLinearFunction(torch.autograd.Function):
    """A user Function taking the quantized weight, with a right backward (as optimum-quanto's
    QuantizedLinearFunction): gradcheck checks it for the input and the bias, the weight passed as it is."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, None, g.sum(0)


class QWeight(torch.Tensor):
    @staticmethod
    def __new__(cls, data, scale, shape):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32, device=data.device)

    def __init__(self, data, scale, shape):
        self._data, self._scale = data, scale

    def __tensor_flatten__(self):
        return ["_data", "_scale"], {"shape": tuple(self.shape)}

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return QWeight(inner["_data"], inner["_scale"], meta["shape"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:
            t = args[0]
            return QWeight(t._data.detach(), t._scale.detach(), t.shape)
        if func is torch.ops.aten._to_copy.default and (kwargs or {}).get("dtype", torch.float32) != torch.float32:
            raise ValueError("the dtype of a QWeight cannot be changed")  # as optimum-quanto's weights
        # anything else (clone included) on the dequantized weight
        args, kwargs = pytree.tree_map_only(QWeight, lambda t: Dequantize.apply(t), (args, kwargs or {}))
        return func(*args, **kwargs)


def quantize(w):
    scale = w.abs().max() / 7
    q = ((w / scale).round().clamp(-8, 7) + 8).to(torch.uint8)
    half = q.shape[0] // 2
    return QWeight(q[:half] | (q[half:] << 4), scale, w.shape)


class QLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(quantize(torch.randn(8, 6)), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.zeros(8))

    def forward(self, x):
        return QLinearFunction.apply(x, self.weight, self.bias)


def probe_qlinear():
    torch.manual_seed(0)
    return QLinear(), (torch.randn(4, 6, requires_grad=True),)
'''

#: a running statistic kept attached to the autograd graph (no detach): the second training step's backward goes
#: through the first step's freed graph
RUNNING = '''
import torch


class Running(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.register_buffer("stat", torch.zeros(6))

    def forward(self, x):
        y = torch.tanh(self.lin(x))
        self.stat = self.stat * 0.9 + y.mean(0)
        return y * self.stat


def probe_running():
    torch.manual_seed(0)
    return Running(), (torch.randn(4, 6),)
'''

SECOND_TIME = "Trying to backward through the graph a second time"


@pytest.fixture(scope="module")
def subclass_module():
    """SUBCLASS imported once in this process (its custom op registers once)."""
    name = "tc_recorder_subclass_probe"
    if name not in sys.modules:
        mod = types.ModuleType(name)
        exec(compile(SUBCLASS, f"<{name}>", "exec"), mod.__dict__)
        sys.modules[name] = mod
    return sys.modules[name]


def test_the_recorder_sees_the_custom_op_a_subclass_calls_in_its_dispatch(subclass_module):
    from tracecheck.evidence.oprecorder import OpRecorder

    model, (x,) = subclass_module.probe_qlinear()
    calls = subclass_module.KERNEL_CALLS[0]
    model(x).sum().backward()  # the oracle: plain eager runs the kernel (inside QWeight.__torch_dispatch__)
    assert subclass_module.KERNEL_CALLS[0] > calls
    with OpRecorder() as rec:
        model(x).sum().backward()
    assert "tc_recsub::unpack" in rec.custom_ops
    [(args, _)] = [v for op, v in rec.calls.items() if str(op) == "tc_recsub.unpack.default"]
    assert args[0].dtype == torch.uint8 and type(args[0]) is torch.Tensor


def test_a_recorder_failure_passes_the_probes_and_the_stages_handlers(subclass_module, monkeypatch):
    from tracecheck.evidence import oprecorder
    from tracecheck.model.exitcodes import InternalError

    def boom(t):
        raise RecursionError("maximum recursion depth exceeded (tracecheck's own)")

    monkeypatch.setattr(oprecorder, "snapshot", boom)
    model, (x,) = subclass_module.probe_qlinear()
    with pytest.raises(oprecorder.RecorderError) as info:
        try:
            with oprecorder.OpRecorder():
                model(x)
        except Exception:  # a stage's handler of the probe's failure: the recorder's is not the probe's
            pytest.fail("the recorder's failure was caught as an Exception (the probe's)")
    assert isinstance(info.value, InternalError) and isinstance(info.value.__cause__, RecursionError)


def _fake_block():
    """A probe's own FakeTensorMode block: a FakeTensor op, and a TwoTensor (a traceable wrapper subclass) made of
    FakeTensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.two_tensor import TwoTensor

    with FakeTensorMode():
        a = torch.randn(3, 4)
        u = TwoTensor(a, a * 2)
        s, v = a + a, u * 3
        return (tuple(s.shape), type(s).__name__, tuple(v.shape), type(v).__name__, type(v.a).__name__)


def test_the_recorder_is_transparent_to_a_probes_own_fake_tensor_mode():
    from tracecheck.evidence.oprecorder import OpRecorder

    expected = _fake_block()  # the oracle: plain torch
    with OpRecorder() as rec:
        got = _fake_block()  # was: TypeError: unsupported operand type(s) for +: 'FakeTensor' and 'FakeTensor'
    assert got == expected
    assert rec.random_ops == ["aten::randn"]


@pytest.mark.parametrize("subclass", [False, True], ids=["plain", "twotensor"])
def test_the_recorder_is_transparent_to_a_compiled_call(subclass):
    from torch.testing._internal.two_tensor import TwoTensor
    from tracecheck.evidence.oprecorder import OpRecorder

    def f(x, w):
        return torch.sin(x) @ w + 1

    def run(recorded: bool):
        torch._dynamo.reset()
        g = torch.compile(f, backend="aot_eager")
        torch.manual_seed(0)
        x, w = torch.randn(3, 4), torch.randn(4, 2)
        x = (TwoTensor(x, x.cos()) if subclass else x).requires_grad_()
        if recorded:
            with OpRecorder():
                y = g(x, w)
                y.sum().backward()
        else:
            y = g(x, w)
            y.sum().backward()
        parts = (y.a, y.b, x.grad.a, x.grad.b) if subclass else (y, x.grad)
        return type(y), [p.detach() for p in parts]

    expected_type, expected = run(False)  # the oracle: the same compiled call without the recorder
    got_type, got = run(True)
    assert got_type is expected_type
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_opcheck_and_gradcheck_see_through_a_dispatching_subclass(tracecheck, write_probe, subclass_module):
    # the oracle: plain eager calls the custom op (its kernel counts), from inside the subclass's __torch_dispatch__
    model, (x,) = subclass_module.probe_qlinear()
    calls = subclass_module.KERNEL_CALLS[0]
    model(x).sum().backward()
    assert subclass_module.KERNEL_CALLS[0] > calls

    write_probe(SUBCLASS, "qmodel.py")
    res = tracecheck("run", "qmodel.py", "--stages", "eager,opcheck,gradcheck", "-j", "2")
    assert res.report is not None, res.stderr[-3000:]
    stages = res.probe("probe_qlinear")["stages"]
    assert stages["eager"]["status"] == "pass"
    opcheck = stages["opcheck"]
    assert opcheck["status"] == "pass", opcheck  # was: skip, "the probe calls no custom op"
    assert "tc_recsub.unpack.default" in opcheck["extra"]["opcheck"]
    gradcheck = stages["gradcheck"]
    # was: skip, "the eager forward fails before any custom op ran (RecursionError)": tracecheck's recorder
    # recursed copying the weight (its clone dequantizes through an autograd.Function the recorder hooks)
    assert gradcheck["status"] == "pass", gradcheck
    checked = gradcheck["extra"]["gradcheck"]
    # the weight is passed as it is (neither cast to float64, which it refuses, nor perturbed)
    assert any(name.endswith(".QLinearFunction") and v["status"] == "SUCCESS" for name, v in checked.items()), checked
    assert not gradcheck["findings"]
    assert res.returncode == 0, res.stdout[-3000:]


def test_a_failure_of_tracecheck_s_recorder_is_an_internal_error_never_a_skip(tracecheck, write_probe):
    # tracecheck's own failure inside the recorder, simulated: its copy of a custom op's inputs raises (what the
    # recursion on optimum-quanto's weights raised). The probe itself runs.
    write_probe(SUBCLASS + '''
import tracecheck.evidence.oprecorder as _recorder


def _broken_snap(t):
    raise RecursionError("maximum recursion depth exceeded (simulated: tracecheck's own recorder)")


_recorder.snapshot = _broken_snap
''', "qbroken.py")
    res = tracecheck("run", "qbroken.py", "--stages", "eager,opcheck,gradcheck", "-j", "2")
    assert res.report is not None, res.stderr[-3000:]
    stages = res.probe("probe_qlinear")["stages"]
    assert stages["eager"]["status"] == "pass"
    for name in ("opcheck", "gradcheck"):
        s = stages[name]
        assert s["status"] == "internal-error", s  # was: skip, "the eager forward fails ... (RecursionError)"
        assert s["skip_reason"] is None and not s["findings"]
        assert "RecorderError" in s["internal_error"] and "simulated" in s["internal_error"]
    assert res.returncode == 3


def test_a_second_training_step_that_fails_is_the_eager_stages_finding_and_no_skip_blames_another_run(
        tracecheck, write_probe):
    # the oracle: plain eager, two training steps on one model; the second raises torch's message, while the
    # first step and batch size 5 on a fresh model run
    namespace: dict = {}
    exec(compile(RUNNING, "<running>", "exec"), namespace)
    model, (x,) = namespace["probe_running"]()
    model(x).sum().backward()
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        model(x).sum().backward()
    fresh, (x,) = namespace["probe_running"]()
    fresh(x[:1].repeat(5, 1)).sum().backward()

    write_probe(RUNNING, "running.py")
    res = tracecheck("run", "running.py", "--stages", "eager,compiled_autograd,dynamic", "-j", "2")
    assert res.report is not None, res.stderr[-3000:]
    stages = res.probe("probe_running")["stages"]
    eager = stages["eager"]
    assert eager["status"] == "fail", eager  # was: pass (the eager stage ran one step)
    [finding] = [f for f in eager["findings"] if f["evidence"].get("step") == 2]
    assert finding["kind"] == "eager-error" and SECOND_TIME in finding["evidence"]["message"]
    assert "training step 2" in finding["summary"]
    assert finding["evidence"]["phase"] == "backward"
    # the stages that run several steps say which run failed, with its exception; none blames step 1 or a size
    for name in ("compiled_autograd", "dynamic"):
        reason = stages[name]["skip_reason"] or ""
        assert stages[name]["status"] == "skip", stages[name]
        assert "training step 2" in reason and SECOND_TIME in reason, reason
        assert "the eager backward fails (see the eager stage)" not in reason        # was compiled_autograd's
        assert "not a batch dimension" not in reason                                 # was dynamic's
    assert res.returncode == 1


#: legitimate training probes: a second eager step on the same model must not be the eager stage's failure. Each
#: factory returns ``(fn, args)``; the closure-held one trips a plain two-step loop too (its set-up tensor's graph
#: is freed by the first backward), which is the probe's set-up, not the model's state: a note at most
LEGITIMATE = {
    "dropout": '''
def probe_case():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5)), (torch.randn(4, 6),)
''',
    "batchnorm_train": '''
def probe_case():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6)).train()
    return model, (torch.randn(4, 6),)
''',
    "inplace_update_under_no_grad": '''
class Decaying(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.register_buffer("avg", torch.zeros(6))

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.999)
            self.avg.mul_(0.9).add_(x.mean(0))
        return self.lin(x) + self.avg


def probe_case():
    torch.manual_seed(0)
    return Decaying(), (torch.randn(4, 6),)
''',
    "reused_input": '''
def probe_case():
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 6)
    x = torch.randn(4, 6, requires_grad=True)
    return (lambda a, b: lin(a) * b), (x, x)
''',
    "non_differentiable_output": '''
def probe_case():
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 3)

    def fn(x):
        logits = lin(x)
        return logits, logits.argmax(-1)
    return fn, (torch.randn(4, 6),)
''',
    "closure_held_graph_tensor": '''
def probe_case():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    w = torch.randn(4, requires_grad=True) * 2  # a non-leaf built once, in the factory
    return (lambda x: lin(x) * w), (torch.randn(3, 4),)
''',
}


def _plain_two_steps(source: str) -> str | None:
    """The oracle: plain torch, two training steps on one model and its inputs; the second step's error, or None."""
    namespace: dict = {}
    exec(compile("import torch\n" + source, "<probe>", "exec"), namespace)
    fn, args = namespace["probe_case"]()
    for step in (1, 2):
        try:
            out = fn(*args)
            outs = out if isinstance(out, tuple) else (out,)
            sum(o.sum() for o in outs if o.is_floating_point() and o.requires_grad).backward()
        except RuntimeError as e:
            assert step == 2, e
            return str(e)
    return None


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_a_legitimate_training_probe_passes_the_eager_stage_with_its_second_step(tracecheck, write_probe, name):
    plain = _plain_two_steps(LEGITIMATE[name])
    assert (plain is not None) == (name == "closure_held_graph_tensor"), plain
    write_probe("import torch\n" + LEGITIMATE[name], "legit.py")
    res = tracecheck("run", "legit.py", "--stages", "eager")
    assert res.report is not None, res.stderr[-3000:]
    eager = res.probe("probe_case")["stages"]["eager"]
    assert eager["status"] == "pass", eager
    assert not eager["findings"], eager["findings"]
    notes = [n for n in (eager.get("extra") or {}).get("not_checked") or [] if "second training step" in n]
    if plain is None:
        assert not notes, notes
    else:  # plain torch fails its own two-step loop: the probe's set-up, said as a note, not the model's failure
        assert SECOND_TIME in plain
        [note] = notes
        assert SECOND_TIME in note and "outside the model" in note, note
    assert res.returncode == 0, res.stdout[-3000:]
