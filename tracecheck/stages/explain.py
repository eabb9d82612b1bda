"""``explain``: ``torch._dynamo.explain`` (forward only) plus tracecheck's own break count from the trace, the
forward's compile coverage (model/payloads.Coverage) and, when it breaks, what each break costs
(model/payloads.BreakCosts, measured by ``_break_cost``)."""
from __future__ import annotations

import os
import re
import sys
import time
from typing import Any, Callable

from ..model.errors import ErrorRecord
from ..model.payloads import Coverage, SourceLines, StageNotes
from ..model.records import StageRecord
from ._spec import StageContext, StageSpec

#: Tensor metadata queries Dynamo answers at trace time (static shapes) with no graph node; an eager count that kept
#: them would not be at calls_captured's level (a tiny GPT-2: 46 of its 145 eager torch calls). Property reads
#: (``.shape``, ``.dtype``, ``.device``, ``.ndim``) reach a TorchFunctionMode as ``__get__`` and are dropped too.
_METADATA = frozenset({"size", "dim", "ndimension", "stride", "numel", "nelement", "storage_offset", "element_size",
                       "is_contiguous", "is_floating_point", "is_complex", "is_signed", "get_device", "__len__",
                       "__get__"})


#: the seconds measuring the breaks' cost may take after its compile, at most, and the least worth starting with: it
#: stays within half the time the stage is sure to get (``StageOptions.assured_s``), so that a slow compile on a
#: loaded machine never turns explain into a timeout
COST_BUDGET_S, COST_MIN_BUDGET_S = 30.0, 3.0

#: ``File "/path/model.py", line 14, in forward``: one frame of a graph node's ``stack_trace``
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _outside(prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    """A test of a file: is it outside torch, Python's standard library and tracecheck (code a source view shows)?"""
    cache: dict[str, bool] = {}

    def test(file: str) -> bool:
        if file not in cache:
            cache[file] = not file.startswith(prefixes) and not file.startswith("<")
        return cache[file]
    return test


def _not_shown() -> tuple[str, ...]:
    import sysconfig

    import torch

    roots = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
             sysconfig.get_paths()["stdlib"]]
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots) + tuple(os.path.join(r, "") for r in roots)


Lines = dict[str, set[int]]
#: an eager torch call's line -> the shown lines further out on its stacks (the calls that led there)
Callers = dict[tuple[str, int], set[tuple[str, int]]]


