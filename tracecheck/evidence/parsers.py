"""The evidence parsers' own failures. A parser must not raise into torch (a logging handler, a patched
``Library.define``), so it records its failure here; ``check_parsers`` (called by isolate.worker after every task)
turns any into an internal error: a parser that failed found nothing, and "nothing found" must never read as a pass."""
from __future__ import annotations

import traceback


#: tracebacks of tracecheck's own evidence parsers that failed in this process
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
