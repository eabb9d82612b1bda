"""Discovery: which files hold probes, loading one model file, finding and selecting its probes, and building
the ``Case`` a probe returns (``case_factory``, used by every stage process).

Directory rule (like pytest's collection, but for model files): every ``*.py`` below the directory, skipping
hidden/underscore folders and Python packages (folders with ``__init__.py`` are libraries that probe files
import, such as ``probes/mhc/``), and ``__init__.py``/``conftest.py``/``setup.py``. A file named explicitly
is always loaded.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
from types import ModuleType
from typing import Any, Callable

from .exitcodes import UsageError
from .probe import Case, ProbeShapeError, is_marked, to_case
from .report import IMPORT_PROBE, LOAD_STAGE

_SKIP_FILES = {"__init__.py", "conftest.py", "setup.py", "__main__.py"}
_PROBE_NAME = re.compile(r"^probe(_\w+)?$")


def split_node_ids(paths: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``model.py::probe_a`` names one probe of a file (pytest's node id): the paths to search, and the names
    asked for per absolute file (a file named without ``::`` is not in the dict: all its probes)."""
    plain: list[str] = []
    named: dict[str, list[str]] = {}
    whole: set[str] = set()
    for p in paths:
        file, sep, name = p.partition("::")
        plain.append(file)
        if sep and name:
            named.setdefault(absolute(file), []).append(name)
        else:
            whole.add(absolute(file))
    return list(dict.fromkeys(plain)), {f: names for f, names in named.items() if f not in whole}


def find_files(paths: list[str]) -> list[str]:
    """Model files named by ``paths`` (files or directories), sorted, absolute. Raises UsageError."""
    found: list[str] = []
    for p in paths:
        if not os.path.exists(p):
            raise UsageError(f"{p}: no such file or directory")
        if not os.path.isdir(p) and not os.path.isfile(p):
            raise UsageError(f"{p}: not a regular file")
        if os.path.isfile(p):
            if not p.endswith(".py"):
                raise UsageError(f"{p}: not a Python file")
            found.append(absolute(p))
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_"))
                             and not os.path.exists(os.path.join(root, d, "__init__.py")))
            found += [absolute(os.path.join(root, f)) for f in sorted(files)
                      if f.endswith(".py") and f not in _SKIP_FILES and os.path.isfile(os.path.join(root, f))]
    return sorted(dict.fromkeys(found))


#: A folder holding one of these is a project root: pytest's rootdir markers, and ``.git``.
ROOT_MARKERS = ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", ".git")


def rootdir(paths: list[str]) -> str:
    """What probe ids are relative to, whatever the current directory: the nearest folder at or above the
    common ancestor of ``paths`` that holds a ``ROOT_MARKERS`` entry, else that common ancestor (pytest's
    rootdir, with ``.git`` also a marker). Absolute."""
    folders = [p if os.path.isdir(p) else os.path.dirname(p) for p in map(absolute, paths)]
    ancestor = os.path.commonpath(folders)
    folder = ancestor
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in ROOT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return ancestor
        folder = parent


