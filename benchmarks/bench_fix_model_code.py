"""How long ``tracecheck fix`` takes on model code, and how many candidates it ran to get there.

    python benchmarks/bench_fix_model_code.py [--jobs N] [--lm clamp|guard] [TARGET]

The built-in targets are tiny LMs in training (embedding + linear head). ``clamp`` (the default): the forward clamps
outliers on a scalar read with ``.item()`` and prints its activations: two break sites in the probe's file, the
``.item()`` (with the ``if`` on it) and the print. ``guard`` (issue 51's new user's LM, tests/models/graph_breaks.py::probe_tiny_lm):
``amax = x.abs().max().item()``, ``if amax > 100.0: x = x / amax``, then ``print("activations ok, amax", amax)``:
three sites on one name, which need the rewrites together (the scalar kept a tensor for torch.where and the print). TARGET (``file.py::probe``) times
another probe instead. It runs what the CLI runs
(``tracecheck.fix.pipeline.fix``: diagnosis, the baseline stages, every candidate tried and verified) in this
process, so the wall time leaves out only the interpreter start and the terminal rendering.

It prints the wall time, the status, the candidate runs (candidates written and run, kept or refused), the stage
groups run (``api.run`` calls: diagnosis, baseline, and up to len(VERIFY_PHASES) per candidate) and the stage
processes started. No assertion: a measurement.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tracecheck import api  # noqa: E402
from tracecheck.fix.trial import VERIFY_PHASES  # noqa: E402
from tracecheck.fix.pipeline import FixOptions, fix  # noqa: E402

TINY_LM = '''import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)

    def forward(self, ids):
        x = self.emb(ids)
        peak = x.abs().max().item()
        if peak > 50:
            x = x.clamp(-50, 50)
        print(x)
        return self.head(x)


def probe():
    torch.manual_seed(0)
    model = TinyLM()
    model.train()
    return model, (torch.randint(0, 16, (2, 5)),)
'''

#: the built-in targets: a text to write, or a probe of the tests' models (issue 51's new user's LM)
LMS = {"clamp": (TINY_LM, "tiny LM (.item() branch + print)"),
       "guard": (os.path.join(REPO, "tests", "models", "graph_breaks.py::probe_tiny_lm"),
                 "tiny LM (.item() guard + print of the scalar)")}

#: a candidate's result when it was never written and run
NOT_RUN = ("it overlaps a rewrite already kept", "not valid Python here")


class Count(api.Progress):
    def __init__(self) -> None:
        self.groups = self.processes = 0

    def discovered(self, n_files: int) -> None:
        self.groups += 1

    def started(self, probe_id: str, stage: str) -> None:
        self.processes += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", nargs="?", help="file.py::probe (default: the built-in tiny LM)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--lm", choices=sorted(LMS), default="clamp", help="the built-in target (without TARGET)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fix-") as tmp:
        target = args.target
        if target is None and "::" in LMS[args.lm][0]:
            target = LMS[args.lm][0]
        elif target is None:
            with open(os.path.join(tmp, "tiny_lm.py"), "w", encoding="utf-8") as f:
                f.write(LMS[args.lm][0])
            target = os.path.join(tmp, "tiny_lm.py::probe")
        count = Count()
        t0 = time.perf_counter()
        out = fix(FixOptions(target, output=os.path.join(tmp, "fixed_ops.py"), patched=os.path.join(tmp, "patched.py"),
                             diff=os.path.join(tmp, "fix.diff"), jobs=args.jobs), count)
        wall = time.perf_counter() - t0
    runs = [t for s in out.sites for t in s.tried if not t.result.startswith(NOT_RUN)]
    print(f"tracecheck fix {args.target or LMS[args.lm][1]}: {wall:.1f} s wall, {out.status}")
    tries = ", ".join(f"{t.rewrite} {'kept' if t.result == 'kept' else 'refused'}" for t in runs)
    print(f"candidate runs: {len(runs)} ({tries})")
    print(f"stage groups run: {count.groups} (diagnosis, baseline, up to {len(VERIFY_PHASES)} per candidate); "
          f"stage processes: {count.processes}")
    for s in out.sites:
        print(f"  line {s.line}: {s.rewrite or 'no rewrite kept'}")


if __name__ == "__main__":
    main()
