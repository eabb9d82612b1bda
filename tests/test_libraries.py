"""What real custom-op libraries do that toy probes do not (issue 27), end to end through the CLI: a Python cache filled
on the first call, a fake impl that asserts, a helper module beside the probes, a direct pybind-style call that
``tracecheck fix`` cannot rewrite. The oracles are plain torch.compile and FakeTensor runs in the test."""
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

FIRST_CALL = '''
import torch

_LEVELS = {}


def levels(n):
    if n not in _LEVELS:                                    # a quantization map built on the first call
        _LEVELS[n] = torch.linspace(-1, 1, n).tolist()     # .tolist(): a graph break then, and only then
    return torch.tensor(_LEVELS[n])


def probe_cache_filled_on_first_call():
    return (lambda x: (x.unsqueeze(-1) - levels(16)).abs().argmin(-1).float() + x), (torch.randn(4, 8),)
'''


def test_the_first_compiled_call_is_the_one_measured(tracecheck, write_probe, tmp_path):
    res = tracecheck("run", str(write_probe(FIRST_CALL)), "--stages", "eager,explain,aot_eager")
    st = res.probe("probe_cache_filled_on_first_call")["stages"]
    for stage in ("explain", "aot_eager"):
        lines = {b["line"] for b in st[stage]["breaks"]}
        assert 9 in lines, (stage, st[stage]["breaks"])
    # the oracle: plain torch.compile on a fresh process's first call breaks at that line
    script = tmp_path / "plain.py"
    script.write_text(FIRST_CALL + "\nfn, (x,) = probe_cache_filled_on_first_call()\n"
                      "torch.compile(fn, backend='aot_eager')(x)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={"TORCH_LOGS": "graph_breaks", "PATH": "/usr/bin:/bin"})
    assert f"Graph break in user code at {script}:9" in proc.stderr


FAKE_ASSERTS = '''
import torch


@torch.library.custom_op("lib27::quant", mutates_args=())
def quant(x: torch.Tensor) -> torch.Tensor:
    return (x * 127).round()


@quant.register_fake
def _(x):
    assert x.dim() == 3, "quant expects (B, S, C)"         # the library's own fake refuses a 2-d input
    return torch.empty_like(x)


def probe_fake_asserts():
    return (lambda x: quant(x) + 1), (torch.randn(4, 8),)
'''


def test_a_fake_that_asserts_is_the_fakes_fault_at_every_stage(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(FAKE_ASSERTS)), "--stages", "eager,explain,aot_eager,fullgraph,opcheck,export")
    st = res.probe("probe_fake_asserts")["stages"]
    assert st["eager"]["status"] == "pass"
    for stage in ("explain", "aot_eager", "fullgraph", "opcheck", "export"):
        kinds = {(f["kind"], f["context"].get("cause"), f["context"].get("op")) for f in st[stage]["findings"]}
        assert kinds == {("fake-mismatch", "raises", "lib27::quant")}, (stage, st[stage]["findings"])
    f = st["explain"]["findings"][0]
    assert f["evidence"]["user_frame"]["line"] == 12 and "quant expects (B, S, C)" in f["summary"]
    # the oracle: the op's fake raises under FakeTensorMode
    ns: dict = {}
    exec(FAKE_ASSERTS.replace("lib27::", "lib27o::"), ns)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, pytest.raises(AssertionError, match="quant expects"):
        ns["quant"](mode.from_tensor(torch.randn(4, 8)))


def test_a_fake_that_raises_is_quoted_in_its_own_words(tracecheck, write_probe):
    """torch 2.14 re-raises the fake's RuntimeError as one of its own wording: the summary quotes the fake's."""
    src = FAKE_ASSERTS.replace("lib27::", "lib27r::").replace(
        'assert x.dim() == 3, "quant expects (B, S, C)"', 'if x.dim() != 3:\n        raise RuntimeError("quant expects (B, S, C)")')
    res = tracecheck("run", str(write_probe(src)), "--stages", "eager,explain")
    f = res.probe("probe_fake_asserts")["stages"]["explain"]["findings"][0]
    assert (f["kind"], f["context"]["cause"]) == ("fake-mismatch", "raises")
    assert "(RuntimeError: quant expects (B, S, C))" in f["summary"]


