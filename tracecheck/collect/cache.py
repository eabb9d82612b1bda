"""Results reused when nothing they depend on changed (``tracecheck run``; ``--no-cache`` turns it off).

A model file's results (its probes' reports after every stage, and what discovery found) are stored under a key of
everything that can change them, as pytest-testmon and Bazel's action cache key theirs:

- what the file loaded, found at run time in the process that imported it and called its probes (``Recorder``):
  the file itself, every module imported from outside the standard library, torch and tracecheck, every shared
  library mapped (a C++ extension), the C++ sources of an extension ``torch.utils.cpp_extension`` built (its
  ``build.ninja``), and every file opened for reading (weights, configs); each by content (a very large file by
  size and mtime);
- the environment (``environment_key``): Python, the platform, tracecheck's own source, torch's ``version.py``,
  every installed distribution and its version, and the environment variables torch, its compilers and its
  runtimes read (``TORCH*``, ``TORCHINDUCTOR_*``, ``PYTORCH_*``, ``CUDA_*``, ``OMP_*``, ...);
- the run's options (``options_key``: stages, device, timeout, --strict, --require, selection, ...).

A stored entry is reused only when every part is equal, re-read now; a file missing or unreadable is a change. A
stale result is the worst outcome, so anything unsure is not stored: a run with a timeout, a crash, an internal
error or a load failure, a probe whose recording failed, more than ``MAX_DEPS`` files, ``--trace-dir`` (the traces
must be written). Modules a stage imports later (inside a forward) are not seen: the file and the probes' calls
import what a model needs in practice; ``--no-cache`` when a model imports lazily from files that change.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ..machine import MachineRecord
from ..model.report import ProbeReport
from ..model.reportio import Json, write_json_atomic

#: bumped when what an entry holds or how a key is made changes: older entries are never read
CACHE_VERSION = 1
#: the folder ``tracecheck run`` keeps results in, relative to the working directory (a CI cache action keeps it)
DEFAULT_DIR = ".tracecheck-cache"
#: an environment variable that turns the cache off, as ``--no-cache`` does
NO_CACHE_ENV = "TRACECHECK_NO_CACHE"
#: more files than this and the recording is not trusted to be complete (nothing is stored)
MAX_DEPS = 20000
#: files larger than this are fingerprinted by size and mtime, not read whole (a CUDA library, a checkpoint)
HASH_LIMIT = 64 << 20
#: the environment variables that change what torch, its compilers or its runtimes do
ENV_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "NVIDIA", "ASCEND", "NPU", "HCCL", "OMP_", "MKL", "KMP_", "LD_",
                "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "TRACECHECK_", "XLA", "TRITON", "PYTHON", "TMPDIR",
                "XDG_CACHE_HOME", "HOME")
_NOT_KEYED = {NO_CACHE_ENV}


def fingerprint(path: str) -> str | None:
    """What a file is: ``sha256:<hex>`` of its content, or ``stat:<size>:<mtime_ns>:<inode>:<ctime_ns>`` above
    ``HASH_LIMIT`` (a same-size file moved in with its old mtime, as ``tar -x`` or ``cp -p`` leave it, has another
    inode and ctime); None when it cannot be read (a change: never a match)."""
    try:
        st = os.stat(path)
        if st.st_size > HASH_LIMIT:
            return f"stat:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


#: a dependency that is not a file's content: an environment variable's value, a folder's listing
ENV, DIR = "env:", "dir:"


def current(dep: str) -> str | None:
    """A dependency as it is now (what ``Recorder`` stored for it then): a file's ``fingerprint``, an environment
    variable's value (``env:NAME``; ``"<unset>"``), a folder's sorted listing (``dir:PATH``; None when gone)."""
    if dep.startswith(ENV):
        return os.environ.get(dep[len(ENV):], UNSET)
    if dep.startswith(DIR):
        try:
            return "names:" + hashlib.sha256("\0".join(sorted(os.listdir(dep[len(DIR):]))).encode()).hexdigest()
        except OSError:
            return None
    return fingerprint(dep)


#: an environment variable the code read while it was not set
UNSET = "<unset>"


# ---------------------------------------------------------------------------------------------------------
# Recording, in the process that imports the model file (collect/survey.py)

#: the recorder an ``open`` audit event goes to (one per process: an audit hook cannot be removed)
_ACTIVE: "Recorder | None" = None
_HOOKED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    rec = _ACTIVE
    if rec is None or event not in _EVENTS:
        return
    try:
        path = args[0]
        if not isinstance(path, (str, bytes)):
            return
        path = os.path.abspath(os.fsdecode(path))  # relative to the working directory of the time
        if event == "open":
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            if (isinstance(mode, str) and not set(mode) & set("wax+")) or \
                    (mode is None and isinstance(flags, int) and not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
                rec.opened.add(path)  # read only: a file written (a log) is no input
        elif _listed_by_the_code():  # a folder the code listed (os.listdir, os.scandir, glob): a file added there
            rec.listed.add(path)  # can change what it does
    except Exception:  # an audit hook must never raise into the code that opened the file
        pass


_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


def _listed_by_the_code() -> bool:
    """Whether the listing under way is the model's code's (a ``glob`` of its plugins), not the import system's (it
    lists every folder on ``sys.path``: a report written beside the model would change it) nor torch's or
    tracecheck's own: the first caller outside the standard library decides."""
    frame: Any = sys._getframe(2)
    stdlib = _roots("stdlib")
    while frame is not None:
        file = frame.f_code.co_filename
        if file.startswith("<frozen importlib"):
            return False
        if not file.startswith("<") and not os.path.realpath(file).startswith(stdlib):
            return not _keyed_elsewhere(os.path.realpath(file))
        frame = frame.f_back
    return False


