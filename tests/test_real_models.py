"""tracecheck on real architectures: tiny random-weight ``transformers`` models (tests/models/hf_tiny.py).

Oracles are independent of tracecheck: plain ``torch.compile`` run in its own process with
``TORCH_LOGS=graph_breaks`` (tests/plain_compile.py) for graph counts and break locations, and the models'
own configuration for what must train. One tracecheck run (all default stages; BigBird without inductor) serves every test.
"""
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tracecheck.stages import STAGES

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
MODELS = TESTS / "models" / "hf_tiny.py"
TRAINING = ["probe_gpt2", "probe_bert", "probe_mixtral", "probe_bigbird"]
_BREAK_LOG = re.compile(r"Graph break in user code at (?P<file>\S+):(?P<line>\d+)")


#: every default stage but inductor for BigBird: Inductor compiles its dozen graphs per layer for longer than the other
#: four models' graphs together (207 s of 742 s of stage time with warm caches, more on CI's cold ones); what BigBird
#: adds (NumPy's random stream, data-dependent breaks) aot_eager and the other stages show
BIGBIRD_STAGES = ",".join(s for s in STAGES if s != "inductor")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("real")
    probes = {}
    for name, args in (("others", [str(MODELS), "-k", "not probe_bigbird"]),
                       ("bigbird", [f"{MODELS}::probe_bigbird", "--stages", BIGBIRD_STAGES])):
        out = folder / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", *args, "-j", "2", "--json", str(out)],
                              capture_output=True, text=True, timeout=1500,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr   # bigbird's graph breaks are findings
        probes.update({p["name"]: p for p in json.loads(out.read_text())["probes"]})
    return probes


