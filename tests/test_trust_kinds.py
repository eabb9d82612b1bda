"""Failures torch explains in its own words get a kind, not ``unknown`` (issue 38, items 3 and 4): a tensor subclass
under fake tensors, a gradient on another device than its parameter, vmap's NYI memory-format queries, and a custom
op's backward shape mismatch linked to opcheck's fake-mismatch; the message a finding shows; "report upstream" only
when no finding points at the probe's code; the live progress line never states a kind the final verdict contradicts.

Oracles: the recorded messages are torch 2.13.0's (reproduced here with plain torch in the end-to-end tests, which
call the same code under plain torch first and check that it raises); the expected kinds are written by hand.
"""
import dataclasses
import copy
import io
import json

import pytest
import torch
from rich.console import Console

from tracecheck.classify import attribute, detect, measured, settle
from tracecheck.render.live import LiveProgress
from tracecheck.model import taxonomy
from tracecheck.model.errors import ErrorRecord
from tracecheck.model.report import FAIL, PASS, Finding, StageResult
from tracecheck.render import terminal, view

# --- torch 2.13.0's recorded wording (each reproduced in the end-to-end tests below) ----------------------------
FAKE_ATTR = "'FakeTensor' object has no attribute 'CB'"
MAKE_SUBCLASS = ("Creating a new Tensor subclass Int8Params but the raw Tensor object is already associated to a python "
                 "object of type FakeTensor which is not a subclass of the requested type")
GRAD_DEVICE = ("attempting to assign a gradient with device type 'cpu' to a tensor with device type 'meta'. Please "
               "ensure that the gradient and the tensor are on the same device")
VMAP_NYI = {
    "NYI: querying is_contiguous inside of vmap for memory_format other than torch.contiguous_format": "memory_format",
    "NYI: Tensor.contiguous(...) inside of vmap for memory_format other than torch.contiguous_format": "memory_format",
    "NYI: Tensor.clone(memory_format) inside vmap is only supported with memory_format torch.preserve_format or "
    "torch.contiguous_format (got ChannelsLast)": "memory_format",
    "NYI: resize_ batch rule for batch dim != 0": "resize",
}
BWD_SHAPE_AUTOGRAD = ("backend='aot_eager' raised:\nRuntimeError: Mismatch in shape: grad_output[0] has a shape of "
                      "torch.Size([4, 16]) and output[0] has a shape of torch.Size([4, 32]).\n\nSet TORCHDYNAMO_VERBOSE=1 "
                      "for the internal stack trace")
BWD_SHAPE_NODE = ("backend='aot_eager' raised:\nRuntimeError: Function GeneratedBackwardFor_tk_bs_widen_defaultBackward "
                  "returned an invalid gradient at index 0 - got [4, 32] but expected shape compatible with [4, 16]\n\n"
                  "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
FAKE_OPCHECK = ("When comparing the output of tk_bs.widen.default on FakeTensor and concrete Tensors, found mismatched "
                "tensor metadata: Shapes torch.Size([4, 32]) and torch.Size([4, 16]) are not equal!")


def err(message, type_="RuntimeError", chain=None, **more):
    return {"type": type_, "message": message, "chain": chain or [{"type": type_, "message": message}], **more}


def backend_failed(message):
    inner = message.split("\n", 2)[1]
    return err(message, "torch._dynamo.exc.BackendCompilerFailed", phase="forward",
               chain=[{"type": "torch._dynamo.exc.BackendCompilerFailed", "message": message},
                      {"type": "RuntimeError", "message": inner.split(": ", 1)[1]}])


# --- recorded messages -> kinds ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stage, raw", [
    ("export", err(FAKE_ATTR, "AttributeError")),
    ("aot_eager", err("Dynamo failed to run FX node with fake tensors: call_function <built-in function matmul>"
                      f"(*(FakeTensor(..., size=(2, 4)),), **{{}}): got AttributeError(\"{FAKE_ATTR}\")",
                      "torch._dynamo.exc.TorchRuntimeError")),
    ("vmap", err(FAKE_ATTR, "AttributeError", transform="vmap")),
])
def test_a_subclass_attribute_read_under_fake_tensors(stage, raw):
    f = detect.classify_error(stage, raw)
    assert f.kind == "untraceable-tensor-state"
    assert (f.context.cause, f.context.attribute) == ("attribute", "CB")
    assert "self.register_buffer(\"CB\"" in taxonomy.fix_text(f)


PARAM_ATTR = "'FakeTensor' object has no attribute 'scale'"


