"""``opcheck``: ``torch.library.opcheck`` on every custom op the probe calls, with the inputs it called them
with (recorded by a dispatch mode during one eager forward)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..model.frame import Frame
from ..model.records import OpTests, StageRecord
from ._spec import StageContext, StageSpec


def opcheck_utils(device: str) -> list[str]:
    """opcheck's autograd-registration test only runs on CPU/CUDA/XPU tensors (NotImplementedError elsewhere)."""
    utils = ["test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"]
    return utils if device.split(":")[0] in ("cpu", "cuda", "xpu") else [u for u in utils if "autograd" not in u]


def run(ctx: StageContext) -> StageRecord:
    import torch
    from ..compat import pytree

    from .. import compat
    from ..evidence import exceptions
    from ..evidence.oprecorder import OpRecorder
    from ..model.report import op_name
    from ._execution import backward_of, phases

    case = ctx.make_case()
    rec = OpRecorder(track_reached=True)
    out = None
    try:
        with rec:
            out = case.fn(*case.args, **case.kwargs)
    except Exception as e:
        if not rec.calls:
            from ..model.report import headline

            return StageRecord(skip_reason=f"the eager forward under tracecheck's op recorder fails before any "
                                           f"custom op ran ({headline(e)})")
    # ops the backward calls (a register_autograd backward, an autograd.Function's backward that calls a custom
    # op): opcheck them too, with the inputs the backward gave them; a fresh case, so the forward's analysis below
    # keeps its own graph
    in_backward = _backward_calls(ctx, rec.calls)
    if not rec.calls and not in_backward:
        return StageRecord(skip_reason="the probe calls no custom op")
    results: dict[str, OpTests] = {}
    for op, (args, kwargs) in {**rec.calls, **in_backward}.items():
        res = torch.library.opcheck(op, args, kwargs, test_utils=opcheck_utils(ctx.device), raise_exception=False)
        tests: OpTests = {test: (v if isinstance(v, str) else exceptions.error_record(v, test))
                          for test, v in res.items()}
        fake_def: Frame | None = None
        for test, outcome in tests.items():
            if not isinstance(outcome, str) and test in ("test_faketensor", "test_aot_dispatch_dynamic"):
                # where a fake-mismatch's fix goes: the fake impl's own def (classify/detect.py places it there)
                fake_def = fake_def or compat.fake_impl_location(op_name(str(op)))
                if fake_def:
                    tests[test] = dataclasses.replace(outcome, fake_def=fake_def)
        results[str(op)] = tests
    # opcheck's autograd tests (test_autograd_registration, test_aot_dispatch_dynamic) run backward only when
    # an input of the recorded call requires grad
    differentiable = any(isinstance(t, torch.Tensor) and t.requires_grad
                         for args, kwargs in rec.calls.values() for t in pytree.tree_leaves((args, kwargs)))
    # ops autograd never reaches in this probe (seen called, and only with grad mode off: inside an
    # autograd.Function's forward, or under no_grad): a missing autograd registration does not matter to it
    # (classify/results.py). An op called from C++ is not seen, so it stays checked.
    grad_free = [str(op) for op in rec.calls
                 if op_name(str(op)) in rec.grad_off and op_name(str(op)) not in rec.differentiated] + \
        [str(op) for op in in_backward]  # a backward runs with grad off: its ops' autograd never runs
    # ops called with grad on whose outputs the probe's loss does not depend on (top-k indices used to gather):
    # the probe's own backward never reaches them either
    unused = rec.never_differentiated(lambda: backward_of(case, out)) if out is not None and rec.differentiated \
        else set()
    grad_unused = [str(op) for op in rec.calls if op_name(str(op)) in unused]
    return StageRecord(opcheck=results, phases=phases(differentiable or bool(in_backward)), grad_free_ops=grad_free,
                       grad_unused_ops=grad_unused, backward_only_ops=[str(op) for op in in_backward])


def _backward_calls(ctx: StageContext, seen: dict[Any, Any]) -> dict[Any, Any]:
    """The custom ops the probe's backward calls and its forward does not, with their first inputs; {} when the
    probe does not train or its backward raises (the other stages report that)."""
    from ..evidence.oprecorder import OpRecorder
    from ._execution import backward_of

    case = ctx.make_case()
    try:
        out = case.fn(*case.args, **case.kwargs)
        with OpRecorder() as rec:
            backward_of(case, out)
    except Exception:
        return {}
    return {op: call for op, call in rec.calls.items() if op not in seen}


SPEC = StageSpec(
    name="opcheck", order=60, cost=1, run=run, needs=("custom ops",),
    summary="torch.library.opcheck on every custom op the probe calls, with the inputs it called them with",
    repro=(
        "# the custom op's calls in an eager run, then torch.library.opcheck on the first call of each\n"
        'from torch.utils._python_dispatch import TorchDispatchMode\n'
        'class _ReproCalls(TorchDispatchMode):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.calls = {}\n'
        '    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n'
        '        if func.namespace not in ("aten", "prim", "prims") and func not in self.calls:\n'
        '            self.calls[func] = (args, kwargs or {})\n'
        '        return func(*args, **(kwargs or {}))\n'
        'with _ReproCalls() as _repro_calls:\n'
        '    _repro_fn(*_repro_args, **_repro_kwargs)\n'
        'for _repro_op, (_a, _k) in _repro_calls.calls.items():\n'
        '    if {op!r} in ("", str(_repro_op.overloadpacket), str(_repro_op)):\n'
        '        print("opcheck", _repro_op)\n'
        '        torch.library.opcheck(_repro_op, _a, _k)'))