HELPER = '''
import torch

SCALE = 2.0


def scaled(x):
    return x * SCALE
'''

def test_a_helper_module_beside_the_probes_is_said_in_the_progress_lines(tracecheck, write_probe):
    write_probe(HELPER, "helpers.py")
    model = write_probe(FIRST_CALL)
    res = tracecheck("run", str(model.parent), "--stages", "eager")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "helpers.py: no probes" in res.stderr


def test_tracecheck_fix_is_offered_only_where_it_generates_code(tmp_path):
    """``tracecheck fix`` rewrites a pybind11 call inside an autograd.Function into custom ops, and a direct call
    through a module-level name into a custom op of its own, from the probe's file or from a library's (the probe's
    file installs it there). A call through ``self.`` (DeepSpeed's ``self.ds_opt_adam.adam_update``) it cannot
    rebind, nor a file it cannot read: the next steps point to the kind's page instead."""
    from tracecheck.render import terminal
    from tracecheck.model.report import FAIL, PASS, Finding, ProbeReport, RunReport, StageResult

    lib = tmp_path / "site-packages" / "lib"
    lib.mkdir(parents=True)
    (lib / "ops.py").write_text("import ext\n\ndef fwd(x):\n    return ext.fwd(x)\n")
    (lib / "adam.py").write_text("class Adam:\n    def step(self, x):\n        return self.ext.fwd(x)\n")

    def report(in_function: bool, frame_file: str = "/abs/m.py", line: int = 3) -> RunReport:
        ctx = {"builtin": "ext.fwd", "pybind11": True, **({"in_autograd_function": True} if in_function else {})}
        f = Finding("pybind-builtin", "Dynamo cannot trace the C/pybind11 builtin `ext.fwd`.", ctx,
                    {"user_frame": {"file": frame_file, "line": line, "code": "ext.fwd(x)" if frame_file ==
                                    "/abs/m.py" else ""}})
        p = ProbeReport("m.py::probe", "/abs/m.py", "probe", {
            "eager": StageResult("eager", PASS, target="compile"),
            "explain": StageResult("explain", FAIL, failure=f, findings=[f], target="compile")})
        return RunReport([p], {}, ["eager", "explain"])

    def offers_fix(lines: list[str]) -> bool:
        return any(line.startswith("tracecheck fix") for line in lines)

    assert offers_fix(terminal.next_steps(report(True)))
    assert offers_fix(terminal.next_steps(report(False)))
    assert offers_fix(terminal.next_steps(report(False, str(lib / "ops.py"), 4)))
    for frame_file, line in ((str(lib / "adam.py"), 3), ("/abs/site-packages/lib/gone.py", 3)):
        elsewhere = terminal.next_steps(report(False, frame_file, line))
        assert not offers_fix(elsewhere), frame_file
        assert any(line.startswith("tracecheck explain pybind-builtin") for line in elsewhere)


def test_a_fake_that_asserts_inside_an_installed_package_is_still_the_fakes(tracecheck, tmp_path):
    """Kernel libraries live in site-packages: the fake's own frame there is what exceptions.fake_impl_raised looks for."""
    pkg = tmp_path / "site-packages" / "libfake27"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_ASSERTS.replace("lib27::", "libfake27::").replace(
        "def probe_fake_asserts", "def _unused"))
    model = tmp_path / "model.py"
    model.write_text(f"import sys\nsys.path.insert(0, {str(pkg.parent)!r})\nimport torch\nimport libfake27\n\n\n"
                     "def probe_installed_fake():\n    return (lambda x: libfake27.quant(x) + 1), (torch.randn(4, 8),)\n")
    res = tracecheck("run", str(model), "--stages", "eager,explain")
    f = res.probe("probe_installed_fake")["stages"]["explain"]["findings"][0]
    assert (f["kind"], f["context"]["cause"], f["context"]["op"]) == ("fake-mismatch", "raises", "libfake27::quant")
    assert f["evidence"]["user_frame"]["file"].endswith("site-packages/libfake27/__init__.py")


