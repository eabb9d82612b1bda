"""A warm re-run of an unchanged model compiles from Inductor's and AOTAutograd's caches, and says so (issue 42):
the inductor stage keeps torch's cache counters (model/payloads.InductorKernels), the terminal sums them."""
import json
import os
import subprocess
import sys

import pytest


SMALL = '''
import torch


def probe_mlp():
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    return net, (torch.randn(4, 8),)
'''


@pytest.mark.slow
def test_a_warm_rerun_compiles_from_inductors_caches_and_says_so(tmp_path):
    """PyTorch's documented behaviour: with the same cache directory, a fresh process compiling the same graph loads
    it from the FX graph cache (``counters["inductor"]["fxgraph_cache_hit"]``) instead of compiling it again."""
    (tmp_path / "m.py").write_text(SMALL)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE",
                                                            "TORCHINDUCTOR_FORCE_DISABLE_CACHES")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")  # torch's defaults: caches on
    runs = []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "m.py", "--stages", "inductor",
                               "--json", f"r{i}.json"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                              env=env)
        extra = json.loads((tmp_path / f"r{i}.json").read_text())["probes"][0]["stages"]["inductor"]["extra"]
        runs.append((extra["inductor"], proc.stdout))
    (cold, cold_out), (warm, warm_out) = runs
    assert cold["fxgraph_cache_miss"] >= 1 and cold["fxgraph_cache_hit"] == 0 and "a warm run" not in cold_out, cold
    assert warm["fxgraph_cache_hit"] >= 1 and warm["fxgraph_cache_miss"] == 0, warm
    assert "Inductor's caches (1 probe, inductor stage): FX graph cache " in warm_out
    assert "a warm run: compiled from the caches" in warm_out and "a cold run: compiled afresh" in cold_out


def test_fix_turns_the_caches_off_only_while_it_runs(monkeypatch, tmp_path):
    """``tracecheck fix`` verifies from scratch (fix/pipeline._NO_CACHES), and gives the caller's environment back:
    a later run in the same process (an API user, a test after it) keeps Inductor's caches."""
    import os as _os

    from tracecheck.fix import pipeline

    monkeypatch.delenv("TORCHINDUCTOR_FX_GRAPH_CACHE", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    seen = {}

    def fake_fix(opts, progress, path, name, patched):
        seen.update({k: _os.environ.get(k) for k in pipeline._NO_CACHES})
        raise RuntimeError("stop")
    monkeypatch.setattr(pipeline, "_fix", fake_fix)
    monkeypatch.setattr(pipeline, "_validate", lambda opts: ("m.py", "probe", None))
    with pytest.raises(RuntimeError):
        pipeline.fix(None)
    assert seen == {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    assert "TORCHINDUCTOR_FX_GRAPH_CACHE" not in _os.environ and _os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
