"""Where each stage's seconds go, beside one plain ``torch.compile`` of the same probe (issue 42, "measure first").

    python benchmarks/bench_phases.py [--warm] [PATH ...]

For each probe file (default: benchmarks/models/tiny_llama.py, probes/, benchmarks/models/convnets.py), two fresh
processes, one after the other, with the same Inductor cache directory (empty, or with ``--warm`` filled by an
unmeasured round of both first):
- plain: what a user runs instead, one ``torch.compile`` (Inductor) forward and backward of each probe;
- stages: every default stage of each probe, one after the other, through tracecheck's stage registry, with
  ``torch._dynamo.reset()`` between them (as benchmarks/bench_run.py's serial script).
Each compile's seconds come from torch's own timers (``torch._dynamo.utils.compilation_time_metrics``, the
``dynamo_timed`` regions ``TORCH_LOGS=dynamo`` summarises), split into:
- Dynamo: frame tracing and guards (``_compile.compile_inner`` without the backend's call);
- AOTAutograd: the backend's call and the lazy backward compile without Inductor (joint trace, partitioning,
  cache lookups; all of ``aot_eager``);
- Inductor: code generation and loading (``GraphLowering.compile_to_module``) without the C++ compiler;
- C++: the compiler itself (``compile_file``);
- other: the rest of the stage's seconds: the probe's runs, eager and float64 references, opcheck's and
  gradcheck's calls, ``torch.export``'s non-strict tracing (not a Dynamo region).
Also the fixed costs of a tracecheck run (its fork server's imports and warm-up compile; importing the model file
and its first probe call) and the Dynamo traces each stage makes (``unique_graphs``): the same forward traced
again by each stage is what isolation costs, and what tracecheck's processes run two at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = [os.path.join(REPO, "benchmarks", "models", "tiny_llama.py"), os.path.join(REPO, "probes"),
            os.path.join(REPO, "benchmarks", "models", "convnets.py")]
PHASES = ("dynamo", "aot", "inductor", "cxx", "other")


def _phases(seconds: float) -> dict[str, float]:
    """``seconds`` of one stage (or the plain compile) split by torch's compile timers since the last reset."""
    from torch._dynamo.utils import compilation_time_metrics as m

    def total(*names: str) -> float:
        return sum(sum(m.get(n, ())) for n in names)

    if m and "_compile.compile_inner" not in m:  # another torch names its timers otherwise: say so, not 0
        print(f"torch's timer _compile.compile_inner is missing (have: {', '.join(list(m)[:8])}): the split is "
              "not torch's here", file=sys.stderr)

    backend = total("OutputGraph.call_user_compiler")
    dynamo = total("_compile.compile_inner") - backend
    backward = total("backward._backward_impl")  # the lazy backward compile, outside Dynamo's region
    inductor, cxx = total("GraphLowering.compile_to_module"), total("compile_file")
    aot = backend + backward - inductor
    return {"dynamo": dynamo, "aot": max(aot, 0.0), "inductor": max(inductor - cxx, 0.0), "cxx": cxx,
            "other": max(seconds - dynamo - backend - backward, 0.0)}


