"""tracecheck run vs a hand-written serial single-process script doing the same stages, side by side.

    python benchmarks/bench_run.py [--rounds N]                 # both sets below
    python benchmarks/bench_run.py PATHS... [--stages ...]      # your own set

The two built-in sets: six small reproducers from ../shared/cases (beside the clone) with five stages, and a
tiny transformers Llama training probe (benchmarks/models/tiny_llama.py) with every stage.

The serial baseline imports torch once, loads each model file once, and runs every stage of every probe
one after the other in that same process. It uses the same stage functions as tracecheck
(tracecheck/stages/) and calls ``torch._dynamo.reset()`` between stages. Its isolation is therefore
weaker than tracecheck's: one crash or hang kills everything. tracecheck instead forks one process per
(probe, stage) from the file's template process (torch preloaded, the file imported once), and runs ``-j``
of them at a time.

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

    from tracecheck.collect import casemaker, loadfile, locate
    from tracecheck import stages as registry

    for path in locate.find_files(paths):
        module = loadfile.load_module(path)
        for name, _ in loadfile.find_probes(module):
            make_case = casemaker.case_factory(path, name)
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


CASES = os.path.join(os.path.dirname(REPO), "shared", "cases")
SETS = {
    "small cases": ([os.path.join(CASES, c) for c in (
        "01_flashattn_ext_fwd_in_autograd_fn.py", "06_custom_op_missing_fake.py", "08_custom_op_missing_autograd.py",
        "16_mask_dependent_branch.py", "19_print_stats_in_forward.py", "22_module_setattr_in_forward.py")], None),
    "real model": ([os.path.join(REPO, "benchmarks", "models", "tiny_llama.py")], None),
}


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    from tracecheck.stages import STAGES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="a set of your own (default: the two built-in sets)")
    ap.add_argument("--stages", default=None, help="default: every stage (the small-cases set: five)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--serial-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serial_worker:
        serial_main(args.paths, args.stages.split(","))
        return
    sets = {"yours": (args.paths, args.stages)} if args.paths else dict(SETS)
    if not args.paths and not os.path.isdir(CASES):
        print(f"({CASES} is missing: the small-cases set is left out)")
        del sets["small cases"]
    print(f"cores: {os.cpu_count()}  jobs: {args.jobs}  rounds: {args.rounds} (interleaved: serial, tracecheck)")
    summary = []
    for name, (paths, stages) in sets.items():
        stages = args.stages or stages or ",".join(STAGES)
        tc = [sys.executable, "-m", "tracecheck", "run", *paths, "--stages", stages, "-j", str(args.jobs)]
        serial = [sys.executable, os.path.abspath(__file__), "--serial-worker", *paths, "--stages", stages]
        print(f"\n[{name}] stages: {stages}")
        print(f"  warm-up (not measured): serial {_time(serial):.1f} s, tracecheck {_time(tc):.1f} s")
        ratios = []
        for r in range(args.rounds):
            t_serial = _time(serial)
            t_tc = _time(tc)
            ratios.append(t_tc / t_serial)
            print(f"  round {r + 1}: serial single-process {t_serial:6.1f} s | tracecheck run -j {args.jobs} "
                  f"{t_tc:6.1f} s | ratio {t_tc / t_serial:.2f}x")
        summary.append((name, statistics.median(ratios)))
    print()
    for name, ratio in summary:
        print(f"{name}: median ratio tracecheck/serial {ratio:.2f}x (goal <= 0.75x)")


if __name__ == "__main__":
    main()
