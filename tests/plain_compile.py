"""The oracle for tests/test_real_models.py: plain ``torch.compile``, no tracecheck, in its own process.

``python plain_compile.py MODEL_FILE PROBE`` builds the probe's case and prints one JSON line:
``graphs`` (``counters["stats"]["unique_graphs"]`` after one aot_eager forward), ``calls_captured`` and
``frames_eager`` (``counters["frames"]`` total - ok) after it, and, with
``--inductor-differs``, ``inductor_max_diff``: how far one inductor forward with default settings (no
``fallback_random``) is from eager at the same seed. Run it with ``TORCH_LOGS=graph_breaks``: the breaks
are read from that log by the test. ``--batch-sizes``: instead, the forward compiled with backend "eager" and called
at three batch sizes (dim 0 of the tensor inputs grown by tiling rows), once as a user varying the batch gets it
(torch.compile's default: the dims that changed become dynamic) and once with ``dynamic=True`` (every dim symbolic):
``{"varying_batch": error or None, "dynamic_true": error or None}``, an error as its exception's type name.
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
    if "--batch-sizes" in sys.argv:
        print(json.dumps({"varying_batch": _batch_sizes(fn, args, kwargs), "dynamic_true": _batch_sizes(
            fn, args, kwargs, dynamic=True)}))
        return
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


def _batch_sizes(fn, args, kwargs, **compile_kwargs):
    torch._dynamo.reset()
    b = next(t.shape[0] for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor) and t.dim())
    compiled = torch.compile(fn, backend="eager", **compile_kwargs)
    try:
        with torch.no_grad():
            for n in (b, b + 1, b + 2):
                rows = torch.arange(n) % b
                grow = [t[rows] if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == b else t for t in args]
                compiled(*grow, **{k: v[rows] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == b else v
                                   for k, v in kwargs.items()})
    except Exception as e:
        return type(e).__name__
    return None


if __name__ == "__main__":
    main()