def test_an_attribute_of_a_plain_parameter_is_not_called_a_subclass():
    """torch's words name the attribute only: a plain nn.Parameter with ``self.w.scale = 2.0`` (a Megatron/FSDP idiom)
    read under non-strict export raises the same AttributeError as a quantized subclass's ``CB``. The finding says
    neither, and its fix fits both."""
    f = detect.classify_error("export", err(PARAM_ATTR, "AttributeError"))
    assert f.kind == "untraceable-tensor-state" and f.context.attribute == "scale"
    assert "a plain tensor, a parameter or a tensor subclass" in f.summary
    assert "subclass keeps" not in f.summary and "subclass's" not in f.summary
    fix = taxonomy.fix_text(f)
    assert "register_buffer" in fix and "passed as an argument" in fix and "wrapper subclass" in fix
    kind = taxonomy.kinds()["untraceable-tensor-state"]
    assert "subclass" not in kind.title.split("(")[0]  # the title holds for a plain parameter too


def test_a_subclass_made_from_a_fake_tensor():
    f = detect.classify_error("export", err(MAKE_SUBCLASS))
    assert f.kind == "untraceable-tensor-state"
    assert (f.context.cause, f.context.subclass, f.context.wrapper) == ("make_subclass", "Int8Params", "FakeTensor")
    assert "Int8Params" in f.summary and "Int8Params" in taxonomy.fix_text(f)


def test_a_gradient_on_another_device_than_its_parameter():
    for stage in ("eager", "aot_eager", "compiled_autograd"):
        f = detect.classify_error(stage, err(GRAD_DEVICE))
        assert f.kind == "device-mismatch", stage
        assert (f.context.grad_device, f.context.param_device) == ("cpu", "meta")
        assert "`cpu`" in f.summary and "`meta`" in f.summary


@pytest.mark.parametrize("message, cause", list(VMAP_NYI.items()))
def test_vmap_nyi_queries_are_functorch_refusals(message, cause):
    f = measured.transform_error_finding("vmap", ErrorRecord.of({"type": "RuntimeError", "message": message,
                                                               "phase": "forward", "transform": "vmap", "functions": []}))
    assert f.kind == "functorch-incompatible"
    assert f.context.cause == cause
    assert "memory_format" in taxonomy.fix_text(f) or "resize_" in taxonomy.fix_text(f)
    # the probe's own torch.vmap, raised in eager: the traceback names the transform
    tb = 'File "/x/torch/_functorch/vmap.py", line 1, in _flat_vmap\n'
    assert detect.classify_error("eager", err(message, traceback=tb)).kind == "functorch-incompatible"


def _bwd_stages(message):
    aot = detect.classify_error("aot_eager", backend_failed(message))
    assert aot.kind == "backend-error"  # alone, the stage cannot tell whose shape is wrong
    fake = detect.classify_error("opcheck", err(FAKE_OPCHECK, "torch._subclasses.fake_tensor.MetadataMismatchError",
                                                phase="test_faketensor"), op="tk_bs.widen.default")
    fake.evidence = dataclasses.replace(fake.evidence, opcheck_test="test_faketensor")
    assert fake.kind == "fake-mismatch"
    return {"aot_eager": StageResult("aot_eager", FAIL, failure=aot, findings=[aot]),
            "opcheck": StageResult("opcheck", FAIL, failure=fake, findings=[fake])}


@pytest.mark.parametrize("message, grad, out", [
    (BWD_SHAPE_AUTOGRAD, "torch.Size([4, 16])", "torch.Size([4, 32])"),
    (BWD_SHAPE_NODE, "[4, 32]", "[4, 16]"),
])
def test_a_backward_shape_mismatch_is_the_fake_mismatch_opcheck_found(message, grad, out):
    stages = _bwd_stages(message)
    stages = settle.attributed(stages)
    f = stages["aot_eager"].failure
    assert f.kind == "fake-mismatch" and f.context.cause == "backward_shape"
    assert f.context.op == "tk_bs::widen"
    assert grad in f.summary and out in f.summary and "tk_bs::widen" in f.summary
    fix = taxonomy.fix_text(f)
    assert "fake impl of tk_bs::widen" in fix and "upstream" not in fix and "Not a torch bug" in fix
    assert "opcheck's test_faketensor found it" in f.summary
    # without opcheck's finding nothing links it: it stays the backend's error
    alone = {"aot_eager": _bwd_stages(message)["aot_eager"]}
    alone = settle.attributed(alone)
    assert alone["aot_eager"].failure.kind == "backend-error"