def _record_environ() -> None:
    """Every read of ``os.environ`` (``os.environ.get``, ``os.getenv``, ``in``, ``[]``) is recorded by the active
    recorder with the value it found: a probe that reads ``MYMODEL_BREAK`` is keyed by it. (No audit event covers
    it: ``os._Environ.__getitem__`` is wrapped once per process.)"""
    cls = type(os.environ)
    plain = cls.__getitem__
    if getattr(plain, "_tracecheck", False):
        return

    def getitem(self: Any, key: Any) -> Any:
        rec = _ACTIVE
        try:
            value = plain(self, key)
        except KeyError:
            if rec is not None and self is os.environ and isinstance(key, str):
                rec.environ.setdefault(key, UNSET)
            raise
        if rec is not None and self is os.environ and isinstance(key, str):
            rec.environ.setdefault(key, value)
        return value

    getitem._tracecheck = True  # type: ignore[attr-defined]
    cls.__getitem__ = getitem  # type: ignore[method-assign]


def _roots(*names: str) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.realpath(paths[n]) + os.sep for n in names if paths.get(n))


#: the runner's own folders of stage results and logs (isolate/runner.py), removed after each run
_RUN_FOLDERS = os.path.join(os.path.realpath(tempfile.gettempdir()), "tracecheck-")


