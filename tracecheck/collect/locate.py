"""Which files hold probes and how probes are named: node ids (``file.py::probe``), the directory rule,
the rootdir probe ids are relative to.

Directory rule (like pytest's collection, but for model files): every ``*.py`` below the directory, skipping
hidden/underscore folders and Python packages (folders with ``__init__.py`` are libraries that probe files
import, such as ``probes/mhc/``), and ``__init__.py``/``conftest.py``/``setup.py``. A file named explicitly
is always loaded."""
from __future__ import annotations

import os

from ..model.exitcodes import UsageError


_SKIP_FILES = {"__init__.py", "conftest.py", "setup.py", "__main__.py"}


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


def skipped_packages(paths: list[str]) -> list[str]:
    """The package folders (an ``__init__.py`` inside) that ``find_files`` does not search under the folders of
    ``paths``: library code, not model files; a user names a file in one, or the package folder itself."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, _ in os.walk(p):
                pkgs = {d for d in dirs if os.path.exists(os.path.join(root, d, "__init__.py"))}
                out += [os.path.join(root, d) for d in sorted(pkgs) if not d.startswith((".", "_"))]
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")) and d not in pkgs)
    return out


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
