"""Half-precision numerics (issue 38): eager-bf16 and compiled-bf16 are judged against a higher-precision run of the
same inputs and weights, as torch._dynamo.utils.same(..., fp64_ref=...) does, never by allclose alone; and one
graph break is located at the same user or library frame in every stage (never at ``<frozen genericpath>``)."""
import json
import subprocess
import sys
import textwrap

import pytest

from tracecheck.classify import detect
from tracecheck.evidence import exceptions, tracelog

#: A 2-layer SwiGLU stack in bfloat16 (RMSNorm in float32, as the mHC model's) whose gate is a custom op with no
#: float64 kernel: the case of the mHC probes, whose CANN-shaped kernels take bf16/fp16/fp32 only. Inductor fuses
#: the elementwise ops and rounds once where eager rounds after each op: compiled and eager differ by a bf16 ulp or
#: two, and gradients summed over 128 tokens are not allclose at bf16's tol 1e-2.
MODULE = """
import torch
from torch import nn

DTYPES = {"gate": (torch.bfloat16, torch.float16, torch.float32), "gate_half": (torch.bfloat16, torch.float16)}


def _define(name):
    @torch.library.custom_op(f"tc_half::{name}", mutates_args=())
    def gate(x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in DTYPES[name]:  # a kernel without a float64 path (and, for gate_half, no float32 one)
            raise RuntimeError(f"{name}: x must be one of {DTYPES[name]}, got {x.dtype}")
        return torch.sigmoid(x.float()).to(x.dtype)

    @gate.register_fake
    def _(x):
        return torch.empty_like(x)

    def backward(ctx, g):
        y = ctx.saved_tensors[0].float()
        return (g.float() * y * (1 - y)).to(g.dtype)

    gate.register_autograd(backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))
    return gate


GATES = {name: _define(name) for name in DTYPES}


class Block(nn.Module):
    def __init__(self, d, h, gate):
        super().__init__()
        self.gate = gate
        self.w1 = nn.Linear(d, h, bias=False)
        self.w3 = nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d, bias=False)
        self.norm = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm.float()).to(x.dtype)
        return x + self.w2(nn.functional.silu(self.w1(y)) * GATES[self.gate](self.w3(y)))


class Stack(nn.Module):
    def __init__(self, gate="gate", wrong_when_compiled=False, d=64, h=128, layers=2):
        super().__init__()
        self.wrong = wrong_when_compiled
        self.layers = nn.ModuleList(Block(d, h, gate) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        if self.wrong == "sign" and torch.compiler.is_compiling():
            x = -x  # a gross bug: the compiled result has its sign flipped
        elif self.wrong and torch.compiler.is_compiling():
            x = x * 1.05  # a real bug: the compiled result is 5% off
        return x


def make(dtype=torch.bfloat16, **kw):
    torch.manual_seed(0)
    model = Stack(**kw).to(dtype)
    x = torch.randn(4, 32, 64, dtype=dtype, requires_grad=True)
    return model, x


def probe_bf16_stack():
    model, x = make()
    return model, (x,)


def probe_bf16_stack_wrong():
    model, x = make(wrong_when_compiled=True)
    return model, (x,)


def probe_bf16_stack_no_reference():
    model, x = make(gate="gate_half")
    return model, (x,)


def probe_bf16_stack_no_reference_wrong():
    model, x = make(gate="gate_half", wrong_when_compiled="sign")
    return model, (x,)
"""

#: the oracle: plain torch.compile (inductor) and eager in bfloat16, and the same model and input in float32, one
#: forward and backward each (the loss is the sum of the output, as tracecheck's); prints same()'s verdict
ORACLE = """
import importlib.util, json, sys
import torch
from torch._dynamo.utils import same

spec = importlib.util.spec_from_file_location("half_model", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)


def run(dtype, compiled=False):
    model, x = m.make(dtype)
    fn = torch.compile(model, backend="inductor") if compiled else model
    torch.manual_seed(0)
    out = fn(x)
    out.float().sum().backward()
    return [out.detach()] + [p.grad.detach() for p in model.parameters()] + [x.grad.detach()]


eager, compiled, ref32 = run(torch.bfloat16), run(torch.bfloat16, True), run(torch.float32)
ref = [r.double() for r in ref32]  # same() runs its RMSE check only against a float64-typed reference
rel = lambda t, r: float((t.double() - r).norm() / r.norm())
print(json.dumps({
    "same": bool(same(eager, compiled, fp64_ref=ref, tol=1e-2)),
    "allclose": [bool(torch.allclose(e, c, rtol=1e-2, atol=1e-2)) for e, c in zip(eager, compiled)],
    "max_ulps": max(float(((e.double() - c.double()).abs() / (2.0 ** (torch.frexp(e.double())[1] - 8).double()))
                          .max()) for e, c in zip(eager, compiled)),
    "rel_eager": sum(rel(e, r) for e, r in zip(eager, ref)) / len(ref),
    "rel_compiled": sum(rel(c, r) for c, r in zip(compiled, ref)) / len(ref),
}))
"""


