"""Parent side of fix's check at shapes the probe never used: run fix.shape_check in a stage process on the patched
probe, and turn what it found into the outcome's ``shapes`` and reasons (no torch here: the CLI process never
imports it)."""
from __future__ import annotations

import os
from typing import Any


def check_shapes(task: Any, patched: str, name: str, ops: list[str], out: Any) -> None:
    """The generated fakes at shapes the probe never used (fix.shape_check); a wrong shape there is a reason.
    ``task(payload, what)``: one task in a stage process."""
    if not ops:
        return
    got = task({"op": "tracecheck.fix.shape_check:run", "file": os.path.abspath(patched), "probe": name, "ops": ops},
               "checking the fakes at other shapes")
    if "error" in got:
        out.reasons.append(f"the patched probe fails eagerly: {got['error']['type']}: {got['error']['message'][:300]}")
        return
    out.shapes = got["ops"]
    for op in got["ops"]:
        for label, test, msg in op["failed"]:
            out.reasons.append(f"{op['op']} at {label} (the eager op accepts it): opcheck {test}: {msg}")
        if not op["checked"] and not op["failed"]:
            out.reasons.append(f"{op['op']}: no shape beyond the probe's could be checked (the eager op refuses "
                               f"every one tried: {', '.join(op['refused'][:4]) or 'none'})")
