"""What a model's source says about a location, read with ``ast`` (no code of the file runs, and no torch: the
parent process classifies with it)."""
from __future__ import annotations

import ast
import functools
import linecache
import os

#: the methods of an ``autograd.Function`` that run its kernels (Dynamo inlines them, or traces them as frames of
#: their own once the Function fell back to eager)
_FUNCTION_METHODS = ("forward", "backward", "setup_context", "jvp", "vjp", "vmap")


def in_autograd_function(file: str | None, line: int | None) -> str | None:
    """The ``Class.method`` of an ``autograd.Function`` subclass whose body holds ``file:line``, read from the source
    (no code runs), or None. A graph break inside a Function's ``forward`` is not always reported inside the
    Function: once an earlier break there (a loader's ``os.path.isdir``) made Dynamo give the Function up, it
    traces ``forward`` as a frame of its own, and the break's message no longer says "autograd.Function"."""
    if not file or not line or file.startswith("<"):
        return None
    tree = _parsed(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno) and any(
                ast.unparse(b).rpartition(".")[2] == "Function" for b in node.bases):
            for fn in node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in _FUNCTION_METHODS \
                        and fn.lineno <= line <= (fn.end_lineno or fn.lineno):
                    return f"{node.name}.{fn.name}"
    return None


@functools.lru_cache(maxsize=64)
def _parsed_at(file: str, mtime: float) -> ast.Module | None:
    try:
        return ast.parse("".join(linecache.getlines(file)) or open(file, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _parsed(file: str) -> ast.Module | None:
    try:
        return _parsed_at(file, os.path.getmtime(file))
    except OSError:
        return None