def _inductor(res, name):
    return res.probe(name)["stages"]["inductor"]


def _kinds(stage):
    return [f["kind"] for f in stage["findings"]]


@pytest.mark.slow
def test_bf16_rounding_noise_is_not_a_numeric_mismatch(tracecheck, write_probe, tmp_path):
    """(a) Compiled and eager bf16 differ by bf16 rounding, not allclose at tol 1e-2, and the model has no float64
    kernel: against a float32 reference both are equally close, and same(eager, compiled, fp64_ref=float32 reference)
    says they agree. tracecheck says so too (it used to judge by allclose and blame the backend)."""
    path = write_probe(MODULE)
    oracle = subprocess.run([sys.executable, "-c", ORACLE, str(path)], capture_output=True, text=True, timeout=600,
                            cwd=tmp_path)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    got = json.loads(oracle.stdout.strip().splitlines()[-1])
    assert not all(got["allclose"]), got  # the case is one allclose alone would call a mismatch
    assert got["same"], got  # the oracle: PyTorch's benchmark check with the higher-precision reference
    assert got["rel_compiled"] < 1.5 * got["rel_eager"], got

    res = tracecheck("run", str(path), "-k", "probe_bf16_stack", "--stages", "eager,inductor")
    stage = _inductor(res, "probe_bf16_stack")
    assert "numeric-mismatch" not in _kinds(stage), json.dumps(stage["findings"])[:3000]
    assert stage["status"] == "pass", stage
    assert not any("not judged" in x for x in stage["extra"].get("not_checked", [])), stage["extra"]


@pytest.mark.slow
def test_a_wrong_bf16_result_is_still_a_numeric_mismatch_against_the_float32_reference(tracecheck, write_probe):
    """(b) The compiled result is 5% off (only under compile): still a numeric-mismatch, judged against the float32
    reference the probe runs in (its custom op has no float64 kernel), the evidence saying which."""
    res = tracecheck("run", str(write_probe(MODULE)), "-k", "probe_bf16_stack_wrong", "--stages", "eager,inductor")
    stage = _inductor(res, "probe_bf16_stack_wrong")
    found = [f for f in stage["findings"] if f["kind"] == "numeric-mismatch"]
    assert found and stage["status"] == "fail", json.dumps(stage)[:3000]
    worst = found[0]["evidence"]["worst"]
    assert found[0]["evidence"]["reference_dtype"] == "float32" and worst["reference_dtype"] == "float32", worst
    assert worst["rmse_compiled_vs_fp64"] > 5 * worst["rmse_eager_vs_fp64"], worst
    assert "RMSE against the float32 reference" in res.stdout


@pytest.mark.slow
def test_bf16_without_any_higher_precision_reference_is_not_judged(tracecheck, write_probe):
    """The custom op takes bf16/fp16 only: no float64 or float32 reference can be made. Not allclose is then said
    as "not judged" in the stage's notes, never a numeric-mismatch blamed on a backend."""
    res = tracecheck("run", str(write_probe(MODULE)), "-k", "probe_bf16_stack_no_reference", "--stages",
                     "eager,inductor")
    stage = _inductor(res, "probe_bf16_stack_no_reference")
    assert "numeric-mismatch" not in _kinds(stage), json.dumps(stage["findings"])[:3000]
    notes = stage["extra"].get("not_checked", [])
    assert any("not judged" in x and "float32" in x for x in notes), stage["extra"]


