"""What the fullgraph stage's answer costs (issue 52): ``torch.compile(fullgraph=True)`` through AOTAutograd (backend
``aot_eager``, what the stage runs now) against Dynamo alone (backend ``eager``, what it ran before and why it passed
where ``torch.compile(fullgraph=True)`` fails), side by side.

    python benchmarks/bench_fullgraph_backend.py [--rounds N] [PATH ...]

For each probe of each file (default: benchmarks/models/tiny_llama.py and probes/mhc_probes.py), N rounds (default
3), each a fresh process per backend, back to back: import torch and the file, build the case, and time the stage's
own call (``run_compiled(make_case, backend, fullgraph=True)``: the compile, one forward and backward, the comparison
with eager). Prints each probe's median seconds per backend and the ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = [os.path.join(REPO, "benchmarks", "models", "tiny_llama.py"), os.path.join(REPO, "probes", "mhc_probes.py")]

ONE = r'''
import sys, time
import torch
torch.set_num_threads(1)
from tracecheck.collect import loadfile
from tracecheck.model.probe import to_case
from tracecheck.stages._execution import run_compiled
path, name, backend = sys.argv[1:4]
fn = dict(loadfile.find_probes(loadfile.load_module(path)))[name]
t = time.perf_counter()
run_compiled(lambda: to_case(fn()), backend, fullgraph=True)
print(time.perf_counter() - t)
'''


def probes(path: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", "import sys; from tracecheck.collect import loadfile; "
                          "print(' '.join(n for n, _ in loadfile.find_probes(loadfile.load_module(sys.argv[1]))))",
                          path], capture_output=True, text=True, check=True, cwd=REPO)
    return out.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", default=DEFAULTS)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    total = {"eager": 0.0, "aot_eager": 0.0}
    for path in args.paths:
        for name in probes(path):
            times: dict[str, list[float]] = {"eager": [], "aot_eager": []}
            for _ in range(args.rounds):
                for backend in times:
                    r = subprocess.run([sys.executable, "-c", ONE, path, name, backend], capture_output=True,
                                       text=True, cwd=REPO)
                    times[backend].append(float(r.stdout.strip().splitlines()[-1]))
            med = {b: statistics.median(t) for b, t in times.items()}
            for b in total:
                total[b] += med[b]
            print(f"{os.path.basename(path)}::{name}: eager {med['eager']:.2f} s, aot_eager {med['aot_eager']:.2f} s "
                  f"({med['aot_eager'] / med['eager']:.2f}x)", flush=True)
    print(f"all probes: eager {total['eager']:.1f} s, aot_eager {total['aot_eager']:.1f} s "
          f"(+{total['aot_eager'] - total['eager']:.1f} s of stage time)")


if __name__ == "__main__":
    main()
