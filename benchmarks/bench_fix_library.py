"""``tracecheck fix`` on breaks in library code: small transformers 4.52.4 models (benchmarks/models/hf452.py), each
break's fix, and plain torch.compile before and after.

Run in a venv of its own (transformers 5.x, the test environment's, no longer breaks at these sites)::

    python3.11 -m venv /tmp/hf452 && . /tmp/hf452/bin/activate
    pip install torch==2.13.0 && pip install transformers==4.52.4 && pip install .
    HF_HUB_OFFLINE=1 python benchmarks/bench_fix_library.py [--only NAME ...]

Per model, each in fresh processes: the graphs plain ``torch.compile`` makes of the original (a counting backend;
breaks = graphs - 1, as GraphMend and most users count them); ``tracecheck fix`` (``tracecheck.fix.pipeline.fix``,
wall time); then the patched copy under plain ``torch.compile`` (graphs, and outputs against the original run
eagerly, ``torch.testing.assert_close``); and whether any file of the installed transformers changed (SHA-256 of
every file before and after). GraphMend's own numbers are given where its paper states them. No assertion: a
measurement, printed as a table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "benchmarks", "models", "hf452.py")
#: GraphMend (arXiv 2509.16248, transformers 4.52.4 small configs): its eight models together, 89 breaks -> 19 (as
#: issue 51 cites it; the abstract: 0 breaks in 6 models, 5 -> 2 in another). No per-model number is cited here
GRAPHMEND = "89 -> 19 over its 8 models"

COUNT = textwrap.dedent('''
    import importlib.util, json, sys, torch
    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        m = sys.modules[name] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        return m
    def graphs(module, probe):
        got = getattr(module, probe)()
        fn, args, kwargs = (got + ({},))[:3]
        n = [0]
        def backend(gm, example):
            n[0] += 1
            return gm.forward
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(fn, backend=backend)(*args, **kwargs)
        return n[0], out
    def first(out):
        out = out[0] if isinstance(out, (tuple, list)) else out
        return getattr(out, "logits", None) if getattr(out, "logits", None) is not None else (
            out.last_hidden_state if hasattr(out, "last_hidden_state") else out)
    original = load(sys.argv[1], "original")
    probe = sys.argv[3]
    got = getattr(original, probe)()
    fn, args, kwargs = (got + ({},))[:3]
    with torch.no_grad():
        want = first(fn(*args, **kwargs))
    before, _ = graphs(original, probe)
    result = {"before": before}
    if sys.argv[2] != "-":
        try:
            patched = load(sys.argv[2], "patched")
            after, out = graphs(patched, probe)
        except Exception as e:  # (a fix that is not verified may not compile at all)
            result["after_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        else:
            try:
                torch.testing.assert_close(first(out), want)
                same = True
            except AssertionError:
                same = False
            result.update(after=after, equal=same)
    print(json.dumps(result))
''')

FIX = textwrap.dedent('''
    import json, sys, time
    from tracecheck.fix.pipeline import FixOptions, fix
    t0 = time.perf_counter()
    out = fix(FixOptions(sys.argv[1], output=sys.argv[2] + "/fixed_ops.py", patched=sys.argv[2] + "/patched.py",
                         diff=sys.argv[2] + "/fix.diff", jobs=2))
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 1), "status": out.status,
                      "sites": [{"where": f"{s.file or 'probe'}:{s.line}", "gb_type": s.gb_type or s.kind,
                                 "rewrite": s.rewrite, "covered": s.covered,
                                 "why": s.note if not s.rewrite else ""} for s in out.sites],
                      "reasons": out.reasons}))
''')


def _tree_digest(folder: str) -> str:
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(root, name)
            h.update(path.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _json(cmd: list[str], cwd: str) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="probe names of benchmarks/models/hf452.py (default: all)")
    args = ap.parse_args()
    import transformers  # noqa: F401 - its folder, and its version in the header

    folder = os.path.dirname(transformers.__file__)
    import ast

    with open(MODELS, encoding="utf-8") as f:
        names = [n.name for n in ast.parse(f.read()).body if isinstance(n, ast.FunctionDef) and n.name.startswith(
            "probe_")]
    names = [n for n in names if not args.only or n in args.only]
    print(f"transformers {transformers.__version__}, python {sys.version.split()[0]}; GraphMend on its eight models: "
          f"{GRAPHMEND} (per model: not stated in what this benchmark cites)")
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="bench-fix-lib-") as tmp:
            digest = _tree_digest(folder)
            fixed = _json([sys.executable, "-c", FIX, f"{MODELS}::{name}", tmp], tmp)
            untouched = _tree_digest(folder) == digest
            patched = os.path.join(tmp, "patched.py")
            plain = _json([sys.executable, "-c", COUNT, MODELS, patched if os.path.exists(patched) else "-", name],
                          tmp)
        rows.append((name, fixed, plain, untouched))
        sites = "; ".join(f"{s['where']} {s['gb_type'][:30]}: {s['rewrite'] or 'not removed (' + (s['why'] or 'no candidate kept') + ')'}"
                          for s in fixed.get("sites", []))
        for key in ("error", "after_error"):
            if key in plain:
                print(f"\n{name}: plain torch.compile failed{' on the patched copy' if key != 'error' else ''}: "
                      f"{plain[key]}")
        print(f"\n{name}: graphs {plain.get('before')} -> {plain.get('after', '-')} (outputs equal: "
              f"{plain.get('equal', '-')}); fix {fixed.get('status', fixed.get('error'))} in {fixed.get('seconds')} s; "
              f"site-packages unchanged: {untouched}\n  {sites}", flush=True)
    print("\n| model | graphs before (breaks) | after (breaks) | fix per break | fix time | verdict | "
          "site-packages unchanged |")
    print("|---|---|---|---|---|---|---|")
    for name, fixed, plain, untouched in rows:
        b, a = plain.get("before"), plain.get("after")
        per = "; ".join(f"{s['where'].rsplit('/', 1)[-1]}: {s['rewrite'] or 'none'}" for s in fixed.get("sites", []))
        print(f"| {name.removeprefix('probe_')} | {b} ({b - 1 if isinstance(b, int) else '-'}) | "
              f"{a if a is not None else '-'} ({a - 1 if isinstance(a, int) else '-'}) | {per} | "
              f"{fixed.get('seconds')} s | {fixed.get('status')} | "
              f"{untouched} |")


if __name__ == "__main__":
    main()
