"""tracecheck run vs a hand-written serial single-process script doing the same stages, side by side.

    python benchmarks/bench_run.py [--rounds N] [--budget] [--set NAME ...]   # the sets below
    python benchmarks/bench_run.py PATHS... [--stages ...]                    # your own set

The built-in sets, each with every default stage: six small reproducers from ../shared/cases (beside the clone),
a tiny transformers Llama training probe (benchmarks/models/tiny_llama.py), the mHC probes (probes/) and two conv
nets in training (benchmarks/models/convnets.py). Goal (issue 42): tracecheck at most 0.6x the serial script.

The serial baseline imports torch once, loads each model file once, and runs every stage of every probe
one after the other in that same process. It uses the same stage functions as tracecheck
(tracecheck/stages/) and calls ``torch._dynamo.reset()`` between stages. Its isolation is therefore
weaker than tracecheck's: one crash or hang kills everything. tracecheck instead forks one process per
(probe, stage) from the file's template process (torch preloaded, the file imported once), and runs ``-j``
of them at a time.

First an unmeasured warm-up run fills the extension build cache and inductor's caches for both sides.
Then each round times the serial script and tracecheck back to back and prints both times and their
ratio. The ratio is tracecheck / serial, so below 1.0 means tracecheck is faster. ``--budget`` adds, per stage,
the serial script's seconds and the sum of tracecheck's stage-process seconds (medians over the rounds): where
tracecheck's per-process costs are.
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


def serial_main(paths: list[str], stages: list[str], budget_out: str | None = None) -> None:
    """The baseline: everything in this one process, in order, through the same stage registry. With
    ``budget_out``, the seconds each stage took (summed over the probes) are written there as JSON."""
    import torch
    from torch._dynamo.utils import counters

    from tracecheck.collect import casemaker, loadfile, locate
    from tracecheck import stages as registry

    budget = dict.fromkeys(stages, 0.0)
    options = registry.StageOptions()  # as `tracecheck run` sets it
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
                t0 = time.perf_counter()
                try:
                    spec.run(registry.StageContext(make_case, "cpu", options))
                except Exception as e:  # the serial script survives what it can
                    print(f"{name} {stage}: {type(e).__name__}", file=sys.stderr)
                budget[stage] += time.perf_counter() - t0
    if budget_out:
        with open(budget_out, "w") as f:
            json.dump(budget, f)


CASES = os.path.join(os.path.dirname(REPO), "shared", "cases")
SETS = {
    "small cases": ([os.path.join(CASES, c) for c in (
        "01_flashattn_ext_fwd_in_autograd_fn.py", "06_custom_op_missing_fake.py", "08_custom_op_missing_autograd.py",
        "16_mask_dependent_branch.py", "19_print_stats_in_forward.py", "22_module_setattr_in_forward.py")], None),
    "real model": ([os.path.join(REPO, "benchmarks", "models", "tiny_llama.py")], None),
    "mHC probes": ([os.path.join(REPO, "probes")], None),
    "conv nets": ([os.path.join(REPO, "benchmarks", "models", "convnets.py")], None),
}


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def _tracecheck_budget(report_path: str) -> dict[str, float]:
    """Seconds per stage in a ``tracecheck run --json`` report, summed over the probes: each stage process's
    wall time, from the fork to its result (what a stage costs tracecheck, its process's start-up included)."""
    with open(report_path) as f:
        report = json.load(f)
    budget: dict[str, float] = {}
    for probe in report["probes"]:
        for stage, result in probe["stages"].items():
            budget[stage] = budget.get(stage, 0.0) + (result.get("seconds") or 0.0)
    return budget


def _print_budget(stages: list[str], serial: list[dict[str, float]], tc: list[dict[str, float]]) -> None:
    """The per-stage budget, medians over the rounds: serial seconds in the one process, and tracecheck's
    stage-process seconds (on -j cores at once, so their sum exceeds the run's wall time)."""
    print(f"  {'stage':<18} {'serial s':>9} {'tracecheck process-s':>21}")
    for stage in [*stages, "(whole run)"]:
        s = statistics.median(b.get(stage, 0.0) for b in serial)
        t = statistics.median(b.get(stage, 0.0) for b in tc)
        print(f"  {stage:<18} {s:9.1f} {t:21.1f}")


def main() -> None:
    from tracecheck.stages import STAGES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="a set of your own (default: the built-in sets)")
    ap.add_argument("--set", action="append", choices=list(SETS), help="only these built-in sets")
    ap.add_argument("--stages", default=None, help="default: every default stage")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget", action="store_true", help="also print the seconds each stage takes on both sides")
    ap.add_argument("--serial-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--budget-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serial_worker:
        serial_main(args.paths, args.stages.split(","), args.budget_out)
        return
    sets = {"yours": (args.paths, args.stages)} if args.paths else \
        {k: v for k, v in SETS.items() if not args.set or k in args.set}
    if "small cases" in sets and not os.path.isdir(CASES):
        print(f"({CASES} is missing: the small-cases set is left out)")
        del sets["small cases"]
    print(f"cores: {os.cpu_count()}  jobs: {args.jobs}  rounds: {args.rounds} (interleaved: serial, tracecheck)")
    summary = []
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        serial_json, tc_json = os.path.join(tmp, "serial.json"), os.path.join(tmp, "tracecheck.json")
        for name, (paths, stages) in sets.items():
            stages = args.stages or stages or ",".join(STAGES)
            tc = [sys.executable, "-m", "tracecheck", "run", *paths, "--no-cache", "--stages", stages, "-j", str(args.jobs)]
            serial = [sys.executable, os.path.abspath(__file__), "--serial-worker", *paths, "--stages", stages]
            if args.budget:
                tc += ["--json", tc_json]
                serial += ["--budget-out", serial_json]
            print(f"\n[{name}] stages: {stages}")
            print(f"  warm-up (not measured): serial {_time(serial):.1f} s, tracecheck {_time(tc):.1f} s")
            ratios, serial_budgets, tc_budgets = [], [], []
            for r in range(args.rounds):
                for stale in (serial_json, tc_json):  # a run that dies writes none: no budget of an earlier run
                    if os.path.exists(stale):
                        os.remove(stale)
                t_serial = _time(serial)
                t_tc = _time(tc)
                ratios.append(t_tc / t_serial)
                print(f"  round {r + 1}: serial single-process {t_serial:6.1f} s | tracecheck run -j {args.jobs} "
                      f"{t_tc:6.1f} s | ratio {t_tc / t_serial:.2f}x")
                if args.budget and os.path.exists(serial_json) and os.path.exists(tc_json):
                    with open(serial_json) as f:
                        serial_budgets.append({**json.load(f), "(whole run)": t_serial})
                    tc_budgets.append({**_tracecheck_budget(tc_json), "(whole run)": t_tc})
                elif args.budget:
                    print("    (a side wrote no per-stage seconds this round: it died; run it by hand to see why)")
            if serial_budgets:
                _print_budget(stages.split(","), serial_budgets, tc_budgets)
            summary.append((name, statistics.median(ratios)))
    print()
    for name, ratio in summary:
        print(f"{name}: median ratio tracecheck/serial {ratio:.2f}x (goal <= 0.6x)")


if __name__ == "__main__":
    main()
