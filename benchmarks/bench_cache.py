"""Results reused while nothing they depend on changed (collect/cache.py, issue 55): a re-run of an unchanged
``probes/`` against a run after its probe file changed, side by side, with the verdicts of both.

    python benchmarks/bench_cache.py [--pairs N] [PATH]

In a temporary copy of PATH (default: probes/), N pairs (default 3), each back to back: the probe file (the first
``*_probes.py``, else the first file) gets one more comment line, then ``tracecheck run`` (everything re-runs: its
content changed), then ``tracecheck run`` again with nothing changed (reused). Both with ``--json``, whose per-probe
verdicts and per-stage statuses and kinds must be equal. Prints each pair's seconds and ratio unchanged / changed,
and the median ratio (goal: at most 0.1).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cwd: str, target: str) -> tuple[float, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "TRACECHECK_NO_CACHE"}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tracecheck", "run", target, "-j", "2", "--json", "r.json"], cwd=cwd,
                       capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        sys.exit(f"tracecheck run exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    with open(os.path.join(cwd, "r.json")) as f:
        doc = json.load(f)
    verdicts = {p["id"]: (p["verdict"]["status"], {s: (v["status"], sorted({f["kind"] for f in v["findings"]}))
                                                   for s, v in p["stages"].items()}) for p in doc["probes"]}
    return seconds, {"verdicts": verdicts, "reused": sum(1 for p in doc["probes"] if p.get("reused"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", default=os.path.join(REPO, "probes"))
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.basename(os.path.normpath(args.path))
        shutil.copytree(args.path, os.path.join(tmp, name), ignore=shutil.ignore_patterns("__pycache__"))
        open(os.path.join(tmp, "pyproject.toml"), "w").close()
        files = sorted(f for f in os.listdir(os.path.join(tmp, name)) if f.endswith(".py"))
        probe_file = os.path.join(tmp, name, next((f for f in files if f.endswith("_probes.py")), files[0]))
        run(tmp, name)  # unmeasured: the extension's build and Inductor's caches warm for both sides
        ratios = []
        for i in range(args.pairs):
            with open(probe_file, "a") as f:
                f.write(f"# benchmark edit {i} {time.time()}\n")
            changed, a = run(tmp, name)
            unchanged, b = run(tmp, name)
            same = a["verdicts"] == b["verdicts"]
            ratios.append(unchanged / changed)
            print(f"pair {i + 1}: after the change {changed:.1f} s ({a['reused']} probes reused), unchanged "
                  f"{unchanged:.2f} s ({b['reused']} reused): {unchanged / changed:.3f}x, verdicts "
                  f"{'equal' if same else 'DIFFER'}", flush=True)
            if not same or a["reused"] or not b["reused"]:
                sys.exit("the re-run did not reuse exactly the results the changed run made")
        print(f"median unchanged / changed: {statistics.median(ratios):.3f}x (goal <= 0.1x)")


if __name__ == "__main__":
    main()