def _keyed_elsewhere(path: str) -> bool:
    """A file whose content the key covers otherwise, so not fingerprinted: torch's (its ``version.py``), tracecheck's
    (its source digest), the standard library's (Python's version), a generated one (Inductor's cache: its kernels
    and wrapper modules), the kernel's (/proc). An installed package's file is fingerprinted: a venv's
    ``platstdlib`` holds ``site-packages``, and a package reinstalled from a checkout keeps its version."""
    import tracecheck

    own = [os.path.dirname(str(tracecheck.__file__))]
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        own.append(os.path.dirname(str(torch.__file__)))
        try:
            from .. import compat

            own.append(compat.inductor_cache_dir())
        except Exception:
            pass
        own.append(os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton"))
    if path.startswith(tuple(os.path.realpath(r) + os.sep for r in own) + ("/proc/", "/sys/", "/dev/", _RUN_FOLDERS)):
        return True
    if path.startswith(_roots("purelib", "platlib")):
        return False
    return path.startswith(_roots("stdlib", "platstdlib"))


def _mapped_libraries() -> set[str]:
    """The files mapped into this process (Linux ``/proc/self/maps``; elsewhere none): shared libraries (a C++
    extension), and files a native reader maps without an ``open`` audit event (safetensors' weights)."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].rstrip().endswith("(deleted)"):
                    out.add(parts[5].strip())
    except OSError:
        pass
    return out


def _ninja_sources(library: str) -> list[str]:
    """The sources a ``torch.utils.cpp_extension`` build compiled into ``library`` (its ``build.ninja``, beside it)."""
    ninja = os.path.join(os.path.dirname(library), "build.ninja")
    try:
        with open(ninja) as f:
            text = f.read()
    except OSError:
        return []
    return [m.replace("$ ", " ").replace("$:", ":") for m in re.findall(r"^build [^:]+: \w+ (.+?)$", text, re.M)
            if not m.endswith(".o")]


@dataclass
class Recorder:
    """What a process loads from now on: modules, shared libraries, files opened for reading (``start`` before the
    model file imports; ``deps`` after its probes' calls)."""

    modules_before: set[str] = field(default_factory=set)
    libraries_before: set[str] = field(default_factory=set)
    opened: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)
    #: environment variables read (``_record_environ``) -> the value found, or ``UNSET``
    environ: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls) -> "Recorder":
        global _ACTIVE, _HOOKED
        rec = cls(set(sys.modules), _mapped_libraries())
        if not _HOOKED:
            sys.addaudithook(_audit)
            _record_environ()
            _HOOKED = True
        _ACTIVE = rec
        return rec

    def modules(self) -> set[str]:
        """The files of the modules imported since ``start``."""
        out = set()
        for name, module in list(sys.modules.items()):
            if name not in self.modules_before:
                path = getattr(module, "__file__", None)
                if isinstance(path, str):
                    out.add(path)
        return out

    def deps(self) -> dict[str, str | None] | None:
        """Each file loaded since ``start`` (modules, shared libraries and the sources they were built from, files
        read; not ``_keyed_elsewhere``) -> its fingerprint; None when there are too many to trust."""
        files: set[str] = set(self.opened) | self.modules()
        for lib in _mapped_libraries() - self.libraries_before:
            files.add(lib)
            if ".so" in os.path.basename(lib):
                files.update(_ninja_sources(lib))
        return self._with_the_rest(_fingerprints(files))

    def _with_the_rest(self, deps: dict[str, str | None] | None) -> dict[str, str | None] | None:
        """``deps`` with the folders listed and the environment variables read (``current``'s forms)."""
        if deps is None:
            return None
        for folder in self.listed:
            if not _keyed_elsewhere(os.path.realpath(folder) + os.sep):
                deps[DIR + folder] = current(DIR + folder)
        # the names only: the value is the run's environment's, which the parent reads (``Cache.store``); a process
        # here may have set it itself (Inductor sets TORCHINDUCTOR_CACHE_DIR where it was unset)
        deps.update({ENV + name: None for name in self.environ})
        return deps if len(deps) <= MAX_DEPS else None


def _fingerprints(files: set[str]) -> dict[str, str | None] | None:
    """Each file (as it was named: a symlink re-pointed is another content) -> its fingerprint, but those
    ``_keyed_elsewhere`` and those gone already (a temporary file)."""
    out: dict[str, str | None] = {}
    for path in files:
        name = os.path.abspath(path)
        real = os.path.realpath(name)
        if real.endswith(".pyc") or _keyed_elsewhere(real) or not os.path.isfile(real):
            continue
        out[name] = fingerprint(name)
        if len(out) > MAX_DEPS:
            return None
    return out


#: the key under which a stage process returns the modules it imported (``stage_modules``), beside its record
LOADED_KEY = "loaded_modules"


def stage_modules() -> dict[str, str | None] | None:
    """In a stage process forked from a template that recorded: what the stage loaded besides its template, the
    model's imports and reads inside its forward included (a helper a forward imports, a file it reads, a variable it
    looks up), fingerprinted; None when nothing records (no cache) or too many. Inductor's and Triton's caches are
    keyed elsewhere (``_keyed_elsewhere``), a temporary file gone by now is not a dependency."""
    rec = _ACTIVE
    if rec is None:
        return None
    return rec._with_the_rest(_fingerprints(rec.modules() | rec.opened))


# ---------------------------------------------------------------------------------------------------------
# Keys and the store, in the parent


