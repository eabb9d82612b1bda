"""fullgraph is ``torch.compile(fullgraph=True)`` through AOTAutograd (stages/fullgraph.py): it fails where plain
``torch.compile(fullgraph=True)`` fails, a graph holding data-dependent values and a wrong fake included (issue 52:
with backend eager it passed those). Oracle: plain torch.compile in this process."""
import json
import subprocess
import sys
import textwrap

import torch

from test_trust_kinds import WRONG_FAKE as _WRONG_FAKE

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


# the trust tests' wrong fake (x @ w.t() with empty_like(x)), under a namespace of its own: both register in one process
WRONG_FAKE = _WRONG_FAKE.replace("tc_fk52", "tc_fg52")


def test_fullgraph_fails_where_plain_fullgraph_compile_fails_on_a_wrong_fake(tmp_path):
    namespace: dict = {}
    exec(textwrap.dedent(WRONG_FAKE), namespace)
    fn, args = namespace["probe_linear"]()
    fn(*args).sum().backward()  # eager runs
    torch._dynamo.reset()
    try:  # the oracle: what a user runs, torch.compile(fullgraph=True) with its default backend
        torch.compile(fn, fullgraph=True)(*(a.detach().requires_grad_() for a in args)).sum().backward()
        plain = None
    except Exception as e:
        plain = type(e).__name__
    assert plain == "BackendCompilerFailed"
    (tmp_path / "m.py").write_text(textwrap.dedent(WRONG_FAKE))
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "m.py"), "--stages",
                           "eager,fullgraph,opcheck", "--json", str(out)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    stages = json.loads(out.read_text())["probes"][0]["stages"]
    assert stages["fullgraph"]["status"] == "fail"  # it used to pass: Dynamo alone never saw the fake's shape
    assert stages["fullgraph"]["failure"]["kind"] == "fake-mismatch"
