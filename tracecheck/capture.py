"""Evidence capture inside a stage process: graph breaks from the structured trace, warnings, exceptions.

Graph breaks are counted from the ``dynamo_graph_break_reason`` artifact of the structured trace (a
``logging.Handler`` on ``torch.__trace``, the way ``torch.export.draft_export`` listens), because on torch
2.13 ``explain().graph_break_count`` is ``graph_count - 1`` (0 for two breaks inside an autograd.Function)
and ``counters["graph_break"]`` misses data-dependent branches. Breaks are deduplicated by
(gb_type, user file, line): Dynamo retries a frame and logs the same break again.
"""
from __future__ import annotations

import json
import linecache
import logging
import os
import re
import traceback
import warnings
from typing import Any

from . import compat
from .report import is_generated
from .wording import TORCH_NAMESPACES, gb_code_from_text, gb_type_from_text

_LOCATION = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)")
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*?)(?:\nUser code traceback:|\Z)", re.S)
_CONTEXT = re.compile(r"Developer debug context: (?P<ctx>.*)")
_FROM_USER_CODE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')

# Frames under these are library frames, never "the user's line".
_LIB_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (compat, os, __import__("torch"))  # tracecheck, the stdlib, torch
)
_TORCH_DIR = _LIB_DIRS[-1]

#: tracebacks of tracecheck's own evidence parsers that failed in this process. A parser must not raise into torch
#: (a logging handler, a patched ``Library.define``), so it records its failure here; ``check_parsers`` (called by
#: worker.child_main after every task) turns any into an internal error: a parser that failed found nothing, and
#: "nothing found" must never read as a pass.
_PARSER_FAILURES: list[str] = []


class ParserError(RuntimeError):
    """tracecheck's evidence capture failed: what it counted cannot be trusted."""


def parser_failed() -> None:
    """Record the exception being handled (call it inside ``except``)."""
    _PARSER_FAILURES.append(traceback.format_exc())


def check_parsers() -> None:
    """Raise ParserError when a parser of this process failed since the last check (its traceback in the message)."""
    if _PARSER_FAILURES:
        first, n = _PARSER_FAILURES[0], len(_PARSER_FAILURES)
        _PARSER_FAILURES.clear()
        raise ParserError(f"tracecheck's evidence capture failed {n} time(s); the first:\n{first}")


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

    def __enter__(self):
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._old_level)


