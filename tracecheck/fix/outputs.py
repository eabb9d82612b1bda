"""Where ``tracecheck fix`` may write: a path that is new or a file tracecheck wrote before (its mark near the
top). Pure: no torch."""
from __future__ import annotations

import os

from ..model.exitcodes import UsageError


def check_output(path: str, option: str, mark: str, module: bool = True, suffix: str = ".py",
                 written_by: str = "tracecheck fix", existing: bool = True, first_lines: int = 60) -> None:
    """A writable path (a ``suffix`` file; "" for any) that is new or a file tracecheck wrote before (``mark``
    in it; ``existing=False`` leaves that to a later call, just before writing)."""
    stem, ext = os.path.splitext(os.path.basename(path))
    if suffix and (ext != suffix or (module and not stem.isidentifier())):
        what = "a .py file whose name is a Python module name" if module else "a .py file"
        raise UsageError(f"{option} {path}: must be {what}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: cannot write there")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{option} {path}: exists and is not a regular file")
    if os.path.exists(path) and existing:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16).splitlines()[:first_lines]
        # the mark as a line of its own near the top, where tracecheck writes it: not quoted or pasted in a user's file
        if not any(line.startswith(mark) for line in head):
            raise UsageError(f"{option} {path}: exists and was not written by {written_by}; refusing to overwrite "
                             "it (choose another path, or delete it)")
