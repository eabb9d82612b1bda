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
    assert st["explain"]["graph_break_count"] == 1
    opcheck_kinds = {f["kind"] for f in st["opcheck"]["findings"]}
    assert opcheck_kinds == {"missing-fake", "missing-autograd"}
    assert all(f["context"]["op"] for f in st["opcheck"]["findings"])


@pytest.mark.slow
def test_correct_custom_op_passes_every_stage(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(GOOD_CUSTOM_OP)))
    assert res.returncode == 0, res.stdout
    probe = res.probe("probe_good_op")
    assert probe["verdict"] == {"status": "pass", "first_failing_stage": None, "kinds": []}
    assert probe["stages"]["opcheck"]["status"] == "pass"  # opcheck ran (the op was recorded), not skipped
    assert probe["stages"]["explain"]["graph_count"] == 1
    assert probe["stages"]["explain"]["graph_break_count"] == 0
    assert res.report["environment"]["device"] == "cpu"
    assert res.report["environment"]["npu_available"] is False
