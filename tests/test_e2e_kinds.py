"""End-to-end kinds through the CLI on small probes written here (the shared cases cover the rest)."""
import pytest

LIBRARY_OP = '''
import torch
lib = torch.library.Library("tc_e2e_lib", "DEF")
lib.define("cpu_only(Tensor x) -> Tensor")
lib.impl("cpu_only", lambda x: x * 2, "CPU")          # no Meta kernel, no Autograd kernel

def f(x):
    return torch.ops.tc_e2e_lib.cpu_only(x.sin()).cos()

def probe_library_op():
    return f, (torch.randn(4, requires_grad=True),)
'''

GOOD_CUSTOM_OP = '''
import torch

@torch.library.custom_op("tc_e2e::scaled", mutates_args=())
def scaled(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s

@scaled.register_fake
def _(x, s):
    return torch.empty_like(x)

def _setup(ctx, inputs, output):
    ctx.s = inputs[1]

def _bwd(ctx, g):
    return g * ctx.s, None

scaled.register_autograd(_bwd, setup_context=_setup)

def probe_good_op():
    return (lambda x: scaled(x.sin(), 3.0).sum(-1)), (torch.randn(3, 4, requires_grad=True),)
'''


@pytest.mark.slow
def test_library_op_without_meta_or_autograd(tracecheck, write_probe):
    """torch_failure_wording.md §5: GB0090 graph break under compile, C++ autograd-fallback warning in eager."""
    res = tracecheck("run", str(write_probe(LIBRARY_OP)), "--stages", "eager,explain,opcheck")
    assert res.returncode == 1
    st = res.probe("probe_library_op")["stages"]
    eager = st["eager"]["failure"]
    assert eager["kind"] == "missing-autograd" and eager["context"]["op"] == "tc_e2e_lib::cpu_only"
    assert eager["context"]["warning"] is True
    brk = st["explain"]["breaks"][0]
    assert (brk["kind"], brk["gb_code"]) == ("missing-fake", "GB0090")
    assert st["explain"]["graph_break_sites"] == 1
    opcheck_kinds = {f["kind"] for f in st["opcheck"]["findings"]}
    assert opcheck_kinds == {"missing-fake", "missing-autograd"}
    assert all(f["context"]["op"] for f in st["opcheck"]["findings"])


@pytest.mark.slow
def test_correct_custom_op_passes_every_stage(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(GOOD_CUSTOM_OP)))
    assert res.returncode == 0, res.stdout
    probe = res.probe("probe_good_op")
    # a custom op is opaque to Inductor and, without register_vmap, batched by vmap's fallback: advice, no failure
    assert probe["verdict"] == {"status": "pass", "first_failing_stage": None, "kinds": [],
                                "advice": ["opaque-op", "no-batching-rule"],
                                "targets": {"compile": "pass", "func": "pass", "export": "pass"},
                                "require": ["compile"], "not_required": []}
    assert probe["stages"]["opcheck"]["status"] == "pass"  # opcheck ran (the op was recorded), not skipped
    assert probe["stages"]["explain"]["graph_count"] == 1
    assert probe["stages"]["explain"]["graph_break_count"] == 0
    assert res.report["environment"]["device"] == "cpu"
    assert res.report["environment"]["npu_available"] is False


MODULE_WITH_OPS = '''
import torch

@torch.library.custom_op("tc_e2e_mod::gate", mutates_args=())
def gate(x: torch.Tensor) -> torch.Tensor:           # registered without register_autograd
    return x * torch.sigmoid(x)

@gate.register_fake
def _(x):
    return torch.empty_like(x)

@torch.library.custom_op("tc_e2e_mod::dequant", mutates_args=())
def dequant(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32) * 0.5

@dequant.register_fake
def _(x):
    return torch.empty(x.shape, dtype=torch.float16, device=x.device)   # lies: the kernel returns float32

class Tagger(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.op = op

    def forward(self, ids):
        return self.op(self.emb(ids)).sum(-1)

def probe_gate():
    return Tagger(gate), (torch.tensor([[1, 2, 3]]),)      # integer ids: only the parameters train

def probe_dequant():
    codes = torch.randint(-8, 8, (4, 6), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    return (lambda c: dequant(c) + 1.0), (codes,)
'''


@pytest.mark.slow
def test_model_given_integer_ids_runs_backward_and_finds_the_missing_autograd(tracecheck, write_probe):
    """An eager ✓ no longer hides a custom op without an autograd formula inside a model fed token ids."""
    res = tracecheck("run", str(write_probe(MODULE_WITH_OPS)), "-k", "probe_gate", "--stages", "eager")
    assert res.returncode == 1, res.stdout
    eager = res.probe("probe_gate")["stages"]["eager"]
    assert eager["failure"]["kind"] == "missing-autograd"
    assert eager["failure"]["context"]["op"] == "tc_e2e_mod::gate"
    assert eager["failure"]["evidence"]["phase"] == "backward"


@pytest.mark.slow
def test_a_fake_that_lies_makes_inductor_differ_and_the_fix_names_the_op(tracecheck, write_probe):
    """The fake says float16, the kernel returns float32. torch 2.13's inductor reads the buffer as float16
    and returns garbage (the shared case 29 bug): a numeric-mismatch against eager whose fix names the custom
    op. torch 2.14's inductor asserts the op's output metadata at run time instead: fake-mismatch. Either way
    inductor is flagged and aot_eager (which runs the real kernel's output) is not."""
    import torch

    res = tracecheck("run", str(write_probe(MODULE_WITH_OPS)), "-k", "probe_dequant", "--stages",
                     "eager,aot_eager,inductor")
    assert res.returncode == 1, res.stdout
    stages = res.probe("probe_dequant")["stages"]
    assert stages["aot_eager"]["status"] == "pass"
    kinds = [f["kind"] for f in stages["inductor"]["findings"]]
    if torch.torch_version.TorchVersion(torch.__version__) < (2, 14):  # compared as a version, not a string
        [f] = [f for f in stages["inductor"]["findings"] if f["kind"] == "numeric-mismatch"]
        assert f["context"]["phase"] == "forward" and f["context"]["cause"] == "custom-op"
        assert f["context"]["custom_ops"] == ["tc_e2e_mod::dequant"]
        assert f["evidence"]["worst"]["max_abs_diff"] > 1.0
        assert "custom op(s) tc_e2e_mod::dequant" in res.stdout and "opcheck" in res.stdout
    else:
        assert kinds == ["fake-mismatch"], kinds
        assert stages["inductor"]["findings"][0]["context"]["op"] == "tc_e2e_mod::dequant"