def absolute(path: str) -> str:
    """``path`` made absolute against the shell's logical current directory (``$PWD``, symlinks kept) when it
    is the process's, so a folder entered through a symlink finds the same rootdir as the path that names
    the link (``os.path.abspath`` uses the physical directory)."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    base = os.getcwd()
    pwd = os.environ.get("PWD")
    try:
        if pwd and os.path.isabs(pwd) and os.path.samefile(pwd, base):
            base = pwd
    except OSError:
        pass
    return os.path.normpath(os.path.join(base, path))


def probe_id(path: str, name: str, root: str) -> str:
    """``<file relative to root>::<name>``, with ``/`` separators on every platform."""
    return f"{os.path.relpath(path, root).replace(os.sep, '/')}::{name}"


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


#: model files this process has imported, by absolute path: a stage process forked from a template (template.py)
#: finds its file here, imported once, instead of importing it again
_LOADED: dict[str, ModuleType] = {}


def load_module(path: str) -> ModuleType:
    """Import a model file with its folder on sys.path, once per process. Raises UsageError naming the user's
    line."""
    key = os.path.abspath(path)
    if key in _LOADED:
        return _LOADED[key]
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = module_name_for(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        where = f"{e.filename or path}:{e.lineno}" if e.lineno else f"{e.filename or path}"
        raise UsageError(f"{where}: syntax error: {e.msg}: {(e.text or '').strip()}"[:300]) from e
    except BaseException as e:  # an import error, or any exception at module level
        raise UsageError(f"{path}: {_where(e, path)}{type(e).__name__}: {e}".splitlines()[0]) from e
    _LOADED[key] = module
    return module


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


# ---------------------------------------------------------------------------------------------------------
# Inside a task process: one file's probes, and the cases they build


def inspect_file(task: dict[str, Any]) -> dict[str, Any]:
    """The ``discover`` task: load one model file; call each selected probe once to check what it returns and
    what it registers (``capture.OpRegistrationWatch``). ``-k`` (``task["select"]``) matches probe ids relative
    to ``task["root"]`` (``rootdir``)."""
    from . import capture
    from .oprecorder import registered_custom_ops

    ops_before = registered_custom_ops()
    path, select = task["file"], task.get("select")
    only = set(task["only"]) if task.get("only") else None  # probe names asked for by ``file.py::name``
    root = task.get("root") or os.path.dirname(path)
    with capture.OpRegistrationWatch() as watch:
        try:
            module = load_module(path)
        except UsageError as e:
            failed = _import_finding(e.__cause__)
            if failed is None:
                raise  # a Python error (import, syntax, name): bad input, exit 2
            # torch refused what the file registers or runs at import (an op defined twice, say): a finding
            entry = {"name": IMPORT_PROBE, "setup_error": failed, "registrations": list(watch.events)}
            return {"probes": [entry], "n_candidates": 1, "names": [IMPORT_PROBE],
                    "custom_ops": sorted(registered_custom_ops() - ops_before)}
        file_events = list(watch.events)
        probes = []
        for name, fn in find_probes(module):
            pid = probe_id(path, name, root)
            if not matches(select, pid) or (only is not None and name not in only):
                continue
            before = len(watch.events)
            entry: dict[str, Any] = {"name": name}
            required = _required_params(fn)
            if required:
                entry["bad_shape"] = f"{pid}: a probe takes no arguments, this one requires {', '.join(required)}"
                probes.append(entry)
                continue
            try:
                to_case(call_probe(fn))
            except ProbeShapeError as e:
                entry["bad_shape"] = f"{pid}: {e}"
            except Exception as e:
                entry["setup_error"] = capture.error_record(e, "setup")
            entry["registrations"] = file_events + watch.events[before:]
            probes.append(entry)
    names = [name for name, _ in find_probes(module)]
    # no custom op registered by the file, its imports or its probes: the runner can skip opcheck (api.py)
    return {"probes": probes, "n_candidates": len(names), "names": names,
            "custom_ops": sorted(registered_custom_ops() - ops_before)}


def _import_finding(exc: BaseException | None) -> dict[str, Any] | None:
    """The error record of an import failure that a kind marked ``at_import`` in kinds.json explains (a custom
    op's registration or first call refused by torch), else None: any other import error is the user's input
    error (exit code 2)."""
    from . import capture, classify, taxonomy

    if exc is None:
        return None
    record = capture.error_record(exc, "setup")
    return record if classify.classify_error(LOAD_STAGE, record).kind in taxonomy.import_ids() else None


def _required_params(fn: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                           p.KEYWORD_ONLY)]


def call_probe(fn: Callable[[], Any]) -> Any:
    """Call a probe function, seeded: every call builds the same case."""
    import torch

    torch.manual_seed(0)
    return fn()


def to_device(case: Case, device: str) -> Case:
    """``case`` with its module and tensors on ``device`` (``requires_grad`` kept); the CPU case as is."""
    if device == "cpu":
        return case
    import torch
    from .compat import pytree

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t

    fn = case.fn.to(device) if isinstance(case.fn, torch.nn.Module) else case.fn
    return Case(fn, pytree.tree_map(move, case.args), pytree.tree_map(move, case.kwargs), case.grad)


def as_leaves(case: Case) -> Case:
    """Inputs that require grad but are not leaves (``torch.randn(..., requires_grad=True) * 2``) become
    leaves: their ``.grad`` is what tracecheck compares, and only the callable is compiled, so the gradient
    at the callable's inputs is the whole check."""
    import torch
    from .compat import pytree

    def leaf(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
            return t.detach().requires_grad_(True)
        return t

    return Case(case.fn, pytree.tree_map(leaf, case.args), pytree.tree_map(leaf, case.kwargs), case.grad)


def load_case(path: str, probe: str) -> tuple[ModuleType, Case]:
    """Load the model file and build the named probe's case once (on the CPU)."""
    module = load_module(path)
    return module, as_leaves(to_case(call_probe(dict(find_probes(module))[probe])))


def case_factory(path: str, probe: str, device: str = "cpu") -> Callable[[], Case]:
    """Load the model file once; the returned function builds a fresh, seeded case of the named probe on
    ``device`` at every call (stages call it once per run they compare).

    A probe may hand out the same module object on every call (a module-level model): its parameters and
    buffers are put back to what they were at the first call, so a model that updates a buffer in forward
    (a step counter, running statistics) starts every run from the same state.
    """
    module = load_module(path)
    fn = dict(find_probes(module))[probe]
    first: dict[int, tuple[Any, Any]] = {}

    def make() -> Case:
        try:
            case = to_case(call_probe(fn))
        except Exception as e:  # the probe's own code, called again in a stage: its failure, not tracecheck's
            raise ProbeCallError(e) from e
        case = as_leaves(to_device(case, device))
        _restore_state(case, first)
        return case

    return make


class ProbeCallError(Exception):
    """The probe function raised (or returned something other than a Case) when a stage called it again: a probe
    that fails on its second call (a global iterator, a counter). The stage reports it as the probe's failure."""


def _restore_state(case: Case, first: dict[int, tuple[Any, Any]]) -> None:
    """Record the tensors of the modules ``case.fn`` reaches on the first call; later, copy the recorded values
    back into the same tensor objects (a fresh module from the probe has other objects: nothing to do)."""
    import torch

    from .reachable import reachable_modules

    if first.get(-1) is not None:
        return  # the probe builds fresh modules: nothing is shared between runs
    tensors = [t for _, m in reachable_modules(case.fn) for t in (*m.parameters(), *m.buffers())]
    if first and not any(id(t) in first for t in tensors):
        first.clear()
        first[-1] = (None, None)  # and stop holding the first call's module alive
        return
    with torch.no_grad():
        for t in tensors:
            seen = first.get(id(t))
            if seen is None:
                first[id(t)] = (t, t.detach().clone())
            elif seen[0] is t and t.shape == seen[1].shape and t.dtype == seen[1].dtype:
                t.copy_(seen[1])
