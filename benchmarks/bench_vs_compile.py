"""tracecheck against what a user runs instead: one plain ``torch.compile`` (Inductor) forward and backward of the
same probe, each in its own fresh process, side by side (issue 42).

    python benchmarks/bench_vs_compile.py [--pairs N] [--warm] [PATH ...]

For each probe file (default: benchmarks/models/tiny_llama.py, probes/, benchmarks/models/convnets.py), N pairs
(default 3), each pair back to back so the machine's load weighs on both alike: ``python plain.py`` (import torch and
the file, build the case, ``torch.compile(fn)``, one forward, a backward of the sum of its floating outputs that
need grad) and ``tracecheck run PATH`` with every default stage. Both start with an empty Inductor cache directory
(cold: what a first run costs), or with ``--warm`` one that the same side filled on an unmeasured run before.
Prints each pair's seconds and ratio tracecheck / plain, the median ratio, and where tracecheck's stage seconds go
(the sum over the probes of each stage's seconds, from the report), and the floor no schedule beats: those seconds spread
evenly over the cores tracecheck runs on (its default -j), before its start-up.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = [os.path.join(REPO, "benchmarks", "models", "tiny_llama.py"), os.path.join(REPO, "probes"),
            os.path.join(REPO, "benchmarks", "models", "convnets.py")]

PLAIN = r'''
import importlib.util, os, sys, time
t0 = time.perf_counter()
import torch
from torch.utils._pytree import tree_leaves
from tracecheck.collect import loadfile, locate
n = 0
for path in locate.find_files([sys.argv[1]]):
    module = loadfile.load_module(path)
    for name, fn in loadfile.find_probes(module):
        case = fn()
        f, args, kwargs = (case.fn, case.args, case.kwargs) if hasattr(case, "fn") else (*case, {})[:3]
        torch.manual_seed(0)
        try:
            out = torch.compile(f)(*args, **kwargs)
            grads = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
            if grads:
                sum(t.float().sum() for t in grads).backward()
            n += 1
        except Exception as e:  # a probe that does not compile costs what it cost until it raised
            print(f"{name}: {type(e).__name__}", file=sys.stderr)
print(n, "probes", round(time.perf_counter() - t0, 2), "s in-process")
'''


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode not in (0, 1):  # 1: tracecheck found something, which is no failure of the benchmark
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def _stage_seconds(report: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in json.load(open(report))["probes"]:
        for stage, s in p["stages"].items():
            out[stage] = out.get(stage, 0.0) + float(s.get("seconds") or 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=DEFAULTS)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "plain.py")
        open(script, "w").write(PLAIN)
        for path in args.paths:
            ratios, stage_sums, plains = [], [], []
            for i in range(args.pairs):
                times = {}
                for side in ("plain", "tracecheck"):
                    cache = tempfile.mkdtemp(dir=tmp)
                    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
                    report = os.path.join(tmp, f"r{i}.json")
                    cmd = ([sys.executable, script, path] if side == "plain" else
                           [sys.executable, "-m", "tracecheck", "run", path, "--no-cache", "--json", report])
                    if args.warm:
                        _timed(cmd, env)
                    times[side] = _timed(cmd, env)
                stage_sums.append(_stage_seconds(report))
                plains.append(times["plain"])
                ratios.append(times["tracecheck"] / times["plain"])
                print(f"{os.path.relpath(path, REPO)} pair {i + 1}: plain torch.compile {times['plain']:.1f} s, "
                      f"tracecheck {times['tracecheck']:.1f} s, ratio {ratios[-1]:.2f}x", flush=True)
            print(f"{os.path.relpath(path, REPO)}: median ratio tracecheck / plain torch.compile "
                  f"{statistics.median(ratios):.2f}x over {args.pairs} pairs ({'warm' if args.warm else 'cold'} "
                  f"Inductor caches; goal <= 2.0x)")
            stages = sorted(stage_sums[0], key=lambda s: -statistics.median(d.get(s, 0) for d in stage_sums))
            total = sum(statistics.median(d.get(s, 0) for d in stage_sums) for s in stages)
            print("  stage seconds summed over the probes (median over the pairs): " + ", ".join(
                f"{s} {statistics.median(d.get(s, 0) for d in stage_sums):.1f}" for s in stages)
                  + f"; {total:.1f} in all", flush=True)
            # no schedule on `jobs` cores beats the stage work spread evenly over them, before start-up costs
            jobs = os.cpu_count() or 1  # tracecheck run's default -j
            print(f"  floor: {total:.1f} stage-seconds / {jobs} cores = {total / jobs:.1f} s, "
                  f"{total / jobs / statistics.median(plains):.2f}x the median plain compile, before tracecheck's "
                  "start-up (the fork server, the file's import, the probes' first calls)", flush=True)


if __name__ == "__main__":
    main()
