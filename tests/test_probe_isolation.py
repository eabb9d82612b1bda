"""No probe sees what another probe's factory left behind (issue 38): a library that fills a global cache on its
first call (bitsandbytes' ``name2qmap``, built with ``Tensor.tolist()``) graph-breaks on that call only. A stage
process starts from its probe's template, a child of the file's template (which imported the file and never called a
probe factory) that called its own probe once (tracecheck/isolate/template.py), so the probe's graph count is the
same beside any other probe, in any file order, with ``-k`` or without, and with ``--fresh-imports``; and equal to
torch's own explain in a fresh process."""
import json
import subprocess
import sys
import textwrap

import pytest

CACHE = '''
import torch

_QMAP = {}


def _qmap():  # filled on the first call: .tolist() graph-breaks then, and never again in this process
    if "map" not in _QMAP:
        _QMAP["map"] = torch.linspace(-1.0, 1.0, 8).tolist()
    return _QMAP["map"]


def _cold(x):
    x = torch.sin(x)
    return x * _qmap()[7] + 1
'''

COLD = '''

def probe_cold():
    return _cold, (torch.randn(4),)
'''

WARM = '''

def probe_warm():
    _qmap()  # the factory warms the cache
    return (lambda x: x * 2), (torch.randn(4),)
'''

ORACLE = '''
import importlib.util, json, sys
import torch

spec = importlib.util.spec_from_file_location("model_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn, args = module.probe_cold()
out = torch._dynamo.explain(fn)(*args)
print(json.dumps([out.graph_count, out.graph_break_count]))
'''


def _write(tmp_path, cold_first):
    path = tmp_path / "cached.py"
    path.write_text(CACHE + (COLD + WARM if cold_first else WARM + COLD))
    return path


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """(graph count, graph breaks) of probe_cold under plain torch._dynamo.explain in a fresh process."""
    path = _write(tmp_path_factory.mktemp("oracle"), True)
    proc = subprocess.run([sys.executable, "-c", ORACLE, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    counts = tuple(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert counts[1] >= 1, counts  # the cold path does break the graph (else this test shows nothing)
    return counts


def _cold_counts(tmp_path, cold_first, *args):
    path = _write(tmp_path, cold_first)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(path), "--stages", "eager,explain",
                           "--json", str(out), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(out.read_text())
    names = sorted(p["name"] for p in report["probes"])
    explain = next(p for p in report["probes"] if p["name"] == "probe_cold")["stages"]["explain"]
    # graphs - 1, explain()'s own count
    return names, (explain["graph_count"], explain["graph_break_count"])


@pytest.mark.parametrize("cold_first", [True, False], ids=["cold-first", "warm-first"])
@pytest.mark.parametrize("args, names", [
    ((), ["probe_cold", "probe_warm"]),
    (("-k", "cold"), ["probe_cold"]),
], ids=["both", "only-cold"])
def test_a_probe_never_sees_another_probes_factory(tmp_path, oracle, cold_first, args, names):
    found, counts = _cold_counts(tmp_path, cold_first, *args)
    assert found == names
    assert counts == oracle


def test_fresh_imports_isolate_probes_too(tmp_path, oracle):
    found, counts = _cold_counts(tmp_path, False, "--fresh-imports")
    assert found == ["probe_cold", "probe_warm"]
    assert counts == oracle


# probe_b refuses to build after probe_a's factory ran in the same process (a registry filled by a first caller,
# as ``torch.library`` refuses a second ``define`` of one name)
SECOND = '''
import torch

_BUILT = []

def probe_a():
    _BUILT.append("a")
    return (lambda x: x + 1), (torch.randn(4),)

def probe_b():
    if _BUILT:
        raise RuntimeError(f"built after {_BUILT}")
    return (lambda x: x * 2), (torch.randn(4),)
'''


def _statuses(tmp_path, target, *args):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", target, "--stages", "eager,aot_eager",
                           "--json", str(out), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    report = json.loads(out.read_text())
    return proc.returncode, {(p["name"], s): r["status"] for p in report["probes"] for s, r in p["stages"].items()}


@pytest.mark.parametrize("args", [(), ("--fresh-imports",)], ids=["template", "fresh-imports"])
def test_discovery_calls_each_probe_where_no_other_probe_ran(tmp_path, args):
    (tmp_path / "second.py").write_text(SECOND)
    alone = _statuses(tmp_path, str(tmp_path / "second.py") + "::probe_b", *args)
    assert alone == (0, {("probe_b", "eager"): "pass", ("probe_b", "aot_eager"): "pass"})  # the oracle: alone
    code, both = _statuses(tmp_path, str(tmp_path / "second.py"), *args)
    assert code == 0
    assert {k: v for k, v in both.items() if k[0] == "probe_b"} == alone[1]
