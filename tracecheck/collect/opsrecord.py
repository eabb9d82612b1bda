"""The recorder of ``tracecheck ops``: runs inside each Python process of the test command and writes what it saw.

The parent writes ``sitecustomize_source()`` into ``<work>/site/`` and runs the command with ``environment(...)``:
Python imports that sitecustomize at start-up, which calls ``install_from_env()``. Nothing here imports torch (pip
and other tools start Python too): a meta-path hook (opshook.py) patches torch once the process imports it.
Patched: ``OpOverload.__call__`` and ``OpOverloadPacket.__call__`` (calls of the package's op namespaces),
``Function.apply`` (the package's autograd.Functions) and ``Library.define`` (which namespaces the package
registers, and redefinitions). At exit the process's ``ProcessRecord`` (model/ops.py) is written to
``<record_dir>/process-<pid>.json``, calls or none.

Transparent: the user's calls run as without it. Nothing is recorded while torch compiles or traces (Dynamo, fake,
functional or proxy tensors and modes, functorch transforms, code torch generated: a compiled graph calling the op;
only the target is kept, ``compiled_only``), nor for the recorder's own work; its own failures never reach the
user's call (the first one: a line on stderr).
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..evidence.wording import TORCH_NAMESPACES
from ..model.frame import Frame
from .opshook import TorchImportHook, describe, import_roots

if TYPE_CHECKING:
    from ..model.ops import DefinedFunction, DefinedOp, ProcessRecord
    from ..model.records import Redefinition

#: the record folder; the recorder is installed only where it is set
OUT = "TRACECHECK_OPS_OUT"
#: the package audited (``--package``)
PACKAGE = "TRACECHECK_OPS_PACKAGE"
#: more op namespaces of the package (``--namespace``), comma-separated
NAMESPACES = "TRACECHECK_OPS_NAMESPACES"
#: distinct size tuples kept per distinct call
MAX_SHAPES = 3
# the same strings as model/ops.OP and FUNCTION (that module is imported only when writing: start-up stays light)
_OP, _FUNCTION = "op", "function"

_SITECUSTOMIZE = '''\
"""Written by `tracecheck ops`: its recorder (tracecheck/collect/opsrecord.py), then the sitecustomize it hides."""
def _tracecheck_ops():
    import os
    import sys
    try:
        if os.environ.get("TRACECHECK_OPS_OUT"):
            from tracecheck.collect.opsrecord import install_from_env

            install_from_env()
    except Exception as e:
        sys.stderr.write(f"tracecheck ops: recorder not installed: {type(e).__name__}: {e}\\n")
    try:  # the next sitecustomize on sys.path, which this one hides: the environment behaves as before
        import importlib.machinery
        import importlib.util
        here = os.path.dirname(os.path.abspath(__file__))
        at = [os.path.abspath(p or os.curdir) for p in sys.path]
        rest = [p for i, p in enumerate(sys.path) if at[i] != here and i > (at.index(here) if here in at else -1)]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as e:
        sys.stderr.write(f"tracecheck ops: the next sitecustomize failed: {type(e).__name__}: {e}\\n")

_tracecheck_ops()
del _tracecheck_ops
'''


def sitecustomize_source() -> str:
    """The text of the ``sitecustomize.py`` the parent writes into the site folder ``environment`` puts first on
    PYTHONPATH. It never raises (a failure: one line on stderr), imports nothing heavy, installs the recorder only
    where ``TRACECHECK_OPS_OUT`` is set, then runs the next sitecustomize found later on sys.path."""
    return _SITECUSTOMIZE


def environment(record_dir: str, package: str, namespaces: Sequence[str], site_dir: str,
                base_env: Mapping[str, str]) -> dict[str, str]:
    """The test command's whole environment: ``base_env``, the site folder first on PYTHONPATH, and the recorder's
    settings."""
    return {**base_env, "PYTHONPATH": os.pathsep.join(p for p in (site_dir, base_env.get("PYTHONPATH")) if p),
            OUT: record_dir, PACKAGE: package, NAMESPACES: ",".join(namespaces)}


_ACTIVE: Recorder | None = None


def install_from_env() -> None:
    """Install the recorder as the environment says (``environment``); nothing where ``TRACECHECK_OPS_OUT`` is unset or
    one is installed already."""
    out = os.environ.get(OUT)
    if out and _ACTIVE is None:
        install(out, os.environ.get(PACKAGE, ""),
                [n.strip() for n in os.environ.get(NAMESPACES, "").split(",") if n.strip()])


def install(record_dir: str, package: str, namespaces: Sequence[str]) -> Recorder:
    """Install a recorder in this process (``Recorder.uninstall`` takes it out). Raises RuntimeError when one is
    installed already."""
    (rec := Recorder(record_dir, package, namespaces)).install()
    return rec


@dataclass
class _Seen:
    """A distinct call so far (grows while the process runs; a ``RecordedCall`` when written)."""

    target: str
    what: str
    signature: str
    test: str | None
    shapes: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    inputs: str | None = None
    why_not: str | None = None
    calls: int = 0
    #: every call so far raised: the next one saves its inputs again
    raised: bool = False


class Recorder:
    """What one process calls (``_seen``) and defines, written by ``write`` (at exit, or when called)."""

    def __init__(self, record_dir: str, package: str, namespaces: Sequence[str]) -> None:
        self.record_dir = os.path.abspath(record_dir)
        self.package = package
        #: namespaces given with --namespace (the others are found at exit: ``namespaces``)
        self.given = tuple(n for n in namespaces if n)
        self.installed = False
        self._seen: dict[tuple[str, str], _Seen] = {}
        #: the package's calls not recorded (``_quiet``: compiled, traced): target -> what
        self._skipped: dict[str, str] = {}
        #: ``namespaces()`` as last computed, for the calls (None: to compute), and the defines seen so far (a define
        #: may add one: it clears the cache)
        self._ours: frozenset[str] | None = None
        self._defines = 0
        #: ``ns::name`` or ``ns::name.overload`` -> the schema it was last defined with, and where
        self._defined: dict[str, tuple[str, Frame | None]] = {}
        #: (namespace, file) of every define seen: which namespaces the package's own files register
        self._defined_in: set[tuple[str, str]] = set()
        self._redefinitions: list[Redefinition] = []
        self._lock = threading.RLock()
        #: ``busy``: the recorder's own work is running on this thread (whatever it calls is not the user's call)
        self._local = threading.local()
        self._undo: list[Callable[[], None]] = []
        self._hook: TorchImportHook | None = None
        self._failed = False
        self._fork_hooked = False
        self._class_frames: dict[str, Frame | None] = {}
        self._generated_dirs: tuple[str, ...] = ()

    # -- installing ---------------------------------------------------------------------------------------------

    def install(self) -> None:
        """Patch torch now if it is imported, else once it is; write the record at exit. Raises RuntimeError when a
        recorder is installed already (one per process: the patches are torch's classes')."""
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("a tracecheck ops recorder is installed in this process already")
        _ACTIVE = self
        self.installed = True
        if "torch" in sys.modules:
            self._torch_imported()
        else:
            self._hook = TorchImportHook(self._torch_imported, self._fail)
            sys.meta_path.insert(0, self._hook)
        atexit.register(self._write_at_exit)
        if not self._fork_hooked:  # (a fork hook cannot be taken out: it checks ``installed``)
            self._fork_hooked = True
            os.register_at_fork(after_in_child=self._forked)

    def uninstall(self) -> None:
        """Restore every patch, drop the import hook and the exit write (what was seen stays: ``write`` works)."""
        global _ACTIVE
        self.installed = False
        if self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        while self._undo:
            self._undo.pop()()
        atexit.unregister(self._write_at_exit)
        if _ACTIVE is self:
            _ACTIVE = None

    def _torch_imported(self) -> None:
        if self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        if not self.installed or self._undo:
            return
        try:
            self._patch_torch()
        except Exception as e:
            self._fail(e)

    def _patch_torch(self) -> None:
        import torch
        import torch.library

        from .. import compat

        rec = self
        root = os.path.dirname(os.path.abspath(torch.__file__))
        # a compiled graph's runtime (AOTAutograd's wrappers, Inductor's runner): the op it calls is not a test's call
        self._generated_dirs = tuple(os.path.join(root, *d) + os.sep for d in (("_functorch", "_aot_autograd"),
                                                                             ("_inductor",)))
        overload_type, packet_type = compat.op_call_types()
        overload_call, packet_call, define = overload_type.__call__, packet_type.__call__, torch.library.Library.define

        def call_overload(op: Any, /, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841  (pytest shows the user's frames, not this one)
            if op.namespace in TORCH_NAMESPACES or not rec._is_ours(op.namespace):
                return overload_call(op, *args, **kwargs)
            # str(op): ``ns.name.overload``; the key of a running op is its packet's ``ns.name``
            return rec._call(str(op).rpartition(".")[0], _OP, lambda: str(op).replace(".", "::", 1),
                             partial(overload_call, op), args, kwargs)

        def call_packet(op: Any, /, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            if (ns := (name := str(op)).partition(".")[0]) in TORCH_NAMESPACES or not rec._is_ours(ns):  # ``ns.name``
                return packet_call(op, *args, **kwargs)
            return rec._call(name, _OP, lambda: _overload(op, args, kwargs), partial(packet_call, op), args, kwargs)

        def apply(cls: type, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            if not rec._mine(getattr(cls, "__module__", None)):
                return original(*args, **kwargs)
            target = f"{cls.__module__}:{cls.__qualname__}"
            return rec._call(target, _FUNCTION, lambda: target, original, args, kwargs)

        def define_op(lib: Any, schema: str, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            result = define(lib, schema, *args, **kwargs)
            try:
                rec._saw_define(lib.ns, schema)
            except Exception as e:  # the user's define went through
                rec._fail(e)
            return result

        for owner, name, new in ((overload_type, "__call__", call_overload), (packet_type, "__call__", call_packet),
                                 (torch.library.Library, "define", define_op)):
            self._undo.append(partial(setattr, owner, name, owner.__dict__[name]))
            setattr(owner, name, new)
        patched = contextlib.ExitStack()
        patched.enter_context(compat.intercept_function_apply(apply))
        self._undo.append(patched.close)

    def _forked(self) -> None:
        """In a forked child: its own record, without the parent's calls (the parent writes those)."""
        if self.installed:
            self._lock, self._local, self._seen, self._skipped = threading.RLock(), threading.local(), {}, {}

    def _fail(self, e: BaseException) -> None:
        if self._failed:
            return
        self._failed = True
        with contextlib.suppress(Exception):
            sys.stderr.write(f"tracecheck ops: the recorder failed and goes on ({_why(e)})\n")

    # -- recording ----------------------------------------------------------------------------------------------

    def _mine(self, module: str | None) -> bool:
        """Is ``module`` the package or one of its modules."""
        return bool(self.package) and isinstance(module, str) and \
            (module == self.package or module.startswith(self.package + "."))

    def _is_ours(self, ns: str) -> bool:
        """Is ``ns`` one of the package's op namespaces: another library's calls are neither counted nor saved (its
        inputs would be copied in the user's test for nothing). Never raises."""
        if (ours := self._ours) is None:
            defines = self._defines
            try:
                ours = frozenset(self.namespaces())
            except Exception as e:
                self._fail(e)
                return False
            if defines == self._defines:  # (no define since: still the set)
                self._ours = ours
        return ns in ours

    def _call(self, name: str, what: str, target: Callable[[], str], call: Callable[..., Any],
              args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
        """``call(*args, **kwargs)``, recorded (``_saw``) unless the same op or Function is already running on this
        thread: then it is that call again (a dispatch mode's or a tensor subclass's redispatch)."""
        __tracebackhide__ = True  # noqa: F841
        if (running := getattr(self._local, "running", None)) is None:
            running = self._local.running = []
        if name in running:
            return call(*args, **kwargs)
        fresh = self._saw(what, target, args, kwargs)
        running.append(name)
        try:
            return call(*args, **kwargs)
        except BaseException as e:
            if fresh is not None:  # the inputs just saved are a failing call's: no probe of an error path
                self._raised(fresh, e)
            raise
        finally:
            running.pop()

    def _saw(self, what: str, target: Callable[[], str], args: tuple[object, ...],
             kwargs: dict[str, object]) -> "_Seen | None":
        """Count a call of ``target`` and save its inputs if it is the first with its signature (or the first after
        calls that all raised); never raises. The distinct call whose inputs were saved now, else None."""
        if not self.installed or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            if not self._quiet(args, kwargs):
                return self._add(target(), what, args, kwargs)
            elif (skipped := target()) not in self._skipped:  # reached, if only compiled: ``compiled_only``
                with self._lock:
                    self._skipped.setdefault(skipped, what)
        except Exception as e:
            self._fail(e)
        finally:
            self._local.busy = False
        return None

    def _quiet(self, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
        """Is this call torch's, not a test's: made while compiling or tracing, under a functorch transform, on fake,
        functional or proxy values, or by a compiled graph."""
        import torch

        from .. import compat

        proxy = getattr(sys.modules.get("torch.fx.proxy"), "Proxy", ())  # (no Proxy exists before torch.fx is loaded)
        return torch.compiler.is_compiling() or compat.functorch_transforms_active() or \
            compat.infra_dispatch_mode_active() or \
            any(compat.is_infra_tensor(a) or isinstance(a, proxy) for a in compat.pytree.tree_leaves((args, kwargs))) or \
            _generated_caller(sys._getframe(1), self._generated_dirs)

    def _add(self, target: str, what: str, args: tuple[object, ...], kwargs: dict[str, object]) -> "_Seen | None":
        signature, sizes = describe(args, kwargs)
        with self._lock:
            seen = self._seen.get((target, signature))
            first = seen is None or seen.raised
            if seen is None:
                seen = self._seen[(target, signature)] = _Seen(target, what, signature, _current_test())
            seen.calls += 1
            if sizes not in seen.shapes and len(seen.shapes) < MAX_SHAPES:
                seen.shapes.append(sizes)
        if not first:
            return None
        # before the call runs: it may write to its inputs
        seen.inputs, seen.why_not = self._save_inputs(target, signature, args, kwargs)
        seen.raised, seen.test = False, seen.test if seen.calls == 1 else _current_test()
        # written now too: a process killed without its exit (multiprocessing's pool workers are terminated) still
        # leaves every distinct call it made, if not the later counts
        self.write()
        return seen

    def _raised(self, seen: "_Seen", e: BaseException) -> None:
        """The call whose inputs were just saved raised: they are dropped, and the next call with the signature
        saves its own (an error-path test's inputs are no probe)."""
        from ..model.ops import RAISED

        if seen.inputs is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.record_dir, seen.inputs))
        seen.inputs, seen.raised = None, True
        seen.why_not = f"{RAISED}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        with contextlib.suppress(OSError):
            self.write()

    def _save_inputs(self, target: str, signature: str, args: tuple[object, ...],
                     kwargs: dict[str, object]) -> tuple[str | None, str | None]:
        """``torch.save((args, kwargs))`` of copies, under ``inputs/``: (the path relative to the record folder, None),
        or (None, why not)."""
        import torch

        from .. import compat

        name = hashlib.sha1(f"{os.getpid()}\0{target}\0{signature}".encode()).hexdigest()
        path = os.path.join(self.record_dir, "inputs", f"{name}.pt")
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # the user's own dispatch and function modes do not see the copies being made
            with compat.user_modes_off():
                torch.save(compat.pytree.tree_map_only(torch.Tensor, _copy, (args, kwargs)), tmp)
            os.replace(tmp, path)
            return f"inputs/{name}.pt", None
        except Exception as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            return None, _why(e)

    def _saw_define(self, ns: str, schema: str) -> None:
        from ..evidence.frames import caller_frame, definer_file
        from ..model.records import Redefinition

        head, _, tail = schema.strip().partition("(")
        name = head.strip()
        qualname = name if "::" in name else f"{ns}::{name}"
        full = f"{qualname}({tail}"
        frame = caller_frame()
        with self._lock:
            first = self._defined.get(qualname)
            if first is not None and first[0] != full:
                self._redefinitions.append(Redefinition(qualname, first[0], full, first[1], frame))
            self._defined[qualname] = (full, frame)
            self._defines, self._ours = self._defines + 1, None
            if (definer := definer_file()) is not None:  # not ``frame``: torch's own run under a package's import
                self._defined_in.add((qualname.partition("::")[0], definer))

    # -- writing ------------------------------------------------------------------------------------------------

    def namespaces(self) -> tuple[str, ...]:
        """The op namespaces the package registers: those its files defined ops in, its top-level name, the given."""
        places = _package_places(self.package)
        with self._lock:
            defined_in = list(self._defined_in)
        found = {ns for ns, file in defined_in if _under(file, places)}
        top = self.package.partition(".")[0]
        return tuple(sorted(found | set(self.given) | ({top} if top else set())))

    def record(self) -> ProcessRecord:
        """What this process saw so far, for the package's namespaces and modules."""
        from ..model.ops import ProcessRecord, RecordedCall

        namespaces = set(self.namespaces())
        with self._lock:
            seen = list(self._seen.values())
            skipped = list(self._skipped.items())
            redefinitions = tuple(r for r in self._redefinitions if r.op.partition("::")[0] in namespaces)
        calls = tuple(RecordedCall(s.target, s.what, s.signature, tuple(s.shapes), s.inputs, s.why_not, s.test, s.calls)
                      for s in seen if s.what != _OP or s.target.partition("::")[0] in namespaces)
        recorded = {s.target for s in seen}
        compiled_only = tuple(sorted(t for t, what in skipped if t not in recorded and
                                     (what != _OP or t.partition("::")[0] in namespaces)))
        torch = sys.modules.get("torch")
        imported = torch is not None and hasattr(torch, "_C") and hasattr(torch, "autograd")
        return ProcessRecord(os.getpid(), self.package, calls, self._ops(namespaces) if imported else (),
                             self._functions() if imported else (),
                             tuple(sorted(m for m in list(sys.modules) if self._mine(m))), redefinitions,
                             compiled_only, import_roots(self.package))

    def write(self) -> str:
        """Write ``<record_dir>/process-<pid>.json`` (``ProcessRecord.to_wire``) atomically; returns its path. Raises
        OSError when the folder cannot be written."""
        from ..model.reportio import write_json_atomic

        os.makedirs(self.record_dir, exist_ok=True)
        path = os.path.join(self.record_dir, f"process-{os.getpid()}.json")
        write_json_atomic(path, self.record().to_wire())
        return path

    def _write_at_exit(self) -> None:
        self.installed = False  # what runs at exit is not a test's call
        try:
            self.write()
        except Exception as e:
            self._failed = False
            self._fail(e)

    def _ops(self, namespaces: set[str]) -> tuple[DefinedOp, ...]:
        """Every op of ``namespaces`` the dispatcher knows (and any defined here it lost), one per name."""
        from .. import compat
        from ..model.ops import DefinedOp

        overloads: dict[str, list[str]] = {}
        for full in compat.all_op_names():
            ns, _, rest = full.partition("::")
            if ns in namespaces:
                name, _, overload = rest.partition(".")
                overloads.setdefault(f"{ns}::{name}", []).append(overload)
        with self._lock:
            defined = dict(self._defined)
        for qualname in defined:
            if qualname.partition("::")[0] in namespaces:
                overloads.setdefault(qualname.partition(".")[0], [])
        ops = []
        for name, names in sorted(overloads.items()):
            definition = defined.get(name) or next((d for q, d in defined.items() if q.startswith(name + ".")), None)
            schema = next(filter(None, (_schema(name, o) for o in sorted(names, key=bool))), None)  # default first
            ops.append(DefinedOp(name, schema or (definition[0] if definition else None),
                                 definition[1] if definition else None))
        return tuple(ops)

    def _functions(self) -> tuple[DefinedFunction, ...]:
        """The package's ``torch.autograd.Function`` subclasses (all levels), each with its class line."""
        import torch

        from ..model.ops import DefinedFunction

        found: dict[str, DefinedFunction] = {}
        stack: list[type] = list(torch.autograd.Function.__subclasses__())
        visited: set[type] = set()
        while stack:
            cls = stack.pop()
            if cls in visited:
                continue
            visited.add(cls)
            stack.extend(cls.__subclasses__())
            if self._mine(getattr(cls, "__module__", None)):
                target = f"{cls.__module__}:{cls.__qualname__}"
                if target not in self._class_frames:  # (inspect parses the module's source each time)
                    self._class_frames[target] = _class_frame(cls)
                found.setdefault(target, DefinedFunction(target, self._class_frames[target]))
        return tuple(found[t] for t in sorted(found))