def _tracecheck_digest() -> str:
    """tracecheck's own source (every file of the package): a new version, or an edited checkout, re-runs all."""
    import tracecheck

    root = os.path.dirname(tracecheck.__file__)
    h = hashlib.sha256()
    for folder, dirs, names in sorted(os.walk(root)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".json", ".html", ".css", ".js", ".txt")):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode() + b"\0" + (fingerprint(path) or "?").encode())
    return h.hexdigest()


def torch_version() -> str:
    """torch's ``version.py`` as text (version, git commit, CUDA), read without importing torch (the parent never
    does); "" when torch is not found."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return ""
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            return f.read()
    except OSError:
        return spec.origin


def _distributions() -> list[str]:
    """Every installed distribution with its version (a ``pip install`` of anything re-runs all)."""
    from importlib import metadata

    return sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata['Name']})


def environment_key(device: str) -> Json:
    """What the machine and its installation contribute to a result (hashed as JSON: ``digest``)."""
    return {"python": sys.version, "executable": sys.executable, "platform": platform.platform(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "device": device,
            "tracecheck": _tracecheck_digest(), "torch": torch_version(), "distributions": _distributions(),
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(ENV_PREFIXES) and k not in _NOT_KEYED},
            "devices": sorted(n for n in _listdir("/dev") if n.startswith(("nvidia", "davinci", "dri")))}


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Reused:
    """A file's results taken from the cache: its probes' reports, the environment they were made in, and when the
    run that made them ended."""

    probes: list[ProbeReport]
    environment: MachineRecord
    stored_at: str


class Cache:
    """One folder of entries, one JSON file per (model file, key of the run): ``<dir>/v1/<digest>.json``."""

    def __init__(self, folder: str, key: Json) -> None:
        self.folder = os.path.join(folder, f"v{CACHE_VERSION}")
        #: the environment's and the options' part of every entry's key
        self.key = digest(key)

    def _path(self, file: str) -> str:
        # the file as named (a symlink is its own entry: its probes' ids are its own name's)
        return os.path.join(self.folder, digest([os.path.abspath(file), self.key]) + ".json")

    def lookup(self, file: str) -> Reused | None:
        """The stored results of ``file`` when nothing they depend on changed, else None (any doubt: None)."""
        try:
            with open(self._path(file)) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            return None
        name = os.path.abspath(file)
        if not isinstance(entry, dict) or entry.get("key") != self.key or entry.get("file") != name:
            return None
        deps = entry.get("deps")
        if not isinstance(deps, dict) or name not in deps:
            return None
        if any(fp is None or current(dep) != fp for dep, fp in deps.items()):
            return None
        try:  # an entry damaged by hand or by another tool is a miss, never a crash
            dict(entry["discovery"])  # (not read back: what discovery found is in the probes' reports)
            probes = [ProbeReport.from_dict(d) for d in list(entry["probes"])]
            if any(p.file != name for p in probes):
                return None
            return Reused(probes, MachineRecord.from_json(entry["environment"]), str(entry["stored_at"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def store(self, file: str, deps: dict[str, str | None], probes: list[Json], discovery: Json, environment: Json,
              started: float) -> bool:
        """Keep ``file``'s results under its key (each part as the entry's JSON holds it: ``ProbeReport.to_dict``,
        ``{"custom_ops"}``, ``MachineRecord.to_json``), unless a file they depend on changed since the run ``started``
        (``time.time()``): edited while the run read it, its fingerprint may be of other code than the one that ran,
        so nothing is stored (ccache's rule). Never fails the run: a cache that cannot be written is no cache."""
        name = os.path.abspath(file)
        deps = {dep: current(dep) if dep.startswith(ENV) else fp for dep, fp in deps.items()}  # the run's values
        if name not in deps or any(fp is None for fp in deps.values()):
            return False
        for dep, fp in deps.items():
            try:
                if current(dep) != fp or (not dep.startswith((ENV, DIR)) and os.stat(dep).st_mtime >= started):
                    return False
            except OSError:
                return False
        try:
            os.makedirs(self.folder, exist_ok=True)
            write_json_atomic(self._path(file), {
                "key": self.key, "file": name, "deps": deps, "probes": probes, "discovery": discovery,
                "environment": environment, "stored_at": time.strftime("%Y-%m-%d %H:%M:%S")})
        except (OSError, TypeError, ValueError):
            return False
        return True
