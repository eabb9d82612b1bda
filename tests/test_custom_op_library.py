"""tracecheck on a real custom-op library from PyPI: bitsandbytes' quantized layers on the CPU
(tests/models/bnb_probes.py; issue 41's custom-op library probe).

The oracle is plain ``torch.compile`` in its own process with ``TORCH_LOGS=graph_breaks`` (tests/plain_compile.py):
torch's counters for the compile coverage, and the file and line the log names for every break, with the innermost
frame of its user traceback outside torch, whose distribution (and its installed version) is the owner tracecheck must
name.
"""
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
MODELS = TESTS / "models" / "bnb_probes.py"
_BREAK_LOG = re.compile(r"Graph break in user code at (?P<file>\S+):(?P<line>\d+)")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is in the test extra: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("bnb") / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(MODELS), "--stages", "explain,aot_eager",
                           "--json", str(out)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # the 8-bit layer's break is a finding
    return {p["name"]: p for p in json.loads(out.read_text())["probes"]}


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+, in ')
_TORCH = f"site-packages{os.sep}torch{os.sep}"


def _plain(probe: str) -> tuple[dict, dict[tuple[str, int], str]]:
    """torch's counters after one plain compiled forward, and each break the log names with the file of its code:
    the innermost frame of its "User code traceback" outside torch (a break inside torch, such as a polyfill Dynamo
    inlines, is the code's that called it)."""
    proc = subprocess.run([sys.executable, str(TESTS / "plain_compile.py"), str(MODELS), probe],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "TORCH_LOGS": "graph_breaks"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    breaks = {}
    for block in proc.stderr.split("Graph break in user code at ")[1:]:
        where = _BREAK_LOG.match("Graph break in user code at " + block)
        frames = [m.group("file") for m in _FRAME.finditer(block.split("User code traceback:", 1)[-1])]
        breaks[(where.group("file"), int(where.group("line")))] = next(f for f in reversed(frames) if _TORCH not in f)
    return json.loads(proc.stdout.strip().splitlines()[-1]), breaks


@pytest.mark.parametrize("probe, breaks", [("probe_bnb_int8_outliers", True), ("probe_bnb_nf4", False)])
def test_coverage_and_owners_agree_with_plain_torch_compile(report, probe, breaks):
    plain, plain_breaks = _plain(probe)
    stages = report[probe]["stages"]
    assert bool(plain_breaks) is breaks  # the comparison is not vacuous: one probe breaks in the library, one not
    for stage in ("explain", "aot_eager"):
        assert {(b["file"], b["line"]) for b in stages[stage]["breaks"]} == set(plain_breaks), stage
    cov = stages["explain"]["extra"]["coverage"]
    assert (cov["calls_captured"], cov["unique_graphs"], cov["frames_eager"]) == \
        (plain["calls_captured"], plain["graphs"], plain["frames_eager"])
    owners = set()
    for b in stages["explain"]["breaks"]:
        dist = plain_breaks[(b["file"], b["line"])].split("site-packages/")[1].split("/")[0]
        assert b["owner"] == {"who": "library", "name": dist, "version": importlib.metadata.version(dist)}, b
        owners.add(dist)
    assert owners == ({"bitsandbytes"} if breaks else set())  # the library's own autograd.Function breaks
    # the custom ops ran inside the graphs Dynamo captured: torch.ops.bitsandbytes.* is no break
    assert all("bitsandbytes::" not in (b.get("reason") or "") for b in stages["explain"]["breaks"])