def _torch_calls_eager(ctx: StageContext, shown: Callable[[str], bool]) -> tuple[int | None, Lines, Callers]:
    """Torch-level calls the probe's forward makes in eager, outermost only (a call's own torch calls run with the
    mode off, as Dynamo records one node for ``F.layer_norm``), less ``_METADATA``; None when the forward raises.
    With it, the line (of a file ``shown`` admits) nearest each such call on the Python stack: the lines that run
    torch code in eager, which a source view marks as captured or not; and the shown lines further out on those
    stacks (``x = self.block(x)``: the calls that led there)."""
    from torch.overrides import TorchFunctionMode

    lines: Lines = {}
    callers: Callers = {}

    class _Count(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__name__", None) not in _METADATA:
                self.n += 1
                frame: Any = sys._getframe(1)  # the innermost shown frame: the line that made the call; the shown
                made: tuple[str, int] | None = None  # frames further out are the calls that led there
                while frame is not None:
                    if shown(frame.f_code.co_filename):
                        at = (frame.f_code.co_filename, frame.f_lineno)
                        if made is None:
                            made = at
                            lines.setdefault(at[0], set()).add(at[1])
                        else:
                            callers.setdefault(made, set()).add(at)
                    frame = frame.f_back
            return func(*args, **(kwargs or {}))

    case = ctx.make_case()
    try:
        with _Count() as count:  # gradients on, as explain ran it (a model may branch on is_grad_enabled)
            case.fn(*case.args, **case.kwargs)
    except Exception:
        return None, {}, {}
    return count.n, lines, callers


def _lines_in_graphs(graphs: Any, shown: Callable[[str], bool]) -> tuple[Lines, Lines]:
    """The line (of a file ``shown`` admits) nearest each node of a graph Dynamo captured, on its stack trace (which
    lists the frames outermost first), and the shown lines further out (the calls that led there). Subgraphs count:
    an autograd.Function's forward or a torch.cond branch is captured as a graph module inside the graph."""
    lines: Lines = {}
    callers: Lines = {}
    for top in graphs or ():
        for gm in top.modules():
            for node in getattr(getattr(gm, "graph", None), "nodes", ()):
                frames = [(f, int(n)) for f, n in _FRAME.findall(node.meta.get("stack_trace") or "") if shown(f)]
                if frames:
                    lines.setdefault(frames[-1][0], set()).add(frames[-1][1])
                for f, n in frames[:-1]:
                    callers.setdefault(f, set()).add(n)
    return lines, callers


def _source_lines(eager: Lines, eager_callers: Callers, graphs: Lines, graph_callers: Lines) -> dict[str, SourceLines]:
    """Per file: the lines inside a graph (a node's own line, or a call that led to captured nodes and to no torch
    call that ran in eager) and the lines that ran torch calls in eager (outside every graph)."""
    outside = {(f, n) for f, ns in eager.items() for n in ns if n not in graphs.get(f, set())}
    leads_outside = {at for call in outside for at in eager_callers.get(call, ())} | outside

    def graph(file: str) -> set[int]:
        return graphs.get(file, set()) | {n for n in graph_callers.get(file, set()) if (file, n) not in leads_outside}
    return {file: SourceLines(graph=tuple(sorted(graph(file))),
                              eager=tuple(sorted(n for n in eager.get(file, set()) if (file, n) in outside)))
            for file in sorted(eager.keys() | graphs.keys() | graph_callers.keys())}


def _stats(counters: Any) -> tuple[int, int, int, int]:
    """calls_captured, unique_graphs, frames total, frames ok: torch's process-wide counters now."""
    return (int(counters["stats"]["calls_captured"]), int(counters["stats"]["unique_graphs"]),
            int(counters["frames"]["total"]), int(counters["frames"]["ok"]))


def run(ctx: StageContext) -> StageRecord:
    from .. import compat
    from ..evidence import exceptions, tracelog
    from ._execution import FORWARD, clip, forward_fails, reference

    # explain runs on the probe's first call, as a user's program compiles it: a library that fills a Python cache on
    # its first call (a quantization map built with .tolist()) breaks the graph then, and not after an eager run
    started = time.perf_counter()
    case = ctx.make_case()
    before = _stats(compat.counters())  # the fork server's warm-up compile counted too: the explain run's own share
    counted_before = compat.graph_break_counter()
    with tracelog.TraceCollector() as trace:
        error: ErrorRecord | None = None
        try:
            out = compat.explain(case.fn, *case.args, **case.kwargs)
        except Exception as e:
            error = exceptions.error_record(e, "forward")
    if error is not None:
        if forward_fails(reference(ctx.make_case, backward=False)):  # explain is forward-only: no eager backward
            return StageRecord(skip_reason="the eager forward fails (see the eager stage)")
        return StageRecord(error=error, breaks=trace.breaks, phases=[FORWARD])
    captured, graphs, frames, frames_ok = (a - b for a, b in zip(_stats(compat.counters()), before))
    counted = compat.graph_break_counter() - counted_before
    shown = _outside(_not_shown())
    eager, eager_lines, eager_callers = _torch_calls_eager(ctx, shown)
    lines = _source_lines(eager_lines, eager_callers, *_lines_in_graphs(getattr(out, "graphs", None), shown))
    extra = Coverage(calls_captured=captured, unique_graphs=graphs, frames_eager=frames - frames_ok,
                     torch_calls_eager=eager, captured_share=Coverage.share(captured, eager),
                     lines=lines or None).to_extra()
    # measuring compiles the forward again (about what explain took) and runs it: within half the stage's timeout
    took = time.perf_counter() - started
    budget = min(COST_BUDGET_S, ctx.options.assured_s / 2 - 2 * took)
    if trace.breaks and budget < COST_MIN_BUDGET_S:
        extra.update(StageNotes(not_checked=[
            f"the cost of each graph break: explain took {took:.0f} s, and measuring would compile the forward again "
            f"and run it several times: more than half of the {ctx.options.assured_s:.0f} s the stage is sure to "
            "get (its deadline is --timeout, or less once a comparable stage of the probe has ended)"]).to_extra())
    elif trace.breaks:
        from ._break_cost import NotMeasured, measure

        try:
            extra.update(measure(ctx.make_case, trace.breaks, ctx.device, budget).to_extra())
        except Exception as e:  # the coverage and the breaks stand: only the cost is missing, and says why
            why = str(e) if isinstance(e, NotMeasured) else f"the measurement failed: {type(e).__name__}: {e}"
            extra.update(StageNotes(not_checked=[f"the cost of each graph break: {why[:300]}"]).to_extra())
    return StageRecord(
        breaks=trace.breaks,
        phases=[FORWARD],
        graph_count=out.graph_count,
        graph_break_count=out.graph_count - 1 if out.graph_count else None,  # explain's own rule, defined at 0
        dynamo_graph_break_count=counted,
        explain_reasons=[clip(str(getattr(b, "reason", b)), 2000) for b in out.break_reasons][:20],
        extra=extra,
    )


SPEC = StageSpec(
    name="explain", order=20, cost=1, run=run, forward_only=True, options=("assured_s",),
    summary="torch._dynamo.explain: graph count, graph breaks counted from the structured trace, compile coverage",
    repro=(
        '# fullgraph=True raises at the first graph break, with its gb_type ...\n'
        'try:\n'
        '    _repro_step(torch.compile(_repro_fn, backend="eager", fullgraph=True), backward=False)\n'
        'except torch._dynamo.exc.UserError:\n'
        '    pass  # a guard on a value fullgraph=True captured (an .item() branched on): explain says where it breaks\n'
        '# ... where it does not (torch 2.13 captures some .item() and boolean masks under fullgraph=True only),\n'
        '# torch._dynamo.explain lists the breaks\n'
        'torch._dynamo.reset()\n'
        '_repro_explained = torch._dynamo.explain(_repro_fn)(*_repro_args, **_repro_kwargs)\n'
        'if _repro_explained.graph_break_count:\n'
        '    raise RuntimeError(f"{_repro_explained.graph_break_count} graph break(s) under torch._dynamo.explain:\\n"\n'
        '                       + "\\n".join(str(r.reason) for r in _repro_explained.break_reasons))'))
