"""A stage's deadline follows what its probe's comparable stages took (tracecheck/isolate/deadline.py): the rule on
numbers written by hand, and the runner killing a stage at the deadline it is given while it runs."""
import textwrap

import pytest

from tracecheck.isolate import deadline
from tracecheck.isolate.deadline import Deadline, Deadlines

COSTS = {"eager": 0, "explain": 1, "inductor": 3, "compiled_autograd": 6}


def test_no_comparable_stage_ended_gives_the_cap():
    d = Deadlines(300, COSTS)
    assert d(("p", "inductor")).seconds == 300
    d.ended("p", "eager", 0.5, on_its_own=True)  # cheaper than inductor: says nothing about it
    got = d(("p", "inductor"))
    assert got.seconds == 300 and "no stage of the probe that costs as much had ended" in got.why


def test_ten_times_the_longest_comparable_stage_within_floor_and_cap():
    d = Deadlines(300, COSTS)
    d.ended("p", "compiled_autograd", 20.0, on_its_own=True)
    got = d(("p", "inductor"))
    assert got.seconds == 200.0  # 10 x 20 s
    assert got.why.startswith("200 s, 10x the 20.0 s the probe's compiled_autograd stage took")
    d.ended("p", "compiled_autograd", 5.0, on_its_own=True)
    assert d(("p", "inductor")).seconds == 120.0  # 50 s is under the floor
    d.ended("p", "compiled_autograd", 40.0, on_its_own=True)
    got = d(("p", "inductor"))
    assert got.seconds == 300 and got.why == ("the 300 s timeout (--timeout; the probe's compiled_autograd stage "
                                             "took 40.0 s)")


def test_only_the_same_probes_stages_that_ended_with_a_result_count():
    d = Deadlines(300, COSTS)
    d.ended("other", "compiled_autograd", 1.0, on_its_own=True)
    d.ended("p", "compiled_autograd", 1.0, on_its_own=False)  # killed or dead: no measure of the probe
    assert d(("p", "inductor")).seconds == 300
    assert d(("other", "inductor")).seconds == 120.0


def test_a_timeout_under_the_floor_is_the_deadline():
    d = Deadlines(20, COSTS)
    d.ended("p", "compiled_autograd", 1.0, on_its_own=True)
    assert d(("p", "explain")).seconds == 20


MODEL = '''
import time
import torch

def _quick(x):
    return x * 2

def probe_quick():
    return _quick, (torch.randn(4),)

def _slow(x):
    time.sleep(60)
    return x * 2

def probe_slow():
    return _slow, (torch.randn(4),)
'''


def test_the_runner_asks_again_and_kills_at_the_shorter_deadline(tmp_path, monkeypatch):
    """Two stages of one probe: once the quick one has ended, the slow one's deadline is 2x its time (floor 1 s),
    and the slow one is killed then, long before its 60 s sleep would end with a result (a pass)."""
    from tracecheck.isolate.runner import Runner, Task
    from tracecheck.stages._run import StageTask

    monkeypatch.setattr(deadline, "FLOOR_S", 1.0)
    monkeypatch.setattr(deadline, "FACTOR", 2.0)
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    path = str(tmp_path / "model.py")
    deadlines = Deadlines(120, {"eager": 1, "vmap": 1})
    tasks = [Task(("p", "vmap"), StageTask(file=path, probe="probe_slow", stage="eager"), 120),
             Task(("p", "eager"), StageTask(file=path, probe="probe_quick", stage="eager"), 120)]
    outcomes = {}
    with Runner(2, warm_compile=False) as runner:
        for o in runner.run(tasks, deadline=deadlines):
            deadlines.ended(*o.task.key, o.seconds, on_its_own=o.message is not None)
            outcomes[o.task.key[1]] = o
    quick, slow = outcomes["eager"], outcomes["vmap"]
    assert quick.message is not None and not quick.timed_out
    assert slow.timed_out and slow.message is None
    assert slow.limit.seconds == max(1.0, 2 * quick.seconds)
    assert slow.died.startswith("killed after ") and "the probe's eager stage took" in slow.died


def test_without_a_deadline_the_tasks_timeout_is_the_limit():
    from tracecheck.isolate.runner import Outcome, Task

    o = Outcome(Task("k", None, 8), None, None, True, 8.1, "")
    assert o.died == "killed after the 8 s timeout"
    o.limit = Deadline(3, "3 s, as set")
    assert o.died == "killed after 3 s, as set"
