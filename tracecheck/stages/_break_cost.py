"""The cost of each graph break, measured (the explain stage, when it found breaks; model/payloads.BreakCosts).

The probe's forward is compiled once more with a backend that runs each graph Dynamo captured inside a
``torch.profiler.record_function`` range named for the graph, and the graph remembers the break that ended it
(``gm.compile_subgraph_reason``, what ``torch._dynamo.explain`` itself reads). Then, under ``torch.profiler`` with
Python stacks, every moment of a call is outside a graph or inside one, and each moment outside one is given to the
break it followed:

* after graph *g* ended at a break, the unsupported code runs in eager (a ``print``, a disabled helper's ops) and
  Dynamo re-enters the resume function: that time, ops and gaps alike, is that break's;
* an op whose innermost user frame holds a break of its own that did not end the last graph ran in a frame Dynamo
  gave up on (a break inside a loop skips the whole resume function), so it is that frame's break's;
* time before the first graph or after a graph that ended at a ``return`` is no break's (``unattributed``).

The ranking is read under the profiler (it slows Python and eager ops more than a graph's ops: shares, not
absolute times); the compiled and eager forwards are also timed without it, side by side, for the ratio and its
noise. The graphs run with backend="eager": an eager gap costs the same whatever compiles the graphs around it.
"""
from __future__ import annotations

import ast
import functools
import os
import re
import statistics
import time
import tokenize
from typing import Any, Callable

from ..evidence.frames import in_torch_or_stdlib
from ..model.payloads import BreakCost, BreakCosts
from ..model.records import BreakRecord

#: ``record_function`` names: a measured call, and a graph (its index in compile order follows); the token keeps a
#: probe's own ranges of a like name out
_TOKEN = os.urandom(4).hex()
_CALL, _GRAPH = f"tracecheck_call_{_TOKEN}_", f"tracecheck_graph_{_TOKEN}_"
#: a Python function event of ``torch.profiler`` with ``with_stack=True``: ``path/to/file.py(12): forward``, the
#: line the code object starts at (not the current line)
_PY_FUNCTION = re.compile(r"^(?P<file>.+\.py)\((?P<line>\d+)\): (?P<name>.+)$")
#: a dispatcher op's event: ``aten::relu``, a custom op's ``mylib::scale`` (not a Python function, ``file.py(3): f``)
_OP = re.compile(r"^[A-Za-z_]\w*::\w")
#: calls timed side by side (compiled and eager), then as many under the profiler: up to CALLS, at least MIN_CALLS,
#: more than MIN_CALLS only while the pairs have taken under PAIRS_S seconds
CALLS, MIN_CALLS, PAIRS_S = 7, 3, 1.5
#: the whole measurement's seconds after its compile, by default (the explain stage gives it a share of its timeout);
#: the profiled calls stop there (one at least), and a forward too slow to fit is not measured
BUDGET_S = 30.0
#: calls before the timed ones: until one compiles nothing new (Dynamo's default recompile_limit is 8)
WARMUP_CALLS = 8
#: how much slower a call runs under the profiler with Python stacks, at most, as budgeted (5x on Python-heavy code)
PROFILER_SLOWDOWN = 8
#: profiler events of one call past which it is not profiled (a Python-heavy forward: 300,000 calls took 6 GB)
MAX_EVENTS = 200_000

Site = tuple[str, int]


def _site(file: str, line: int) -> Site:
    return os.path.realpath(file), int(line)