def plain_compile(probe: str, *flags: str) -> tuple[dict, set[tuple[str, int]]]:
    proc = subprocess.run([sys.executable, str(TESTS / "plain_compile.py"), str(MODELS), probe, *flags],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_LOGS": "graph_breaks"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    breaks = {(m.group("file"), int(m.group("line"))) for m in _BREAK_LOG.finditer(proc.stderr)}
    return json.loads(proc.stdout.strip().splitlines()[-1]), breaks


@pytest.mark.parametrize("probe", TRAINING)
def test_graphs_and_breaks_agree_with_plain_torch_compile(report, probe):
    plain, plain_breaks = plain_compile(probe)
    stages = report[probe]["stages"]
    for stage in ("explain", "aot_eager"):
        got = {(b["file"], b["line"]) for b in stages[stage]["breaks"]}
        assert got == plain_breaks, (stage, got ^ plain_breaks)
        assert stages[stage]["graph_count"] == plain["graphs"], stage
    assert stages["explain"]["graph_break_sites"] == len(plain_breaks)
    assert stages["explain"]["graph_break_count"] == plain["graphs"] - 1  # graphs - 1, as explain() counts
    if probe == "probe_bigbird":   # the architecture that does break: the comparison above is not vacuous
        assert plain["graphs"] > 1 and len(plain_breaks) >= 5
    # compile coverage: torch's own counters, as plain torch.compile leaves them
    cov = stages["explain"]["extra"]["coverage"]
    assert (cov["calls_captured"], cov["unique_graphs"], cov["frames_eager"]) == \
        (plain["calls_captured"], plain["graphs"], plain["frames_eager"])
    # the owner of every break: the distribution whose files TORCH_LOGS=graph_breaks names, at its installed version
    for b in stages["explain"]["breaks"]:  # (a tiny model's breaks are the library's: the probe file only builds it)
        dist = b["file"].split("site-packages/")[1].split("/")[0]
        assert b["owner"] == {"who": "torch" if dist == "torch" else "library", "name": dist,
                              "version": importlib.metadata.version(dist)}, b


@pytest.mark.parametrize("probe", TRAINING)
def test_models_given_token_ids_run_backward_everywhere(report, probe):
    stages = report[probe]["stages"]
    for name in ("eager", "aot_eager", "inductor", "fullgraph", "compiled_autograd"):
        if name == "inductor" and probe == "probe_bigbird":   # not run for BigBird (BIGBIRD_STAGES)
            continue
        s = stages[name]
        if name == "fullgraph" and s["status"] == "fail":   # bigbird: fullgraph stops at its first break
            continue
        assert s["status"] != "skip", (name, s["skip_reason"])
        assert s["phases"] == ["forward", "backward"], name
    assert stages["explain"]["phases"] == ["forward"]
    ca = stages["compiled_autograd"]["extra"]
    assert ca["captures"] >= 1 and ca["unique_graphs_with_ca"] >= 1


def test_dropout_is_on_and_gives_no_false_numeric_mismatch(report):
    # precondition: the dropout really draws, since plain inductor (its own RNG) differs from eager on it
    plain, _ = plain_compile("probe_gpt2", "--inductor-differs")
    assert plain["inductor_max_diff"] > 1e-3
    for name in TRAINING:
        kinds = {f["kind"] for s in report[name]["stages"].values() for f in s["findings"]}
        assert "numeric-mismatch" not in kinds, name
    for name in ("probe_gpt2", "probe_bert", "probe_mixtral"):
        assert report[name]["verdict"]["status"] == "pass", report[name]["verdict"]


def test_numpy_random_blocks_are_compared_on_numpys_stream(report):
    """BigBird draws its random attention blocks from NumPy; Dynamo moves such calls onto torch's generator,
    so compiled and eager differ by design. tracecheck compares on NumPy's stream and says so."""
    stages = report["probe_bigbird"]["stages"]
    assert "inductor" not in stages  # BIGBIRD_STAGES
    assert "NumPy" in stages["aot_eager"]["extra"]["numerics"]
    kinds = {name: {f["kind"] for f in s["findings"]} for name, s in stages.items()}
    assert all(k <= {"graph-break", "data-dependent"} for name, k in kinds.items() if name not in ("dynamic", "vmap")), \
        kinds
    # the dynamic stage varies the batch dimension only: Dynamo's crash at modeling_big_bird.py:1028 under
    # dynamic=True (InternalTorchDynamoError, "SymNodeVariable() is not a constant", torch 2.13.0) needs the sequence
    # length symbolic too, and a user who varies the batch under plain torch.compile never meets it (the oracle)
    plain = subprocess.run([sys.executable, str(TESTS / "plain_compile.py"), str(MODELS), "probe_bigbird",
                            "--batch-sizes"], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert plain.returncode == 0, plain.stderr[-3000:]
    oracle = json.loads(plain.stdout.strip().splitlines()[-1])
    assert oracle["varying_batch"] is None
    if torch.torch_version.TorchVersion(torch.__version__) < (2, 14):
        assert oracle["dynamic_true"] == "InternalTorchDynamoError"  # what the stage no longer reports, and why
    assert stages["dynamic"]["status"] in ("pass", "fail"), stages["dynamic"]
    assert kinds["dynamic"] <= {"graph-break", "data-dependent"}, kinds["dynamic"]


def test_frozen_model_is_checked_forward_only_and_says_so(report, tmp_path):
    stages = report["probe_gpt2_frozen"]["stages"]
    for name in ("eager", "aot_eager", "inductor", "fullgraph"):
        assert stages[name]["status"] == "pass" and stages[name]["phases"] == ["forward"], name
    assert stages["compiled_autograd"]["status"] == "skip"
    assert "no backward" in stages["compiled_autograd"]["skip_reason"]


def test_torch_func_on_the_real_models(report):
    """vmap and grad on the tiny models. By hand, from the models' code: Llama and Mixtral are deterministic and
    batch; GPT-2 and BERT train with dropout, so vmap runs with randomness="different" and is not compared;
    BigBird without an attention mask runs transformers' warn_if_padding_and_no_attention_mask, whose
    ``pad_token_id in input_ids[:, [-1, 0]]`` calls .item(), which vmap refuses."""
    for name in ("probe_mixtral",):
        vmap = report[name]["stages"]["vmap"]
        assert vmap["status"] == "pass" and vmap["findings"] == [], name
        assert (vmap["extra"]["vmap"]["vmap"], vmap["extra"]["vmap"]["grad"]) == ("matches", "matches"), name
        assert vmap["extra"]["vmap"]["grads_compared"] == len(vmap["extra"]["vmap"]["grad_wrt"]) > 0
    for name in ("probe_gpt2", "probe_bert"):
        vmap = report[name]["stages"]["vmap"]
        assert vmap["status"] == "pass" and vmap["extra"]["vmap"]["compared"] is False, name
        assert vmap["extra"]["vmap"]["grad"] == "matches", name
        # token ids only: nothing to perturb, and dropout: nothing the loop can reproduce; both said
        assert any("randomness='different'" in x for x in vmap["extra"]["not_checked"]), name
        assert any("no floating input to perturb" in x for x in vmap["extra"]["not_checked"]), name
    f = report["probe_bigbird"]["stages"]["vmap"]["failure"]
    assert (f["kind"], f["context"]["cause"]) == ("functorch-incompatible", "item")
    assert "pad_token_id in input_ids" in f["evidence"]["user_frame"]["code"]
    assert f["evidence"]["user_frame"]["file"].endswith("modeling_utils.py")