@pytest.mark.parametrize("message, cause", [
    # a dtype mismatch cannot make a backward's shapes disagree
    ("When comparing the output of tk_bs.widen.default on FakeTensor and concrete Tensors, found mismatched tensor "
     "metadata: Dtypes torch.float32 and torch.float64 are not equal!", None),
    # a fake that raises says nothing of shapes
    ("fake impl raised", "raises"),
])
def test_a_fake_mismatch_not_about_shapes_is_not_linked(message, cause):
    stages = _bwd_stages(BWD_SHAPE_AUTOGRAD)
    fake = stages["opcheck"].failure
    other = Finding("fake-mismatch", fake.summary, dataclasses.replace(fake.context, cause=cause) if cause else fake.context,
                    dataclasses.replace(fake.evidence, message=message))
    stages["opcheck"] = StageResult("opcheck", FAIL, failure=other, findings=[other])
    stages = settle.attributed(stages)
    assert stages["aot_eager"].failure.kind == "backend-error"


def test_a_backward_shape_links_only_the_op_it_can_be():
    # the node names another op: not linked to tk_bs::widen
    stages = _bwd_stages(BWD_SHAPE_NODE.replace("tk_bs_widen_default", "tk_bs_narrow_default"))
    stages = settle.attributed(stages)
    assert stages["aot_eager"].failure.kind == "backend-error"
    # autograd's words name no op, and the probe calls two custom ops: which fake is wrong is unknown
    stages = _bwd_stages(BWD_SHAPE_AUTOGRAD)
    stages["opcheck"].extra["opcheck"] = {"tk_bs.widen.default": {"test_faketensor": "FAIL"},
                                          "tk_bs.narrow.default": {"test_faketensor": "SUCCESS"}}
    stages = settle.attributed(stages)
    assert stages["aot_eager"].failure.kind == "backend-error"
    # found by the dynamic stage's fake check, not opcheck: said so
    stages = _bwd_stages(BWD_SHAPE_AUTOGRAD)
    fake = stages.pop("opcheck").failure
    fake.evidence = dataclasses.replace(fake.evidence, opcheck_test=None)
    stages["compile_check"] = StageResult("compile_check", FAIL, failure=fake, findings=[fake])
    stages = settle.attributed(stages)
    f = stages["aot_eager"].failure
    assert f.kind == "fake-mismatch" and "the compile_check stage found it" in f.summary and "opcheck's" not in f.summary


# --- the message shown -------------------------------------------------------------------------------------------
def _shown(f):
    """The terminal's short block of one finding (render/cause.sighting laid out by terminal.finding_text)."""
    from tracecheck.model.report import ProbeReport
    from tracecheck.render import cause

    p = ProbeReport("m.py::probe", "/m/m.py", "probe", {"aot_eager": StageResult("aot_eager", FAIL, failure=f, findings=[f])})
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(terminal.finding_text(cause.sighting(p, ["aot_eager"], f), verbose=False))
    return console.file.getvalue()


def test_the_message_shown_is_the_root_cause_not_the_wrapper_header():
    f = detect.classify_error("aot_eager", backend_failed(BWD_SHAPE_AUTOGRAD))
    assert f.evidence.headline().startswith("RuntimeError: Mismatch in shape: grad_output[0]")
    lines = [ln.strip() for ln in _shown(f).splitlines()]
    assert any(ln.startswith("message: RuntimeError: Mismatch in shape") for ln in lines), lines
    assert "message: backend='aot_eager' raised:" not in lines


def test_a_typeerror_finding_shows_its_message():
    """NumPy reading activations under torch.compile: a TypeError, kind data-dependent by its line."""
    f = Finding("data-dependent", "Control flow or an output shape depends on tensor data.", {},
                {"exception_type": "TypeError", "exception_chain": ["TypeError"],
                 "message": "only 0-dimensional arrays can be converted to Python scalars"})
    assert "message: only 0-dimensional arrays can be converted to Python scalars" in _shown(f)


# --- "report upstream" -------------------------------------------------------------------------------------------
def _upstream_stages(*others):
    aot = detect.classify_error("aot_eager", backend_failed(BWD_SHAPE_AUTOGRAD))
    stages = {f"s{i}": StageResult(f"s{i}", FAIL, failure=o, findings=[o]) for i, o in enumerate(others)}
    stages["aot_eager"] = StageResult("aot_eager", FAIL, failure=aot, findings=[aot])
    stages = settle.attributed(stages)
    return stages["aot_eager"], aot


def test_report_upstream_only_when_no_finding_points_at_the_probes_code():
    from tracecheck.fix import repro

    alone, _ = _upstream_stages()
    assert "report upstream" in taxonomy.fix_text(alone.failure)
    assert repro.owner(alone.failure, "m.py").party == repro.TORCH

    # a custom op's fake that lies to the tracer can make the backend fail: fix it first
    fake = Finding("fake-mismatch", "fake", {"op": "tk::f"}, {"opcheck_test": "test_faketensor",
                                                             "message": "Dtypes torch.float32 and torch.int64 are not equal!"})
    suspect, before = _upstream_stages(fake)
    fix = taxonomy.fix_text(suspect.failure)
    assert "upstream" not in fix and "fake-mismatch of tk::f" in fix
    assert suspect.failure is not before and before.context.cause is None  # a new finding, the old one unchanged
    owner = repro.owner(suspect.failure, "m.py")
    assert owner.party == repro.UNPLACED and "fake-mismatch of tk::f" in owner.why  # never "torch's, for upstream"
    # the probe's own eager failure, placed: named by its line
    eager = Finding("eager-error", "e", {}, {"user_frame": {"file": "/m/model.py", "line": 7, "code": "x.foo()"}})
    assert "/m/model.py:7" in taxonomy.fix_text(_upstream_stages(eager)[0].failure)