def _ending_site(gm: Any) -> Site | None:
    """The break that ended a graph: the innermost frame outside torch of its compile reason's user stack; None for
    a graph that ended at a return."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return None
    for f in reversed(getattr(reason, "user_stack", None) or []):
        if not in_torch_or_stdlib(f.filename, f.name):
            return _site(f.filename, f.lineno)
    return None


#: the name Dynamo gives the function that resumes ``forward`` after its break at line 10 (``<lambda>`` too)
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+?)_at_(?P<line>\d+)$")


@functools.lru_cache(maxsize=256)
def _functions(file: str) -> tuple[tuple[int, int, int], ...]:
    """(first line as the code object counts it: its first decorator's, def line, last line) of each function and
    lambda in a source file; () when it cannot be read or parsed."""
    try:
        with tokenize.open(file) as f:  # its declared encoding (a latin-1 file with a coding line)
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            decorators = [d.lineno for d in getattr(node, "decorator_list", [])]
            out.append((min([node.lineno, *decorators]), node.lineno, node.end_lineno or node.lineno))
    return tuple(out)


def _function_at(file: str, line: int) -> int | None:
    """The first line (``co_firstlineno``) of the innermost function of ``file`` whose body holds ``line``."""
    inside = [f for f in _functions(file) if f[1] <= line <= f[2]]
    return max(inside, key=lambda f: f[1])[0] if inside else None


class _Frames:
    """Which breaks a frame of a profiler stack holds. A break is filed under its function: its file and the line the
    function's code object starts at, which is what the profiler names a frame by (``model.py(8): forward``, the path
    relative to a ``sys.path`` entry), so two ``forward``s of one file are two functions. A resume function
    (``torch_dynamo_resume_in_forward_at_10``) runs the rest of the function it resumes, from its line on."""

    def __init__(self, breaks: list[BreakRecord]) -> None:
        self.by_function: dict[tuple[str, int], list[Site]] = {}
        self.names: dict[str, str] = {}  # a name the profiler may give a file (as imported, or real) -> the real path
        for b in breaks:
            if b.file and b.line:
                site = _site(b.file, b.line)
                start = _function_at(*site)
                if start is not None:
                    self.by_function.setdefault((site[0], start), []).append(site)
                    self.names[b.file] = self.names[site[0]] = site[0]
        for sites in self.by_function.values():
            sites.sort(key=lambda s: s[1])

    def breaks_in(self, file_tail: str, first_line: int, name: str) -> list[Site]:
        """The breaks in the code a frame runs, first line first."""
        tail = file_tail.replace("/", os.sep)
        m = _RESUME.match(name)
        held: list[Site] = []
        for file in sorted({real for seen, real in self.names.items() if seen == tail or seen.endswith(os.sep + tail)}):
            if m:
                resumed = int(m.group("line"))
                start = _function_at(file, resumed)
                held += [s for s in self.by_function.get((file, start), ()) if s[1] > resumed] if start else []
            else:
                held += self.by_function.get((file, first_line), [])
        return held

    def resumed(self, frames: list[tuple[str, int, str]]) -> Site | None:
        """The break a resume function resumes after (``torch_dynamo_resume_in_forward_at_10``: forward's at line 10),
        for the innermost of ``frames``; None for another function."""
        for file_tail, _, name in frames:
            m = _RESUME.match(name)
            if m:
                tail, line = file_tail.replace("/", os.sep), int(m.group("line"))
                for seen, real in self.names.items():
                    if (seen == tail or seen.endswith(os.sep + tail)) and any(
                            (real, line) in sites for sites in self.by_function.values()):
                        return real, line
        return None

    def owner(self, frames: list[tuple[str, int, str]], last: Site | None) -> Site | None:
        """Whose time an eager op is (``frames``: its Python frames, innermost first): the break the last graph
        ended at (``last``) when the op runs in the function of that break (the unsupported code, or a function it
        calls); else the first break of the innermost function that has any (one Dynamo gave up on because of it);
        else ``last``."""
        for frame in frames:
            held = self.breaks_in(*frame)
            if held:
                return last if last in held else held[0]
        return last


#: profiler frames of torch's and tracecheck's own code (the measurement's wrappers): named relative to a
#: ``sys.path`` entry, or whole where none holds them
_SKIPPED_FRAMES = ("torch/", "tracecheck/", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""))


def _ancestry(event: Any) -> tuple[str | None, int | None, bool, list[tuple[str, int, str]]]:
    """(the measured call's name, the graph's index, under another aten op, the Python frames innermost first) of a
    profiler event, from its parents."""
    call = None
    graph = None
    nested = False
    py: list[tuple[str, int, str]] = []
    p = event.cpu_parent
    while p is not None:
        name = p.name
        if name.startswith(_CALL):
            call = name
            break
        if name.startswith(_GRAPH):
            graph = int(name[len(_GRAPH):])
        elif _OP.match(name):
            nested = True
        else:
            m = _PY_FUNCTION.match(name)
            if m and not m.group("file").startswith(_SKIPPED_FRAMES):
                py.append((m.group("file"), int(m.group("line")), m.group("name")))
        p = p.cpu_parent
    return call, graph, nested, py


def _attribute(events: list[Any], ends: list[Site | None],
               frames: _Frames) -> dict[str, tuple[float, dict[Site | None, float]]]:
    """Per measured call, its microseconds and those outside graphs given to each break (None: to no break)."""
    calls: dict[str, tuple[float, float]] = {}
    timeline: dict[str, list[tuple[float, float, str, Any]]] = {}
    for e in events:
        if e.name.startswith(_CALL):
            calls[e.name] = (e.start, e.end)
            continue
        if not (e.name.startswith(_GRAPH) or _OP.match(e.name)):
            continue
        call, graph, nested, py = _ancestry(e)
        if call is None or nested:
            continue
        if e.name.startswith(_GRAPH):
            if graph is None:  # the outermost range of a graph (a graph called inside another's range is its own)
                timeline.setdefault(call, []).append((e.start, e.end, "graph",
                                                      (int(e.name[len(_GRAPH):]), frames.resumed(py[:1]))))
        elif graph is None:
            timeline.setdefault(call, []).append((e.start, e.end, "op", py))
    out: dict[str, tuple[float, dict[Site | None, float]]] = {}
    for call, (start, end) in calls.items():
        spent: dict[Site | None, float] = {}
        after: Site | None = None  # the break the last graph ended at
        owner: Site | None = None  # whose time a gap is: the previous moment's owner
        loose = 0.0  # time given to no break since the last graph
        at = start
        for s, e, what, info in sorted(timeline.get(call, ()), key=lambda t: t[0]):
            if s > at:
                spent[owner] = spent.get(owner, 0.0) + (s - at)
                loose += (s - at) if owner is None else 0.0
            if what == "graph":
                index, resumed = info
                if resumed is not None and loose:  # the code before it ran because of the break it resumes after
                    spent[None] -= loose  # (a break before any graph, a return of a nested frame before it)
                    spent[resumed] = spent.get(resumed, 0.0) + loose
                loose = 0.0
                after = owner = ends[index] if index < len(ends) else None
            else:
                owner = frames.owner(info, after)
                spent[owner] = spent.get(owner, 0.0) + (e - s)
                loose += (e - s) if owner is None else 0.0
            at = max(at, e)
        if end > at:
            spent[owner] = spent.get(owner, 0.0) + (end - at)
        out[call] = (end - start, spent)
    return out


class _Event:
    """A profiler event with its parent, from torch's raw (Kineto) events: building ``prof.events()``'s
    FunctionEvents takes seconds on a transformers model (330,000 Python-function events for BigBird's 7 calls)."""

    __slots__ = ("name", "start", "end", "cpu_parent")

    def __init__(self, name: str, start: float, end: float) -> None:
        self.name, self.start, self.end = name, start, end
        self.cpu_parent: _Event | None = None


def _rank(name: str) -> int:
    """Which of two events with the same times encloses the other: a measured call, a graph, a Python frame, an op."""
    return 0 if name.startswith(_CALL) else 1 if name.startswith(_GRAPH) else 3 if _OP.match(name) else 2


def _events(prof: Any) -> list[_Event]:
    """The CPU events of one thread's calls, each with its parent: the innermost event that encloses it in time
    (on one thread, a call encloses what it calls)."""
    from .. import compat

    raw = [(_Event(name, start / 1000, end / 1000), thread) for name, start, end, thread in compat.profiler_events(prof)]
    ours = {t for e, t in raw if e.name.startswith(_CALL)}  # the calling thread's events, not an intra-op thread's
    events = [e for e, t in raw if t in ours]
    events.sort(key=lambda e: (e.start, -e.end, _rank(e.name)))  # at equal times the enclosing kind first
    stack: list[_Event] = []
    for e in events:
        while stack and stack[-1].end < e.end:
            stack.pop()
        e.cpu_parent = stack[-1] if stack else None
        stack.append(e)
    return events


def _iqr(values: list[float]) -> float:
    """The interquartile range: the noise of a few timings, which one slow call (a page fault, the other stage
    process) does not set as (slowest - fastest) would."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[2] - q[0]


class NotMeasured(Exception):
    """Why the breaks' cost was not measured, in words for the report's "not checked"."""


def measure(make_case: Callable[[], Any], breaks: list[BreakRecord], device: str = "cpu",
            budget_s: float = BUDGET_S) -> BreakCosts:
    """Measure the forward's breaks within about ``budget_s`` seconds after its compile. Raises NotMeasured with why
    when it cannot (any other exception is a bug of its own: the explain stage notes it and keeps its results)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from .. import compat

    if device != "cpu":  # the profiler and the timers here see the host only: an accelerator's queued work would
        raise NotMeasured(f"measured on the CPU only (the probe runs on {device})")  # land on whichever op syncs
    ends: list[Site | None] = []

    def backend(gm: Any, example_inputs: Any) -> Callable[..., Any]:
        name = f"{_GRAPH}{len(ends)}"
        ends.append(_ending_site(gm))
        forward = gm.forward

        def run(*args: Any) -> Any:
            with record_function(name):
                return forward(*args)
        return run

    def call(fn: Callable[..., Any]) -> float:
        t0 = time.perf_counter()
        try:
            fn(*case.args, **case.kwargs)
        except (Exception, SystemExit) as e:  # the probe's own: it runs more calls here than explain made
            raise NotMeasured(f"the forward raised {type(e).__name__} when called again: {str(e)[:200]}") from e
        return time.perf_counter() - t0

    compat.dynamo_reset()
    try:
        case = make_case()
        compiled = torch.compile(case.fn, backend=backend)
        for _ in range(WARMUP_CALLS):  # compiles, and the recompiles a first call's side effects make
            before = len(ends)
            call(compiled)
            if len(ends) == before:
                break
        compiles = len(ends)
        start = time.perf_counter()
        eager_s, compiled_s = [call(case.fn)], [call(compiled)]
        # the profiled calls run several times slower (Python-heavy code most): enough of them to fit the budget
        if 2 * MIN_CALLS * (eager_s[0] + compiled_s[0]) + MIN_CALLS * PROFILER_SLOWDOWN * compiled_s[0] > budget_s:
            raise NotMeasured(f"one compiled call took {compiled_s[0]:.2g} s: {MIN_CALLS} calls under the profiler "
                              f"would not fit the {budget_s:.0f} s this measurement may take")
        while len(compiled_s) < CALLS and (len(compiled_s) < MIN_CALLS or time.perf_counter() < start + PAIRS_S):
            eager_s.append(call(case.fn))  # side by side, so the machine's load weighs on both alike
            compiled_s.append(call(compiled))
        per_call: list[tuple[float, dict[Site | None, float]]] = []
        frames = _Frames(breaks)
        for i in range(len(compiled_s) + 1):  # each call its own profile: what one holds is read, then let go
            with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
                with record_function(f"{_CALL}{i}"):
                    call(compiled)
            events = _events(prof)
            del prof
            if len(events) > MAX_EVENTS:
                raise NotMeasured(f"one call made {len(events):,} profiler events (Python calls and ops), over "
                                  f"{MAX_EVENTS:,}: profiling it would take too much memory")
            if i:  # the first: the profiler's own first-call costs
                per_call += [v for v in _attribute(events, ends, frames).values() if v[0] > 0]
            if time.perf_counter() > start + budget_s:
                break
        if len(ends) > compiles:  # its time would be Dynamo's compiles, not the breaks'
            raise NotMeasured("the forward kept compiling again on later calls (a recompile each time)")
    finally:
        compat.dynamo_reset()
    if not per_call:
        raise NotMeasured("the profiler recorded no measured call")
    given = {_site(b.file, b.line)[0]: b.file for b in breaks if b.file and b.line}
    gb_types = {_site(b.file, b.line): b.gb_type for b in breaks if b.file and b.line}
    costs = []
    # every break the trace named (one of no cost too), not torch's or the standard library's own lines
    for site in {s for _, spent in per_call for s in spent if s in gb_types} | set(gb_types):
        if in_torch_or_stdlib(site[0]):
            continue
        shares = [spent.get(site, 0.0) / total for total, spent in per_call]
        costs.append(BreakCost(file=given.get(site[0], site[0]), line=site[1], gb_type=gb_types.get(site),
                               ms=round(statistics.median(spent.get(site, 0.0) for _, spent in per_call) / 1000, 4),
                               share=round(statistics.median(shares), 4), low=round(min(shares), 4),
                               high=round(max(shares), 4)))
    costs.sort(key=lambda c: (-c.share, c.file, c.line))
    # a site no break of the trace names (torch's, the standard library's) is in no break's share
    unattributed = [sum(v for k, v in spent.items() if k not in gb_types or in_torch_or_stdlib(k[0])) / total
                    for total, spent in per_call]
    return BreakCosts(
        calls=len(per_call), compiled_ms=round(statistics.median(compiled_s) * 1000, 4),
        eager_ms=round(statistics.median(eager_s) * 1000, 4),
        compiled_spread=round(_iqr(compiled_s) / statistics.median(compiled_s), 3),
        unattributed=round(statistics.median(unattributed), 4), breaks=costs)
