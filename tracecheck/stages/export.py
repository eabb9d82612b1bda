"""``export``: ``torch.export.export(strict=False)`` on the probe (a module, or the callable wrapped in one),
its program run and compared with eager; on failure, ``torch.export.draft_export`` for its report.

The deployment path (AOTInductor, ExecuTorch) starts here. Export traces the forward only, at the probe's static
shapes (dynamic batch sizes are the ``dynamic`` stage's question). draft_export's failure types map onto kinds
(``draft_export`` in kinds.json); an export error draft_export does not explain is classified like any other exception.
"""
from __future__ import annotations

import time
from typing import Any

from ..model import taxonomy
from ..model.targets import EXPORT
from ..model.payloads import ExportGraph, StageNotes
from ..model.records import DraftExportReport, DraftFailure, StageRecord
from ._spec import StageContext, StageSpec

# draft_export's FailureType names map to kinds in kinds.json (``draft_export.failure_types``). GUARD_ADDED: a guard
# specialized a dimension that the dynamic_shapes declared dynamic (draft_export reports it only then).
#: draft_export runs when what is left of the stage's time is at least this many times the failed export's own
DRAFT_MARGIN = 3.0


def run(ctx: StageContext) -> StageRecord:
    import dataclasses

    import torch

    from ..evidence import exceptions
    from ._execution import FORWARD, compare, execute, float64_run, forward_fails, reference, tensor_outputs

    stage_started = time.perf_counter()
    ref = reference(ctx.make_case, backward=False)
    if forward_fails(ref):
        return StageRecord(skip_reason="the eager forward fails (see the eager stage)")
    case = ctx.make_case()
    module = _as_module(case.fn)
    # compared as the tensors among the outputs; the program itself returns the probe's real outputs (below)
    ref = dataclasses.replace(ref, outputs=tensor_outputs(ref.outputs))
    started = time.perf_counter()
    with exceptions.WarningCollector() as w:
        try:
            ep = torch.export.export(module, case.args, case.kwargs, strict=False)
        except Exception as e:
            took = time.perf_counter() - started
            left = ctx.options.assured_s - (time.perf_counter() - stage_started)
            failed = StageRecord(error=exceptions.error_record(e, "forward"), phases=[FORWARD],
                                 warnings=w.messages)
            # draft_export traces again, and its report only explains the error above: run it within what is left
            # of the stage's time (a run that needs longer ends with a note, and the export error stands)
            if left < DRAFT_MARGIN * took:
                failed.extra = StageNotes(not_checked=[
                    f"torch.export.draft_export's report: the failed export took {took:.0f} s and draft_export "
                    f"traces again, more than the {max(left, 0):.0f} s left of the stage's time "
                    "(--timeout raises it)"]).to_extra()
            else:
                failed.draft_export = _draft(module, case, left)
                if failed.draft_export.ran_out:
                    failed.extra = StageNotes(not_checked=[
                        f"torch.export.draft_export's report: it ran past the {left:.0f} s left of the stage's time "
                        "and was stopped (--timeout raises it)"]).to_extra()
            return failed
    case = ctx.make_case()
    try:
        program = ep.module()
    except Exception as e:
        return StageRecord(error=exceptions.error_record(e, "forward"), phases=[FORWARD], warnings=w.messages)
    got = execute(program, dataclasses.replace(case, grad=False))
    if not got.error:
        got = dataclasses.replace(got, outputs=tensor_outputs(got.outputs))
    record = StageRecord(phases=[FORWARD], warnings=w.messages,
                         extra=ExportGraph(graph_nodes=len(ep.graph.nodes)).to_extra())
    if got.error:
        record.error = got.error  # the exported program does not run on the probe's own inputs
    else:
        fp64 = float64_run(lambda: dataclasses.replace(ctx.make_case(), grad=False))

        def fp64_tensors() -> Any:  # the float64 reference, flattened like the outputs it is compared with
            ex = fp64()
            return ex if isinstance(ex, str) else dataclasses.replace(ex, outputs=tensor_outputs(ex.outputs))

        try:
            record.mismatches = compare(ref, got, fp64_tensors)
        except Exception as e:  # the outputs refuse comparing (optimum-quanto's subclass runs allclose on its fakes)
            why = (str(e).splitlines() or [""])[0][:200]
            record.extra.update(StageNotes(numerics="not compared: comparing the exported program's outputs with "
                                                    f"eager's raised {type(e).__name__}: {why}").to_extra())
    return record


