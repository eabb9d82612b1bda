"""The first lines of a patched copy of a probe file (``tracecheck fix``): it says what it is a copy of, and puts the
original's folder on sys.path so that the original's imports resolve from wherever the copy is written. Pure text
(no torch): the CLI process builds model-code copies with it."""
from __future__ import annotations

import ast
import os
import re
import tokenize

from ..model.exitcodes import UsageError


#: the line ends Python's tokenizer knows (``str.splitlines`` also splits on form feeds and U+2028, which ast does not)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def source_lines(text: str, keepends: bool = False) -> list[str]:
    """``text``'s lines as ast numbers them."""
    lines = _LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def header_end(tree: ast.Module) -> int:
    """The 1-based line before which code may be inserted: after the module docstring and the ``__future__``
    imports, above the next statement's decorators."""
    body, i = tree.body, 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and getattr(body[i], "module", None) == "__future__":
        i += 1
    if i == len(body):
        return (body[-1].end_lineno or 0) + 1 if body else 1
    return min([body[i].lineno] + [d.lineno for d in getattr(body[i], "decorator_list", [])])


def prelude(source: str, probe_file: str, patched_path: str) -> tuple[list[str], int, list[str]]:
    """``(source lines, index where the prelude goes, prelude lines)``: after the docstring and ``__future__``
    imports, a sys.path entry (relative to where the copy is written) that finds the original file's imports."""
    lines = source_lines(source)
    at = header_end(ast.parse(source)) - 1
    here = os.path.dirname(os.path.abspath(patched_path))
    rel_src = os.path.relpath(os.path.dirname(os.path.abspath(probe_file)), here)
    prelude = [
        "# ---- tracecheck fix: this is a patched copy of " + os.path.abspath(probe_file),
        "import os as _tc_os, sys as _tc_sys  # noqa: E401",
        "_tc_here = _tc_os.path.dirname(_tc_os.path.abspath(__file__))",
        "# the original's imports resolve as they did next to it (a file beside this copy cannot shadow them)",
        f"_tc_sys.path.insert(0, _tc_os.path.normpath(_tc_os.path.join(_tc_here, {rel_src!r})))",
        "# ----",
        "",
    ]
    return lines, at, prelude


def with_prelude(source: str, probe_file: str, patched_path: str) -> tuple[str, int, int]:
    """The runnable patched copy of ``source`` (model-code rewrites): ``(text, first line the prelude shifts,
    lines it adds)``."""
    lines, at, head = prelude(source, probe_file, patched_path)
    return "\n".join(lines[:at] + head + lines[at:]) + "\n", at + 1, len(head)


def read_source(path: str, utf8_only: bool = False) -> str:
    """A probe file's text as Python reads it (a coding cookie honoured), its line ends kept. ``utf8_only``: a
    file in another encoding is refused, for a rewrite written back as UTF-8 would garble it. Raises UsageError."""
    try:
        with open(path, "rb") as f:
            encoding, _ = tokenize.detect_encoding(f.readline)
        if utf8_only and encoding not in ("utf-8", "utf-8-sig"):
            raise UsageError(f"{path}: encoded in {encoding}; tracecheck rewrites UTF-8 files only")
        with open(path, encoding=encoding, newline="") as f:
            return f.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read it as Python source ({e})") from e
