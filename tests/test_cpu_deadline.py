"""Stage deadlines follow the machine, not the clock (issue 52, item 9): a stage's CPU time counts against its
deadline, as ``ulimit -t`` counts it, so a stage slowed by a busy machine (here: one that waits, using no CPU, as a
stage starved of its core does) is not failed; a stage that computes past its deadline is killed, saying so; one that
only waits is killed at a much larger wall-clock cap, saying it waited. Real runs of the CLI in a subprocess."""
import json
import subprocess
import sys
import textwrap

import pytest

from tracecheck.isolate import runner

MODEL = textwrap.dedent('''
    import time
    import torch

    def _busy(x):
        end = time.time() + 30
        while time.time() < end:   # computes far past its deadline
            pass
        return x

    def probe_busy():
        return _busy, (torch.randn(4),)

    def _waits(x):
        if not getattr(_waits, "done", False):   # once per process: longer on the clock than --timeout, no CPU
            _waits.done = True
            time.sleep(4)
        return x * 2

    def probe_waits():
        return _waits, (torch.randn(4),)

    def _hangs(x):
        time.sleep(3600)
        return x

    def probe_hangs():
        return _hangs, (torch.randn(4),)
    ''')
TIMEOUT = 2.5


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu")
    (d / "model.py").write_text(MODEL)
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "model.py", "--stages", "eager", "--timeout",
                           str(TIMEOUT), "--json", "r.json"], cwd=d, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((d / "r.json").read_text())
    return {p["name"]: p["stages"]["eager"] for p in doc["probes"]}


@pytest.mark.slow
def test_a_stage_that_waits_longer_than_the_timeout_but_computes_little_passes(report):
    s = report["probe_waits"]
    assert s["status"] == "pass" and s["seconds"] > TIMEOUT  # over --timeout on the clock: the old rule killed it


@pytest.mark.slow
def test_a_stage_that_computes_past_its_deadline_is_killed_on_cpu_time(report):
    s = report["probe_busy"]
    assert s["status"] == "timeout", s
    cause = s["failure"]["evidence"]["cause"]
    assert f"after the {TIMEOUT:g} s timeout" in cause and "s of CPU time" in cause, cause
    assert s["seconds"] < runner.wall_cap(TIMEOUT)  # the CPU limit, not the wall-clock cap


@pytest.mark.slow
def test_a_stage_that_only_waits_is_killed_at_the_wall_clock_cap_and_says_so(report):
    s = report["probe_hangs"]
    assert s["status"] == "timeout", s
    cause = s["failure"]["evidence"]["cause"]
    assert "of wall-clock time" in cause and "waiting, not computing" in cause, cause
    assert s["seconds"] >= runner.wall_cap(TIMEOUT)


def test_cpu_time_is_read_per_process_group():
    import os
    import time

    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    used = runner._cpu_by_group().get(os.getpgrp())
    assert used is not None and used >= 0.3  # this process computed 0.3 s at least; its group's sum includes it
    assert runner._busy(10.0, {42: 2.0}, 42) == 2.0  # a busy machine: CPU time counts
    assert runner._busy(1.0, {42: 2.0}, 42) == 1.0  # two threads: never more than the clock
    assert runner._busy(5.0, {}, 42) == 5.0  # no /proc: the clock
