"""Where a failure is: the user's frame, found in tracebacks, Dynamo's ``from user code:`` blocks and
structured-trace stacks; which files are torch's, tracecheck's, the standard library's or an installed library's."""
from __future__ import annotations

import linecache
import os
import re
import traceback
from typing import Any

from .. import compat
from ..model.records import Frame
from ..model.report import is_generated


FROM_USER_CODE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')

# Frames under these are library frames, never "the user's line".
_LIB_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (compat, os, __import__("torch"))  # tracecheck, the stdlib, torch
)
TORCH_DIR = _LIB_DIRS[-1]


def caller_outside_torch(file: str | None, stack: str) -> dict[str, Any] | None:
    """When Dynamo places a break inside torch (a custom op's ``__call__`` in torch/_library, say) or in code torch
    generated (``<eval_with_key>.N``, an FX graph such as compiled autograd's), the innermost frame of its user
    stack in a real file outside torch: the line the user or their library wrote. The break's own location is
    kept as is (it is what TORCH_LOGS=graph_breaks prints and what breaks are counted by)."""
    if not file or not (is_generated(file) or os.path.abspath(file).startswith(TORCH_DIR)):
        return None
    frames = [m for m in FROM_USER_CODE.finditer(stack) if not in_torch_or_stdlib(m.group("file"))]
    if not frames:
        return None
    return from_match(frames[-1])


def from_match(m: re.Match[str]) -> dict[str, Any]:
    """The frame of a ``FROM_USER_CODE`` match (a traceback-formatted ``File "...", line N, in f`` and its code)."""
    return Frame(m.group("file"), int(m.group("line")), m.group("func"), m.group("code").strip()).to_dict()


def from_summary(f: traceback.FrameSummary) -> dict[str, Any]:
    """The frame of a ``traceback.extract_tb``/``extract_stack`` entry."""
    return Frame(f.filename, f.lineno, f.name, (f.line or "").strip()).to_dict()


def innermost_user_frame(stack: Any, names: dict[int, str]) -> dict[str, Any] | None:
    """The innermost frame outside torch and tracecheck of a structured-trace stack (frames name files by index)."""
    for f in reversed(stack or []):
        file = names.get(f.get("filename"), f.get("filename"))
        # site-packages stays in: a fake impl of an installed extension package is the frame to name
        if isinstance(file, str) and not in_torch_or_stdlib(file):
            line = int(f.get("line") or 0)
            return Frame(file, line, f.get("name"), (f.get("loc") or linecache.getline(file, line)).strip()).to_dict()
    return None


def in_torch_or_stdlib(path: str) -> bool:
    """torch's, tracecheck's or the standard library's code; an installed package is not (kernel libraries live in
    site-packages, which a system Python keeps inside the standard library's folder)."""
    if path.startswith("<"):  # no file: FX-generated code, <string>
        return True
    full = os.path.abspath(path)
    if full.startswith((TORCH_DIR, _LIB_DIRS[0])):
        return True
    return full.startswith(_LIB_DIRS[1]) and not any(m in full for m in ("site-packages", "dist-packages"))


def is_library(path: str) -> bool:
    return path.startswith("<") or os.path.abspath(path).startswith(_LIB_DIRS) or "site-packages" in path


def caller_frame() -> dict[str, Any] | None:
    for f in reversed(traceback.extract_stack()[:-2]):
        if not is_library(f.filename):
            return from_summary(f)
    return None
