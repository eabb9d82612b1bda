"""fullgraph leaves AOTAutograd to the aot_eager stage, except for a graph that holds data-dependent values, which
only fullgraph=True captures whole (stages/fullgraph.py). Oracle: plain torch.compile in this process."""
import json
import subprocess
import sys
import textwrap

import torch

MODEL = '''
import torch

def _repeat_by_count(x):
    n = (x > 0).sum().item()   # fullgraph=True captures it (an unbacked u0); without fullgraph, a graph break
    return x.repeat(n, 1).sin()

def probe_data_dependent_repeat():
    return _repeat_by_count, (torch.randn(8, 3, requires_grad=True),)

def probe_plain():
    return (lambda x: x.sin() * 2), (torch.randn(8, 3, requires_grad=True),)
'''


def _plain(backend: str) -> str | None:
    namespace: dict = {}
    exec(textwrap.dedent(MODEL), namespace)
    torch._dynamo.reset()
    try:
        torch.compile(namespace["_repeat_by_count"], backend=backend, fullgraph=True)(
            torch.randn(8, 3, requires_grad=True)).sum().backward()
    except Exception as e:
        return type(e).__name__
    return None


def test_a_graph_with_data_dependent_values_still_goes_through_aot_eager(tmp_path):
    # the oracle: AOTAutograd fails on this one graph; Dynamo alone does not; aot_eager without fullgraph breaks the
    # graph at .item() (a data-dependent graph break, its finding) and compiles the rest, so no other stage sees it
    assert _plain("aot_eager") == "BackendCompilerFailed" and _plain("eager") is None
    (tmp_path / "m.py").write_text(textwrap.dedent(MODEL))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "m.py"), "--stages",
                           "aot_eager,fullgraph", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    probes = {p["name"]: p["stages"] for p in json.loads(out.read_text())["probes"]}
    broken = probes["probe_data_dependent_repeat"]
    assert broken["aot_eager"]["failure"]["evidence"]["gb_type"].startswith("Unsupported Tensor.item() call")
    failure = broken["fullgraph"]["failure"]
    assert failure["kind"] == "data-dependent" and failure["evidence"]["gb_type"] is None  # no graph break
    assert "GuardOnDataDependentSymNode" in json.dumps(failure["evidence"])  # AOTAutograd's, on the one graph
    assert {s["status"] for s in probes["probe_plain"].values()} == {"pass"}
