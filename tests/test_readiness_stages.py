"""End to end, through the CLI: the readiness stages (gradcheck, dynamic, export) on custom ops with one defect each,
written here by hand so that the expected verdict is known without tracecheck: a backward off by a factor of 2, a
fake that hard-codes the batch size, a fake that calls int() on it, a data-dependent branch, an op without a fake.
Each defect must be found by its stage, and only there; a clean model and op pass all three."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

OPS = '''
import torch

# a backward that forgets the factor 2 of d(2xw)/dx: every compile stage agrees with eager (same formula)
@torch.library.custom_op("rs::scale", mutates_args=())
def scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w * 2

@scale.register_fake
def _(x, w):
    return torch.empty_like(x)

def _scale_bwd(ctx, g):
    x, w = ctx.saved_tensors
    return g * w, g * x * 2

def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)

scale.register_autograd(_scale_bwd, setup_context=_save_inputs)

# the same defect in a kernel that refuses float64 (the float32 central-difference path)
@torch.library.custom_op("rs::scale32", mutates_args=())
def scale32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float32:
        raise TypeError("scale32: float32 only")
    return x * w * 2

@scale32.register_fake
def _(x, w):
    return torch.empty_like(x)

scale32.register_autograd(_scale_bwd, setup_context=_save_inputs)

def _sin_bwd(ctx, g):
    (x,) = ctx.saved_tensors
    return g * x.cos()

def _save_x(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])

# a fake that hard-codes the batch size it was written at
@torch.library.custom_op("rs::hard", mutates_args=())
def hard(x: torch.Tensor) -> torch.Tensor:
    return x.sin()

@hard.register_fake
def _(x):
    return x.new_empty(2, x.shape[1])

hard.register_autograd(_sin_bwd, setup_context=_save_x)

# a fake that turns the symbolic batch size into a Python int: one compile per batch size
@torch.library.custom_op("rs::spec", mutates_args=())
def spec(x: torch.Tensor) -> torch.Tensor:
    return x.sin()

@spec.register_fake
def _(x):
    b = int(x.shape[0])
    return x.new_empty(b, x.shape[1])

spec.register_autograd(_sin_bwd, setup_context=_save_x)

# a correct op: passes everything
@torch.library.custom_op("rs::good", mutates_args=())
def good(x: torch.Tensor) -> torch.Tensor:
    return x.sin()

@good.register_fake
def _(x):
    return torch.empty_like(x)

good.register_autograd(_sin_bwd, setup_context=_save_x)

# an autograd.Function with the factor-2 defect
class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x

# no fake impl at all
@torch.library.custom_op("rs::nofake", mutates_args=())
def nofake(x: torch.Tensor) -> torch.Tensor:
    return x.sin()

nofake.register_autograd(_sin_bwd, setup_context=_save_x)


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            return y * 2
        return y


def _x():
    return torch.randn(2, 5, requires_grad=True)

def probe_wrong_backward():
    return (lambda x, w: scale(x, w).sin()), (_x(), _x())

def probe_wrong_backward_fp32():
    return (lambda x, w: scale32(x, w).sin()), (_x(), _x())

def probe_wrong_function():
    return (lambda x: Twice.apply(x).sum(-1)), (_x(),)

def probe_hard_coded_fake():
    return (lambda x: hard(x * 2) + 1), (_x(),)

def probe_specializing_fake():
    return (lambda x: spec(x * 2) + 1), (_x(),)

def probe_clean():
    lin = torch.nn.Linear(5, 5)
    return (lambda x: good(lin(x)).relu()), (_x(),)

def probe_size_branch():
    return (lambda x: x * 2 if x.shape[0] > 3 else x * 3), (_x(),)

def probe_data_dependent():
    return Branchy(), (torch.randn(2, 5),)

def probe_no_fake():
    return (lambda x: nofake(x) + 1), (_x(),)
'''
#: 1-based line of ``b = int(x.shape[0])`` in OPS after dedent (the frame that specialized)
SPEC_LINE = next(i for i, ln in enumerate(textwrap.dedent(OPS).splitlines(), 1) if "b = int(x.shape[0])" in ln)
STATIC = ["eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck", "compiled_autograd"]
READINESS = ["gradcheck", "dynamic", "export"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One run of every stage on every probe of OPS (the stages run in parallel processes)."""
    d = tmp_path_factory.mktemp("readiness")
    (d / "ops.py").write_text(textwrap.dedent(OPS))
    out = d / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(d / "ops.py"), "--json", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=d, env={**os.environ, "COLUMNS": "200"})
    assert out.exists(), proc.stdout + proc.stderr
    probes = {p["id"].split("::")[-1]: p for p in json.loads(out.read_text())["probes"]}
    return proc, probes


