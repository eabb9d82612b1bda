"""Listeners on the structured trace, inside a stage process: graph breaks, recompiles, specialized dynamic
dimensions, and the ops Inductor's generated code calls.

Graph breaks are read from the ``dynamo_graph_break_reason`` artifact of the structured trace (a
``logging.Handler`` on ``torch.__trace``, the way ``torch.export.draft_export`` listens): the sites, each break's
gb_type and user line. The count reports show is graphs - 1, as ``explain()`` counts (0 for two breaks inside an
autograd.Function: nothing before them to make a graph of), with these sites beside it; ``counters["graph_break"]``
misses data-dependent branches. Breaks are deduplicated by (gb_type, user file, line): Dynamo retries a frame and
logs the same break again.
"""
from __future__ import annotations

import dataclasses
import json
import linecache
import logging
import os
import re
import sys
from typing import Any

from .. import compat
from ..model.evidence import Specialization
from ..model.frame import Frame
from ..model.records import COMPILED_AUTOGRAD, DYNAMO, BreakRecord, OpaqueOp, RecompileRecord
from .wording import gb_code_from_text, gb_type_from_text
from .frames import FROM_USER_CODE, caller_outside_torch, from_match, in_torch_or_stdlib, innermost_user_frame
from .parsers import parser_failed


_LOCATION = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*?)(?:\nUser code traceback:|\Z)", re.S)
_CONTEXT = re.compile(r"Developer debug context: (?P<ctx>.*)")


