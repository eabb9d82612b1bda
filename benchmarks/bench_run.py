"""tracecheck run vs a hand-written serial single-process script doing the same stages, side by side.

    python benchmarks/bench_run.py [PATHS...] [--stages ...] [--rounds N]

The serial baseline imports torch once, loads each model file once, and runs every stage of every probe
one after the other in that same process. It uses the same stage functions as tracecheck
(tracecheck/stages.py) and calls ``torch._dynamo.reset()`` between stages. Its isolation is therefore
weaker than tracecheck's: one crash or hang kills everything. tracecheck instead forks one process per
(probe, stage) from a server that has already imported torch, and runs ``-j`` of them at a time.

First an unmeasured warm-up run fills the extension build cache and inductor's caches for both sides.
Then each round times the serial script and tracecheck back to back and prints both times and their
ratio. The ratio is tracecheck / serial, so below 1.0 means tracecheck is faster.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def serial_main(paths: list[str], stages: list[str]) -> None:
    """The baseline: everything in this one process, in order, through the same stage registry."""
    import torch
    from torch._dynamo.utils import counters

    from tracecheck import discover
    from tracecheck import stages as registry

    for path in discover.find_files(paths):
        module = discover.load_module(path)
        for name, _ in discover.find_probes(module):
            make_case = discover.case_factory(path, name)
            try:
                make_case()
            except Exception:
                continue  # a probe whose function raises runs no stage in tracecheck either
            for stage in stages:
                torch._dynamo.reset()
                counters.clear()
                spec = registry.get(stage)
                try:
                    spec.run(registry.StageContext(make_case, "cpu", {"steps": 3, "dynamic": False}))
                except Exception as e:  # the serial script survives what it can
                    print(f"{name} {stage}: {type(e).__name__}", file=sys.stderr)


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    from tracecheck.stages import STAGES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[os.path.join(REPO, "probes")])
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--serial-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    stages = args.stages.split(",")
    if args.serial_worker:
        serial_main(args.paths, stages)
        return
    tc = [sys.executable, "-m", "tracecheck", "run", *args.paths, "--stages", args.stages, "-j", str(args.jobs)]
    serial = [sys.executable, os.path.abspath(__file__), "--serial-worker", *args.paths, "--stages", args.stages]
    print(f"cores: {os.cpu_count()}  jobs: {args.jobs}  stages: {args.stages}  paths: {' '.join(args.paths)}")
    print(f"warm-up (not measured): {_time(tc):.1f} s")
    ratios = []
    for r in range(args.rounds):
        t_serial = _time(serial)
        t_tc = _time(tc)
        ratios.append(t_tc / t_serial)
        print(f"round {r + 1}: serial single-process {t_serial:6.1f} s | tracecheck run -j {args.jobs} "
              f"{t_tc:6.1f} s | ratio {t_tc / t_serial:.2f}x")
    print(f"median ratio tracecheck/serial: {statistics.median(ratios):.2f}x (target <= 1.0x)")


if __name__ == "__main__":
    main()
