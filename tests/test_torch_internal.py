"""torch's own internal errors (issue 38): ``torch-internal-error``, a compiled-autograd hard error that is no graph
break, and two reproducer misses (gradcheck's re-raise of the eager error). Recorded wording first (torch 2.13.0,
../shared/torch_failure_wording.md), then the CLI on probes written here, with plain torch as the oracle."""
import dataclasses
import json
import subprocess
import sys

import pytest

from tracecheck.classify import detect, settle
from tracecheck.model import taxonomy
from tracecheck.model.report import Finding, StageResult, FAIL

# torch 2.13.0: compiled autograd tracing an autograd.Function whose backward is a classmethod
_TORCH = "/venv/lib/python3.11/site-packages/torch"
ASSERT_TB = (
    "Traceback (most recent call last):\n"
    f'  File "{_TORCH}/_dynamo/variables/misc.py", line 1136, in call_method\n'
    "    return self.call_backward(tx, args, kwargs)\n"
    f'  File "{_TORCH}/_dynamo/variables/misc.py", line 1095, in call_backward\n'
    '    raise AssertionError(f"Expected FunctionType, got {type(fn)}")\n'
    "AssertionError: Expected FunctionType, got <class 'method'>\n\nfrom user code:\n"
    '   File "<eval_with_key>.11", line 25, in forward\n'
    "    call_backward = torch__dynamo_external_utils_call_backward(getitem_13, (), aot2_expand)\n"
    f'  File "{_TORCH}/_dynamo/external_utils.py", line 133, in call_backward\n'
    "    grads = fake._forward_cls.backward(fake, *args)\n"
)
ASSERT_MSG = ("Expected FunctionType, got <class 'method'>\n\nfrom user code:\n"
              '   File "<eval_with_key>.11", line 25, in forward\n'
              "    call_backward = torch__dynamo_external_utils_call_backward(getitem_13, (), aot2_expand)\n")
# torch 2.13.0: compiled autograd's own backward graph feeds None to DivBackward's aten.div (GB4315, a hard error)
NONE_DIV_MSG = (
    "RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake tensors: "
    "call_function aten.div.Tensor(*(None, 127), **{}): got RuntimeError(\"Expected a proper Tensor but got None (or an "
    "undefined Tensor in C++) for argument #0 'self'\")\n  Hint: Your code may result in an error when running in "
    "eager. Please double check that your code doesn't contain a similar error when actually running eager/uncompiled."
    "\n\n  Developer debug context: \n\n For more details about this graph break, please visit: "
    "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4315.html\n\nfrom user code:\n"
    '   File "<eval_with_key>.9", line 36, in forward\n'
    "    aot0_div_1 = torch.ops.aten.div.Tensor(aot0_trace_wrapped, 127);  aot0_trace_wrapped = None\n\n"
    "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to "
    "PyTorch). For even more developer context, set TORCH_LOGS=\"+dynamo\"\n")
NONE_DIV_CHAIN = [
    {"type": "torch._dynamo.exc.TorchRuntimeError", "message": NONE_DIV_MSG},
    {"type": "torch._dynamo.exc.Unsupported", "message": NONE_DIV_MSG.split("\n\nfrom user code:")[0]},
    {"type": "RuntimeError", "message": "Expected a proper Tensor but got None (or an undefined Tensor in C++) for "
                                        "argument #0 'self'"}]


def test_an_assert_raised_in_dynamo_is_torchs_internal_error():
    f = detect.classify_error("compiled_autograd", {"type": "AssertionError", "message": ASSERT_MSG,
                                                    "phase": "backward", "traceback": ASSERT_TB})
    assert f.kind == "torch-internal-error"
    assert f.context.exception == "AssertionError: Expected FunctionType, got <class 'method'>"
    assert f.context.torch_frame == "torch/_dynamo/variables/misc.py:1095 in call_backward"
    assert f.evidence.torch_frame.line == 1095
    assert "torch failed in its own code" in f.summary and "@staticmethod" in f.summary  # cause classmethod
    # any other assert at the same torch frame: torch's bug, nothing of the user's to change
    generic = {"type": "AssertionError", "phase": "backward",
               "message": ASSERT_MSG.replace("Expected FunctionType, got <class 'method'>", "boom"),
               "traceback": ASSERT_TB.replace("Expected FunctionType, got <class 'method'>", "boom")}
    f = detect.classify_error("compiled_autograd", generic)
    assert f.kind == "torch-internal-error" and f.context.cause is None
    assert "torch bug, not your code" in f.summary
    fix = taxonomy.fix_text(f)
    assert "tracecheck repro MODEL.py::PROBE --stage compiled_autograd" in fix and "pytorch/pytorch/issues" in fix
    assert taxonomy.kinds()["torch-internal-error"].severity == "error"


