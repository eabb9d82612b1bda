"""The oracle for tests/test_fix_model_code.py: plain torch, no tracecheck, in its own process.

``python fix_oracle.py ORIGINAL.py PATCHED.py PROBE`` builds the probe's case from both files (seeded alike),
runs the original eagerly and the patched copy under ``torch.compile(backend="aot_eager", fullgraph=True)``
(fullgraph: any graph break left raises), forward and backward, and prints one JSON line: ``fullgraph`` ("ok" or
the exception), and whether the outputs and the gradients (inputs and parameters) equal the original's eager ones.
"""
import importlib.util
import json
import sys

import torch
from torch.utils import _pytree as pytree


def build(path: str, name: str, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    case = getattr(module, name)()
    return (case.fn, case.args) if hasattr(case, "fn") else (case[0], case[1])


def run(fn, args, compiled: bool):
    leaves = [a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    call = torch.compile(fn, backend="aot_eager", fullgraph=True) if compiled else fn
    torch.manual_seed(0)
    out = call(*args)
    outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    loss = sum(t.float().sum() for t in outs if t.requires_grad)
    grads = []
    if isinstance(loss, torch.Tensor):
        grads = torch.autograd.grad(loss, leaves + params, allow_unused=True)
    return [t.detach() for t in outs], [g for g in grads if g is not None]


def same(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b)
        return True
    except AssertionError:
        return False


def main() -> None:
    original, patched, name = sys.argv[1:4]
    fn, args = build(original, name, "fix_oracle_original")
    want_out, want_grads = run(fn, args, compiled=False)
    fn, args = build(patched, name, "fix_oracle_patched")
    result = {"fullgraph": "ok"}
    try:
        got_out, got_grads = run(fn, args, compiled=True)
        result.update(outputs_equal=same(got_out, want_out), grads_equal=same(got_grads, want_grads),
                      grads=len(want_grads))
    except Exception as e:  # noqa: BLE001 - the oracle reports what plain torch raised
        result["fullgraph"] = f"{type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
