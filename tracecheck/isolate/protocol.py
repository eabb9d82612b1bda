"""What a task process sends back to the parent: one JSON document per task, tagged with ``$type``.

Like pytest's reports (``_to_json``/``_from_json`` with ``$report_type``): each outcome of a task is its own
message type, written by ``worker.child_main`` and read by ``runner`` in one place (``from_json``). A task
process that dies sends nothing; the runner reports that itself (``runner.Outcome.died``).
Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Union

from ..model.reportio import Json

TYPE_KEY = "$type"


@dataclass
class Result:
    """The task ran; ``value`` is what its function returned (a stage's raw record, a discovery, ...)."""

    value: Json


@dataclass
class UsageErrorMessage:
    """The user's input is bad (an unloadable model file, a probe that takes arguments): exit 2 in the CLI.
    ``detail`` is the traceback, shown with ``--verbose``."""

    message: str
    detail: str | None = None


@dataclass
class InternalErrorMessage:
    """tracecheck's own code raised inside the task: the traceback, for the bug report."""

    traceback: str


Message = Union[Result, UsageErrorMessage, InternalErrorMessage]
_TYPES: dict[str, type] = {"result": Result, "usage_error": UsageErrorMessage, "internal_error": InternalErrorMessage}
_NAMES = {cls: name for name, cls in _TYPES.items()}


def to_json(message: Message) -> Json:
    return {TYPE_KEY: _NAMES[type(message)], **asdict(message)}


def from_json(doc: Any) -> Message:
    """The message in ``doc``. Raises ValueError for anything that is not one (a torn or foreign file)."""
    if not isinstance(doc, dict) or doc.get(TYPE_KEY) not in _TYPES:
        raise ValueError(f"not a tracecheck task message: {str(doc)[:200]}")
    fields = {k: v for k, v in doc.items() if k != TYPE_KEY}
    try:
        return _TYPES[doc[TYPE_KEY]](**fields)
    except TypeError as e:
        raise ValueError(f"malformed {doc[TYPE_KEY]} message: {e}") from e


def read_message(path: str) -> Message | None:
    """The task's message; None when the process wrote none (it died) or a torn one."""
    import json

    try:
        with open(path) as f:
            return from_json(json.load(f))
    except (OSError, ValueError):
        return None
