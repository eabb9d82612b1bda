"""One probe that segfaults, hangs or exits must not take down the run or lose the other results."""
import pytest

MODEL = '''
import ctypes, sys, time
import torch

def _ok(x):
    return torch.sin(x) * 2

def probe_ok():
    return _ok, (torch.randn(4, requires_grad=True),)

def _segv(x):
    ctypes.string_at(0)          # reads address 0: SIGSEGV
    return x

def probe_segfault():
    return _segv, (torch.randn(4),)

def _hang(x):
    time.sleep(3600)
    return x

def probe_hang():
    return _hang, (torch.randn(4),)

def _exit(x):
    sys.exit(7)

def probe_exit():
    return _exit, (torch.randn(4),)
'''


@pytest.fixture(scope="module")
def isolation_run(tmp_path_factory):
    import json, os, subprocess, sys

    d = tmp_path_factory.mktemp("iso")
    (d / "model.py").write_text(MODEL)
    out = d / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(d / "model.py"), "--stages", "eager",
                           "--timeout", "8", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=d)
    return proc, json.loads(out.read_text())


def _stage(report, name):
    return next(p for p in report["probes"] if p["name"] == name)["stages"]["eager"]


def test_run_finishes_with_findings_exit_code(isolation_run):
    proc, report = isolation_run
    assert proc.returncode == 1, proc.stderr
    assert len(report["probes"]) == 4


def test_good_probe_survives(isolation_run):
    assert _stage(isolation_run[1], "probe_ok")["status"] == "pass"


def test_segfault_is_a_crash_with_signal(isolation_run):
    s = _stage(isolation_run[1], "probe_segfault")
    assert s["status"] == "crash"
    assert s["failure"]["kind"] == "crash"
    assert "SIGSEGV" in s["failure"]["evidence"]["cause"]


def test_hang_is_a_timeout(isolation_run):
    s = _stage(isolation_run[1], "probe_hang")
    assert s["status"] == "timeout" and s["failure"]["kind"] == "timeout"
    assert 8 <= s["seconds"] < 60


def test_sys_exit_is_a_crash_with_exit_code(isolation_run):
    s = _stage(isolation_run[1], "probe_exit")
    assert s["status"] == "crash"
    assert "code 7" in s["failure"]["evidence"]["cause"]