def _as_module(fn: Any) -> Any:
    """The probe as the ``nn.Module`` export takes: a module whose forward calls the probe (a module probe is a
    submodule, so its parameters are the program's) and returns its outputs as they are, so that export flattens
    them as ``torch.export.export`` of the probe would: an output type that is no pytree node (transformers'
    ``DynamicCache``, an unregistered dataclass) is refused with torch's own error (``non-pytree-output``), as it
    is when the user exports the model."""
    import torch

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.fn(*args, **kwargs)

    return Probe()


class _RanOut(BaseException):
    """Not an Exception: code under draft_export that catches Exception must not swallow the alarm."""


def _draft(module: Any, case: Any, budget_s: float) -> DraftExportReport:
    """draft_export's failures (``DraftFailure``: its FailureType name and the kind it maps to, ``op``, ``expr``, the
    innermost user frame of its user stack and that line's code); or the ``error`` draft_export raised; or ``ran_out``
    when it ran past ``budget_s`` (an alarm stops it, where the stage runs on the main thread)."""
    import signal
    import threading

    import torch

    from .. import compat
    from ..evidence import exceptions, frames

    def stop(signum: int, frame: Any) -> None:
        raise _RanOut

    timed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = signal.signal(signal.SIGALRM, stop) if timed else None
    try:
        if timed:  # repeating: an alarm some code swallowed comes again
            signal.setitimer(signal.ITIMER_REAL, max(budget_s, 0.1), 1.0)
        ep = torch.export.draft_export(module, case.args, case.kwargs)
    except _RanOut:
        return DraftExportReport(ran_out=True)
    except Exception as e:
        return DraftExportReport(error=exceptions.error_record(e, "forward"))
    finally:
        if timed:
            signal.signal(signal.SIGALRM, signal.SIG_IGN)  # an alarm now must not escape the stage
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    report = compat.draft_export_report(ep)
    # names interned before this draft_export are in torch's table only
    names = {**compat.trace_filenames(), **(getattr(report, "str_to_filename", {}) or {})}
    failures: list[DraftFailure] = []
    for f in getattr(report, "failures", []) or []:
        name = getattr(f.failure_type, "name", str(f.failure_type))
        data = f.data if isinstance(f.data, dict) else {}
        frame = frames.innermost_user_frame(data.get("user_stack"), names)
        locals_ = data.get("frame_locals") or {}
        code = locals_.get("loc") if isinstance(locals_, dict) else None
        failures.append(DraftFailure(name, taxonomy.draft_kind(name), _text(data.get("op")), _text(data.get("expr")),
                                     str(data.get("reason", ""))[:500], _text(code), frame))
    return DraftExportReport(tuple(failures))


def _text(v: Any) -> str | None:
    """A value of draft_export's data as text (the op, a sympy expression), as JSON would have written it."""
    return str(v) if v is not None else None


SPEC = StageSpec(
    target=EXPORT,
    name="export", order=90, cost=2, run=run, forward_only=True, options=("assured_s",),
    summary="torch.export.export(strict=False), the exported program compared with eager; on failure "
            "torch.export.draft_export's report",
    repro=(
        '_repro_module = _repro_fn if isinstance(_repro_fn, torch.nn.Module) else _ReproWrap(_repro_fn)\n'
        'torch.export.export(_repro_module, tuple(_repro_args), dict(_repro_kwargs), strict=False)'))