def test_a_graph_break_or_torchs_own_error_does_not_silence_report_upstream():
    """Most models have a graph break somewhere: a break at an unrelated line is no suspect for a backend's bug, nor is
    torch's own internal error (its frame is torch's)."""
    brk = Finding("graph-break", "a break", {"gb_type": "x"},
                  {"user_frame": {"file": "/m/model.py", "line": 7, "code": "print(x)"}})
    internal = Finding("torch-internal-error", "torch", {"exception": "AssertionError: x", "torch_frame": "t"},
                       {"user_frame": {"file": "/m/model.py", "line": 9, "code": "y = f(x)"}})
    advice = Finding("opaque-op", "opaque", {"op": "tk::g"}, {"user_frame": {"file": "/m/model.py", "line": 3}})
    f = _upstream_stages(brk, internal, advice)[0].failure
    assert f.context.cause is None and "report upstream" in taxonomy.fix_text(f)


# --- the live progress line --------------------------------------------------------------------------------------
def test_the_live_line_never_states_a_kind_the_final_verdict_contradicts():
    from tracecheck import api
    from tracecheck.model.report import ProbeReport

    unknown = detect.classify_error("opcheck", err("fake not written yet", "RuntimeError",
                                                   user_frame={"file": "/m/model.py", "line": 3, "code": "ext.fwd(x)"}))
    assert unknown.kind == "unknown"
    pyb = Finding("pybind-builtin", "cannot trace", {"builtin": "ext.fwd"},
                  {"user_frame": {"file": "/m/model.py", "line": 3, "code": "ext.fwd(x)"}})
    p = ProbeReport("m.py::probe_a", "m.py", "probe_a", stages={
        "opcheck": StageResult("opcheck", FAIL, failure=unknown, findings=[unknown])})
    verdicts = api._Verdicts(api.Progress(), set(), False)
    verdicts.waiting = {p.id: {"opcheck", "explain"}}
    shown = api._as_settled(p, "opcheck", verdicts)  # explain still running: the kind is pending
    assert shown.notes.kind_pending is True

    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    live = LiveProgress(console)
    live.finished(p.id, shown)
    line = console.file.getvalue()
    assert "[opcheck]" in line and "unknown" not in line and "kind pending" in line

    p.stages["explain"] = StageResult("explain", FAIL, failure=pyb, findings=[pyb])  # now explain has finished
    verdicts.waiting = {p.id: {"opcheck"}}
    shown = api._as_settled(p, "opcheck", verdicts)
    assert shown.failure.kind == "pybind-builtin" and not shown.notes.kind_pending
    assert p.stages["opcheck"].failure.kind == "unknown"  # the live view is a copy: the run's records unchanged


# --- end to end: plain torch first (the oracle), then tracecheck -------------------------------------------------
SUBCLASS_PROBE = '''
import torch


class Int8Params(torch.Tensor):
    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data, False)

    def __init__(self, data):
        self.CB = data


class QLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", Int8Params(torch.randn(8, 4)))     # a quantized weight

    def forward(self, x):
        return x @ self.weight.CB.t()


def probe_qlinear():
    return QLinear(), (torch.randn(2, 4),)
'''

FIXED_SUBCLASS_PROBE = SUBCLASS_PROBE.replace('''        self.register_buffer("weight", Int8Params(torch.randn(8, 4)))     # a quantized weight''',
                                              '''        self.register_buffer("CB", Int8Params(torch.randn(8, 4)).CB)''').replace(
    "self.weight.CB", "self.CB")

GRAD_DEVICE_PROBE = '''
import torch


def step(x):
    p = torch.nn.Parameter(torch.empty(4, device="meta"))
    p.grad = torch.zeros(4)            # on the CPU
    return x * 2


def probe_meta_step():
    return step, (torch.randn(4),)
'''

VMAP_PROBE = '''
import torch


def f(x):
    if x.is_contiguous(memory_format=torch.channels_last):
        return x * 2
    return x * 3


def probe_channels_last():
    return f, (torch.randn(2, 3, 4, 5),)
'''

