"""Where a failure is: the user's frame, found in tracebacks, Dynamo's ``from user code:`` blocks and
structured-trace stacks; which files are torch's, tracecheck's, the standard library's or an installed library's."""
from __future__ import annotations

import linecache
import os
import re
import traceback
from typing import Any

from .. import compat
from ..model.frame import Frame
from ..model.report import is_generated


#: a traceback-formatted frame and its code line; a frame with no source (``<string>``, ``<frozen os>``) has none, and
#: the next frame's ``File`` line is never taken for its code
FROM_USER_CODE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n'
                            r'(?:(?![ \t]*File ")[ \t]*(?P<code>.*))?')

# Frames under these are library frames, never "the user's line".
_LIB_DIRS = tuple(
    os.path.dirname(os.path.abspath(str(m.__file__))) + os.sep
    for m in (compat, os, __import__("torch"))  # tracecheck, the stdlib, torch
)
TORCH_DIR = _LIB_DIRS[-1]


def caller_outside_torch(file: str | None, stack: str) -> Frame | None:
    """When Dynamo places a break inside torch (a custom op's ``__call__`` in torch/_library, say), in code torch
    generated (``<eval_with_key>.N``, an FX graph such as compiled autograd's) or in Python's standard library
    (``<frozen genericpath>``: ``os.path.isdir``'s ``os.stat``, called by a library's op builder), the innermost
    frame of its user stack outside torch and the standard library (``in_torch_or_stdlib``): the line the user or
    their library wrote, the frame the fullgraph stage names for the same break (``exceptions.user_frame``). A break
    in the user's own file-less code (``exec``'d, a notebook cell: ``<string>``) is left where it is. The break's own
    location is kept as is (it is what TORCH_LOGS=graph_breaks prints and what breaks are counted by)."""
    stacked = list(FROM_USER_CODE.finditer(stack))
    # the break's function, from its own frame (the innermost of the stack): a dataclass's __init__ in <string>
    func = next((m.group("func") for m in reversed(stacked) if m.group("file") == file), None)
    if not file or not in_torch_or_stdlib(file, func):
        return None
    frames = [m for m in stacked if not in_torch_or_stdlib(m.group("file"), m.group("func"))]
    if not frames:
        return None
    return from_match(frames[-1])


def from_match(m: re.Match[str]) -> Frame:
    """The frame of a ``FROM_USER_CODE`` match (a traceback-formatted ``File "...", line N, in f`` and its code)."""
    return Frame.of(m.group("file"), int(m.group("line")), m.group("func"), (m.group("code") or "").strip())


def from_summary(f: traceback.FrameSummary) -> Frame:
    """The frame of a ``traceback.extract_tb``/``extract_stack`` entry."""
    return Frame.of(f.filename, f.lineno, f.name, (f.line or "").strip())


def innermost_user_frame(stack: Any, names: dict[int, str]) -> Frame | None:
    """The innermost frame outside torch and tracecheck of a structured-trace stack (frames name files by index)."""
    for f in reversed(stack or []):
        file = names.get(f.get("filename"), f.get("filename"))
        # site-packages stays in: a fake impl of an installed extension package is the frame to name
        if isinstance(file, str) and not in_torch_or_stdlib(file, f.get("name")):
            line = int(f.get("line") or 0)
            return Frame.of(file, line, f.get("name"), (f.get("loc") or linecache.getline(file, line)).strip())
    return None


#: a dunder the standard library generates with ``exec`` (file ``<string>``): a dataclass's ``__init__``/``__repr__``/
#: ``__eq__`` (and their ``__create_fn__``), a namedtuple's ``__new__``
_GENERATED_DUNDER = re.compile(r"__\w+__")


def in_torch_or_stdlib(path: str, func: str | None = None) -> bool:
    """torch's, tracecheck's or the standard library's code, never the frame a finding is located at. An installed
    package is not (kernel libraries live in site-packages, which a system Python keeps inside the standard library's
    folder), nor is code the user ran without a file: ``exec``/``compile`` (``<string>``), a prompt (``<stdin>``) or a
    notebook cell (``<ipython-input-3-…>``). Of the file-less frames, only the standard library's frozen modules
    (``<frozen genericpath>``), code torch generated (``<eval_with_key>.N``) and the dunders the standard library
    generates in ``<string>`` (``func``: a dataclass's ``__init__``, a namedtuple's ``__new__``) are. The one rule for
    every frame a finding is placed at (the user frame of an exception, a graph break, a guard, an op's definition)."""
    if path.startswith("<"):
        return path.startswith("<frozen ") or is_generated(path) or \
            (path == "<string>" and bool(func) and _GENERATED_DUNDER.fullmatch(func or "") is not None)
    full = os.path.abspath(path)
    if full.startswith((TORCH_DIR, _LIB_DIRS[0])) or f"{os.sep}torchinductor_" in full:  # (Inductor's output code)
        return True
    return full.startswith(_LIB_DIRS[1]) and not any(m in full for m in ("site-packages", "dist-packages"))


def caller_frame() -> Frame | None:
    """The innermost frame of the current stack outside torch, tracecheck and the standard library: where an op was
    defined (evidence/opwatch.py; its records write it when they cross to the parent)."""
    for f in reversed(traceback.extract_stack()[:-2]):
        if not in_torch_or_stdlib(f.filename, f.name):
            return from_summary(f)
    return None


#: torch.library's own machinery between an op's definition and the code that asked for it (``custom_op``, its
#: decorators, ``Library.define``)
_LIBRARY_MACHINERY = (os.path.join(TORCH_DIR, "library.py"), os.path.join(TORCH_DIR, "_library") + os.sep,
                      os.path.join(TORCH_DIR, "_ops.py"))


def definer_file() -> str | None:
    """While ``Library.define`` runs: the file whose code defined the op, the innermost frame outside tracecheck,
    torch.library's machinery and the standard library. A file inside torch when torch itself defined it (its
    symmetric-memory ops, defined when a package's import reaches torch.distributed): never the package's, which
    ``caller_frame`` (the first frame outside torch) would name."""
    for f in reversed(traceback.extract_stack()[:-1]):
        full = os.path.abspath(f.filename)
        if f.filename.startswith("<") or full.startswith((_LIB_DIRS[0], *_LIBRARY_MACHINERY)):
            continue
        if full.startswith(_LIB_DIRS[1]) and not any(m in full for m in ("site-packages", "dist-packages")):
            continue  # the standard library's (contextlib, functools) between the two
        return full
    return None
