"""One probe that segfaults, hangs or exits must not take down the run or lose the other results."""
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = '''
import ctypes, sys, time
import torch

def _segv(x):
    ctypes.string_at(0)          # reads address 0: SIGSEGV
    return x

def probe_segfault():            # first: its stage is the run's first task after discovery
    return _segv, (torch.randn(4),)

def _ok(x):
    return torch.sin(x) * 2

def probe_ok():
    return _ok, (torch.randn(4, requires_grad=True),)

def _hang(x):
    import multiprocessing
    _hang.locks = [multiprocessing.Lock(), multiprocessing.Semaphore()]  # a killed process never releases them
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
    import json, subprocess, sys

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


def test_segfault_is_a_crash_with_signal_and_python_stack(isolation_run):
    s = _stage(isolation_run[1], "probe_segfault")
    assert s["status"] == "crash"
    assert s["failure"]["kind"] == "crash"
    assert "SIGSEGV" in s["failure"]["evidence"]["cause"]
    assert "in _segv" in s["failure"]["evidence"]["stderr_tail"]  # faulthandler's stack names the frame


def test_hang_is_a_timeout(isolation_run):
    s = _stage(isolation_run[1], "probe_hang")
    assert s["status"] == "timeout" and s["failure"]["kind"] == "timeout"
    # the cause names the limit it was killed at: a sleep uses no CPU, so the wall-clock cap (3x the 8 s timeout;
    # tests/test_cpu_deadline.py has the CPU-time side)
    cause = s["failure"]["evidence"]["cause"]
    assert "of wall-clock time" in cause and "(the 8 s timeout" in cause and s["seconds"] >= 24, cause


def test_sys_exit_is_a_crash_with_exit_code(isolation_run):
    s = _stage(isolation_run[1], "probe_exit")
    assert s["status"] == "crash"
    assert "code 7" in s["failure"]["evidence"]["cause"]


def test_interrupt_kills_stage_processes_and_exits_130(tmp_path):
    import os, signal, subprocess, sys, time

    (tmp_path / "model.py").write_text(MODEL)
    marker = "tc-interrupt-test-hang"
    proc = subprocess.Popen([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "model.py"), "-k", "hang",
                             "--stages", "eager", "--timeout", "120"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TC_MARK": marker})
    deadline = time.time() + 120
    while time.time() < deadline and not _stage_processes(marker, proc.pid):
        time.sleep(0.5)
    stage_pids = _stage_processes(marker, proc.pid)
    assert stage_pids, "the hanging stage never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    # the resource tracker frees the killed stage's semaphores without warning the user of a "leak"
    assert "leaked semaphore" not in err, err
    time.sleep(1)
    assert not set(stage_pids) & set(_stage_processes(marker, proc.pid)), "a stage process outlived tracecheck"


def _stage_processes(marker, cli_pid):
    """Live stage processes: they inherit the marker from the CLI's environment and are children of the fork
    server (grandchildren of the CLI), unlike the CLI itself, the fork server and the resource tracker."""
    import os

    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state, ppid = f.read().split(")")[-1].split()[:2]
        except OSError:
            continue
        if marker.encode() in env and state != "Z" and int(pid) != cli_pid and int(ppid) != cli_pid:
            pids.append(int(pid))
    return pids


def test_a_tracecheck_folder_in_the_working_directory_is_not_imported(tmp_path, write_probe):
    """The fork server is a `python -c` interpreter (cwd first on sys.path; Python 3.11 ignores the sys_path
    multiprocessing passes it): a ./tracecheck/ clone must not replace the installed one in stage processes."""
    shadow = tmp_path / "tracecheck"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("import os\nos._exit(9)  # a stale clone that must never be imported\n")
    write_probe("""
        import torch

        def probe():
            return (lambda x: x.sin()), (torch.randn(3),)
    """)
    # the console script, as a user runs it (`python -m` would put the folder on the CLI's own path, as always)
    script = Path(sys.executable).parent / "tracecheck"
    proc = subprocess.run([str(script), "run", "model.py", "--stages", "eager"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 probe, 0 failing" in proc.stdout
