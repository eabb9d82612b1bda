"""``tracecheck repro``: a standalone script that fails with plain torch as the finding did.

Each script is run here by the test itself, in a fresh process whose ``import tracecheck`` fails, and what it
raised is checked against literals taken from torch's wording (the exception class, the gb_type), not from
tracecheck's report.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
BLOCKED = "import runpy, sys; sys.modules['tracecheck'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"

pytestmark = pytest.mark.slow


def repro(target: str, out: Path, *extra: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracecheck", "repro", target, "-o", str(out), *extra],
                          capture_output=True, text=True, cwd=cwd, timeout=900, env={**os.environ, "COLUMNS": "200"})


def plain(script: Path) -> subprocess.CompletedProcess:
    """The script alone: plain python, tracecheck unimportable, from another folder."""
    return subprocess.run([sys.executable, "-c", BLOCKED, str(script)], capture_output=True, text=True,
                          cwd=script.parent.parent, timeout=600)


@pytest.mark.parametrize("probe,stage,raised,gb_type", [
    # the motivating case: Dynamo stops at the pybind11 call inside the autograd.Function
    ("probe_autograd_function", "explain", "torch._dynamo.exc.Unsupported", "Attempted to call function marked as skipped"),
    # a custom op without register_fake: Dynamo's fake-tensor pass
    ("probe_missing_fake", None, "torch._dynamo.exc.TorchRuntimeError", "RuntimeError when making fake tensor call"),
])
def test_mhc_probes_reproduce_with_plain_torch(tmp_path, probe, stage, raised, gb_type):
    out = tmp_path / "out" / "repro.py"
    out.parent.mkdir()
    proc = repro(f"probes/mhc_probes.py::{probe}", out, *(["--stage", stage] if stage else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "fails the same way with plain torch" in proc.stdout
    text = out.read_text()
    assert "import tracecheck" not in text and "from tracecheck" not in text
    run = plain(out)
    assert run.returncode == 1
    last = [line for line in run.stderr.splitlines() if line.startswith(raised + ":")]
    assert last, run.stderr[-3000:]
    assert gb_type in run.stderr
    if probe == "probe_missing_fake":
        assert "There was no fake impl registered for" in run.stderr


def test_a_data_dependent_branch_reproduces(tmp_path, shared_cases):
    out = tmp_path / "out" / "repro_16.py"
    out.parent.mkdir()
    proc = repro(str(shared_cases / "16_mask_dependent_branch.py"), out, "--stage", "explain")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    run = plain(out)
    assert run.returncode == 1
    assert any(line.startswith("torch._dynamo.exc.Unsupported: Data-dependent branching")
               for line in run.stderr.splitlines()), run.stderr[-3000:]
    assert "if torch.all(mask == 1):" in run.stderr  # the user frame, in the script's copy of the file


def test_an_item_break_that_fullgraph_captures_is_reproduced_by_explain(tmp_path):
    """torch 2.13 keeps .item() in the graph under fullgraph=True with capture_scalar_outputs off, while explain
    (and plain torch.compile) break there: the script falls back to torch._dynamo.explain and raises its reasons."""
    out = tmp_path / "out" / "repro_item.py"
    out.parent.mkdir()
    proc = repro(f"{TESTS / 'models' / 'graph_breaks.py'}::probe_item", out, "--stage", "explain")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    run = plain(out)
    assert run.returncode == 1 and "Unsupported Tensor.item() call with capture_scalar_outputs=False" in run.stderr, \
        run.stderr[-3000:]


def test_the_script_keeps_a_parenthesised_future_import_first(tmp_path):
    from tracecheck.fix import repro_script

    model = tmp_path / "m.py"
    model.write_text("from __future__ import (\n    annotations,\n)\nimport torch\n\ndef probe_a():\n"
                     "    return torch.sin, (torch.randn(2),)\n")
    text = repro_script.script(str(model), "probe_a", "eager", {"kind": "eager-error", "message": "C:\\Users\\x"},
                               "2.13", False, "r.py")
    compile(text, "r.py", "exec")
    assert text.index("from __future__ import annotations") < text.index("import torch")


def test_a_probe_written_with_tracecheck_names_runs_without_tracecheck(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\nimport tracecheck\n\n\n"
        "def f(x):\n    print(x.sum().item())\n    return x * 2\n\n\n"
        "@tracecheck.probe\ndef probe_prints():\n"
        "    return tracecheck.Case(f, (torch.randn(3, requires_grad=True),))\n"
        "\n\nif __name__ == '__main__':\n    raise SystemExit('the own script part of the file must not run')\n")
    out = tmp_path / "out" / "repro.py"
    out.parent.mkdir()
    proc = repro(f"{model}::probe_prints", out, "--stage", "fullgraph", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    run = plain(out)
    assert run.returncode == 1 and "torch._dynamo.exc.Unsupported" in run.stderr, run.stderr[-3000:]
    assert "the own script part" not in run.stderr


def test_nothing_to_reproduce_and_bad_input(tmp_path):
    out = tmp_path / "repro.py"
    proc = repro("probes/mhc_probes.py::probe_fixed", out, "--stage", "explain")
    assert proc.returncode == 1 and "nothing to reproduce" in proc.stdout, proc.stdout + proc.stderr
    assert not out.exists()
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    proc = repro("probes/mhc_probes.py::probe_fixed", mine)
    assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr and "Traceback" not in proc.stderr
    assert mine.read_text() == "x = 1\n"
    proc = repro("probes/mhc_probes.py::probe_fixed", out, "--stage", "vmap")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = repro("probes/mhc_probes.py::probe_fixed", tmp_path / "torch.py")  # `python torch.py` would shadow torch
    assert proc.returncode == 2 and "would shadow the module 'torch'" in proc.stderr


def test_a_branch_on_an_item_value_that_fullgraph_refuses_as_a_guard_is_reproduced_by_explain(tmp_path):
    """torch 2.13 captures a float .item() under fullgraph=True, then refuses the branch on it with a UserError
    ("Could not guard on data-dependent expression"); explain breaks the graph there. The script goes on to explain,
    whose reasons name the break (a new user's model hit "NOT reproduced" before)."""
    model = tmp_path / "item_branch.py"
    model.write_text("import torch\n\n\ndef f(x):\n    s = x.sum().item()\n    if s > 0:\n        x = x + 5\n"
                     "    return x * 2\n\n\ndef probe():\n    return f, (torch.ones(4, 8),)\n")
    # plain torch, the oracle: fullgraph raises the guard error, explain counts one break
    check = ("import torch, runpy; ns = runpy.run_path(%r); f, (x,) = ns['probe']()\n"
             "try:\n    torch.compile(f, backend='eager', fullgraph=True)(x)\nexcept torch._dynamo.exc.UserError:\n"
             "    print('userError')\ntorch._dynamo.reset(); print('breaks', torch._dynamo.explain(f)(x).graph_break_count)"
             % str(model))
    oracle = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert oracle.stdout.split() == ["userError", "breaks", "1"], oracle.stdout + oracle.stderr[-2000:]
    out = tmp_path / "out" / "repro_item_branch.py"
    out.parent.mkdir()
    proc = repro(f"{model}::probe", out, "--stage", "explain", cwd=tmp_path)
    assert proc.returncode == 0 and "fails the same way with plain torch" in proc.stdout, proc.stdout + proc.stderr
    run = plain(out)
    assert run.returncode == 1 and "graph break(s) under torch._dynamo.explain" in run.stderr, run.stderr[-3000:]