BWD_PROBE = '''
import torch


@torch.library.custom_op("tc_trust::widen", mutates_args=())
def widen(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@widen.register_fake
def _(x):
    return x.new_empty(x.shape[0], x.shape[1] * 2)       # the kernel keeps the last dim: 16, not 32


def _setup(ctx, inputs, output):
    pass


def _bwd(ctx, g):
    return g


widen.register_autograd(_bwd, setup_context=_setup)


def probe_widen():
    return (lambda x: widen(x) * 1.0), (torch.randn(4, 16, requires_grad=True),)
'''


def _load(path):
    ns = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns


def test_e2e_subclass_attribute_under_export(tracecheck, write_probe):
    path = write_probe(SUBCLASS_PROBE)
    model, args = _load(path)["probe_qlinear"]()
    model(*args)  # eager runs
    with pytest.raises(AttributeError, match="'FakeTensor' object has no attribute 'CB'"):
        torch.export.export(model, args)  # plain torch: export raises
    res = tracecheck("run", str(path), "--stages", "eager,export")
    export = res.probe("probe_qlinear")["stages"]["export"]
    assert export["failure"]["kind"] == "untraceable-tensor-state", json.dumps(export["failure"])[:2000]
    assert export["failure"]["context"]["attribute"] == "CB"


PARAM_ATTR_PROBE = '''
import torch


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))
        self.w.scale = 2.0                       # a Python attribute on a plain parameter (Megatron/FSDP idiom)

    def forward(self, x):
        return x * self.w * self.w.scale


def probe_param_attr():
    return Scaled(), (torch.randn(4),)
'''


def test_e2e_plain_parameter_attribute_under_export(tracecheck, write_probe):
    path = write_probe(PARAM_ATTR_PROBE)
    model, args = _load(path)["probe_param_attr"]()
    assert type(model.w) is torch.nn.Parameter  # no subclass anywhere
    model(*args)  # eager runs
    with pytest.raises(AttributeError, match="'FakeTensor' object has no attribute 'scale'"):
        torch.export.export(model, args, strict=False)  # plain torch: non-strict export raises
    res = tracecheck("run", str(path), "--stages", "eager,export")
    failure = res.probe("probe_param_attr")["stages"]["export"]["failure"]
    assert failure["kind"] == "untraceable-tensor-state", json.dumps(failure)[:2000]
    assert failure["context"]["attribute"] == "scale"
    assert "subclass keeps" not in failure["summary"] and "a parameter" in failure["summary"]


def test_e2e_the_documented_subclass_fix_exports(write_probe):
    model, args = _load(write_probe(FIXED_SUBCLASS_PROBE, "fixed.py"))["probe_qlinear"]()
    ep = torch.export.export(model, args)
    torch.testing.assert_close(ep.module()(*args), model(*args))


def test_e2e_gradient_on_another_device(tracecheck, write_probe):
    path = write_probe(GRAD_DEVICE_PROBE)
    fn, args = _load(path)["probe_meta_step"]()
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with device type 'cpu'"):
        fn(*args)  # plain torch
    res = tracecheck("run", str(path), "--stages", "eager")
    eager = res.probe("probe_meta_step")["stages"]["eager"]
    assert eager["failure"]["kind"] == "device-mismatch"
    assert eager["failure"]["context"]["param_device"] == "meta"


def test_e2e_vmap_nyi_memory_format(tracecheck, write_probe):
    path = write_probe(VMAP_PROBE)
    fn, args = _load(path)["probe_channels_last"]()
    with pytest.raises(RuntimeError, match="NYI: querying is_contiguous inside of vmap"):
        torch.vmap(fn)(torch.stack([args[0], args[0]]))  # plain torch
    res = tracecheck("run", str(path), "--stages", "eager,vmap")
    vmap = res.probe("probe_channels_last")["stages"]["vmap"]
    kinds = {(f["kind"], f["context"].get("cause")) for f in vmap["findings"]}
    assert ("functorch-incompatible", "memory_format") in kinds, kinds


def test_e2e_custom_op_backward_shape_is_the_fake_mismatch(tracecheck, write_probe):
    path = write_probe(BWD_PROBE)
    fn, args = _load(path)["probe_widen"]()
    fn(*args).sum().backward()  # eager runs
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="invalid gradient|Mismatch in shape"):
        torch.compile(fn, backend="aot_eager")(*(a.detach().requires_grad_() for a in args)).sum().backward()
    res = tracecheck("run", str(path), "--stages", "eager,aot_eager,opcheck", "-j", "1", json_report=True)
    st = res.probe("probe_widen")["stages"]
    aot = st["aot_eager"]["failure"]
    assert aot["kind"] == "fake-mismatch" and aot["context"]["op"] == "tc_trust::widen", aot
    assert aot["context"]["cause"] == "backward_shape" and "[4, 16]" in aot["summary"]
    assert {f["kind"] for f in st["opcheck"]["findings"]} >= {"fake-mismatch"}
    out = res.stdout + res.stderr
    assert "message: backend='aot_eager' raised:" not in out
    assert "report upstream" not in out
    # the live lines (not a terminal: one per finished stage) never say backend-error for aot_eager
    live = [ln for ln in res.stderr.splitlines() if "probe_widen [aot_eager]" in ln]
    assert live and all("backend-error" not in ln for ln in live), live


