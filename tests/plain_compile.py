"""The oracle for tests/test_real_models.py: plain ``torch.compile``, no tracecheck, in its own process.

``python plain_compile.py MODEL_FILE PROBE`` builds the probe's case and prints one JSON line:
``graphs`` (``counters["stats"]["unique_graphs"]`` after one aot_eager forward), ``calls_captured`` and
``frames_eager`` (``counters["frames"]`` total - ok) after it, and, with
``--inductor-differs``, ``inductor_max_diff``: how far one inductor forward with default settings (no
``fallback_random``) is from eager at the same seed. Run it with ``TORCH_LOGS=graph_breaks``: the breaks
are read from that log by the test.
"""
import importlib.util
import json
import sys

import torch
from torch._dynamo.utils import counters


def main() -> None:
    path, name = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("plain_compile_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    case = getattr(module, name)()
    fn, args, kwargs = (case.fn, case.args, case.kwargs) if hasattr(case, "fn") else (*case, {})[:3]
    torch.manual_seed(0)
    torch.compile(fn, backend="aot_eager")(*args, **kwargs)
    out = {"graphs": int(counters["stats"]["unique_graphs"]),
           # compile coverage as PyTorch's CI reads it: call nodes captured, frames Dynamo gave up on
           "calls_captured": int(counters["stats"]["calls_captured"]),
           "frames_eager": int(counters["frames"]["total"]) - int(counters["frames"]["ok"])}
    if "--inductor-differs" in sys.argv:
        torch._dynamo.reset()
        torch.manual_seed(0)
        eager = fn(*args, **kwargs).logits
        torch.manual_seed(0)
        compiled = torch.compile(fn)(*args, **kwargs).logits
        out["inductor_max_diff"] = float((eager - compiled).abs().max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