@pytest.mark.slow
def test_a_grossly_wrong_bf16_result_without_any_reference_is_still_a_numeric_mismatch(tracecheck, write_probe):
    """The same bf16-only op (no float64 or float32 reference), the compiled result's sign flipped (only under
    compile): the gross-error check against eager (cosine similarity, RMSE against eager's RMS) still reports it."""
    res = tracecheck("run", str(write_probe(MODULE)), "-k", "probe_bf16_stack_no_reference_wrong", "--stages",
                     "eager,inductor")
    stage = _inductor(res, "probe_bf16_stack_no_reference_wrong")
    found = [f for f in stage["findings"] if f["kind"] == "numeric-mismatch"]
    assert found and stage["status"] == "fail", json.dumps(stage)[:3000]
    ev = found[0]["evidence"]
    assert ev["fp64_reference"] is False and "float32" in ev["fp64_unavailable"], ev
    assert "cosine" in ev["worst"]["failed"] and ev["worst"]["relative_rmse_vs_eager"] > 1, ev["worst"]
    assert "no higher-precision reference" in res.stdout


def _pair(eager, compiled, what="output[0]"):
    from tracecheck.stages import _numerics

    return _numerics.Pair(what, eager, compiled)


def _bf16_and_ulps(ulps=2, n=4096):
    """A bf16 tensor and the same one moved by up to ``ulps`` bf16 ulps per element (not allclose at tol 1e-2)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=g).bfloat16()
    ulp = 2.0 ** (torch.frexp(a.float())[1] - 8).float()
    b = (a.float() + ulp * torch.randint(-ulps, ulps + 1, a.shape, generator=g).float()).bfloat16()
    assert not torch.allclose(a, b, rtol=1e-2, atol=1e-2)
    return a, b


def test_half_precision_without_a_reference_judges_gross_errors_only():
    """No higher-precision reference: 1-2 bf16 ulps are not judged (and said so), while a compiled result with its
    sign flipped, zeroed or 20% off is a mismatch, by the cosine check or the RMSE against eager's RMS."""
    from tracecheck.stages import _numerics

    a, noisy = _bf16_and_ulps()
    ref = _numerics.Reference(make=lambda: "the probe does not run in float64")
    assert _numerics.judge([_pair(a, noisy)], ref) == [] and ref.not_judged == ["output[0]"]
    for wrong, failed in ((-a, {"rmse", "cosine"}), (a * 0, {"rmse", "cosine"}), (a * 1.2, {"rmse"})):
        ref = _numerics.Reference(make=lambda: "the probe does not run in float64")
        [record] = _numerics.judge([_pair(a, wrong)], ref)
        worst = record.worst
        assert set(worst.failed) == failed and record.fp64_reference is False, worst
        assert "gross error" in worst.rule and not ref.not_judged, worst


def test_half_precision_is_decided_per_tensor_never_by_a_buffer():
    """A float32 model with one bfloat16 buffer (a rotary cache) computes in float32: its float32 outputs are judged
    at float32's tol, not bf16's. A model whose outputs are bf16 has its float32 gradients judged in bf16."""
    import torch
    from torch import nn
    from tracecheck.stages import _execution

    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.register_buffer("cos_cache", torch.ones(8, dtype=torch.bfloat16))

        def forward(self, x):
            return self.fc(x) * self.cos_cache.float()

    model = Rotary()
    assert _execution.half_precision(_execution.Case(model, (torch.randn(2, 8),), {}, False)) == torch.bfloat16
    out = torch.randn(64)
    off = out + 3e-3  # within bf16's tol 1e-2, far outside float32's 1e-4
    eager, got = _execution.Execution(outputs=(out,)), _execution.Execution(outputs=(off,))
    [record] = _execution.compare(eager, got, fp64=lambda: "the probe does not run in float64")
    assert record.worst.tol == 1e-4, record
    # bf16 outputs: a float32 gradient (an RMSNorm weight's) carries bf16's rounding and gets bf16's tol
    half = _execution.Execution(outputs=(out.bfloat16(),), grads={"param:norm": out}, ran_backward=True)
    half_got = _execution.Execution(outputs=(out.bfloat16(),), grads={"param:norm": off}, ran_backward=True)
    assert _execution.compare(half, half_got, fp64=lambda: "the probe does not run in float64") == []


# ---------------------------------------------------------------------------------------------------------
# One break, one place

#: the CANN wrapper's builder, as installed: ``os.path.isdir`` in its load() (Dynamo breaks on ``os.stat`` inside
#: ``<frozen genericpath>``); recorded from torch 2.13.0 (structured trace and the fullgraph error), trimmed
LIB = "/opt/venv/lib/python3.11/site-packages/cann_ops_transformer/op_builder/builder.py"
USER = "/home/u/train.py"
_BREAK = ("Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the builtin "
          "`posix.stat.` This function is either a Python builtin (e.g. _warnings.warn) or a third-party C/C++ Python "
          "extension (perhaps created with pybind).\n\n  Developer debug context: module: posix, qualname: stat, skip "
          "reason: cannot determine source file for posix (likely a C extension or builtin)\n\n For more details about "
          "this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html\n")
