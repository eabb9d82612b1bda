"""Issue 22, end to end through the CLI: where torch says why a stage failed, tracecheck names it (no ``unknown``);
torch's own C builtins are not the user's extension; the eager failure seen again is the same root cause; a
torch.func.grad that cannot agree with autograd (gradient hooks) is not compared; tracecheck's own failure is an
internal error (exit 3), never a finding about the probe.

One run over PROBES (module fixture); each test reads its probe. The oracles are torch itself, run in the test: the
exception each transform or compile raises, and whether torch.func runs the hooks."""
import json
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

PROBES = '''
import torch
from torch._higher_order_ops.scan import scan

lib = torch.library.Library("trust22", "DEF")
lib.define("log_stats(Tensor x) -> ()")
lib.impl("log_stats", lambda x: None, "CompositeExplicitAutograd")


def probe_op_without_returns():                   # vmap: "The fallback path does not support operations with no returns"
    def f(x):
        torch.ops.trust22.log_stats(x)
        return x.sin()
    return f, (torch.randn(4, 3),)


@torch.library.custom_op("trust22::scalar_out", mutates_args=())
def scalar_out(x: torch.Tensor) -> float:
    return float(x.sum())


@scalar_out.register_fake
def _(x):
    return 0.0


def probe_op_returning_a_float():                 # vmap: "We could not generate a fallback"; opcheck: AOTDispatcher
    return (lambda x: x * scalar_out(x)), (torch.randn(4, 3),)


@torch.library.custom_op("trust22::stub", mutates_args=())
def stub(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@stub.register_fake
def _(x):
    raise NotImplementedError("fake not written yet")


def probe_stub_fake():                            # export raises the fake's NotImplementedError bare
    return (lambda x: stub(x) + 1), (torch.randn(4, 3),)


def probe_marked_dynamic_then_specialized():      # ConstraintViolationError at every compile stage
    x = torch.randn(4, 3)
    torch._dynamo.mark_dynamic(x, 0)

    def f(x):
        if x.shape[0] == 4:
            return x * 2
        return x
    return f, (x,)


class Old(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def probe_calls_vmap_itself():                    # the probe's own torch.func call is refused
    return (lambda x: torch.func.vmap(lambda r: Old.apply(r).sum())(x)), (torch.randn(4, 3),)


def probe_cond_under_grad():                      # torch.func.grad: KeyError <TransformType.Grad: 2>
    def f(x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))
    return f, (torch.randn(4, 3, requires_grad=True),)


@torch.library.custom_op("trust22::picky", mutates_args=())
def picky(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % 8:
        raise RuntimeError(f"picky: last dim must be a multiple of 8, got {x.shape[-1]}")
    return x * 2


@picky.register_fake
def _(x):
    return torch.empty_like(x)


picky.register_autograd(lambda ctx, g: g * 2)


def probe_op_fails_in_eager():                    # opcheck and gradcheck run it again: the same error
    return (lambda x: picky(x).sum()), (torch.randn(4, 3, requires_grad=True),)


class Scaled(torch.Tensor):
    @staticmethod
    def __new__(cls, data, scale):
        r = torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)
        r._data, r._scale = data, scale
        return r

    def __init__(self, data, scale):
        pass

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t._data * t._scale if isinstance(t, Scaled) else t
        return func(*torch.utils._pytree.tree_map(unwrap, args), **torch.utils._pytree.tree_map(unwrap, kwargs or {}))


def probe_tensor_subclass():                      # <unknown module>.TensorBase._make_wrapper_subclass is torch's
    return (lambda x: (Scaled(x, 2.0) + 1) * 3), (torch.randn(4, 3),)


def _halve(p):
    p.grad.mul_(0.5)


def probe_gradient_hook():                        # autograd runs the hook, torch.func.grad does not
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    m[0].weight.register_post_accumulate_grad_hook(_halve)
    return m, (torch.randn(5, 3),)


class RetainGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        if h.requires_grad:
            h.retain_grad()
        return self.b(h.tanh())


def probe_retain_grad():                          # torch.func refuses retain_grad() by name
    return RetainGrad(), (torch.randn(5, 3),)


def probe_while_loop():                            # vmap refuses it; not "the probe does not run on its inputs"
    from torch._higher_order_ops.while_loop import while_loop

    def f(x):
        return while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y.cos()), (torch.tensor(0), x))[1]
    return f, (torch.randn(4, 3),)
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trust")
    (folder / "trust.py").write_text(PROBES)
    out = folder / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "trust.py", "--json", str(out),
                           "--require", "export,func"], capture_output=True, text=True, timeout=1200, cwd=folder)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    return {p["name"]: p for p in report["probes"]}, proc


def _findings(p: dict, stage: str) -> list[dict]:
    return p["stages"][stage]["findings"]


def _kinds(p: dict, stage: str) -> list[str]:
    return [f["kind"] for f in _findings(p, stage)]


def test_no_unknown_anywhere(run):
    probes, proc = run
    unknown = {(name, stage) for name, p in probes.items() for stage, s in p["stages"].items()
               for f in s["findings"] if f["kind"] == "unknown"}
    assert unknown == set(), proc.stdout[-4000:]


def test_vmap_over_an_op_without_returns_or_with_a_float_output(run):
    probes, _ = run
    for name, op, cause in (("probe_op_without_returns", "trust22::log_stats", "no_returns"),
                            ("probe_op_returning_a_float", "trust22::scalar_out", "no_fallback")):
        f = _findings(probes[name], "vmap")[0]
        assert (f["kind"], f["context"]["cause"], f["context"]["op"]) == ("functorch-incompatible", cause, op)
    # the oracle: torch.func.vmap itself refuses an op with no returns, naming it
    lib = torch.library.Library("trust22_oracle", "DEF")
    lib.define("noret(Tensor x) -> ()")
    lib.impl("noret", lambda x: None, "CompositeExplicitAutograd")
    with pytest.raises(RuntimeError, match="does not support operations with no returns"):
        torch.func.vmap(lambda x: torch.ops.trust22_oracle.noret(x) or x)(torch.randn(2, 3))


def test_opchecks_aot_output_mismatch_is_the_fake(run):
    probes, _ = run
    opcheck = _findings(probes["probe_op_returning_a_float"], "opcheck")
    assert {(f["kind"], f["context"]["cause"]) for f in opcheck} == {("fake-mismatch", "aot_outputs")}


def test_export_of_a_stub_fake_is_missing_fake(run):
    probes, _ = run
    f = _findings(probes["probe_stub_fake"], "export")[0]
    assert (f["kind"], f["context"]["cause"], f["context"]["op"]) == ("missing-fake", "stub", "trust22::stub")
    assert f["evidence"]["user_frame"]["code"] == 'raise NotImplementedError("fake not written yet")'


def test_a_dimension_marked_dynamic_and_specialized(run):
    probes, _ = run
    p = probes["probe_marked_dynamic_then_specialized"]
    for stage in ("explain", "aot_eager", "inductor", "fullgraph", "export"):
        f = _findings(p, stage)[0]
        assert (f["kind"], f["context"]["cause"]) == ("dynamic-shape", "marked"), (stage, f)
    assert _findings(p, "explain")[0]["evidence"]["user_frame"]["code"] == "if x.shape[0] == 4:"


def test_a_probe_refused_by_its_own_torch_func_call(run):
    probes, _ = run
    f = _findings(probes["probe_calls_vmap_itself"], "eager")[0]
    assert (f["kind"], f["context"]["cause"]) == ("functorch-incompatible", "setup_context")


def test_torch_func_grad_over_cond_names_the_op(run):
    probes, _ = run
    f = next(f for f in _findings(probes["probe_cond_under_grad"], "vmap") if f["kind"] == "functorch-incompatible")
    assert (f["context"]["cause"], f["context"]["hop"], f["context"]["transform"]) == ("hop", "torch.cond", "grad")
    # the oracle: torch.func.grad over torch.cond refuses it (a KeyError for the missing Grad rule, or, on a first
    # call, cond's own compile failing on the transform's wrapped tensors)
    with pytest.raises((KeyError, AssertionError)):
        torch.func.grad(lambda x: torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)).sum())(
            torch.randn(3))


def test_the_eager_failure_again_is_the_same_root_cause(run):
    probes, _ = run
    p = probes["probe_op_fails_in_eager"]
    for stage in ("eager", "opcheck", "gradcheck"):
        assert set(_kinds(p, stage)) == {"eager-error"}, (stage, p["stages"][stage])
    assert "hit the same error" in _findings(p, "opcheck")[0]["summary"]


def test_torchs_own_wrapper_subclass_constructor_is_not_pybind(run):
    probes, _ = run
    p = probes["probe_tensor_subclass"]
    kinds = {k for stage in ("explain", "fullgraph") for k in _kinds(p, stage)}
    assert kinds == {"graph-break"}


def test_gradient_hooks_skip_the_grad_comparison_and_say_why(run):
    probes, _ = run
    vmap = probes["probe_gradient_hook"]["stages"]["vmap"]
    assert vmap["status"] == "pass" and vmap["findings"] == []
    assert any("post-accumulate-grad hook on param:0.weight" in x for x in vmap["extra"]["not_checked"])
    assert vmap["extra"]["vmap"]["grad"].startswith("ran (not compared: the probe has gradient hooks")
    # the oracle: torch.func.grad's gradient is not autograd's once the hook halves .grad
    m = torch.nn.Linear(3, 2)

    def halve(p):
        p.grad.mul_(0.5)

    m.weight.register_post_accumulate_grad_hook(halve)
    x = torch.randn(5, 3)
    m(x).sum().backward()
    g = torch.func.grad(lambda p: torch.func.functional_call(m, p, (x,)).sum())(dict(m.named_parameters()))
    assert torch.allclose(g["weight"], 2 * m.weight.grad)


def test_retain_grad_is_a_torch_func_refusal_by_name(run):
    probes, _ = run
    f = _findings(probes["probe_retain_grad"], "vmap")[0]
    assert (f["kind"], f["context"]["cause"]) == ("functorch-incompatible", "retain_grad")


def test_a_while_loop_that_vmap_refuses_is_a_refusal_not_a_skip(run):
    probes, _ = run
    vmap = probes["probe_while_loop"]["stages"]["vmap"]
    assert vmap["status"] == "fail", vmap
    assert not any("does not run" in x for x in vmap["extra"].get("not_checked") or [])


SABOTAGE = '''
import torch
import tracecheck.evidence.tracelog as tracelog


def _broken(self, payload):
    raise ValueError("injected parser failure")


tracelog.TraceCollector._add_break = _broken     # tracecheck's break parser now fails inside every stage


def probe_print():
    def f(x):
        print("hello")                           # a graph break the broken parser cannot record
        return x.sin()
    return f, (torch.randn(3),)
'''


def test_a_parser_that_fails_is_an_internal_error_not_a_pass(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(SABOTAGE)), "--stages", "eager,explain")
    assert res.returncode == 3, res.stdout[-3000:]
    p = res.probe("probe_print")
    explain = p["stages"]["explain"]
    assert explain["status"] == "internal-error" and explain["findings"] == []
    assert "ValueError: injected parser failure" in explain["internal_error"]
    assert p["verdict"]["status"] == "internal-error" and p["verdict"]["kinds"] == []
    assert "tracecheck's own code failed in this stage" in res.stdout
