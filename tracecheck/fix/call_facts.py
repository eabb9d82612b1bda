"""What ``tracecheck fix`` learns of a C function called straight from model code (a ``pybind-builtin`` site), typed,
in the order it learns it: the call in the source (``CallSite``, rewrites.c_call_at), the names a library's call is
kept under (``LibraryCall``), what a task process is asked to record (``CallAsk``, fix.jobs.ObserveCallsTask) and,
held by the site (``sourcetext.Site.call``), all of it with the custom op the recording gave (``CCall``). The
answer itself crosses back as JSON: task_results.CallAnswer. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass

from .task_results import CustomOpDef

#: an Edit position: (1-based line, 0-based column)
Position = tuple[int, int]


@dataclass(frozen=True)
class CallSite:
    """The call of the C function on a site's line (rewrites.c_call_at): the callee as a dotted name, one parameter
    name per argument in call order (the argument's own name where it is a plain variable, ``argN`` else; a
    keyword's name), how many are positional, the call's first and last lines and the callee's span."""

    callee: str
    params: tuple[str, ...]
    positional: int
    first: int
    last: int
    span: tuple[Position, Position]


@dataclass(frozen=True)
class LibraryCall:
    """A C call in a library's file: the file, and the names the probe's file keeps the library's module
    (``module_alias``) and the original C function (``call_as``) under; ``file_label`` names the file for the user."""

    file: str
    call_as: str
    module_alias: str
    file_label: str


@dataclass(frozen=True)
class CallAsk:
    """One site a task process records (fix.c_call.observe_calls): its line (the op is named by it), the call, and
    where the call is in a library's file."""

    line: int
    call: CallSite
    library: LibraryCall | None = None


@dataclass(frozen=True)
class CCall:
    """A C call site as the ``custom-op`` rewrite reads it: the finding's builtin, then what was learnt of it, step by
    step (model_code._c_calls); ``error`` says why there is no custom op."""

    #: the C function as the finding names it (its context's ``builtin``)
    builtin: str
    found: CallSite | None = None
    library: LibraryCall | None = None
    #: the custom op the recording wrote for it (fix.c_call)
    op: CustomOpDef | None = None
    error: str = ""