def test_the_structured_raising_frame_wins_over_the_traceback_text():
    chain = [{"type": "torch._dynamo.exc.InternalTorchDynamoError", "message": "KeyError: 'x'"},
              {"type": "KeyError", "message": "'x'", "raised_at": {"file": f"{_TORCH}/_functorch/_aot_autograd/x.py",
                                                                  "line": 7, "function": "f"}}]
    f = detect.classify_error("aot_eager", {"type": chain[0]["type"], "message": chain[0]["message"],
                                            "chain": chain, "phase": "forward"})
    assert (f.kind, f.context.torch_frame) == ("torch-internal-error", "torch/_functorch/_aot_autograd/x.py:7 in f")


@pytest.mark.parametrize("frame", [
    {"file": "/home/me/model.py", "line": 12, "function": "forward"},                 # the user's own assert
    {"file": "/venv/lib/python3.11/site-packages/somelib/layers.py", "line": 3},       # a library's
    {"file": f"{_TORCH}/nn/functional.py", "line": 5000},                              # torch's argument checks
])
def test_an_assert_outside_torchs_compiler_is_not_torchs_bug(frame):
    for wrapper in ([], [{"type": "torch._dynamo.exc.InternalTorchDynamoError", "message": "AssertionError: no"}]):
        chain = wrapper + [{"type": "AssertionError", "message": "no", "raised_at": frame}]
        f = detect.classify_error("aot_eager", {"type": chain[0]["type"], "message": "no", "chain": chain,
                                                "phase": "forward"})
        assert f.kind == "unknown", (frame, wrapper)
    assert detect.classify_error("eager", {"type": "AssertionError", "message": "no", "phase": "forward",
                                           "chain": [{"type": "AssertionError", "message": "no",
                                                      "raised_at": frame}]}).kind == "eager-error"


def _frames(*files):
    return [{"file": f, "line": i + 1, "function": fn} for i, (f, fn) in enumerate(files)]


_USER = "/home/me/model.py"
_ENTRY = (f"{_TORCH}/_dynamo/convert_frame.py", "__call__")
_RAISE = (f"{_TORCH}/_subclasses/fake_tensor.py", "validate")


@pytest.mark.parametrize("message", [
    "Please convert all Tensors to FakeTensors first or instantiate FakeTensorMode with 'allow_non_fake_inputs'. "
    "Found in aten.add.Tensor(FakeTensor(..., size=(4,)), tensor([1., 1., 1., 1.]))",
    "Mixing fake modes NYI x.fake_mode=<torch._subclasses.fake_tensor.FakeTensorMode object at 0x7f> vs "
    "self=<torch._subclasses.fake_tensor.FakeTensorMode object at 0x7e>",
])
def test_the_users_misuse_of_fake_mode_is_not_torchs_bug(message):
    """torch's words for the user's own misuse of FakeTensorMode (a real tensor mixed in, two fake modes), raised by
    an assert in torch/_subclasses: never "a torch bug", at any stage, even with no frame of the user's recorded."""
    for frames in (_frames(_ENTRY, _RAISE), []):
        chain = [{"type": "AssertionError", "message": message, "raised_at": {"file": _RAISE[0], "line": 3159},
                  "frames": frames}]
        for stage in ("eager", "aot_eager", "export"):
            f = detect.classify_error(stage, {"type": "AssertionError", "message": message, "chain": chain,
                                              "phase": "forward"})
            assert f.kind != "torch-internal-error", (stage, frames)
            assert f.kind == ("eager-error" if stage == "eager" else "unknown")