# --- the root cause's message, from real exceptions ----------------------------------------------------------------
def _raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the test inspects whatever was raised
        return e
    raise AssertionError("expected an exception")


def _finding_for(exc, stage="aot_eager"):
    from tracecheck.evidence.exceptions import error_record
    return detect.classify_error(stage, error_record(exc, "forward"))


def test_a_backends_own_error_is_shown_by_its_root_not_the_wrapper():
    """torch.compile with a backend that raises: torch wraps it in BackendCompilerFailed (``inner_exception``)."""
    def bad_backend(gm, example_inputs):
        raise ValueError("the backend's own words\nsecond line")

    exc = _raised(lambda: torch.compile(lambda x: x.sin() + 1, backend=bad_backend)(torch.randn(3)))
    inner = exc.inner_exception  # the oracle: torch's own exception object
    f = _finding_for(exc)
    assert f.evidence.headline() == f"{type(inner).__name__}: {str(inner).splitlines()[0]}"
    assert "backend=" not in f.evidence.headline()


def test_raise_from_out_of_torchs_wrapper_shows_the_cause_and_a_handled_context_does_not_replace_the_error():
    from torch._dynamo.exc import TorchRuntimeError

    def wrapped():
        try:
            raise KeyError("the real reason")
        except KeyError as e:
            raise TorchRuntimeError("Failed running call_function foo") from e  # torch's wrapper, raised from

    def handled():
        try:
            {}["cache miss"]
        except KeyError:
            raise ValueError("shape [4, 16] does not match [4, 32]")

    assert _finding_for(_raised(wrapped)).evidence.headline() == "KeyError: 'the real reason'"
    assert _finding_for(_raised(handled)).evidence.headline() == "shape [4, 16] does not match [4, 32]"


def test_an_exception_that_says_more_than_its_cause_keeps_its_own_words():
    """Inductor's CppCompileError, raised from the compiler's CalledProcessError (torch/_inductor/cpp_builder.py), and
    a user's ValueError raised from a KeyError: their own message is the useful one, not the cause's."""
    import subprocess

    from torch._inductor.exc import CppCompileError

    def compile_failed():
        try:
            raise subprocess.CalledProcessError(1, ["g++", "x.cpp"])
        except subprocess.CalledProcessError as e:
            raise CppCompileError(["g++", "x.cpp"], "x.cpp:3: error: 'foo' was not declared in this scope") from e

    def users_own():
        try:
            {}["rank"]
        except KeyError as e:
            raise ValueError("input must be 4-D") from e

    exc = _raised(compile_failed)
    own_first = next(ln.strip() for ln in str(exc).splitlines() if ln.strip())  # the oracle: torch's own words
    assert _finding_for(exc, "inductor").evidence.headline() == own_first and "CalledProcessError" not in own_first
    assert _finding_for(_raised(users_own)).evidence.headline() == "input must be 4-D"


