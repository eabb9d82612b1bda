"""Exceptions as data: ``error_record`` (model/errors.ErrorRecord: type, message, cause chain, gb_type and GB code,
user frame, whether a custom op's fake impl raised it), for the classifier; and the warnings a stage raised."""
from __future__ import annotations

import linecache
import os
import traceback
import warnings
from typing import Any

from .. import compat
from .wording import TORCH_NAMESPACES
from ..model.errors import ChainLink, ErrorRecord, FakeImplRaise
from ..model.frame import Frame
from .frames import FROM_USER_CODE, TORCH_DIR, from_match, from_summary, in_torch_or_stdlib


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
    return [e for e, _ in _links(exc)]


def _links(exc: BaseException) -> list[tuple[BaseException, str]]:
    """``_chain`` with how each exception was reached from the one before it: ``raised`` (the first), ``inner``
    (BackendCompilerFailed's ``inner_exception``: the backend's own error), ``cause`` (``raise ... from``) or
    ``context`` (raised while another was being handled: often the cause, but sometimes an error torch caught and
    handled first)."""
    out: list[tuple[BaseException, str]] = []
    cur: BaseException | None = exc
    via = "raised"
    while cur is not None and all(cur is not e for e, _ in out) and len(out) < 8:
        out.append((cur, via))
        inner = getattr(cur, "inner_exception", None)
        if isinstance(inner, BaseException):
            cur, via = inner, "inner"
        elif cur.__cause__ is not None:
            cur, via = cur.__cause__, "cause"
        else:
            cur, via = cur.__context__, "context"
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


def user_frame(exc: BaseException) -> Frame | None:
    """The innermost frame in the user's or a library's code (``frames.in_torch_or_stdlib``: never torch's,
    tracecheck's or the standard library's; an installed library's line is named, as the explain stage's break
    records name it, frames.caller_outside_torch): from Dynamo's ``from user code:`` block (or the ``User stack:`` of
    a constraint violation), else the traceback. One rule in both, so that the same problem is placed at the same
    frame by every stage (``finding_key``, ``attribute.unknowns``)."""
    for e in _chain(exc):
        msg = safe_str(e)
        # Dynamo's "from user code:" block; the shape environment's "User stack:" (ConstraintViolationError)
        marker = next((m for m in ("from user code:", "User stack:") if m in msg), None)
        if marker:
            frames = list(FROM_USER_CODE.finditer(msg.split(marker, 1)[1]))
            user = [m for m in frames if not in_torch_or_stdlib(m.group("file"), m.group("func"))]
            if user:
                return from_match(user[-1])
    return frame_outside_torch(exc)


def frame_outside_torch(exc: BaseException) -> Frame | None:
    """The innermost traceback frame outside torch, tracecheck and the stdlib, installed packages included: where
    an error raised inside a library (``transformers``' model code, say) was last in code torch did not write."""
    for e in _chain(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not in_torch_or_stdlib(f.filename, f.name)]
        if frames:
            return from_summary(frames[-1])
    return None


def fake_impl_raised(exc: BaseException) -> FakeImplRaise | None:
    """The raise, when an exception of the chain was raised by a custom op's own fake impl: its innermost frame is user
    code, called from FakeTensor's dispatch of that op (whose ``func`` local names it). An error torch raised inside a
    fake impl (a data-dependent size, say) is not the fake's own raise."""
    found: FakeImplRaise | None = None
    for e in _chain(exc):
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        if not frames or in_torch_or_stdlib(frames[-1].f_code.co_filename, frames[-1].f_code.co_name):  # an installed library's fake counts
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
        if found is not None and found.frame is not None and (found.frame.file, found.frame.line) != \
                (last.f_code.co_filename, last.f_lineno):
            break
        found = FakeImplRaise(str(op), _qualname(e).rsplit(".", 1)[-1], safe_str(e)[:500],
                              Frame.of(last.f_code.co_filename, last.f_lineno, last.f_code.co_name,
                                       linecache.getline(last.f_code.co_filename, last.f_lineno).strip()))
    return found


def raised_at(exc: BaseException) -> Frame | None:
    """The innermost traceback frame of ``exc`` itself (where it was raised, torch's own files included), or None
    when it carries no traceback (raised in C with no Python frame under it)."""
    try:
        frames = traceback.extract_tb(exc.__traceback__)
    except Exception:
        return None
    return from_summary(frames[-1]) if frames else None


def tb_frames(exc: BaseException, limit: int = 300) -> tuple[Frame, ...]:
    """The frames of ``exc``'s own traceback, outermost first (no source line): where it went from the frame that caught
    it down to its raise. The innermost ``limit`` when deeper."""
    out = []
    try:
        for frame, line in traceback.walk_tb(exc.__traceback__):
            out.append(Frame.of(frame.f_code.co_filename, line, frame.f_code.co_name))
    except Exception:
        return tuple(out[-limit:])
    return tuple(out[-limit:])


def error_record(exc: BaseException, phase: str) -> ErrorRecord:
    """Plain-data evidence of one exception, for ``classify.detect.classify_error``."""
    links = _links(exc)
    chain = [e for e, _ in links]
    gb_type = next((getattr(e, "gb_type", None) for e in chain if getattr(e, "gb_type", None)), None)
    try:
        tb = "".join(traceback.format_exception(exc))[-20000:]
    except Exception:
        tb = ""
    return ErrorRecord(
        type=_qualname(exc),
        message=safe_str(exc),
        # the innermost exception's whole traceback too (classify.detect: did the user's code call torch there?)
        chain=tuple(ChainLink(_qualname(e), safe_str(e), raised_at(e), via, tb_frames(e) if e is chain[-1] else None)
                    for e, via in links),
        gb_type=gb_type if isinstance(gb_type, str) else None,
        gb_code=compat.gb_code(gb_type) if isinstance(gb_type, str) else None,
        phase=phase,
        user_frame=user_frame(exc),
        traceback=tb,
        fake_impl=fake_impl_raised(exc),
        traced_in_torch=_traced_in_torch(chain),
    )


def _traced_in_torch(chain: list[BaseException]) -> bool:
    """Was Dynamo tracing torch's own code when it stopped: the innermost frame of its ``from user code:`` block lies
    inside torch (flex_attention's fallback calling a C builtin, say), not in the user's or a library's code."""
    for e in chain:
        msg = safe_str(e)
        if "from user code:" in msg:
            frames = list(FROM_USER_CODE.finditer(msg.split("from user code:", 1)[1]))
            inner = os.path.abspath(frames[-1].group("file")) if frames else ""
            # Dynamo's polyfills re-enact the user's Python (object construction): not torch's own call
            return inner.startswith(TORCH_DIR) and "/_dynamo/polyfills/" not in inner.replace(os.sep, "/")
    return False