class TraceCollector(StructuredTraceHandler):
    """Collects graph breaks from the structured trace while installed.

    Use as a context manager. ``breaks`` holds raw break records (see ``classify.classify_break``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.breaks: list[dict[str, Any]] = []
        self._seen: set[tuple[Any, ...]] = set()

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
        self.breaks.append({
            "gb_type": gb_type, "gb_code": code, "doc": compat.gb_doc_link(code),
            "file": file, "line": line, "reason": reason, "caller": _caller_outside_torch(file, stack),
            "code": linecache.getline(file, line).strip() if file and line else None,
            "debug_context": ctx.group("ctx").strip() if ctx else None,
            "user_stack": stack[-6000:],  # tells e.g. that the break is inside an autograd.Function forward
        })


def _caller_outside_torch(file: str | None, stack: str) -> dict[str, Any] | None:
    """When Dynamo places a break inside torch (a custom op's ``__call__`` in torch/_library, say) or in code torch
    generated (``<eval_with_key>.N``, an FX graph such as compiled autograd's), the innermost frame of its user
    stack in a real file outside torch: the line the user or their library wrote. The break's own location is
    kept as is (it is what TORCH_LOGS=graph_breaks prints and what breaks are counted by)."""
    if not file or not (is_generated(file) or os.path.abspath(file).startswith(_TORCH_DIR)):
        return None
    frames = [m for m in _FROM_USER_CODE.finditer(stack) if not _in_torch_or_stdlib(m.group("file"))]
    if not frames:
        return None
    m = frames[-1]
    return {"file": m.group("file"), "line": int(m.group("line")), "function": m.group("func"),
            "code": m.group("code").strip()}


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

    def extern_ops(self, torch_namespaces: set[str]) -> list[dict[str, Any]]:
        """``{"op": "ns::op", "calls", "graphs", "lines"}`` per op outside ``torch_namespaces``, in order seen."""
        found: dict[str, dict[str, Any]] = {}
        for g, code in enumerate(self.codes):
            for line in code.splitlines():
                m = _OUTPUT_CODE_CALL.search(line)
                if not m or m.group("ns") in torch_namespaces:
                    continue
                rec = found.setdefault(f"{m.group('ns')}::{m.group('op')}", {"calls": 0, "graphs": [], "lines": []})
                rec["calls"] += 1
                if g not in rec["graphs"]:
                    rec["graphs"].append(g)
                rec["lines"].append(line.strip()[:200])
        return [{"op": op, **rec} for op, rec in found.items()]


class _StepRecords(StructuredTraceHandler):
    """A listener that keeps ``records``, each tagged with ``step``: the caller sets it before each step."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []
        self.step = 0


#: structured-trace artifacts with recompile reasons: Dynamo guard failures, compiled-autograd cache misses
_DYNAMO_REASONS = "recompile_reasons"
_CA_REASONS = "compiled_autograd_compile_reasons"

_COMPILE_ID = re.compile(r"^\s*!?[\d/]+:\s*")
_USER_STACK = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')
_GUARD_SITE = re.compile(r"#\s*(?P<code>.*?)\s*#\s*(?P<file>\S+\.py):(?P<line>\d+) in (?P<func>\w+)")


class RecompileCollector(_StepRecords):
    """Recompile reasons from the structured trace, tagged with the step that was running.

    ``records``: ``{"reason", "step", "source", "user_frame", "graph"}`` where ``source`` is
    ``"compiled_autograd"`` (a capture, i.e. a compiled-autograd cache miss) or ``"dynamo"`` (a guard
    failure), and ``graph`` is ``"backward"`` when the recompiled frame is a captured backward graph.
    Use as a context manager; set ``step`` before each step.
    """

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
            self.records.append({"reason": _clean(reasons[-1]), "step": self.step,
                                 "source": "compiled_autograd", "user_frame": None, "graph": "backward"})
        else:
            # One reason per cache entry that failed its guards; the newest entry comes first.
            self.records.append({"reason": _clean(reasons[0]), "step": self.step, "source": "dynamo",
                                 "user_frame": _guard_user_frame(reasons[0]), "graph": graph})


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


def _guard_user_frame(reason: str) -> dict[str, Any] | None:
    """The user line a guard came from: the ``User stack trace`` (2.13), else the ``# code  # file:line``
    comment Dynamo puts after the guard."""
    if "User stack trace:" in reason:
        frames = [m for m in _USER_STACK.finditer(reason.split("User stack trace:", 1)[1])
                  if not _is_library(m.group("file"))]
        if frames:
            m = frames[-1]
            return {"file": m.group("file"), "line": int(m.group("line")), "function": m.group("func"),
                    "code": m.group("code").strip()}
    m = _GUARD_SITE.search(reason)
    if m:
        return {"file": m.group("file"), "line": int(m.group("line")), "function": m.group("func"),
                "code": m.group("code").strip()}
    return None


class SpecializationCollector(_StepRecords):
    """Dimensions the shape environment specialized (``symbolic_shape_specialization`` events of the structured
    trace: a symbolic size replaced by a constant), with the frame that forced it: ``frame`` is the innermost
    frame outside torch and tracecheck of the Python stack (a fake impl's line, or model code), ``user_frame``
    the user line Dynamo was tracing. ``step`` tags each record, as in RecompileCollector."""

    def read(self, record: logging.LogRecord) -> None:
        event = (getattr(record, "metadata", {}) or {}).get("symbolic_shape_specialization")
        if not isinstance(event, dict):
            return
        names = compat.trace_filenames()
        self.records.append({
            "symbol": str(event.get("symbol")), "sources": [str(s) for s in event.get("sources") or []],
            "value": str(event.get("value")), "reason": str(event.get("reason", "")), "step": self.step,
            "frame": innermost_user_frame(event.get("stack"), names),
            "user_frame": innermost_user_frame(event.get("user_stack"), names)})


def innermost_user_frame(stack: Any, names: dict[int, str]) -> dict[str, Any] | None:
    """The innermost frame outside torch and tracecheck of a structured-trace stack (frames name files by index)."""
    for f in reversed(stack or []):
        file = names.get(f.get("filename"), f.get("filename"))
        # site-packages stays in: a fake impl of an installed extension package is the frame to name
        if isinstance(file, str) and not _in_torch_or_stdlib(file):
            line = int(f.get("line") or 0)
            return {"file": file, "line": line, "function": f.get("name"),
                    "code": (f.get("loc") or linecache.getline(file, line)).strip()}
    return None


class WarningCollector:
    """Records every warning (Python and C++ TORCH_WARN) raised while active, ignoring filters/once-rules."""

    def __enter__(self) -> "WarningCollector":
        self._cm = warnings.catch_warnings(record=True)
        self.records = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    @property
    def messages(self) -> list[str]:
        return [str(w.message) for w in self.records]


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, then what it wraps: ``inner_exception`` (BackendCompilerFailed), cause, context."""
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = getattr(cur, "inner_exception", None) or cur.__cause__ or cur.__context__
    return out


def safe_str(obj: Any) -> str:
    """``str(obj)``, even when the probe's exception class breaks ``__str__``."""
    try:
        return str(obj)
    except Exception as e:
        return f"<{type(obj).__name__}: str() raised {type(e).__name__}>"


def _qualname(exc: BaseException) -> str:
    t = type(exc)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def user_frame(exc: BaseException) -> dict[str, Any] | None:
    """The innermost frame in the user's code: from Dynamo's ``from user code:`` block (or the ``User stack:`` of a
    constraint violation), else the traceback."""
    for e in _chain(exc):
        msg = safe_str(e)
        # Dynamo's "from user code:" block; the shape environment's "User stack:" (ConstraintViolationError)
        marker = next((m for m in ("from user code:", "User stack:") if m in msg), None)
        if marker:
            frames = list(_FROM_USER_CODE.finditer(msg.split(marker, 1)[1]))
            user = [m for m in frames if not _is_library(m.group("file"))]
            if user:
                m = user[-1]
                return {"file": m.group("file"), "line": int(m.group("line")), "function": m.group("func"),
                        "code": m.group("code").strip()}
    for e in _chain(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__) if not _is_library(f.filename)]
        if frames:
            f = frames[-1]
            return {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
    return None


def frame_outside_torch(exc: BaseException) -> dict[str, Any] | None:
    """The innermost traceback frame outside torch, tracecheck and the stdlib, installed packages included: where
    an error raised inside a library (``transformers``' model code, say) was last in code torch did not write."""
    for e in _chain(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not _in_torch_or_stdlib(f.filename)]
        if frames:
            f = frames[-1]
            return {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
    return None


def _in_torch_or_stdlib(path: str) -> bool:
    """torch's, tracecheck's or the standard library's code; an installed package is not (kernel libraries live in
    site-packages, which a system Python keeps inside the standard library's folder)."""
    if path.startswith("<"):  # no file: FX-generated code, <string>
        return True
    full = os.path.abspath(path)
    if full.startswith((_TORCH_DIR, _LIB_DIRS[0])):
        return True
    return full.startswith(_LIB_DIRS[1]) and not any(m in full for m in ("site-packages", "dist-packages"))


def _is_library(path: str) -> bool:
    return path.startswith("<") or os.path.abspath(path).startswith(_LIB_DIRS) or "site-packages" in path


def fake_impl_raised(exc: BaseException) -> dict[str, Any] | None:
    """``{"op", "exception_type", "message", "frame"}`` when an exception of the chain was raised by a custom op's own
    fake impl: its innermost frame is user code, called from FakeTensor's dispatch of that op (whose ``func`` local
    names it). An error torch raised inside a fake impl (a data-dependent size, say) is not the fake's own raise."""
    found = None
    for e in _chain(exc):
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        if not frames or _in_torch_or_stdlib(frames[-1].f_code.co_filename):  # an installed library's fake counts
            continue
        op = None
        for frame in frames:
            func = compat.fake_dispatch_op(frame)
            if func is not None and func.namespace not in TORCH_NAMESPACES:
                op = func
        if op is None:
            continue
        last = frames[-1]
        # torch 2.14 re-raises the fake's error as a RuntimeError of its own wording over the fake's traceback: the
        # inner exception raised at the same line is the fake's own words. Any other inner one (a KeyError the
        # fake caught before raising its ValueError) is not what the fake raised.
        if found is not None and (found["frame"]["file"], found["frame"]["line"]) != \
                (last.f_code.co_filename, last.f_lineno):
            break
        found = {"op": str(op), "exception_type": _qualname(e).rsplit(".", 1)[-1],
                 "message": safe_str(e)[:500],
                 "frame": {"file": last.f_code.co_filename, "line": last.f_lineno, "function": last.f_code.co_name,
                           "code": linecache.getline(last.f_code.co_filename, last.f_lineno).strip()}}
    return found


def error_record(exc: BaseException, phase: str) -> dict[str, Any]:
    """Plain-data evidence of one exception, for ``classify.classify_error``."""
    chain = _chain(exc)
    gb_type = next((getattr(e, "gb_type", None) for e in chain if getattr(e, "gb_type", None)), None)
    try:
        tb = "".join(traceback.format_exception(exc))[-20000:]
    except Exception:
        tb = ""
    return {
        "type": _qualname(exc),
        "message": safe_str(exc),
        "chain": [{"type": _qualname(e), "message": safe_str(e)} for e in chain],
        "gb_type": gb_type if isinstance(gb_type, str) else None,
        "gb_code": compat.gb_code(gb_type) if isinstance(gb_type, str) else None,
        "phase": phase,
        "user_frame": user_frame(exc),
        "traceback": tb,
        "fake_impl": fake_impl_raised(exc),
        "traced_in_torch": _traced_in_torch(chain),
    }


def _traced_in_torch(chain: list[BaseException]) -> bool:
    """Was Dynamo tracing torch's own code when it stopped: the innermost frame of its ``from user code:`` block lies
    inside torch (flex_attention's fallback calling a C builtin, say), not in the user's or a library's code."""
    for e in chain:
        msg = safe_str(e)
        if "from user code:" in msg:
            frames = list(_FROM_USER_CODE.finditer(msg.split("from user code:", 1)[1]))
            inner = os.path.abspath(frames[-1].group("file")) if frames else ""
            # Dynamo's polyfills re-enact the user's Python (object construction): not torch's own call
            return inner.startswith(_TORCH_DIR) and "/_dynamo/polyfills/" not in inner.replace(os.sep, "/")
    return False


class OpRegistrationWatch:
    """Sees every ``Library.define`` (custom_op and torch.library.define go through it) while active.

    A name defined again with a different schema is an ``op-redefined`` event: ``torch.library.custom_op``
    silently replaces the earlier op (pytorch PR #122344), the mutates_args case of pytorch#187319.
    """

    def __init__(self) -> None:
        self.schemas: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> "OpRegistrationWatch":
        import torch.library

        self._orig = orig = torch.library.Library.define
        watch = self

        def define(lib: Any, schema: str, *args: Any, **kwargs: Any) -> Any:
            result = orig(lib, schema, *args, **kwargs)
            try:
                watch._saw(lib.ns, schema)
            except Exception:  # the user's define went through; the task reports the watch's own failure
                parser_failed()
            return result

        torch.library.Library.define = define  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.library

        torch.library.Library.define = self._orig  # type: ignore[method-assign]

    def _saw(self, ns: str, schema: str) -> None:
        name = schema.split("(", 1)[0].strip()
        qualname = name if "::" in name else f"{ns}::{name}"
        full = f"{qualname}{schema[len(name):].strip()}" if "::" not in name else schema
        frame = _caller_frame()
        if qualname in self.schemas and self.schemas[qualname][0] != full:
            first, first_frame = self.schemas[qualname]
            self.events.append({"op": qualname, "first_schema": first, "second_schema": full,
                                "first_frame": first_frame, "second_frame": frame})
        self.schemas[qualname] = (full, frame)


def _caller_frame() -> dict[str, Any] | None:
    for f in reversed(traceback.extract_stack()[:-2]):
        if not _is_library(f.filename):
            return {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
    return None
