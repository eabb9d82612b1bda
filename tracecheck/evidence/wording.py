"""How torch words what tracecheck reads, as plain text (no torch import): the op namespaces that are torch's own,
and the gb_type and GB code inside a Dynamo message. The evidence listeners (evidence/tracelog.py, evidence/exceptions.py) and the classifier both
read it, so neither imports the other."""
from __future__ import annotations

import re

#: op namespaces of torch itself: an op in one of them is never a user's custom op
TORCH_NAMESPACES = {"aten", "prims", "prim", "rngprims", "_c10d_functional", "c10d", "c10d_functional",
                    "profiler", "quantized", "_quantized", "inductor", "debugprims", "higher_order",
                    "_refs", "mkldnn", "mkl", "onednn", "_inductor_test", "_dynamo_testing", "streams"}

#: how tracecheck's emulated NPU (devices/csrc/emulated_npu.cpp) says an aten op fails for want of a host kernel:
#: the emulator's gap, never the probe's bug (classify: unknown with the evidence, not eager-error)
EMULATOR_GAP = "The emulated npu device cannot run "

_GB_CODE = re.compile(r"/gb/gb(\d{4})\.html")


def gb_code_from_text(text: str) -> str | None:
    m = _GB_CODE.search(text)
    return f"GB{m.group(1)}" if m else None


def gb_type_from_text(text: str) -> str | None:
    """The gb_type is the line right before ``  Explanation:`` in Dynamo's formatted messages (2.7+)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  Explanation:"):
            # fullgraph inside a HOP inserts "  Higher Order Operator: ..." between gb_type and Explanation
            j = i - 1
            while j >= 0 and lines[j].startswith("  Higher Order Operator"):
                j -= 1
            return lines[j].strip() or None if j >= 0 else None
    return None
