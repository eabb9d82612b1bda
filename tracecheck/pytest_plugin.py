"""Optional pytest integration: "no graph breaks beyond the baseline" inside a project's own tests.

For projects that would rather not add a second CI step. Enable it explicitly (it is not auto-loaded)::

    pytest -p tracecheck.pytest_plugin            # or, in conftest.py:
    pytest_plugins = ["tracecheck.pytest_plugin"]

Then::

    def test_block_compiles(tracecheck_baseline):
        tracecheck_baseline.assert_no_new_graph_breaks(block, x)   # fails on any break not in the baseline

    @pytest.mark.tracecheck(key="probes/model.py::probe")          # reuse an entry of a `tracecheck run` baseline
    def test_model(tracecheck_baseline): ...

The function is compiled in-process (``torch.compile(backend=<counting eager backend>)``) and its graph
breaks are read from the structured trace, as ``tracecheck run``'s explain stage does. The allowed breaks
come from ``--tracecheck-baseline PATH`` (ini ``tracecheck_baseline``), a baseline file in the format of
``tracecheck run --update-baseline`` (docs/ci.md): entry ``probes[<key>].stages.explain.breaks``, where
``<key>`` is the marker's ``key`` or the test's node id. No entry means no break is allowed. Breaks match by
(kind, gb_type, file relative to the rootdir, line); a break whose line merely moved is tolerated.
``--tracecheck-update-baseline`` records what the tests saw into that file instead of failing.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from .model.reportio import BASELINE_FORMAT, Json, write_json_atomic
from .gate.changes import REGRESSED
from .gate.comparison import compare_breaks
from .gate.document import BASELINE_SCHEMA_VERSION, load_document
from .gate.snapshot import BreakSnapshot, package_relative

STAGE = "explain"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tracecheck", "graph-break baseline (tracecheck)")
    group.addoption("--tracecheck-baseline", metavar="PATH", default=None,
                    help="Baseline JSON listing the graph breaks each test may have.")
    group.addoption("--tracecheck-update-baseline", action="store_true", default=False,
                    help="Record the graph breaks the tests see into the baseline instead of failing.")
    parser.addini("tracecheck_baseline", "Baseline JSON for the tracecheck_baseline fixture.", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tracecheck(key=None): baseline key for the tracecheck_baseline fixture "
                                       "(default: the test's node id)")
    path = config.getoption("--tracecheck-baseline") or config.getini("tracecheck_baseline") or None
    if path and not os.path.isabs(path):
        path = str(config.rootpath / path)
    config.stash[_STATE] = _State(path=path, update=config.getoption("--tracecheck-update-baseline"),
                                  root=str(config.rootpath))


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None or not state.update or not state.recorded or not state.path:
        return
    doc = state.load() or {"format": BASELINE_FORMAT, "schema_version": BASELINE_SCHEMA_VERSION,
                           "torch": _torch_version(), "stages": [STAGE], "probes": {}}
    for key, snap in state.recorded.items():
        doc["probes"].setdefault(key, {"stages": {}})["stages"][STAGE] = snap
    doc["probes"] = dict(sorted(doc["probes"].items()))
    write_json_atomic(state.path, doc)


@dataclass
class _State:
    path: str | None
    update: bool
    root: str
    #: baseline key -> the explain snapshot the tests saw, as the baseline document holds it (written at the end)
    recorded: dict[str, Json] = field(default_factory=dict)
    #: the baseline document as read (document.load_document); the fixture reads its breaks with BreakSnapshot
    _doc: Json | None = None

    def load(self) -> Json | None:
        if self._doc is None and self.path and os.path.exists(self.path):
            self._doc = load_document(self.path)
        return self._doc


_STATE = pytest.StashKey[_State]()


@dataclass
class Measurement:
    """What compiling ``fn`` once showed. ``breaks`` are tracecheck GraphBreaks (deduplicated)."""

    graph_count: int
    breaks: list[Any]


def measure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Measurement:
    """Compile ``fn`` with a counting eager backend, call it once, return graphs and graph breaks.

    Resets Dynamo before and after, so earlier compiles in the test process do not leak in or out.
    """
    import torch

    from . import compat
    from .classify import detect
    from .evidence import parsers, tracelog

    graphs = 0

    def backend(gm: Any, example_inputs: Any) -> Any:
        nonlocal graphs
        graphs += 1
        return gm.forward

    # pytest's log capture hooks onto torch's non-propagating trace logger too; keep its thousands of
    # structured-trace records out of the test report while we listen.
    trace_logger = logging.getLogger("torch.__trace")
    pytest_handlers = [h for h in trace_logger.handlers if type(h).__module__.startswith("_pytest")]
    for h in pytest_handlers:
        trace_logger.removeHandler(h)
    compat.dynamo_reset()
    try:
        with tracelog.TraceCollector() as tc:
            torch.compile(fn, backend=backend)(*args, **kwargs)
    finally:
        compat.dynamo_reset()
        for h in pytest_handlers:
            trace_logger.addHandler(h)
    parsers.check_parsers()  # a parser that failed counted nothing: never "no new graph breaks"
    return Measurement(graphs, [detect.classify_break(b) for b in tc.breaks])


class TracecheckFixture:
    """The ``tracecheck_baseline`` fixture. ``key`` names the baseline entry (marker ``key`` or the node id)."""

    def __init__(self, state: _State, key: str) -> None:
        self._state = state
        self.key = key

    def graph_breaks(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        return measure(fn, *args, **kwargs).breaks

    def _breaks(self, m: Measurement) -> list[BreakSnapshot]:
        return sorted((BreakSnapshot(b.kind, b.gb_type, self._relative(b.file), b.line) for b in m.breaks),
                      key=BreakSnapshot.sort_key)

    def _snapshot(self, m: Measurement, breaks: list[BreakSnapshot]) -> Json:
        """The explain snapshot the plugin records (document.py's layout, without phases and target)."""
        kinds = sorted({b.kind for b in m.breaks})
        return {"status": "fail" if breaks else "pass", "kinds": kinds, "graph_count": m.graph_count,
                "graph_break_count": m.graph_count - 1 if m.graph_count else None,
                "graph_break_sites": len(breaks), "breaks": [b.to_json() for b in breaks], "recompiles": None}

    def _relative(self, file: str | None) -> str | None:
        if not file:
            return None
        installed = package_relative(file)
        if installed:
            return installed
        rel = os.path.relpath(file, self._state.root) if os.path.isabs(file) else file
        return rel.replace("\\", "/")

    def allowed(self) -> Json | None:
        doc = self._state.load()
        return ((doc or {}).get("probes", {}).get(self.key) or {}).get("stages", {}).get(STAGE)

    def assert_no_new_graph_breaks(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Measurement:
        """Compile and call ``fn(*args, **kwargs)``; fail the test on any graph break not in the baseline."""
        m = measure(fn, *args, **kwargs)
        breaks = self._breaks(m)
        if self._state.update:
            self._state.recorded[self.key] = self._snapshot(m, breaks)
            return m
        allowed = [BreakSnapshot.from_json(b) for b in (self.allowed() or {}).get("breaks", [])]
        new = [c for c in compare_breaks(self.key, STAGE, allowed, breaks) if c.effect == REGRESSED]
        if new:
            lines = "\n".join(f"  - {c.detail}" for c in new)
            where = f"baseline {self._state.path}" if self._state.path else "no baseline (--tracecheck-baseline)"
            pytest.fail(f"{len(new)} graph break(s) beyond the baseline for {self.key} ({where}):\n{lines}\n"
                        "Fix them, or accept them with --tracecheck-update-baseline.", pytrace=False)
        return m


@pytest.fixture
def tracecheck_baseline(request: pytest.FixtureRequest) -> TracecheckFixture:
    marker = request.node.get_closest_marker("tracecheck")
    key = (marker.kwargs.get("key") if marker else None) or request.node.nodeid
    state = request.config.stash.get(_STATE, None)
    if state is None:  # plugin imported as a module of fixtures without pytest_configure having run
        state = _State(path=None, update=False, root=str(request.config.rootpath))
    return TracecheckFixture(state, key)


def _torch_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except Exception:
        return None
