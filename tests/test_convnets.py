"""Conv nets in training mode (benchmarks/models/convnets.py): the default run passes where plain torch.compile finds
nothing, torch.func's refusals show only when asked (--require func), and the compiled-vs-eager check neither cries
wolf on BatchNorm's fp32 noise nor lets a 1% gradient error through.

Oracles: plain torch.compile in its own process (tests/plain_compile.py, TORCH_LOGS=graph_breaks) for graphs and
breaks; torch.func itself for the refusal; float64 for the injected error's size (1%, written by hand)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CONVNETS = REPO / "benchmarks" / "models" / "convnets.py"
PROBES = ["probe_resnet18", "probe_hf_resnet", "probe_resnet18_grad_hook"]
_BREAK_LOG = re.compile(r"Graph break in user code at (?P<file>\S+):(?P<line>\d+)")


def _run(tmp, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", *[f"{CONVNETS}::{p}" for p in PROBES], "-j", "2",
                           "--json", str(out), *args], capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    return proc, {p["name"]: p for p in json.loads(out.read_text())["probes"]} if out.exists() else {}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("conv"))


def test_the_default_run_passes_the_conv_nets(default_run):
    proc, probes = default_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    for name in PROBES:
        assert probes[name]["verdict"]["status"] == "pass", probes[name]["verdict"]
        for stage in ("aot_eager", "inductor", "compiled_autograd"):
            s = probes[name]["stages"][stage]
            assert s["phases"] == ["forward", "backward"] and s["findings"] == [], (name, stage, s["findings"])


@pytest.mark.parametrize("name", PROBES)
def test_graphs_and_breaks_agree_with_plain_torch_compile(default_run, name):
    _, probes = default_run
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "plain_compile.py"), str(CONVNETS), name],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_LOGS": "graph_breaks"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain = json.loads(proc.stdout.strip().splitlines()[-1])
    breaks = {(m.group("file"), int(m.group("line"))) for m in _BREAK_LOG.finditer(proc.stderr)}
    explain = probes[name]["stages"]["explain"]
    assert (explain["graph_count"], explain["graph_break_count"]) == (plain["graphs"], len(breaks)) == (1, 0)
    cov = explain["extra"]["coverage"]  # compile coverage: torch's own counters, as plain torch.compile leaves them
    assert (cov["calls_captured"], cov["unique_graphs"], cov["frames_eager"]) == \
        (plain["calls_captured"], plain["graphs"], plain["frames_eager"])
    assert cov["calls_captured"] > 20  # a whole conv net in one graph: not vacuous


def test_batchnorm_in_training_is_refused_by_vmap_and_gates_only_when_asked(default_run, tmp_path):
    _, probes = default_run
    vmap = probes["probe_resnet18"]["stages"]["vmap"]
    assert vmap["status"] == "fail" and vmap["target"] == "func"
    # vmap: batched statistics into unbatched running buffers; grad: their in-place update of a captured tensor
    assert {(f["kind"], f["context"]["cause"]) for f in vmap["findings"]} == {
        ("functorch-incompatible", "batch_norm"), ("functorch-incompatible", "captured_mutation")}
    assert probes["probe_resnet18"]["verdict"]["not_required"] == ["functorch-incompatible"]
    proc, required = _run(tmp_path, "--stages", "eager,vmap", "--require", "func")
    assert proc.returncode == 1
    assert required["probe_resnet18"]["verdict"]["kinds"] == ["functorch-incompatible"]
    # the oracles: torch.func.vmap and torch.func.grad refuse BatchNorm in training mode
    bn = torch.nn.BatchNorm2d(3).train()
    with pytest.raises(RuntimeError, match="Batch norm got a batched tensor"):
        torch.func.vmap(bn)(torch.randn(2, 4, 3, 8, 8))
    params = dict(bn.named_parameters())
    with pytest.raises(RuntimeError, match="would mutate a captured Tensor"):
        torch.func.grad(lambda p: torch.func.functional_call(bn, p, (torch.randn(4, 3, 8, 8),)).sum())(params)


def test_a_gradient_hook_gives_no_false_mismatch(default_run):
    """The hook runs in eager and in every compiled run alike (no numeric-mismatch anywhere); torch.func.grad, which
    would not run it, refuses this model anyway (BatchNorm's running statistics), and that refusal is what is said."""
    _, probes = default_run
    p = probes["probe_resnet18_grad_hook"]
    assert not any(f["kind"] == "numeric-mismatch" for s in p["stages"].values() for f in s["findings"])
    causes = {f["context"]["cause"] for f in p["stages"]["vmap"]["findings"]}
    assert causes == {"batch_norm", "captured_mutation"}


INJECTED = '''
import sys

sys.path[:0] = [{models!r}, {benchmarks!r}]
import calibrate_numerics                        # its injections: an error only the compiled run makes
import convnets


def probe_first_conv_gradient_off_by_1_percent():
    convnets.SEED = 1                            # the first conv's weight gradient is 1% too large when compiled
    return calibrate_numerics.injected(convnets.resnet18(), "grad x1.01 conv"), (convnets.images(8, seed=1),)


def probe_batchnorm_noise():                      # seed 1, batch 8: Inductor's BatchNorm kernels, 0.12% off float64
    convnets.SEED = 1
    return convnets.resnet18(), (convnets.images(8, seed=1),)
'''


def test_batchnorm_noise_passes_and_a_one_percent_gradient_error_does_not(tmp_path):
    model = tmp_path / "injected.py"
    model.write_text(INJECTED.format(models=str(CONVNETS.parent), benchmarks=str(CONVNETS.parent.parent)))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(model), "--stages", "eager,inductor",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    probes = {p["name"]: p for p in json.loads(out.read_text())["probes"]}
    assert probes["probe_batchnorm_noise"]["stages"]["inductor"]["findings"] == [], proc.stdout[-3000:]
    bad = probes["probe_first_conv_gradient_off_by_1_percent"]["stages"]["inductor"]
    f = bad["findings"][0]
    assert f["kind"] == "numeric-mismatch" and f["context"]["phase"] == "backward"
    assert "grad param:stem.0.parametrizations.weight.original" in f["evidence"]["disagreeing_tensors"]
    assert "per-model tolerance" in f["evidence"]["worst"]["rule"]   # the BatchNorm floor was applied, and held