def _overload(packet: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> str:
    """``ns::name.overload`` a packet call runs: its only overload, or the dispatcher's pick, else ``.default``."""
    from .. import compat

    names, qualname = packet.overloads(), str(packet).replace(".", "::")
    return f"{qualname}.{names[0] if len(names) == 1 else compat.packet_overload(qualname, args, kwargs) or 'default'}"


def _copy(t: Any) -> Any:
    """An input as saved: its type kept (a tensor subclass's ``clone`` may return a plain tensor); with grad mode
    off at the call (inside an autograd.Function's forward, under no_grad) it requires no grad, as the call saw it."""
    import torch

    from ..evidence.oprecorder import snapshot

    c = snapshot(t)
    return c if torch.is_grad_enabled() or not c.requires_grad else c.detach()


def _generated_caller(frame: FrameType | None, dirs: tuple[str, ...]) -> bool:
    """Is the call made by a compiled graph: torch-generated code (``<eval_with_key>``, Inductor's output) or a
    compiled graph's runtime (``dirs``) on the stack."""
    while frame is not None:
        file = frame.f_code.co_filename
        if file.startswith("<eval_with_key>") or "torchinductor_" in file or file.startswith(dirs):
            return True
        frame = frame.f_back
    return False


def _current_test() -> str | None:
    test = os.environ.get("PYTEST_CURRENT_TEST")  # ``path::name (call)``
    return (test.rsplit(" (", 1)[0] if test.endswith(")") else test) if test else None


def _why(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _schema(name: str, overload: str) -> str | None:
    """``ns::name.overload(...) -> ...`` as the dispatcher holds it (``""``: the default overload)."""
    import torch

    from .. import compat

    ns, _, op = name.partition("::")
    try:
        return str(compat.op_schema(getattr(getattr(getattr(torch.ops, ns), op), overload or "default")))
    except (AttributeError, RuntimeError):
        return None


def _class_frame(cls: type) -> Frame | None:
    import inspect

    try:
        file = inspect.getsourcefile(cls)
        lines, line = inspect.getsourcelines(cls)
        return Frame.of(file, line, None, lines[0].strip()) if file and lines else None
    except (OSError, TypeError):  # no source (a class made by exec, a compiled module)
        return None


def _package_places(package: str) -> tuple[str, ...]:
    """The package's folders (with a trailing separator) or its one file; found without importing it (a dotted name's
    parent is not imported: its folder is the top-level package's)."""
    parts = package.split(".")
    if (module := sys.modules.get(package)) is not None and (getattr(module, "__file__", None) or
                                                             getattr(module, "__path__", None)):
        return tuple(_real(str(p)) + os.sep for p in getattr(module, "__path__", None) or ()) or \
            (_real(str(module.__file__)),)
    try:
        if (spec := importlib.util.find_spec(parts[0]) if parts[0] else None) is None:
            return ()
    except (ImportError, ValueError):
        return ()
    roots = list(spec.submodule_search_locations or ())
    if len(parts) == 1:
        return tuple(_real(r) + os.sep for r in roots) or ((_real(spec.origin),) if spec.origin else ())
    bases = [_real(os.path.join(r, *parts[1:])) for r in roots]
    return tuple(b + os.sep for b in bases) + tuple(b + ".py" for b in bases)


_real = os.path.realpath


def _under(file: str, places: tuple[str, ...]) -> bool:
    full = _real(file)
    return any(full.startswith(p) if p.endswith(os.sep) else full == p for p in places)