def test_a_wrong_metadata_guard_is_not_torchs_bug():
    """Dynamo raises InternalTorchDynamoError itself (torch/_dynamo/utils.py) about the user's tensor subclass."""
    msg = "Tensor subclass method __metadata_guard__ must be a classmethod"
    chain = [{"type": "torch._dynamo.exc.InternalTorchDynamoError", "message": msg,
              "raised_at": {"file": f"{_TORCH}/_dynamo/utils.py", "line": 5524, "function": "verify_guard_fn_signature"}}]
    f = detect.classify_error("aot_eager", {"type": chain[0]["type"], "message": msg, "chain": chain, "phase": "forward"})
    assert f.kind == "unknown"


def test_an_assert_torch_raised_under_the_users_own_call_is_not_torchs_bug():
    """A generic assert in torch's compiler files, raised under a frame of the user's that torch ran for real (a fake
    impl called by FakeTensor's dispatch, below Dynamo's entry) or that called torch directly: theirs to look at first.
    A user frame Dynamo intercepts (a graph break's resume function: Dynamo's entry under it) does not count."""
    fake_impl = (_USER, "_fake_impl")
    dispatch = (f"{_TORCH}/_subclasses/fake_tensor.py", "dispatch")
    assert_at = (f"{_TORCH}/_subclasses/fake_tensor.py", "validate")
    for frames, internal in [
        (_frames(_ENTRY, dispatch, fake_impl, dispatch, assert_at), False),   # torch ran the user's fake impl
        (_frames((_USER, "forward"), dispatch, assert_at), False),             # the user's code called torch
        (_frames((_USER, "forward"), _ENTRY, dispatch, assert_at), True),      # Dynamo intercepted the user's frame
        (_frames(_ENTRY, dispatch, assert_at), True),                          # torch's own, end to end
    ]:
        chain = [{"type": "AssertionError", "message": "boom", "frames": frames,
                  "raised_at": {"file": assert_at[0], "line": 5, "function": "validate"}}]
        f = detect.classify_error("aot_eager", {"type": "AssertionError", "message": "boom", "chain": chain,
                                                "phase": "forward"})
        assert (f.kind == "torch-internal-error") is internal, frames
    # the formatted traceback's frames when the record has none (torch versions whose records predate frames)
    tb = ("Traceback (most recent call last):\n"
          f'  File "{_USER}", line 3, in forward\n    return x + y\n'
          f'  File "{assert_at[0]}", line 9, in validate\n    raise AssertionError("boom")\nAssertionError: boom\n')
    f = detect.classify_error("aot_eager", {"type": "AssertionError", "message": "boom", "phase": "forward",
                                            "traceback": tb})
    assert f.kind == "unknown"