def test_a_parser_failure_is_raised_once_and_cleared():
    from tracecheck.evidence import parsers

    try:
        raise ValueError("a record the parser did not expect")
    except ValueError:
        parsers.parser_failed()
    with pytest.raises(parsers.ParserError, match="(?s)failed 1 time.*a record the parser did not expect"):
        parsers.check_parsers()
    parsers.check_parsers()  # cleared: the next task starts clean


INSIDE_FUNCTION = '''
import torch


@torch.library.custom_op("lib27f::gemm_q", mutates_args=())
def gemm_q(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:      # no autograd registration, as in the library
    return a @ w.t()


@gemm_q.register_fake
def _(a, w):
    return a.new_empty(a.shape[0], w.shape[0])


class MatMulQ(torch.autograd.Function):                              # the library's own backward
    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(w)
        return gemm_q(a, w)

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g @ w, None


W = torch.randn(6, 8)


def probe_only_inside_its_function():
    return (lambda a: MatMulQ.apply(a, W)), (torch.randn(4, 8, requires_grad=True),)


def probe_called_directly():
    return (lambda a: gemm_q(a, W)), (torch.randn(4, 8, requires_grad=True),)
'''


def test_an_op_called_only_inside_its_autograd_function_needs_no_autograd_registration(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(INSIDE_FUNCTION)), "--stages", "eager,aot_eager,opcheck")
    inside = res.probe("probe_only_inside_its_function")["stages"]
    assert inside["opcheck"]["status"] == "pass", inside["opcheck"]["findings"]
    assert any("the autograd of lib27f::gemm_q" in n for n in inside["opcheck"]["extra"]["not_checked"])
    assert inside["aot_eager"]["status"] == "pass"
    direct = res.probe("probe_called_directly")["stages"]["opcheck"]
    assert {f["kind"] for f in direct["findings"]} == {"missing-autograd"}
    # the oracles: opcheck itself fails the registration test; compiled gradients through the Function equal eager's
    ns: dict = {}
    exec(INSIDE_FUNCTION.replace("lib27f::", "lib27fo::"), ns)
    a = torch.randn(4, 8, requires_grad=True)
    out = torch.library.opcheck(ns["gemm_q"], (a, ns["W"]), raise_exception=False)
    failed = {t for t, v in out.items() if v != "SUCCESS"}
    assert failed and failed == {f["evidence"]["opcheck_test"] for f in direct["findings"]}
    eager_grad, = torch.autograd.grad(ns["MatMulQ"].apply(a, ns["W"]).sum(), a)
    compiled = torch.compile(lambda x: ns["MatMulQ"].apply(x, ns["W"]), backend="aot_eager", fullgraph=True)
    compiled_grad, = torch.autograd.grad(compiled(a).sum(), a)
    torch.testing.assert_close(compiled_grad, eager_grad)


@pytest.mark.parametrize("code, rebindable", [
    ("return ext.fwd(x)", True), ("y = fwd(x) + 1", True), ("return pkg.ext.fwd(x)", True),
    ("return self.ext.fwd(x)", False), ("return torch.ops.ext.fwd(x)", False), ("return helper._fwd(x)", False),
    ("return ext.fwd_other(x)", False)])
def test_a_c_call_is_rebindable_only_through_a_module_level_name(code, rebindable):
    from tracecheck.model.records import Frame
    from tracecheck.model.taxonomy import _called_by_name

    assert _called_by_name(Frame("/abs/lib.py", 3, "f", code), "ext.fwd") is rebindable