def one(kind: str, path: str) -> None:
    """In this process: the plain compile or the stages of every probe in ``path``; prints one JSON line."""
    t0 = time.perf_counter()
    import torch
    from torch._dynamo.utils import compilation_time_metrics, counters
    from torch.utils._pytree import tree_leaves

    from tracecheck import stages as registry
    from tracecheck.collect import casemaker, loadfile, locate

    torch.set_num_threads(1)  # as a tracecheck stage process runs with -j 2 on 2 cores
    rows: dict[str, dict[str, float]] = {}
    graphs: dict[str, int] = {}
    load = 0.0

    def timed(name: str, body) -> None:
        torch._dynamo.reset()
        compilation_time_metrics.clear()
        counters.clear()
        t = time.perf_counter()
        try:
            body()
        except Exception as e:  # a probe that does not compile costs what it cost until it raised
            print(f"{name}: {type(e).__name__}", file=sys.stderr)
        row = _phases(time.perf_counter() - t)
        rows[name] = {k: rows.get(name, {}).get(k, 0.0) + v for k, v in {**row, "total": sum(row.values())}.items()}
        graphs[name] = graphs.get(name, 0) + int(counters["stats"]["unique_graphs"])

    for file in locate.find_files([path]):
        t = time.perf_counter()
        module = loadfile.load_module(file)
        probes = loadfile.find_probes(module)
        for name, _ in probes:
            make_case = casemaker.case_factory(file, name)
            try:
                make_case()  # the first call imports what the probe function imports (the template does it once)
            except Exception:
                continue
            load += time.perf_counter() - t
            if kind == "plain":
                def plain(case=make_case()) -> None:
                    out = torch.compile(case.fn)(*case.args, **case.kwargs)
                    grads = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
                    if grads:
                        sum(o.float().sum() for o in grads).backward()
                timed("plain torch.compile", plain)
            else:
                options = registry.StageOptions()  # as in `tracecheck run`
                for stage in registry.STAGES:
                    spec = registry.get(stage)
                    timed(stage, lambda: spec.run(registry.StageContext(make_case, "cpu", options)))
            t = time.perf_counter()
    print(json.dumps({"rows": rows, "graphs": graphs, "load": load, "process": time.perf_counter() - t0}))


def _child(kind: str, path: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--one", kind, path], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"{kind} {path} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _server_start(env: dict[str, str]) -> float:
    """A tracecheck run's fork server: torch, the compiler stack and the warm-up compile (isolate/preload.py)."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tracecheck.isolate.preload"], env=env, check=True,
                   capture_output=True, timeout=600)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=DEFAULTS)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one(*args.one)
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.paths:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(dir=tmp), "HF_HUB_OFFLINE": "1"}
            if args.warm:
                _child("plain", path, env), _child("stages", path, env)
            plain, stages = _child("plain", path, env), _child("stages", path, env)
            server = _server_start(env)
            name = os.path.relpath(path, REPO)
            print(f"\n{name} ({'warm' if args.warm else 'cold'} Inductor caches; seconds, one thread, in-process)")
            print(f"  {'':22}{'total':>7}{'Dynamo':>8}{'AOT':>7}{'Inductor':>9}{'C++':>6}{'other':>7}{'graphs':>7}")
            rows = {**plain["rows"], **stages["rows"]}
            graphs = {**plain["graphs"], **stages["graphs"]}
            for row, r in rows.items():
                print(f"  {row:22}{r['total']:7.1f}{r['dynamo']:8.1f}{r['aot']:7.1f}{r['inductor']:9.1f}"
                      f"{r['cxx']:6.1f}{r['other']:7.1f}{graphs[row]:7d}")
            summed = {k: sum(r[k] for s, r in stages["rows"].items()) for k in (*PHASES, "total")}
            p = plain["rows"]["plain torch.compile"]
            print(f"  {'all stages':22}{summed['total']:7.1f}{summed['dynamo']:8.1f}{summed['aot']:7.1f}"
                  f"{summed['inductor']:9.1f}{summed['cxx']:6.1f}{summed['other']:7.1f}")
            print(f"  the stages' compile seconds against plain torch.compile's: Dynamo {summed['dynamo']:.1f} / "
                  f"{p['dynamo']:.1f} ({summed['dynamo'] / max(p['dynamo'], 1e-9):.1f}x: each stage traces the "
                  f"forward again), AOTAutograd {summed['aot']:.1f} / {p['aot']:.1f}, Inductor and C++ "
                  f"{summed['inductor'] + summed['cxx']:.1f} / {p['inductor'] + p['cxx']:.1f}")
            print(f"  fixed costs: a fresh process importing the model file and calling its probes "
                  f"{stages['load']:.1f} s; tracecheck's fork server (torch, the compiler stack, the warm-up "
                  f"compile) {server:.1f} s; whole processes: plain {plain['process']:.1f} s, stages "
                  f"{stages['process']:.1f} s (ratio {stages['process'] / plain['process']:.2f}x serial; "
                  "tracecheck runs the stages two at a time: benchmarks/bench_vs_compile.py times it whole)",
                  flush=True)


if __name__ == "__main__":
    main()