def test_a_graph_break_keeps_dynamos_own_account_of_why():
    """fullgraph=True on a data-dependent branch: Dynamo's Unsupported is the root cause even when raised from an
    internal exception; its first line is what plain torch prints first."""
    def branchy(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    exc = _raised(lambda: torch.compile(branchy, backend="eager", fullgraph=True)(torch.randn(3)))
    f = _finding_for(exc, "fullgraph")
    plain_first = next(ln.strip() for ln in str(exc).splitlines() if ln.strip())
    assert f.evidence.headline() == plain_first


# --- "register a backward" only where a gradient flows through the op ---------------------------------------------
TOPK_PROBE = '''
import torch


@torch.library.custom_op("tc_trust_topk::topk_idx", mutates_args=())
def topk_idx(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    v, i = torch.topk(x, k, dim=-1)
    return v.clone(), i.clone()


@topk_idx.register_fake
def _(x, k):
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.long)
# no register_autograd: the router below differentiates only through gather, never through the op


class Router(torch.nn.Module):
    def __init__(self, use_values=False):
        super().__init__()
        self.gate = torch.nn.Linear(16, 8)
        self.proj = torch.nn.Linear(16, 16)
        self.use_values = use_values

    def forward(self, x):
        scores = self.gate(x)
        values, idx = topk_idx(scores, 2)
        w = values if self.use_values else torch.gather(scores.softmax(-1), -1, idx)
        return self.proj(x) * w.sum(-1, keepdim=True)


def probe_indices_only():
    torch.manual_seed(0)
    return Router(), (torch.randn(4, 16),)


def probe_through_values():
    torch.manual_seed(0)
    return Router(use_values=True), (torch.randn(4, 16),)
'''


def test_e2e_an_op_no_gradient_reaches_is_not_told_to_register_a_backward(tracecheck, write_probe):
    path = write_probe(TOPK_PROBE)
    ns = _load(path)
    # plain torch, the oracle: with indices only, eager trains and aot_eager's gradients equal eager's; opcheck on
    # the op itself (its inputs requiring grad) still fails, as tracecheck's opcheck stage saw before
    model, (x,) = ns["probe_indices_only"]()
    model(x).sum().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.compile(model, backend="aot_eager")(x).sum().backward()
    assert all(torch.allclose(a, p.grad) for a, p in zip(eager, model.parameters()))
    scores = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(Exception, match="no autograd formula was registered"):
        torch.library.opcheck(ns["topk_idx"], (scores, 2))
    # through the values, eager's own backward raises: the op needs its backward there
    model, (x,) = ns["probe_through_values"]()
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        model(x).sum().backward()

    res = tracecheck("run", str(path), "--stages", "eager,aot_eager,opcheck,gradcheck")
    only = res.probe("probe_indices_only")["stages"]
    assert only["opcheck"]["status"] == "pass" and only["aot_eager"]["status"] == "pass", json.dumps(only)[:3000]
    assert only["gradcheck"]["status"] in ("pass", "skip") and not only["gradcheck"].get("findings")
    said = " ".join(only["opcheck"].get("not_checked") or only["opcheck"].get("extra", {}).get("not_checked", []))
    assert "no gradient reaches the op's outputs" in said, json.dumps(only["opcheck"])[:3000]
    through = res.probe("probe_through_values")["stages"]
    assert through["eager"]["failure"]["kind"] == "missing-autograd"
    assert through["opcheck"]["failure"]["kind"] == "missing-autograd"


# --- a generic graph break named by the vmap stage at the same line ----------------------------------------------
DATA_PTR_PROBE = '''
import torch


def aligned(x):
    return x * 2 if x.data_ptr() % 16 == 0 else x.clone()


def probe_data_ptr():
    return aligned, (torch.randn(4, 8),)
'''


def test_e2e_a_generic_break_gets_the_construct_vmap_names_at_its_line(tracecheck, write_probe):
    path = write_probe(DATA_PTR_PROBE)
    fn, (x,) = _load(path)["probe_data_ptr"]()
    # plain torch, the oracle: fullgraph refuses the line, and vmap refuses it for its data pointer
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(fn, backend="eager", fullgraph=True)(x)
    with pytest.raises(RuntimeError, match="Cannot access data pointer of Tensor that doesn't have storage"):
        torch.func.vmap(fn)(x.unsqueeze(0))
    res = tracecheck("run", str(path), "--stages", "eager,fullgraph,vmap")
    stages = res.probe("probe_data_ptr")["stages"]
    brk = stages["fullgraph"]["failure"]
    assert brk["kind"] == "graph-break" and brk["context"]["cause"] == "named_by_transform", json.dumps(brk)[:2000]
    assert brk["evidence"]["user_frame"]["code"].startswith("return x * 2 if x.data_ptr()")
    fix = taxonomy.fix_text(Finding(brk["kind"], brk["summary"], brk["context"], brk["evidence"]))
    assert "data pointer" in brk["summary"] and "x.is_contiguous()" in fix
    assert "vmap" not in fix.split("too", 1)[1] and "batching rule" not in fix  # Dynamo's terms, not torch.func's


def test_a_break_elsewhere_or_with_its_own_hints_keeps_its_advice():
    frame = {"file": "/m/model.py", "line": 7, "code": "x.data_ptr()"}
    vmap = Finding("functorch-incompatible", "v", {"cause": "storage"}, {"user_frame": frame})
    other_line = Finding("graph-break", "b", {"gb_type": "Observed exception"}, {"user_frame": {**frame, "line": 9}})
    hinted = Finding("graph-break", "b", {"gb_type": "x", "cause": "hints", "hints": "do y."}, {"user_frame": frame})
    stages = {"vmap": StageResult("vmap", FAIL, failure=vmap, findings=[vmap]),
              "explain": StageResult("explain", FAIL, failure=other_line, findings=[other_line, hinted])}
    stages = settle.applied(stages, attribute.named_by_transform(stages))
    assert [f.context.cause for f in stages["explain"].findings] == [None, "hints"]
    # the same line, no cause of its own: named, and the stage's failure is the new finding
    same = Finding("graph-break", "b", {"gb_type": "Observed exception"}, {"user_frame": frame})
    stages["fullgraph"] = StageResult("fullgraph", FAIL, failure=same, findings=[same])
    stages = settle.applied(stages, attribute.named_by_transform(stages))
    named = stages["fullgraph"].failure
    assert named is stages["fullgraph"].findings[0] and named.context.cause == "named_by_transform"
    assert "data pointer" in named.summary and "torch.library.custom_op" in taxonomy.fix_text(named)


@pytest.mark.parametrize("in_fn", [True, False])
def test_a_constant_args_c_call_is_not_offered_tracecheck_fix(in_fn, tmp_path):
    """pywt's Modes.from_object('zero'): the fix is to keep a constant, not a custom op; `tracecheck fix` (which
    generates custom ops) declines it, so `next:` must not offer it (it did, with -o/--diff)."""
    model = tmp_path / "model.py"
    model.write_text("import ext\n\ndef f(x):\n    return x * ext.mode('zero')\n")
    frame = {"file": str(model), "line": 4, "code": "return x * ext.mode('zero')"}
    ctx = {"builtin": "ext.mode", "in_autograd_function": in_fn}
    constant = Finding("pybind-builtin", "c", {**ctx, "cause": "constant_args", "args": "'zero'"}, {"user_frame": frame})
    assert not terminal._generated(constant, str(model))
    assert not taxonomy.needs_registration_fix(constant, str(model))
    assert not taxonomy.rewrites_model_code(constant, str(model))
    # the same call on a tensor is the custom-op case tracecheck fix answers
    assert terminal._generated(Finding("pybind-builtin", "c", ctx, {"user_frame": frame}), str(model))


# --- issue 52, item 1: the fake blamed at the fake, in its most common form -----------------------------------------
WRONG_FAKE = """
import torch


@torch.library.custom_op("tc_fk52::linear", mutates_args=())
def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.t()


@linear.register_fake
def _(x, w):
    return torch.empty_like(x)  # wrong: the last dim is w.size(0)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    x, w = ctx.saved_tensors
    return g @ w, g.t() @ x


linear.register_autograd(_backward, setup_context=_setup)


def probe_linear():
    return linear, (torch.randn(4, 32, requires_grad=True), torch.randn(16, 32, requires_grad=True))
"""


def test_e2e_a_wrong_fake_is_blamed_at_the_fake_not_the_backward_that_tripped_on_it(tracecheck, write_probe):
    """A fake returning ``empty_like(x)`` for ``x @ w.t()``, a correct backward ``(g @ w, g.t() @ x)``: plain torch
    runs it eagerly, and compiling it fails on a shape (AOTAutograd traces the backward with the fake's shape);
    opcheck finds the fake's shape wrong. Every traced stage that fails so is ``fake-mismatch`` at the fake's def
    (not ``backend-error`` at the backward's line), the dynamic stage's symbolic size included."""
    path = write_probe(WRONG_FAKE)
    fn, args = _load(path)["probe_linear"]()
    fn(*args).sum().backward()  # eager runs (the oracle: the user's backward is right)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="reduction dim|shape|size"):
        torch.compile(fn, backend="aot_eager")(*(a.detach().requires_grad_() for a in args)).sum().backward()
    with pytest.raises(Exception, match="Shapes torch.Size"):
        torch.library.opcheck(torch.ops.tc_fk52.linear.default, [a.detach() for a in args],
                              test_utils="test_faketensor")
    res = tracecheck("run", str(path), "--stages", "eager,aot_eager,opcheck,dynamic", "-j", "2", json_report=True)
    st = res.probe("probe_linear")["stages"]
    text = path.read_text().splitlines()
    fake_def = text.index("def _(x, w):") + 1
    backward_line = text.index("    return g @ w, g.t() @ x") + 1
    for stage in ("aot_eager", "dynamic"):
        f = st[stage]["failure"]
        assert f["kind"] == "fake-mismatch", (stage, f["kind"], f["summary"])
        assert f["context"]["cause"] == "downstream_shape" and f["context"]["op"] == "tc_fk52::linear"
        assert f["evidence"]["user_frame"]["line"] == fake_def, f["evidence"]["user_frame"]
        assert f["context"]["tripped_at"].endswith(f"model.py:{backward_line}")  # evidence, not the location
        # both shapes, the fake's and the kernel's, written by hand from the op: x [4, 32], out [4, 16]
        assert "the fake returns torch.Size([4, 32]), the kernel torch.Size([4, 16])" in f["summary"], f["summary"]
    assert st["opcheck"]["failure"]["evidence"]["user_frame"]["line"] == fake_def
    assert "backend-error" not in res.stdout
    assert f"model.py:{fake_def}  (" in res.stdout and f"model.py:{backward_line}  (" not in res.stdout