class StructuredTraceHandler(logging.Handler):
    """Base for listeners on the structured trace (``torch.__trace``); a context manager that installs itself.

    torch emits a record only while the logger has a handler, so installing one is what turns the trace on.
    Subclasses implement ``read(record)``; a failure in it is recorded (``parser_failed``), never raised into torch.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self._logger = logging.getLogger("torch.__trace")
        self._old_level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.read(record)
        except Exception:  # a logging handler must never raise into torch: the task reports it instead
            parser_failed()

    def read(self, record: logging.LogRecord) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._old_level)


class TraceCollector(StructuredTraceHandler):
    """Collects graph breaks from the structured trace while installed.

    Use as a context manager. ``breaks`` holds the break records (see ``classify.detect.classify_break``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.breaks: list[BreakRecord] = []
        self._seen: set[tuple[str | None, str | None, int | None]] = set()

    def read(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", {}) or {}
        art = meta.get("artifact")
        if isinstance(art, dict) and art.get("name") == "dynamo_graph_break_reason":
            self._add_break(getattr(record, "payload", "") or "")

    def _add_break(self, payload: str) -> None:
        loc = _LOCATION.search(payload)
        reason_m = _REASON.search(payload)
        reason = (reason_m.group("reason") if reason_m else payload).strip()
        gb_type = gb_type_from_text(reason)  # None when unparsable: never invent one from message text
        file = loc.group("file") if loc else None
        line = int(loc.group("line")) if loc else None
        key = (gb_type, file, line)
        if key in self._seen:
            return
        self._seen.add(key)
        code = gb_code_from_text(reason) or compat.gb_code(gb_type)
        ctx = _CONTEXT.search(reason)
        stack = payload.split("User code traceback:", 1)[1] if "User code traceback:" in payload else ""
        stack = stack.split("\nTraceback (most recent call last)", 1)[0]
        self.breaks.append(BreakRecord(
            gb_type=gb_type, gb_code=code, doc=compat.gb_doc_link(code),
            file=file, line=line, reason=reason, caller=caller_outside_torch(file, stack),
            code=linecache.getline(file, line).strip() if file and line else None,
            debug_context=ctx.group("ctx").strip() if ctx else None,
            user_stack=stack[-6000:],  # tells e.g. that the break is inside an autograd.Function forward
        ))


#: a call of a dispatcher op in Inductor's generated wrapper code: ``buf1 = torch.ops.ns.op.default(buf0)``
_OUTPUT_CODE_CALL = re.compile(r"torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)\.(?P<overload>\w+)\(")
#: a kernel Inductor generated, in its wrapper code: ``cpp_fused_add_sin_0 = async_compile.cpp_pybinding(...``
#: (``async_compile.triton(`` on a GPU)
_OUTPUT_CODE_KERNEL = re.compile(r"^\w+ = async_compile\.\w+\(", re.M)


class OutputCodeCollector(StructuredTraceHandler):
    """Inductor's generated wrapper code (the ``inductor_output_code`` event, one per compiled graph, logged on a
    cache hit too), read for the custom ops it calls as extern kernels: Inductor generated no code for them, so
    nothing fused across them. ``codes`` holds each graph's code."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: list[str] = []

    def read(self, record: logging.LogRecord) -> None:
        if "inductor_output_code" in (getattr(record, "metadata", {}) or {}):
            self.codes.append(str(getattr(record, "payload", "") or ""))

    def kernel_count(self) -> int:
        """The kernels Inductor generated, over every compiled graph (each defined once in its graph's code)."""
        return sum(len(_OUTPUT_CODE_KERNEL.findall(code)) for code in self.codes)

    def extern_ops(self, torch_namespaces: set[str], kernels: int | None = None) -> list[OpaqueOp]:
        """One record per op outside ``torch_namespaces`` (``ns::op``), in order seen: its calls, the graphs and the
        lines that call it; ``kernels``: what ``kernel_count`` counted, when it was."""
        calls: dict[str, list[tuple[int, str]]] = {}  # op -> (graph, line) per call
        for g, code in enumerate(self.codes):
            for line in code.splitlines():
                m = _OUTPUT_CODE_CALL.search(line)
                if not m or m.group("ns") in torch_namespaces:
                    continue
                calls.setdefault(f"{m.group('ns')}::{m.group('op')}", []).append((g, line.strip()[:200]))
        return [OpaqueOp(op, len(seen), tuple(dict.fromkeys(g for g, _ in seen)), tuple(text for _, text in seen),
                         kernels) for op, seen in calls.items()]


class _StepRecords(StructuredTraceHandler):
    """A listener whose records are tagged with ``step``: the caller sets it before each step."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0


#: structured-trace artifacts with recompile reasons: Dynamo guard failures, compiled-autograd cache misses
_DYNAMO_REASONS = "recompile_reasons"
_CA_REASONS = "compiled_autograd_compile_reasons"

_COMPILE_ID = re.compile(r"^\s*!?[\d/]+:\s*")
_GUARD_SITE = re.compile(r"#\s*(?P<code>.*?)\s*#\s*(?P<file>\S+\.py):(?P<line>\d+) in (?P<func>\w+)")


class RecompileCollector(_StepRecords):
    """Recompile reasons from the structured trace, tagged with the step that was running.

    ``records``: one ``RecompileRecord`` per recompile, whose ``source`` is ``COMPILED_AUTOGRAD`` (a capture, i.e. a
    compiled-autograd cache miss) or ``DYNAMO`` (a guard failure), and ``graph`` is ``"backward"`` when the recompiled
    frame is a captured backward graph. Use as a context manager; set ``step`` before each step.
    """

    def __init__(self) -> None:
        super().__init__()
        self.records: list[RecompileRecord] = []

    def read(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", {}) or {}
        art = meta.get("artifact")
        if not isinstance(art, dict) or art.get("name") not in (_DYNAMO_REASONS, _CA_REASONS):
            return
        reasons = _payload_list(getattr(record, "payload", None))
        if not reasons:
            return
        graph = "backward" if "compiled_autograd_id" in meta else "forward"
        if art["name"] == _CA_REASONS:
            # The list grows per cache node: every capture ever made there; the newest is last.
            self.records.append(RecompileRecord(_clean(reasons[-1]), self.step, COMPILED_AUTOGRAD, "backward"))
        else:
            # One reason per cache entry that failed its guards; the newest entry comes first.
            self.records.append(RecompileRecord(_clean(reasons[0]), self.step, DYNAMO, graph,
                                                _guard_user_frame(reasons[0])))


def _payload_list(payload: Any) -> list[str]:
    """A reasons payload as a list: torch JSON-encodes a list but passes a single reason as the bare string."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return [payload]
    if isinstance(payload, str):
        return [payload]
    return [str(p) for p in payload or []]


def _clean(reason: str) -> str:
    """First line of a reason, without the compile id (``0/1:``, ``!2:``) and the column padding."""
    first = _COMPILE_ID.sub("", str(reason).strip().split("\nUser stack trace:", 1)[0])
    return re.sub(r"[ \t]{2,}", "  ", first.strip())[:1000]


def _guard_user_frame(reason: str) -> Frame | None:
    """The user line a guard came from: the ``User stack trace`` (2.13), else the ``# code  # file:line``
    comment Dynamo puts after the guard."""
    if "User stack trace:" in reason:
        frames = [m for m in FROM_USER_CODE.finditer(reason.split("User stack trace:", 1)[1])
                  if not in_torch_or_stdlib(m.group("file"), m.group("func"))]
        if frames:
            return from_match(frames[-1])
    m = _GUARD_SITE.search(reason)
    frame = from_match(m) if m else None
    if frame and frame.file and not os.path.isabs(frame.file):
        # Dynamo shortens the comment's path to the part under a sys.path entry (optimum/quanto/nn/qlinear.py)
        found = next((p for p in (os.path.join(e, frame.file) for e in sys.path if e) if os.path.isfile(p)), None)
        if found:
            frame = dataclasses.replace(frame, file=found)
    return frame


class SpecializationCollector(_StepRecords):
    """Dimensions the shape environment specialized (``symbolic_shape_specialization`` events of the structured
    trace: a symbolic size replaced by a constant), with the frame that forced it: ``frame`` is the innermost
    frame outside torch and tracecheck of the Python stack (a fake impl's line, or model code), ``user_frame``
    the user line Dynamo was tracing. ``step`` tags each record, as in RecompileCollector."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Specialization] = []

    def read(self, record: logging.LogRecord) -> None:
        event = (getattr(record, "metadata", {}) or {}).get("symbolic_shape_specialization")
        if not isinstance(event, dict):
            return
        names = compat.trace_filenames()
        self.records.append(Specialization(
            symbol=str(event.get("symbol")), sources=tuple(str(s) for s in event.get("sources") or []),
            value=str(event.get("value")), reason=str(event.get("reason", "")) or None, step=self.step,
            frame=innermost_user_frame(event.get("stack"), names),
            user_frame=innermost_user_frame(event.get("user_stack"), names)))
