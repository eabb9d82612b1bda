"""``tracecheck fix`` on pybind11 ops it was not written for (tests/models/pybind_ops.py), with fakes that must
hold at shapes and ranks the probe never used.

The oracle is plain torch in a fresh interpreter: the patched probe's model compiled with
``torch.compile(fullgraph=True, dynamic=True)``, forward and backward, against the original autograd.Functions
run eagerly, at sizes and ranks no run of tracecheck's used (the probe is x (4, 16), w (32, 16))."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracecheck.fix.pipeline import VERIFIED, FixOptions, fix

MODEL = Path(__file__).resolve().parent / "models" / "pybind_ops.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("generic_ops")
    shutil.copy(MODEL, tmp / "ops_model.py")
    outcome = fix(FixOptions(f"{tmp / 'ops_model.py'}::probe_ops", output=str(tmp / "fixed_ops.py"), timeout_s=600))
    return outcome, tmp


def test_every_function_is_converted_and_verified_at_other_shapes(fixed):
    outcome, _ = fixed
    assert outcome.status == VERIFIED, outcome.reasons
    assert {f.function for f in outcome.functions} == {"Swish", "Linear", "RowSum", "Stats", "RepeatLast"}
    # each op's fake was checked beyond the probe, at another rank too
    assert len(outcome.shapes) == 5
    for op in outcome.shapes:
        assert op.failed == () and len(op.checked) >= 2, op
        assert any(" at rank " in label for label in op.checked), op


def test_the_fixed_ops_compile_at_sizes_and_ranks_the_probe_never_used(fixed):
    _, tmp = fixed
    code = textwrap.dedent("""
        import importlib.util, os, torch

        def load(name, path):
            spec = importlib.util.spec_from_file_location(name, path)
            m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
            return m

        patched, original = load("patched", "ops_model_fixed.py"), load("original", "ops_model.py")
        compiled = torch.compile(patched.model, backend="aot_eager", fullgraph=True, dynamic=True)
        for xs, ws in [((2, 3, 16), (8, 16)), ((5, 7), (6, 7)), ((2, 2, 3, 9), (4, 9)), ((11,), (5, 11))]:
            torch.manual_seed(0)
            x, w = torch.randn(*xs), torch.randn(*ws)
            a = [x.clone().requires_grad_(), w.clone().requires_grad_()]
            r = [x.clone().requires_grad_(), w.clone().requires_grad_()]
            got, ref = compiled(*a), original.model(*r)
            assert [o.shape for o in got] == [o.shape for o in ref]
            sum((o * torch.cos(torch.arange(o.numel()).reshape(o.shape))).sum() for o in got).backward()
            sum((o * torch.cos(torch.arange(o.numel()).reshape(o.shape))).sum() for o in ref).backward()
            for g, h in zip(got, ref):
                torch.testing.assert_close(g, h)
            for g, h in zip(a, r):
                torch.testing.assert_close(g.grad, h.grad, rtol=1e-4, atol=1e-4)
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("OK")