def test_plain_torch_fake_mode_misuse_recorded_live_is_not_torchs_bug():
    """The oracle is plain torch: the record of the AssertionError it raises, classified at every stage."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tracecheck.evidence.exceptions import error_record

    def mixes(x):
        real = torch.ones(4)
        with FakeTensorMode() as mode:
            return mode.from_tensor(x) + real

    with pytest.raises(AssertionError, match="Please convert all Tensors to FakeTensors first") as info:
        mixes(torch.randn(4))
    raw = error_record(info.value, "forward")
    assert raw.chain[-1].frames[-1].file.replace("\\", "/").endswith("torch/_subclasses/fake_tensor.py")
    assert detect.classify_error("eager", raw).kind == "eager-error"
    assert detect.classify_error("aot_eager", raw).kind == "unknown"
    # the frames alone tell it (a message torch may reword): the user's `mixes` called torch directly
    reworded = dataclasses.replace(raw, message="x", chain=tuple(dataclasses.replace(c, message="x") for c in raw.chain))
    assert detect.classify_error("aot_eager", reworded).kind == "unknown"


def test_a_classmethod_backward_says_the_cheapest_fix_is_staticmethod():
    f = detect.classify_error("compiled_autograd", {"type": "AssertionError", "message": ASSERT_MSG,
                                                    "phase": "backward", "traceback": ASSERT_TB})
    assert (f.kind, f.context.cause) == ("torch-internal-error", "classmethod")
    fix = taxonomy.fix_text(f)
    assert "@staticmethod" in fix and "Nothing in your code needs to change" not in fix
    assert "torch should have raised a clear error" in fix
    from tracecheck.fix import repro
    assert repro.owner(f, "m.py").party == repro.YOURS


def test_a_compiled_autograd_fake_run_error_is_no_graph_break():
    raw = {"type": NONE_DIV_CHAIN[0]["type"], "message": NONE_DIV_MSG, "chain": NONE_DIV_CHAIN, "phase": "backward",
           "gb_type": "RuntimeError when making fake tensor call", "gb_code": "GB4315"}
    f = detect.classify_error("compiled_autograd", raw)
    assert (f.kind, f.context.cause) == ("torch-internal-error", "generated")
    assert f.context.exception.startswith("aten.div.Tensor(*(None, 127), **{}): RuntimeError: Expected a proper")
    assert f.evidence.torch_frame.file == "<eval_with_key>.9"
    assert f.evidence.gb_code == "GB4315"  # kept as evidence
    # the same hard error in the forward (an FX graph could be the user's): the error it is, unplaced, never a break
    assert detect.classify_error("aot_eager", {**raw, "phase": "forward"}).kind == "unknown"
    # any other GB4315 hard error: never a graph break either
    other = NONE_DIV_MSG.replace("Expected a proper Tensor but got None (or an undefined Tensor in C++)", "boom")
    g = detect.classify_error("compiled_autograd", {**raw, "message": other, "chain": [
        {"type": c["type"], "message": c["message"].replace(
            "Expected a proper Tensor but got None (or an undefined Tensor in C++)", "boom")} for c in NONE_DIV_CHAIN]})
    assert g.kind == "unknown" and g.evidence.message.startswith("RuntimeError when making fake tensor call")
    # a trace's graph break of a break gb_type is still one
    b = detect.classify_break({"reason": "Unsupported method call\n", "gb_type": "Unsupported method call"})
    assert b.kind == "graph-break"


def _finding(kind, message, frame, stage):
    return Finding(kind, "s", {}, {"exception_type": "TypeError", "message": message, "user_frame": frame})


def test_gradchecks_unplaced_rerun_of_the_eager_error_is_that_error():
    msg = "save_for_backward can only save variables, but argument 0 is of type float"
    eager = _finding("eager-error", msg, {"file": "/p/model.py", "line": 7}, "eager")
    rerun = _finding("unknown", msg, None, "gradcheck")
    stages = {"eager": StageResult("eager", FAIL, failure=eager, findings=[eager]),
              "gradcheck": StageResult("gradcheck", FAIL, failure=rerun, findings=[rerun])}
    stages = settle.attributed(stages)
    assert stages["gradcheck"].failure.kind == "eager-error"
    assert stages["gradcheck"].failure.context.first_seen_at == "eager"
    # unplaced words that say nothing (a bare type, an empty first line): never matched on them alone
    for vague in ("", "RuntimeError: ", "boom"):
        e2 = _finding("eager-error", vague, {"file": "/p/model.py", "line": 7}, "eager")
        r2 = _finding("unknown", vague, None, "gradcheck")
        st2 = {"eager": StageResult("eager", FAIL, failure=e2, findings=[e2]),
               "gradcheck": StageResult("gradcheck", FAIL, failure=r2, findings=[r2])}
        st2 = settle.attributed(st2)
        assert st2["gradcheck"].failure.kind == "unknown", vague
    # placed elsewhere: another error, not attributed
    other = _finding("unknown", msg, {"file": "/p/other.py", "line": 3}, "gradcheck")
    stages["gradcheck"] = StageResult("gradcheck", FAIL, failure=other, findings=[other])
    stages = settle.attributed(stages)
    assert stages["gradcheck"].failure.kind == "unknown"


# -- end to end: the CLI on probes written here; plain torch, run in the test, is the oracle -------------------

CLASSMETHOD_BACKWARD = '''
import torch

class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @classmethod
    def backward(cls, ctx, g):          # valid: eager calls it as cls.backward(ctx, g)
        return g * 2

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return Scale.apply(self.lin(x)).sum()

def probe_classmethod_backward():
    return M(), (torch.randn(2, 4),)
'''

NONE_INTO_DIV = '''
import torch

class Drop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        return None                     # no gradient for a: eager then skips a's DivBackward

@torch.compiler.disable
def drop(a):
    return Drop.apply(a)

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        y = self.w / 127
        y.register_hook(lambda g: None if g is None else g * 1)
        return drop(y).sum() + (x * self.w).sum()

def probe_none_into_div():
    return M(), (torch.randn(4),)
'''

# plain torch: the probe's training steps under compiled autograd; prints the exception's class, or "ok"
ORACLE = '''
import runpy, sys, torch
from torch._dynamo import compiled_autograd as ca
ns = runpy.run_path(sys.argv[1])
fn, args = ns[sys.argv[2]]()
eager = fn(*args)
eager.backward()
enable = getattr(ca, "_enable", None) or ca.enable
compiled = torch.compile(fn, backend="aot_eager")
try:
    with enable(torch.compile(backend="aot_eager")):
        for _ in range(3):
            compiled(*args).backward()
except Exception as e:
    print(type(e).__module__ + "." + type(e).__qualname__)
else:
    print("ok")
'''


def _plain_torch(tmp_path, probe_file, probe):
    oracle = tmp_path / "oracle.py"
    oracle.write_text(ORACLE)
    out = subprocess.run([sys.executable, str(oracle), str(probe_file), probe], capture_output=True, text=True,
                         timeout=300)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("source, probe, raised, cause", [
    (CLASSMETHOD_BACKWARD, "probe_classmethod_backward", "builtins.AssertionError", "classmethod"),
    (NONE_INTO_DIV, "probe_none_into_div", "torch._dynamo.exc.TorchRuntimeError", "generated"),
])
def test_torchs_own_failure_under_compiled_autograd_is_torchs(tracecheck, write_probe, tmp_path, source, probe,
                                                              raised, cause):
    path = write_probe(source)
    assert _plain_torch(tmp_path, path, probe) == raised  # plain torch: eager passes, compiled autograd raises this
    res = tracecheck("run", str(path), "--stages", "eager,compiled_autograd")
    assert res.returncode == 1, res.stdout
    st = res.probe(probe)["stages"]
    assert st["eager"]["status"] == "pass"
    failure = st["compiled_autograd"]["failure"]
    assert failure["kind"] == "torch-internal-error", failure
    assert failure["context"].get("cause") == cause
    assert failure["evidence"]["exception_type"].rsplit(".", 1)[-1] == raised.rsplit(".", 1)[-1]
    assert failure["evidence"]["torch_frame"]["file"]
    kinds = [f["kind"] for f in st["compiled_autograd"]["findings"]]
    assert "unknown" not in kinds
    # the hard error is not also reported as a graph break of the backward
    assert not any(f["kind"] == "graph-break" and f["evidence"].get("gb_code") == "GB4315"
                   for f in st["compiled_autograd"]["findings"])


GRADCHECK_FLOAT = '''
import torch

class Bad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.sum().item())          # a float, not a tensor
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2

def probe_float_saved():
    return (lambda x: Bad.apply(x)), (torch.randn(3, dtype=torch.double, requires_grad=True),)
'''


@pytest.mark.slow
def test_gradchecks_rerun_of_a_failing_function_is_the_eager_error(tracecheck, write_probe):
    path = write_probe(GRADCHECK_FLOAT)
    import runpy
    fn, args = runpy.run_path(str(path))["probe_float_saved"]()
    with pytest.raises(TypeError, match="save_for_backward can only save variables"):  # plain torch
        torch_gradcheck = __import__("torch").autograd.gradcheck
        torch_gradcheck(fn, args)
    res = tracecheck("run", str(path), "--stages", "eager,gradcheck")
    st = res.probe("probe_float_saved")["stages"]
    assert st["eager"]["failure"]["kind"] == "eager-error"
    kinds = [f["kind"] for f in st["gradcheck"]["findings"]]
    assert kinds and "unknown" not in kinds, kinds
    assert st["gradcheck"]["failure"]["context"]["first_seen_at"] == "eager"