def _status(probe: dict) -> dict[str, str]:
    return {name: s["status"] for name, s in probe["stages"].items()}


def _kinds(probe: dict, stage: str) -> list[str]:
    return [f["kind"] for f in probe["stages"][stage]["findings"]]


def test_the_readiness_stages_are_in_the_default_stage_list(report):
    proc, probes = report
    assert proc.returncode == 1  # the defective probes fail
    assert set(READINESS) <= set(probes["probe_clean"]["stages"])


def test_a_clean_op_and_model_pass_all_three(report):
    _, probes = report
    st = _status(probes["probe_clean"])
    assert all(st[s] == "pass" for s in STATIC + READINESS), st
    dyn = probes["probe_clean"]["stages"]["dynamic"]["extra"]["dynamic"]
    assert dyn["batch_sizes"] == [2, 3, 4, 5] and dyn["symbolic"] is True and dyn["recompiles"] == []
    grad = probes["probe_clean"]["stages"]["gradcheck"]["extra"]["gradcheck"]
    assert grad["rs.good.default"]["status"] == "SUCCESS"
    assert grad["rs.good.default"]["method"].startswith("torch.autograd.gradcheck, float64")


def test_a_wrong_backward_fails_gradcheck_only_with_the_factor_it_forgot(report):
    _, probes = report
    for name, method in (("probe_wrong_backward", "torch.autograd.gradcheck, float64"),
                         ("probe_wrong_backward_fp32", "central difference along a random direction, float32")):
        p = probes[name]
        st = _status(p)
        assert st["gradcheck"] == "fail" and all(st[s] == "pass" for s in STATIC + ["dynamic", "export"]), (name, st)
        f = p["stages"]["gradcheck"]["findings"][0]
        assert f["kind"] == "wrong-gradient"
        assert f["context"]["input"] == "x" and f["context"]["op"].startswith("rs::scale")
        assert f["evidence"]["method"].startswith(method)
        # the registered backward gives half the true derivative along any direction: analytical / numerical = 1/2
        ev = f["evidence"]
        assert ev["analytical"] / ev["numerical"] == pytest.approx(0.5, rel=1e-2)
        assert ev["relative_error"] == pytest.approx(0.5, rel=1e-2)
    assert "the call does not run with float64 inputs" in probes["probe_wrong_backward_fp32"]["stages"]["gradcheck"][
        "findings"][0]["evidence"]["note"]


def test_an_autograd_function_with_a_wrong_backward_is_named_by_its_class(report):
    _, probes = report
    f = probes["probe_wrong_function"]["stages"]["gradcheck"]["findings"][0]
    assert f["kind"] == "wrong-gradient" and f["context"]["op"].endswith("Twice")
    assert f["evidence"]["analytical"] / f["evidence"]["numerical"] == pytest.approx(0.5, rel=1e-2)


def test_a_fake_with_a_hard_coded_size_passes_every_static_stage_and_fails_dynamic(report):
    _, probes = report
    p = probes["probe_hard_coded_fake"]
    st = _status(p)
    assert all(st[s] == "pass" for s in STATIC + ["gradcheck", "export"]), st
    assert st["dynamic"] == "fail"
    first = p["stages"]["dynamic"]["findings"][0]
    assert first["kind"] == "fake-mismatch" and first["context"]["op"] == "rs::hard"
    assert first["evidence"]["batch_size"] == 3  # the first size after the probe's 2
    assert p["verdict"]["kinds"] == ["fake-mismatch"]


def test_a_fake_that_specializes_gets_dynamic_shape_with_the_fake_impl_frame(report):
    _, probes = report
    p = probes["probe_specializing_fake"]
    st = _status(p)
    assert all(st[s] == "pass" for s in STATIC + ["gradcheck", "export"]), st
    f = p["stages"]["dynamic"]["findings"][0]
    assert f["kind"] == "dynamic-shape"
    assert f["evidence"]["user_frame"]["line"] == SPEC_LINE
    assert f["evidence"]["user_frame"]["code"] == "b = int(x.shape[0])"
    assert "size mismatch" in f["evidence"]["reason"]
    # one compile per batch size: three recompiles after the first of four sizes
    assert len(p["stages"]["dynamic"]["extra"]["dynamic"]["recompiles"]) == 3


