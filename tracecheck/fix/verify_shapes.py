"""Parent side of fix's check at shapes the probe never used: run fix.shape_check in a stage process on the patched
probe, and turn what it found into the outcome's ``shapes`` and reasons (no torch here: the CLI process never
imports it)."""
from __future__ import annotations

import os

from ..model.exitcodes import UsageError
from .outcome import FixOutcome
from .task_results import ShapeCheck
from .jobs import ShapeCheckTask, TaskRunner


def check_shapes(task: TaskRunner, patched: str, name: str, ops: list[str], out: FixOutcome) -> None:
    """The generated fakes at shapes the probe never used (fix.shape_check); a wrong shape there is a reason.
    ``task(work, what)``: one task (fix/jobs.py) in a stage process."""
    if not ops:
        return
    try:
        got = ShapeCheck.of(task(ShapeCheckTask(file=os.path.abspath(patched), probe=name, ops=tuple(ops)),
                                 "checking the fakes at other shapes"))
    except (UsageError, RuntimeError) as e:  # the process died (a kernel crashing at a new rank) or timed out
        out.reasons.append(f"the check of the fakes at other shapes did not finish ({e})")
        return
    if got.error is not None:
        out.reasons.append(f"the patched probe fails eagerly: {got.error.type}: {got.error.message[:300]}")
        return
    out.shapes = list(got.ops)
    for name in got.missing:
        out.reasons.append(f"{name}: the patched probe never called it, so its fake was not checked at other shapes")
    for op in out.shapes:
        for label, test, msg in op.failed:
            out.reasons.append(f"{op.op} at {label} (the eager op accepts it): opcheck {test}: {msg}")
        if not op.checked and not op.failed and not op.own_refused:
            why = (f"the fake's rank checks refuse {len(op.restricted)} the eager op takes, and the eager op "
                   f"refuses the other {len(op.refused)}" if op.restricted else
                   f"the eager op refuses every one tried: {', '.join(op.refused[:4]) or 'none'}")
            out.reasons.append(f"{op.op}: no shape beyond the probe's could be checked ({why})")