_STACK = (f'  File "{USER}", line 8, in f\n    op = OpBuilder().load()\n         ^^^^^^^^^^^^^^^^^^\n'
          f'  File "{LIB}", line 107, in load\n    if os.path.isdir(build_dir):\n       ^^^^^^^^^^^^^^^^^^^^^^^^\n'
          '  File "<frozen genericpath>", line 42, in isdir\n')
PAYLOAD = ("Graph break in user code at <frozen genericpath>:42\nGraph Break Reason: Encountered graph break when "
           "attempting to trace CALL: a function call, e.g. f(x, y):\n\n" + _BREAK + "\nUser code traceback:\n"
           + _STACK + "\nTraceback (most recent call last):\n  File \"/x/torch/_dynamo/exc.py\", line 727, in "
           "unimplemented\n    raise Unsupported(msg, gb_type, skip_frame)\n")
FULLGRAPH = (_BREAK + "\nfrom user code:\n " + _STACK + "\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n")


def test_a_break_in_the_stdlib_is_located_at_the_library_frame_above_it():
    """(c) The break's innermost frame is ``<frozen genericpath>`` (os.path.isdir), an installed library's
    builder.py above it: the explain/aot_eager/inductor record (structured trace) and the fullgraph error both
    locate it at the library's line, the same frame."""
    collector = tracelog.TraceCollector()
    collector._add_break(PAYLOAD)
    [raw] = collector.breaks
    assert (raw.file, raw.line) == ("<frozen genericpath>", 42)  # the break's own location is kept
    f = detect.break_finding(detect.classify_break(raw))
    frame = f.evidence.user_frame
    assert (frame.file, frame.line, frame.code) == (LIB, 107, "if os.path.isdir(build_dir):"), frame

    fullgraph = exceptions.user_frame(RuntimeError(FULLGRAPH))
    assert (fullgraph.file, fullgraph.line) == (LIB, 107), fullgraph


BUILDER = """
import os

BUILD_DIR = os.path.dirname(__file__)


class OpBuilder:
    def load(self):
        if os.path.isdir(BUILD_DIR):  # the build folder exists: load the cached op
            return self
        raise RuntimeError("not built")

    def scale(self, x):
        return x * 2
"""

FRAMES_PROBE = """
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from fakelib.builder import OpBuilder

BUILDER = OpBuilder()


def f(x):
    op = BUILDER.load()
    return op.scale(x.sin()).cos()


def probe_builder():
    return f, (torch.randn(4, requires_grad=True),)
"""


@pytest.mark.slow
def test_one_break_is_located_at_the_same_library_line_in_every_stage(tracecheck, write_probe, tmp_path):
    """(c, end to end) A library's op builder calls os.path.isdir inside traced code: explain, aot_eager and fullgraph
    all name the library's line (builder.py:9), none ``<frozen genericpath>``."""
    (tmp_path / "fakelib").mkdir()
    (tmp_path / "fakelib" / "__init__.py").write_text("")
    (tmp_path / "fakelib" / "builder.py").write_text(textwrap.dedent(BUILDER))
    res = tracecheck("run", str(write_probe(FRAMES_PROBE)), "--stages", "explain,aot_eager,fullgraph")
    stages = res.probe("probe_builder")["stages"]
    located = {(name, f["evidence"]["user_frame"]["file"], f["evidence"]["user_frame"]["line"])
               for name, s in stages.items() for f in s["findings"] if f["evidence"].get("gb_type")}
    assert {name for name, _, _ in located} == {"explain", "aot_eager", "fullgraph"}, located
    assert {(file, line) for _, file, line in located} == {(str(tmp_path / "fakelib" / "builder.py"), 9)}, located
    assert "genericpath" not in res.stdout


# ---------------------------------------------------------------------------------------------------------
# One rule for every frame: torch's, tracecheck's and the standard library's are never the located frame; the user's
# (a real file, or file-less code: exec'd, a notebook cell) and an installed library's are

_TORCH_OP = __import__("torch").__file__.replace("__init__.py", "_ops.py")  # (the installed torch: its own frames)


