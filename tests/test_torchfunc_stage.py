"""End to end, through the CLI: torch.func readiness (the ``vmap`` stage), Inductor's opaque ops, and advice
severity. The oracles are torch itself, run in the test: the transform raising, functorch's fallback raising
when it is turned off, Inductor's generated code from ``run_and_get_code``, and literals written by hand."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracecheck.model import taxonomy

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

OPS = '''
import torch
from torch.library import Library

# a Library op with a CPU kernel and a fake, and no batching rule
lib = Library("tfn", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CPU")
lib.impl("scale", lambda x: torch.empty_like(x), "Meta")

# the same op with a batching rule: the vmapped dim is a batch dim the kernel takes as it is
lib.define("scale_b(Tensor x) -> Tensor")
lib.impl("scale_b", lambda x: x * 2, "CPU")
lib.impl("scale_b", lambda x: torch.empty_like(x), "Meta")
torch.library.register_vmap("tfn::scale_b", lambda info, in_dims, x: (torch.ops.tfn.scale_b(x), in_dims[0]))

# a batching rule that is wrong: it multiplies by 3 (the kernel by 2)
lib.define("scale_w(Tensor x) -> Tensor")
lib.impl("scale_w", lambda x: x * 2, "CPU")
lib.impl("scale_w", lambda x: torch.empty_like(x), "Meta")
torch.library.register_vmap("tfn::scale_w", lambda info, in_dims, x: (x * 3, in_dims[0]))


class OldDouble(torch.autograd.Function):
    """forward(ctx, ...): the old form that torch.func refuses."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def probe_old_function():
    x = torch.randn(4, 8, requires_grad=True)
    return (lambda t: OldDouble.apply(t).sin()), (x,)


def probe_library_op():
    x = torch.randn(4, 8)
    return (lambda t: torch.ops.tfn.scale(t).sin() + 1), (x,)


def probe_batched_op():
    x = torch.randn(4, 8)
    return (lambda t: torch.ops.tfn.scale_b(t).sin() + 1), (x,)


def probe_wrong_rule():
    x = torch.randn(4, 8)
    return (lambda t: torch.ops.tfn.scale_w(t).sin()), (x,)


# an op defined with a named overload only (ns::op.Tensor): there is no ns::op overload packet default
lib.define("shift.Tensor(Tensor x, Tensor y) -> Tensor")
lib.impl("shift.Tensor", lambda x, y: x + y, "CPU")
lib.impl("shift.Tensor", lambda x, y: torch.empty_like(x), "Meta")


def probe_overload():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    return (lambda a, b: torch.ops.tfn.shift.Tensor(a, b) * 2), (x, y)


def probe_batch_norm():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
    return model, (torch.randn(4, 8),)


def probe_writes_its_inputs():
    """Writes an int input in place, and a non-grad float input under grad: vmap and grad as the loop and autograd."""
    def f(x, pos, y):
        pos.add_(1)
        y.mul_(2)
        return x * pos * y, pos + 0
    return f, (torch.randn(3, requires_grad=True), torch.tensor([1, 2, 3]), torch.randn(3))


def probe_one_element_loss():
    import tracecheck
    return tracecheck.Case(lambda x: x.sin(), (torch.randn(4, requires_grad=True),),
                           grad=lambda out: out.sum().reshape(1))


def probe_nonzero():
    return (lambda x: x.nonzero()), (torch.randn(8),)


def probe_plain():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return mlp, (torch.randn(3, 8),)


