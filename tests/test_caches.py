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
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    runs = []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "m.py", "--stages", "inductor",
                               "--json", f"r{i}.json"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                              env=env)
        extra = json.loads((tmp_path / f"r{i}.json").read_text())["probes"][0]["stages"]["inductor"]["extra"]
        runs.append((extra["inductor"], proc.stdout))
    (cold, cold_out), (warm, warm_out) = runs
    assert cold["fxgraph_cache_miss"] >= 1 and cold["fxgraph_cache_hit"] == 0 and "a warm run" not in cold_out
    assert warm["fxgraph_cache_hit"] >= 1 and warm["fxgraph_cache_miss"] == 0
    assert "Inductor's caches (1 probe, inductor stage): FX graph cache " in warm_out
    assert "a warm run: compiled from the caches" in warm_out and "a cold run: compiled afresh" in cold_out
