"""A stage's deadline follows what its probe's comparable stages took (tracecheck/isolate/deadline.py): the rule on
numbers written by hand, and the runner killing a stage at the deadline it is given while it runs."""
import textwrap

import pytest

from tracecheck.isolate import deadline
from tracecheck.isolate.deadline import Deadline, Deadlines
from tracecheck.model.tasks import floor_s

COSTS = {"eager": 0, "explain": 1, "aot_eager": 2, "inductor": 3, "compiled_autograd": 6}


def test_no_comparable_stage_passed_gives_the_cap():
    d = Deadlines(300, COSTS)
    assert d(("p", "inductor")).seconds == 300
    d.passed("p", "eager", 0.5)  # cheaper than inductor: says nothing about it
    d.passed("p", "aot_eager", 0.5)
    got = d(("p", "inductor"))
    assert got.seconds == 300 and got.is_cap and "no stage of the probe that costs as much had passed" in got.why


def test_ten_times_the_longest_comparable_stage_within_floor_and_cap():
    d = Deadlines(300, COSTS)
    d.passed("p", "compiled_autograd", 20.0)
    got = d(("p", "inductor"))
    assert got.seconds == 200.0 and not got.is_cap  # 10 x 20 s
    assert got.why == ("its 200 s deadline, 10x the 20.0 s the probe's compiled_autograd stage took (at least 150 s, "
                       "at most --timeout 300 s)")
    d.passed("p", "compiled_autograd", 5.0)
    got = d(("p", "inductor"))
    assert got.seconds == 150.0 and got.why.startswith("its 150 s deadline, the least a stage gets (half --timeout, at least 120 s)")  # not 50 s
    d.passed("p", "compiled_autograd", 40.0)
    got = d(("p", "inductor"))
    assert got.seconds == 300 and got.is_cap
    assert got.why == "the 300 s timeout (--timeout; the probe's compiled_autograd stage took 40.0 s)"


def test_cheap_stages_set_no_deadline_and_take_one_from_costlier_ones():
    d = Deadlines(300, COSTS)
    d.passed("p", "eager", 0.1)  # cost 0: under MIN_REFERENCE_COST, for no stage
    assert d(("p", "explain")).is_cap
    d.passed("p", "aot_eager", 16.0)
    assert d(("p", "explain")).seconds == 160.0


def test_only_the_same_probes_passed_stages_count():
    d = Deadlines(300, COSTS)
    d.passed("other", "compiled_autograd", 1.0)
    assert d(("p", "inductor")).is_cap
    assert d(("other", "inductor")).seconds == 150.0


def test_the_floor_is_half_the_timeout_at_least_120_s_within_it():
    assert floor_s(300) == 150 and floor_s(3600) == 1800 and floor_s(200) == 120 and floor_s(20) == 20
    d = Deadlines(20, COSTS)
    d.passed("p", "compiled_autograd", 1.0)
    got = d(("p", "explain"))
    assert got.seconds == 20 and got.is_cap and got.why == "the 20 s timeout (--timeout)"


MODEL = '''
import time
import torch

def _quick(x):
    return x * 2

def probe_quick():
    return _quick, (torch.randn(4),)

def _slow(x):
    end = time.time() + 60
    while time.time() < end:  # computes (a deadline counts CPU time: a sleep would only meet the wall-clock cap)
        pass
    return x * 2

def probe_slow():
    return _slow, (torch.randn(4),)
'''


def test_the_runner_asks_again_and_kills_at_the_shorter_deadline(tmp_path, monkeypatch):
    """Two stages of one probe: once the quick one has passed, the slow one's deadline is 2x its time (floor 1 s),
    and the slow one is killed then, long before its 60 s busy loop would end with a result (a pass)."""
    from tracecheck.isolate.runner import Runner, Task
    from tracecheck.stages._run import StageTask

    monkeypatch.setattr(deadline, "floor_s", lambda cap: 1.0)
    monkeypatch.setattr(deadline, "FACTOR", 2.0)
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    path = str(tmp_path / "model.py")
    deadlines = Deadlines(120, {"eager": 2, "vmap": 2})
    tasks = [Task(("p", "vmap"), StageTask(file=path, probe="probe_slow", stage="eager"), 120),
             Task(("p", "eager"), StageTask(file=path, probe="probe_quick", stage="eager"), 120)]
    outcomes = {}
    with Runner(2, warm_compile=False) as runner:
        for o in runner.run(tasks, deadline=deadlines):
            if o.message is not None:
                deadlines.passed(*o.task.key, o.seconds)
            outcomes[o.task.key[1]] = o
    quick, slow = outcomes["eager"], outcomes["vmap"]
    assert quick.message is not None and not quick.timed_out
    assert slow.timed_out and slow.message is None
    assert slow.limit.seconds == max(1.0, 2 * quick.seconds)
    assert slow.cpu_seconds is not None and slow.cpu_seconds >= slow.limit.seconds * 0.9
    assert slow.died.startswith(f"was killed after {min(slow.seconds, slow.cpu_seconds):.0f} s of CPU time "
                                f"({slow.seconds:.0f} s on the clock), over its ") and \
        "the probe's eager stage took" in slow.died


def test_without_a_deadline_the_tasks_timeout_is_the_limit():
    from tracecheck.isolate.runner import Outcome, Task

    o = Outcome(Task("k", None, 8), None, None, True, 8.1, "")
    assert o.died == "was killed after the 8 s timeout"
    o.limit = Deadline(3, "its 3 s deadline, as set", False)
    assert o.died == "was killed after 8 s, over its 3 s deadline, as set"
