"""Report files: reading JSON documents with one-line errors, and writing outputs atomically. Pure.

Near the bottom of model/: it imports only exitcodes, so that every module may name ``Json`` (report.py reads a
report with ``read_json``: ``load_report``)."""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from typing import Any

from .exitcodes import UsageError

#: A JSON object as a file or a task process's message holds it: the boundary where a typed record is read
#: (``from_json``/``from_dict``/``of``) or written (``to_json``/``to_dict``). Nowhere else.
Json = dict[str, Any]

# --- one JSON value read as what a typed field holds, or None (a missing key, or a value of the wrong shape: a
# hand-edited report, an older tracecheck's record): the one spelling of each meaning for model/'s readers.

def text(v: object) -> str | None:
    """A text field: a string, or a number as its text; None for a missing or empty one, a flag, a list or an
    object (never ``"True"`` or a dict's repr)."""
    return str(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != "" else None


def string(v: object) -> str | None:
    """A string as written, ``""`` included; None for anything else (a number too: compare ``text``)."""
    return v if isinstance(v, str) else None


def texts(v: object) -> tuple[str, ...]:
    """A list's items as text; anything else (a string, a number) as none: never a string's characters."""
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else ()


def strings(v: object) -> tuple[str, ...] | None:
    """A list of strings as a tuple; None for anything else, a list holding another value included (read whole or
    not at all: compare ``texts``, ``string_items``)."""
    return tuple(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def string_items(v: object) -> tuple[str, ...]:
    """A list's strings, its other values dropped; anything else (a tuple too) as none."""
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def items(v: object) -> tuple[object, ...]:
    """A list as a tuple of its values, unread; anything else as none."""
    return tuple(v) if isinstance(v, (list, tuple)) else ()


def obj(v: object) -> Json:
    """A JSON object as it is; anything else as an empty one."""
    return v if isinstance(v, dict) else {}


def integer(v: object) -> int | None:
    """A whole number (not a flag), of any sign."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def count(v: object) -> int | None:
    """A count: a whole number (not a flag), zero or more."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def number(v: object) -> float | None:
    """Any number (not a flag) as a float, NaN and infinities included: what a stage measured, as it measured it."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def finite(v: object) -> float | None:
    """A finite number as a float: the report's JSON never holds NaN or Infinity (a missing measurement reads as
    None)."""
    n = number(v)
    return n if n is not None and math.isfinite(n) else None


def measure(v: object) -> float | None:
    """A finite number, zero or more, as a float: what a hand-edited report must hold where a time, a share or a
    size is read."""
    n = finite(v)
    return n if n is not None and n >= 0 else None


def flag(v: object) -> bool | None:
    """``true`` or ``false``; None for anything else."""
    return v if isinstance(v, bool) else None


#: The ``format`` of a baseline document (gate/document.py); a full report has none.
BASELINE_FORMAT = "tracecheck-baseline"


def read_json(path: str, what: str) -> Json:
    """Load a JSON document; a missing or malformed file is a UsageError naming the path."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{what} {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} {path}: not readable JSON ({type(e).__name__}: {e})".splitlines()[0]) from e
    if not isinstance(doc, dict):
        raise UsageError(f"{what} {path}: not a tracecheck JSON document")
    return doc


def is_baseline(doc: Json) -> bool:
    return doc.get("format") == BASELINE_FORMAT


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file + rename, so readers never see half a file.

    A symlink is written through (its target is replaced, not the link); the file gets the umask's mode, not
    mkstemp's 0600. Raises OSError when the directory is not writable; no temp file is left behind.
    """
    path = os.path.realpath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tracecheck-", suffix=".tc-tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, data: Json) -> None:
    """``data`` as indented JSON, atomically (see write_text_atomic). Raises OSError."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def trace_subdir(probe_id: str, stage: str) -> str:
    """Where ``--trace-dir`` keeps one (probe, stage)'s TORCH_TRACE logs, relative to the trace dir: the run writes
    there, the Markdown report points there."""
    return os.path.join(re.sub(r"[^\w.-]+", "_", probe_id).strip("._"), stage)
