"""Loading one model file as a module, finding its probe functions, and selecting them with ``-k``."""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
from types import ModuleType
from typing import Any, Callable

from ..model.exitcodes import UsageError
from ..model.probe import is_marked


_PROBE_NAME = re.compile(r"^probe(_\w+)?$")


def module_name_for(path: str) -> str:
    """The file's stem, unless that would shadow another module (``random.py``, ``torch.py``) or is no identifier."""
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    if not stem.isidentifier() or stem[0].isdigit() or stem in sys.modules:
        return f"tc_model_{stem}"
    try:
        spec = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        spec = None
    same_file = spec is not None and spec.origin and os.path.abspath(spec.origin) == os.path.abspath(path)
    return stem if spec is None or same_file else f"tc_model_{stem}"


#: model files this process has imported, by absolute path: a stage process forked from a template (isolate/template.py)
#: finds its file here, imported once, instead of importing it again
_LOADED: dict[str, ModuleType] = {}


def package_of(path: str) -> tuple[str, str] | None:
    """``(base folder, dotted name)`` of a file inside a package (its folder has an ``__init__.py``) that needs its
    package (a relative import), as pytest's default import mode names it: up through every folder that has one, the
    base is the first that does not. None for a file outside any package or without a relative import (it loads
    alone, as before: its package's ``__init__`` files do not run)."""
    if not _imports_relatively(path):
        return None
    folder = os.path.dirname(os.path.abspath(path))
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    if len(parts) == 1 or not all(p.isidentifier() for p in parts):
        return None
    return folder, ".".join(parts)


def _imports_relatively(path: str) -> bool:
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return False  # the import proper reports it
    return any(isinstance(n, ast.ImportFrom) and n.level > 0 for n in ast.walk(tree))


def load_module(path: str) -> ModuleType:
    """Import a model file, once per process: inside a package (``package_of``) by its dotted name with the
    package's base folder on sys.path, so that its relative imports work; else with its folder on sys.path.
    Raises UsageError naming the user's line."""
    key = os.path.abspath(path)
    if key in _LOADED:
        return _LOADED[key]
    package = package_of(path)
    folder = package[0] if package else os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = _import_package_module(path, *package) if package else _exec_file(path)
    except UsageError:
        raise
    except SyntaxError as e:
        where = f"{e.filename or path}:{e.lineno}" if e.lineno else f"{e.filename or path}"
        raise UsageError(f"{where}: syntax error: {e.msg}: {(e.text or '').strip()}"[:300]) from e
    except BaseException as e:  # an import error, or any exception at module level
        raise UsageError(f"{path}: {_where(e, path)}{type(e).__name__}: {_first_line(e)}"[:500]) from e
    _LOADED[key] = module
    return module


def _import_package_module(path: str, base: str, dotted: str) -> ModuleType:
    """``dotted`` imported, checked to be ``path`` itself: a package of the same name imported already (another
    copy, installed, imported by the model file's neighbours or by a plugin) answers the name with its own file."""
    module = importlib.import_module(dotted)
    got = getattr(module, "__file__", None)
    if not got or not os.path.exists(got) or not os.path.samefile(got, path):
        raise UsageError(f"{path}: its package imports it as {dotted}, but that name is {got or 'another module'} in "
                         f"this process (another copy of the package was imported first); give tracecheck the files "
                         f"of one copy, or rename one package")
    return module


def _exec_file(path: str) -> ModuleType:
    """A file outside any package, imported under ``module_name_for``'s name."""
    name = module_name_for(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _first_line(exc: BaseException) -> str:
    """The exception's first non-empty message line, even when its class breaks ``__str__`` (as Python's own
    ``<exception str() failed>``)."""
    try:
        text = str(exc)
    except Exception:
        return "<exception str() failed>"
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _where(exc: BaseException, path: str) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(path)]
    f = mine[-1] if mine else (frames[-1] if frames else None)
    return f"line {f.lineno}: `{(f.line or '').strip()}`: " if f else ""


def find_probes(module: ModuleType) -> list[tuple[str, Callable[[], Any]]]:
    """Probe functions defined in ``module``, in source order."""
    out = []
    for name, obj in vars(module).items():
        if not callable(obj) or getattr(obj, "__module__", None) != module.__name__:
            continue
        if is_marked(obj) or (_PROBE_NAME.match(name) and not isinstance(obj, type)):
            out.append((name, obj))
    out.sort(key=lambda item: getattr(getattr(item[1], "__code__", None), "co_firstlineno", 0))
    return out


def matches(expr: str | None, probe_id: str) -> bool:
    """pytest-style ``-k``: substrings joined with ``and``/``or``/``not`` and parentheses.

    Raises UsageError for a malformed expression.
    """
    if not expr:
        return True
    tokens = re.findall(r"\(|\)|[^\s()]+", expr)
    py: list[str] = []
    for tok in tokens:
        if tok in ("and", "or", "not", "(", ")"):
            py.append(tok)
        else:
            py.append(repr(tok.lower() in probe_id.lower()))
    try:
        return bool(eval(" ".join(py), {"__builtins__": {}}, {}))  # only True/False/and/or/not/() reach eval
    except (SyntaxError, RecursionError, MemoryError):
        raise UsageError(f"-k {expr[:80]!r}: malformed or too deeply nested expression") from None