def test_a_branch_on_the_batch_size_recompiles_once_and_is_no_specialization(report):
    """Sizes 2, 3, 4, 5: the guard x.size()[0] <= 3 fails once, at 4, and that graph serves 5."""
    proc, probes = report
    # a passing probe still says what was not checked, and why (each reason once, with the probes it concerns)
    assert "not checked: gradcheck (the probe calls no custom op or autograd.Function) in " in proc.stdout
    assert probes["probe_size_branch"]["stages"]["gradcheck"]["skip_reason"] == \
        "the probe calls no custom op or autograd.Function"
    dyn = probes["probe_size_branch"]["stages"]["dynamic"]
    assert dyn["status"] == "pass", dyn["findings"]
    assert [r["step"] for r in dyn["extra"]["dynamic"]["recompiles"]] == [2]


def test_plain_torch_compile_recompiles_per_size_with_such_a_fake():
    """The oracle for the test above: plain torch.compile(dynamic=True), in this process."""
    import torch
    from torch._dynamo.utils import counters

    @torch.library.custom_op("rs_oracle::spec", mutates_args=())
    def spec(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    @spec.register_fake
    def _(x):
        return x.new_empty(int(x.shape[0]), x.shape[1])

    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda x: spec(x * 2) + 1, backend="eager", dynamic=True)
    for b in (2, 3, 4):
        f(torch.randn(b, 5))
    assert counters["stats"]["unique_graphs"] == 3


def test_a_data_dependent_model_and_an_op_without_fake_fail_export_with_their_kinds(report):
    _, probes = report
    dd = probes["probe_data_dependent"]["stages"]["export"]["findings"][0]
    assert dd["kind"] == "data-dependent"
    assert dd["evidence"]["draft_export_type"] == "DATA_DEPENDENT_ERROR"
    assert dd["evidence"]["user_frame"]["code"] == "if y.sum() > 0:"
    nf = probes["probe_no_fake"]["stages"]["export"]["findings"][0]
    assert nf["kind"] == "missing-fake" and nf["context"]["op"] == "rs::nofake"
    assert nf["evidence"]["draft_export_type"] == "MISSING_FAKE_KERNEL"


KEY_PROBE = '''
import torch


def f(x):
    key = str(x.shape[-1])  # a cache key from the width: str() of a SymInt once the width is symbolic
    return (x * 2).sin() * len(key)


def probe_key():
    return f, (torch.randn(4, 3, 8, requires_grad=True),)
'''


def test_dynamic_finds_what_dynamic_true_finds_beyond_the_batch(tracecheck, write_probe):
    """Issue 52, item 2: the stage marks the batch dimension, then (that passing) compiles with ``dynamic=True``: a
    break only a symbolic width causes is this stage's finding, as plain ``torch.compile(dynamic=True)`` finds it
    (the oracle, in this process: it breaks at the str() line; with the batch alone marked it does not)."""
    import torch
    from torch._dynamo.utils import counters

    path = write_probe(KEY_PROBE)
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    fn, (x,) = ns["probe_key"]()
    for dynamic, breaks in ((True, True), (None, False)):
        torch._dynamo.reset()
        counters.clear()
        arg = x.detach().clone().requires_grad_()
        if dynamic is None:
            torch._dynamo.maybe_mark_dynamic(arg, 0)
        torch.compile(fn, backend="eager", dynamic=dynamic)(arg).sum().backward()
        assert bool(sum(counters["graph_break"].values())) is breaks, dynamic
    res = tracecheck("run", str(path), "--stages", "eager,explain,dynamic", "-j", "1", json_report=True)
    stages = res.probe("probe_key")["stages"]
    assert stages["explain"]["status"] == "pass"  # static shapes: no break
    dyn = stages["dynamic"]
    line = path.read_text().splitlines().index("    key = str(x.shape[-1])  # a cache key from the width: str() of "
                                               "a SymInt once the width is symbolic") + 1
    assert dyn["status"] == "fail" and dyn["failure"]["kind"] == "graph-break", dyn["status"]
    assert dyn["failure"]["evidence"]["user_frame"]["line"] == line
    assert "1 graph break(s) that the batch dimension alone does not cause" in dyn["extra"]["dynamic"]["every_dimension"]
