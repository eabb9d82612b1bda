"""The measured cost of graph breaks, ranked, in repeated runs (issue 41): does tracecheck put the expensive break
first every time, and how noisy is the measurement?

    python benchmarks/bench_break_cost.py [--runs N] [PATH]

Runs ``tracecheck run PATH --stages explain`` N times (default 5, each its own processes) on
benchmarks/models/print_and_item.py (a ``print`` once per call, and an ``.item()`` in a loop that Dynamo gives up
on), and prints per run each break's share of the compiled forward (its lowest-highest over the calls of that run),
the order, then over the runs: how often each order came, and each break's share, median and range. The compiled
and eager forwards are timed side by side in each run (median ms, and the spread of the compiled calls).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(REPO, "benchmarks", "models", "print_and_item.py")


def one_run(path: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", path, "--no-cache", "--stages", "explain", "--json", out],
                              capture_output=True, text=True, timeout=900)
        if proc.returncode not in (0, 1):  # 1: the breaks are findings
            sys.exit(f"tracecheck exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        report = json.load(open(out))
    rows = []
    for p in report["probes"]:
        costs = p["stages"].get("explain", {}).get("extra", {}).get("break_costs")
        if costs:
            rows.append({"probe": p["id"], **costs})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    orders: collections.Counter = collections.Counter()
    shares: dict[str, list[float]] = collections.defaultdict(list)
    for i in range(1, args.runs + 1):
        for row in one_run(args.path):
            breaks = row["breaks"]
            order = " > ".join(f"{os.path.basename(b['file'])}:{b['line']}" for b in breaks)
            orders[(row["probe"], order)] += 1
            print(f"run {i} {row['probe']}: compiled {row.get('compiled_ms')} ms, eager {row.get('eager_ms')} ms "
                  f"(compiled spread {row.get('compiled_spread')}), {row['calls']} calls")
            for b in breaks:
                key = f"{os.path.basename(b['file'])}:{b['line']} {b['gb_type']}"
                shares[key].append(b["share"])
                print(f"    {key}: {b['share']:.1%} ({b['low']:.1%}-{b['high']:.1%})")
    print("\norders over the runs:")
    for (probe, order), n in orders.most_common():
        print(f"  {n}/{args.runs}  {probe}: {order}")
    print("each break's share of the compiled forward over the runs (median, lowest-highest):")
    for key, v in shares.items():
        print(f"  {key}: {statistics.median(v):.1%} ({min(v):.1%}-{max(v):.1%})")


if __name__ == "__main__":
    main()