def test_a_break_in_the_users_exec_or_notebook_code_stays_there():
    """A break in code the user ran with exec (``<string>``) or in a notebook cell (``<ipython-input-…>``) is the
    user's code: never moved to an outer frame. A dataclass's ``__init__`` (the stdlib's exec'd ``<string>``) is
    not."""
    from tracecheck.evidence import frames

    stack = (f'  File "{USER}", line 8, in run\n    return f(x)\n'
             '  File "<string>", line 4, in f\n')
    assert frames.caller_outside_torch("<string>", stack) is None  # the break's own location is kept
    f = detect.break_finding(detect.classify_break({"reason": _BREAK, "gb_type": "Attempted to call function marked "
                                                    "as skipped", "file": "<string>", "line": 4,
                                                    "caller": frames.caller_outside_torch("<string>", stack)}))
    assert (f.evidence.user_frame.file, f.evidence.user_frame.line) == ("<string>", 4)

    cell = "<ipython-input-3-9f2c1a>"
    stack = (f'  File "{USER}", line 8, in run\n    return f(x)\n'
             f'  File "{cell}", line 2, in f\n    return torch.ops.mylib.op(x)\n'
             f'  File "{_TORCH_OP}", line 1158, in __call__\n    return self._op(*args, **kwargs)\n')
    assert frames.caller_outside_torch(_TORCH_OP, stack).file == cell

    dataclass_init = (f'  File "{USER}", line 8, in run\n    return Box(x)\n'
                      '  File "<string>", line 3, in __init__\n'
                      f'  File "{_TORCH_OP}", line 1158, in __call__\n    return self._op(*args, **kwargs)\n')
    assert frames.caller_outside_torch(_TORCH_OP, dataclass_init).line == 8

    fullgraph = exceptions.user_frame(RuntimeError(
        _BREAK + "\nfrom user code:\n " + f'  File "{USER}", line 8, in run\n    return f(x)\n'
        '  File "<string>", line 4, in f\n' + "\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n"))
    assert (fullgraph.file, fullgraph.line) == ("<string>", 4), fullgraph


def test_an_error_raised_in_a_library_is_located_alike_from_dynamos_block_and_from_the_traceback(tmp_path):
    """``exceptions.user_frame`` has one rule in both of its sources: an error raised in an installed library
    (site-packages) is placed at the library's line whether Dynamo's ``from user code:`` block or the traceback (an
    eager error) tells where; code the user exec'd is the user's."""
    import importlib.util

    lib = tmp_path / "site-packages" / "somelib"
    lib.mkdir(parents=True)
    (lib / "layers.py").write_text("def scale(x):\n    raise ValueError('bad scale')\n")
    spec = importlib.util.spec_from_file_location("somelib_layers", lib / "layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.scale(1)
    except ValueError as e:
        eager = exceptions.user_frame(e)
    assert (eager.file, eager.line) == (str(lib / "layers.py"), 2), eager
    dynamo = exceptions.user_frame(RuntimeError(
        "bad scale\n\nfrom user code:\n" f'  File "{USER}", line 8, in f\n    y = scale(x)\n'
        f'  File "{lib / "layers.py"}", line 2, in scale\n    raise ValueError(\'bad scale\')\n'))
    assert (dynamo.file, dynamo.line) == (eager.file, eager.line), dynamo

    ns: dict = {}
    exec("def g(x):\n    return 1 / x\n", ns)
    try:
        ns["g"](0)
    except ZeroDivisionError as e:
        assert (exceptions.user_frame(e).file, exceptions.user_frame(e).line) == ("<string>", 2)


EXEC_PROBE = """
import torch

SRC = '''
def f(x):
    y = x.sin()
    print("in exec'd code")
    return y.cos()
'''
NS = {}
exec(SRC, NS)


def g(x):
    return NS["f"](x) * 2


def probe_exec():
    return g, (torch.randn(4),)
"""


@pytest.mark.slow
def test_a_break_in_execd_code_is_located_there_in_every_stage(tracecheck, write_probe):
    """The print in code the probe exec'd: explain and fullgraph both name ``<string>:4`` (the user's code), neither the
    probe file's line that called it."""
    res = tracecheck("run", str(write_probe(EXEC_PROBE)), "--stages", "explain,fullgraph")
    stages = res.probe("probe_exec")["stages"]
    located = {(name, f["evidence"]["user_frame"]["file"], f["evidence"]["user_frame"]["line"])
               for name, s in stages.items() for f in s["findings"] if f["evidence"].get("gb_type")}
    assert {name for name, _, _ in located} == {"explain", "fullgraph"}, located
    assert {(file, line) for _, file, line in located} == {("<string>", 4)}, located
