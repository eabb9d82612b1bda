"""The files a run writes (``--json``, ``--report``, ``--junit-xml``, ``--html``, ``--baseline``): checked before it
(writable, each at its own path), so that a long run does not end in a path error; each written on its own after it,
so that one that cannot be written loses only itself."""
from __future__ import annotations

import os
import tempfile
from typing import Callable

from ..model.exitcodes import UsageError


def check_writable(path: str | None, option: str) -> None:
    """Fail before the run, not after it. Outputs are regular files: never a device, FIFO or directory."""
    if path is None:
        return
    if path == "":
        raise UsageError(f"{option}: empty path")
    real = os.path.realpath(path)
    directory = os.path.dirname(real) or "."
    if os.path.exists(real) and not os.path.isfile(real):
        raise UsageError(f"{option} {path}: exists and is not a regular file")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: cannot write there")
    try:  # what the atomic write will do: a temporary file beside it (/proc passes os.access, refuses this)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".tracecheck-check-"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror or e})") from None


def check_distinct(*outputs: tuple[str, str | None]) -> None:
    """Two outputs at one path would overwrite each other after the run: refused before it."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        if path:
            real = os.path.realpath(path)
            if real in seen:
                raise UsageError(f"{seen[real]} and {option} name the same path {path}: give each its own")
            seen[real] = option


def check_directory(path: str | None, option: str) -> None:
    """An output folder: made now (before the run), and writable."""
    if path is None:
        return
    if path == "":
        raise UsageError(f"{option}: empty path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {path}: exists and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".tracecheck-check-"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror or e})") from None


def try_output(option: str, path: str, write: Callable[[], None]) -> str | None:
    """Write one output; the error message when it could not be written, else None."""
    try:
        write_output(option, path, write)
    except UsageError as e:
        return str(e)
    return None


def write_output(option: str, path: str, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as e:
        raise UsageError(f"{option} {path}: could not write it ({e.strerror or e})") from e
