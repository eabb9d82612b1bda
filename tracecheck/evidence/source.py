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


def classmethod_function(file: str | None, line: int | None) -> str | None:
    """The class at ``file:line`` (an ``X.apply(...)`` call there, or the class whose body holds the line) when it
    defines ``forward``/``backward``/``setup_context`` as a ``@classmethod`` itself or through a base class in the same
    file (entmax's Functions), where torch documents ``@staticmethod``; else None. Read from the source."""
    if not file or not line or file.startswith("<"):
        return None
    tree = _parsed(file)
    if tree is None:
        return None
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "apply" and isinstance(node.value, ast.Name) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            named.append(node.value.id)
    named += [c.name for c in classes.values() if c.lineno <= line <= (c.end_lineno or c.lineno)]

    def has_classmethod(name: str, depth: int = 0) -> bool:
        cls = classes.get(name)
        if cls is None or depth > 3:
            return False
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in _FUNCTION_METHODS[:3] and any(
                    ast.unparse(d) == "classmethod" for d in fn.decorator_list):
                return True
        return any(has_classmethod(ast.unparse(b).rpartition(".")[2], depth + 1) for b in cls.bases)
    return next((n for n in named if has_classmethod(n)), None)


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