def probe_plain_inputs():
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    return (lambda a, b: torch.tanh(a @ b).pow(2)), (x, w)
'''


@pytest.fixture(scope="module")
def ops_report(tmp_path_factory):
    """One run of the vmap and inductor stages over OPS (each probe is one case below)."""
    folder = tmp_path_factory.mktemp("tf")
    model = folder / "ops.py"
    model.write_text(OPS)
    out = folder / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(model), "--stages", "eager,inductor,vmap",
                           "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=folder)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    return {p["name"]: p for p in report["probes"]}, proc, model


def _kinds(stage: dict) -> list[str]:
    return [f["kind"] for f in stage["findings"]]


def test_an_old_style_autograd_function_is_functorch_incompatible(ops_report):
    probes, _, _ = ops_report
    p = probes["probe_old_function"]
    vmap = p["stages"]["vmap"]
    # the stage fails; the probe does not, since the func target is not required (no --require func)
    assert vmap["status"] == "fail" and vmap["target"] == "func"
    assert p["verdict"]["status"] == "pass" and p["verdict"]["targets"] == {"compile": "pass", "func": "fail"}
    assert p["verdict"]["not_required"] == ["functorch-incompatible"]
    f = vmap["failure"]
    assert f["kind"] == "functorch-incompatible"
    assert f["context"]["cause"] == "setup_context"
    assert f["context"]["function"].endswith("OldDouble")
    assert "setup_context" in f["summary"] and "OldDouble" in f["summary"]
    # both transforms refuse it, for one cause at one line: one finding names both
    assert f["summary"].startswith("torch.func.vmap and torch.func.grad refuse the probe")
    assert [x["kind"] for x in vmap["findings"]] == ["functorch-incompatible"]
    # the oracle: torch.func itself refuses a Function of that form
    class Old(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.vmap(Old.apply)(torch.randn(2, 3))
    # eager and inductor accept it: only the torch.func stage sees it
    assert p["stages"]["eager"]["status"] == "pass" and p["stages"]["inductor"]["status"] == "pass"


def test_a_library_op_without_a_batching_rule_is_advice_and_passes(ops_report):
    probes, _, _ = ops_report
    p = probes["probe_library_op"]
    vmap = p["stages"]["vmap"]
    assert vmap["status"] == "pass" and p["verdict"]["status"] == "pass" and p["verdict"]["kinds"] == []
    advice = [f for f in vmap["findings"] if f["kind"] == "no-batching-rule"]
    assert [f["context"]["op"] for f in advice] == ["tfn::scale"]
    assert advice[0]["evidence"]["confirmed"] is True
    assert "no-batching-rule" in p["verdict"]["advice"]
    assert vmap["extra"]["vmap"]["vmap"] == "matches"      # the fallback's loop gives the eager loop's values
    # the oracles: the dispatcher has no batching kernel for it, and vmap with the fallback off stops at it
    lib = torch.library.Library("tfn_oracle", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CPU")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("tfn_oracle::scale", "FuncTorchBatched")
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        with pytest.raises(RuntimeError, match="tfn_oracle::scale hit the vmap fallback"):
            torch.func.vmap(torch.ops.tfn_oracle.scale)(torch.randn(2, 3))
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


def test_an_op_with_a_batching_rule_gets_no_advice(ops_report):
    probes, _, _ = ops_report
    vmap = probes["probe_batched_op"]["stages"]["vmap"]
    assert vmap["status"] == "pass" and vmap["findings"] == []
    assert vmap["extra"]["vmap"]["vmap"] == "matches"


def test_a_wrong_batching_rule_is_a_numeric_mismatch_at_vmap(ops_report):
    probes, _, _ = ops_report
    vmap = probes["probe_wrong_rule"]["stages"]["vmap"]
    assert vmap["status"] == "fail"
    f = vmap["failure"]
    assert f["kind"] == "numeric-mismatch" and f["context"]["cause"] == "transform"
    assert f["summary"].startswith("torch.func.vmap gives other forward outputs than an eager loop")
    assert "no-batching-rule" not in _kinds(vmap)                       # it has a rule: a wrong one


def test_plain_math_passes_vmap_and_grad_with_no_advice(ops_report):
    probes, _, _ = ops_report
    for name in ("probe_plain", "probe_plain_inputs"):
        p = probes[name]
        vmap = p["stages"]["vmap"]
        assert vmap["status"] == "pass" and vmap["findings"] == [], name
        assert p["verdict"]["advice"] == [], name
        assert vmap["extra"]["vmap"]["vmap"] == "matches", name
        assert vmap["extra"]["vmap"]["grad"] == "matches", name
        assert vmap["phases"] == ["forward", "backward"], name
        assert vmap["extra"]["vmap"]["grads_compared"] == len(vmap["extra"]["vmap"]["grad_wrt"]), name
        assert p["stages"]["inductor"]["findings"] == [], name   # no custom op: nothing opaque
    assert probes["probe_plain"]["stages"]["vmap"]["extra"]["vmap"]["grad_wrt"][0] == "param:0.weight"
    assert probes["probe_plain_inputs"]["stages"]["vmap"]["extra"]["vmap"]["grad_wrt"] == ["input[0]", "input[1]"]


def test_inductor_names_the_custom_op_it_calls_as_an_extern_kernel(ops_report):
    probes, _, _ = ops_report
    ind = probes["probe_library_op"]["stages"]["inductor"]
    assert ind["status"] == "pass"
    opaque = [f for f in ind["findings"] if f["kind"] == "opaque-op"]
    assert [f["context"]["op"] for f in opaque] == ["tfn::scale"]
    assert opaque[0]["context"]["calls"] == 1
    assert ind["extra"]["inductor"]["extern_custom_ops"] == 1
    # the oracle: plain torch.compile's generated code calls the op, and Inductor generates a kernel for the rest
    from torch._inductor.utils import run_and_get_code

    lib = torch.library.Library("tfn_code", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CPU")
    lib.impl("scale", lambda x: torch.empty_like(x), "Meta")
    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(lambda t: torch.ops.tfn_code.scale(t).sin() + 1), torch.randn(4, 8))
    assert "torch.ops.tfn_code.scale.default(" in "\n".join(code)
    kernels = {k for c in code for k in re.findall(r"^(cpp_fused_\w+) = ", c, re.M)}
    assert ind["extra"]["inductor"]["generated_kernels"] == len(kernels) >= 1


def test_the_terminal_shows_advice_for_a_passing_probe_and_the_run_fails_only_for_errors(ops_report):
    probes, proc, _ = ops_report
    assert proc.returncode == 1                               # the old-style Function and the wrong rule
    assert probes["probe_library_op"]["verdict"]["status"] == "pass"
    # the verdict view names the probe with its stages' advice; then the advice, once per kind, with its op
    row = next(ln for ln in proc.stdout.splitlines() if "probe_library_op" in ln)
    assert "opaque-op" in row and "no-batching-rule" in row   # the table's row (a wide log: the table fits)
    assert "ⓘ no-batching-rule  advice: fails nothing unless --strict" in proc.stdout
    assert "tfn::scale has no batching rule" in proc.stdout


def test_advice_alone_exits_0_and_strict_makes_it_fail(tracecheck, write_probe):
    model = write_probe(OPS)
    res = tracecheck("run", f"{model}::probe_library_op", "--stages", "eager,inductor,vmap")
    assert res.returncode == 0, res.stdout[-2000:]
    assert res.report["strict"] is False
    strict = tracecheck("run", f"{model}::probe_library_op", "--stages", "eager,inductor,vmap", "--strict")
    assert strict.returncode == 1
    v = strict.report["probes"][0]["verdict"]
    assert v["status"] == "fail" and v["first_failing_stage"] == "inductor"
    # the vmap stage's advice fails that stage, but func is not a required target: it fails no probe
    assert v["kinds"] == ["opaque-op"] and v["not_required"] == ["no-batching-rule"] and strict.report["strict"]
    both = tracecheck("run", f"{model}::probe_library_op", "--stages", "eager,inductor,vmap", "--strict",
                      "--require", "func")
    v = both.report["probes"][0]["verdict"]
    assert both.returncode == 1 and set(v["kinds"]) == {"opaque-op", "no-batching-rule"} and v["not_required"] == []


def test_the_fixed_mhc_probe_passes_with_opaque_op_advice(tracecheck):
    res = tracecheck("run", str(REPO / "probes" / "mhc_probes.py::probe_fixed"), "--stages",
                     "eager,inductor,vmap", cwd=REPO)
    assert res.returncode == 0, res.stdout[-3000:]
    p = res.report["probes"][0]
    assert p["verdict"]["status"] == "pass" and p["verdict"]["advice"] == ["opaque-op"]
    ind = p["stages"]["inductor"]
    ops = {f["context"]["op"] for f in ind["findings"] if f["kind"] == "opaque-op"}
    assert {"cann_ops_transformer::mhc_pre_sinkhorn", "cann_ops_transformer::mhc_post"} <= ops
    vmap = p["stages"]["vmap"]
    # fixed.py registers batching rules: vmap matches the eager loop, and nothing runs through the fallback
    assert vmap["status"] == "pass" and vmap["findings"] == []
    assert vmap["extra"]["vmap"]["vmap"] == "matches"
    # torch refuses torch.func.grad through register_autograd ops (pytorch/pytorch#168393): said, not a finding
    assert "pytorch/pytorch#168393" in vmap["extra"]["not_checked"][0]
    assert "not checked: vmap: torch.func.grad" in res.stdout


def test_torch_refuses_grad_through_register_autograd_as_the_stage_says():
    """The limitation the stage reports instead of a finding is torch's own, on the installed version."""
    @torch.library.custom_op("tfn_grad::cube", mutates_args=())
    def cube(x: torch.Tensor) -> torch.Tensor:
        return x ** 3

    cube.register_autograd(lambda ctx, g: 3 * ctx.x ** 2 * g,
                           setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]))
    with pytest.raises(RuntimeError, match="must override the setup_context staticmethod"):
        torch.func.grad(lambda t: cube(t).sum())(torch.randn(3))


def test_every_kind_states_its_severity_on_its_page():
    """The registry and the docs agree: each page's Severity line names the kind's severity."""
    for kind in taxonomy.kinds().values():
        page = kind.page()
        assert f"**Severity:** `{kind.severity}`" in page, kind.id
    assert taxonomy.advice_ids() == {"no-batching-rule", "opaque-op"}


def test_an_overload_only_op_is_named_with_its_overload(ops_report):
    probes, _, _ = ops_report
    vmap = probes["probe_overload"]["stages"]["vmap"]
    assert vmap["status"] == "pass"
    assert [(f["kind"], f["context"]["op"]) for f in vmap["findings"]] == [("no-batching-rule", "tfn::shift.Tensor")]
    assert vmap["findings"][0]["evidence"]["confirmed"] is True


def test_batch_norm_in_training_is_refused_with_its_cause(ops_report):
    probes, _, _ = ops_report
    f = probes["probe_batch_norm"]["stages"]["vmap"]["failure"]
    assert (f["kind"], f["context"]["cause"]) == ("functorch-incompatible", "batch_norm")
    # the oracle: torch.func itself refuses BatchNorm in training mode
    bn = torch.nn.BatchNorm1d(8).train()
    with pytest.raises(RuntimeError, match="Batch norm got a batched tensor"):
        torch.func.vmap(bn)(torch.randn(2, 4, 8))



def test_a_probe_that_is_function_apply_itself_is_named(tracecheck, write_probe):
    """``return MyFn.apply, (x,)``: the Function is bound before tracecheck's hook; it is still found (its class
    named in the finding) and gradchecked."""
    model = write_probe(OPS + """

def probe_apply_itself():
    return OldDouble.apply, (torch.randn(4, 8, dtype=torch.float64, requires_grad=True),)
""")
    res = tracecheck("run", f"{model}::probe_apply_itself", "--stages", "eager,gradcheck,vmap")
    p = res.report["probes"][0]
    f = p["stages"]["vmap"]["failure"]
    assert f["kind"] == "functorch-incompatible" and f["context"]["function"].endswith("OldDouble")
    assert p["stages"]["gradcheck"]["status"] == "pass"
    assert list(p["stages"]["gradcheck"]["extra"]["gradcheck"]) == [f["context"]["function"]]


def test_probes_that_write_their_inputs_or_return_a_one_element_loss_pass(ops_report):
    """By hand: vmap of f equals the loop when every run gets its own inputs, and grad takes a 1-element loss as
    backward() does; so both pass, compared."""
    probes, _, _ = ops_report
    for name in ("probe_writes_its_inputs", "probe_one_element_loss"):
        vmap = probes[name]["stages"]["vmap"]
        assert vmap["status"] == "pass" and vmap["findings"] == [], (name, vmap["findings"])
        assert (vmap["extra"]["vmap"]["vmap"], vmap["extra"]["vmap"]["grad"]) == ("matches", "matches"), name


def test_a_value_dependent_output_shape_is_refused_by_vmap(ops_report):
    probes, _, _ = ops_report
    f = probes["probe_nonzero"]["stages"]["vmap"]["failure"]
    assert (f["kind"], f["context"]["cause"]) == ("functorch-incompatible", "dynamic_shape")
    with pytest.raises(RuntimeError, match="dynamic shape"):     # the oracle: torch.func itself
        torch.func.vmap(torch.nonzero)(torch.randn(2, 8))
