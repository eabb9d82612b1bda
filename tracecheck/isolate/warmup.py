"""The fork server's warm-up (isolate/preload.py): the compiler stack's imports, Inductor's per-process answers for the
CPU, and one small forward-only Inductor compile, so each stage process forked from the server starts past them; and
a probe template's (isolate/template.py): the source files its model's classes live in, tokenized for Dynamo.

Warm-up logic only: each private torch name it reads comes from a function of ``tracecheck.compat`` (the torch
boundary; compat never imports this module).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import torch

from .. import compat


#: the compiler stack a stage process needs, imported once by the fork server (isolate/preload.py)
PRELOAD_MODULES = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx", "torch.library",
                   "torch.testing._internal.optests")  # the last: torch.library.opcheck


def preload_compiler_stack() -> None:
    import importlib

    for name in PRELOAD_MODULES:
        importlib.import_module(name)


def warm_source_names(fn: Any) -> None:
    """Tokenize, once in the process stage processes fork from, the source files of the classes of the modules
    ``fn`` reaches (a probe's model: its modeling file, its library's base classes, torch.nn's): Dynamo names each
    line it traces after its function, from the file tokenized at its first lookup in a process (about 0.15 s of
    each tiny Llama compile). Only reads files; whatever fails leaves each stage process to read them itself."""
    import inspect

    from ..evidence.reachable import reachable_modules

    get_funcname = compat.source_names_cache()
    if get_funcname is None:
        return
    files: set[str] = set()
    try:
        for _, module in reachable_modules(fn):
            for cls in type(module).__mro__[:-1]:  # not object
                try:
                    files.add(inspect.getsourcefile(cls) or "")
                except TypeError:  # a class defined in C
                    pass
        for path in sorted(files - {""}):
            get_funcname(path, 1)
    except Exception:
        pass


def warm_inductor_cpu() -> None:
    """Answer, once in the fork server, what every Inductor stage process would otherwise work out for itself
    on its first compile. Only files and subprocesses: no tensor op, no thread left behind."""
    try:
        codecache, cpu_vec_isa = compat.inductor_cpu_modules()
    except Exception:  # a torch without Inductor: the stage that needs it reports it
        return
    try:
        _pick_vec_isa(cpu_vec_isa)
    except Exception:  # no compiler, say: the stage that needs one reports it
        pass
    try:
        codecache.torch_key()  # the FX graph cache's hash of torch's sources (about 0.2 s per process)
    except Exception:
        pass
    try:  # imported by Dynamo's first look at a higher-order op (about 0.07 s per process)
        import torch.distributed.tensor.experimental  # noqa: F401
    except Exception:
        pass


def warm_compile() -> list[str] | None:
    """Compile and run one small function with Inductor, forward only, in the fork server: each stage process
    forked from it then starts past Dynamo's, AOTAutograd's and Inductor's first compile in a process (lowerings,
    passes, FakeTensor's dispatch set-up, the compiled-code loader). Returns the warnings the compile raised (none is
    expected: a warn-once spent here would never reach a stage), or None when it did not compile.

    Forward only, on tensors that need no grad: a backward here would spend autograd's one-time device set-up
    (``Engine::start_device_threads``, once per process) before the fork, and every stage process's backward on a
    device registered later (``--emulate-npu``, torch_npu imported by the model file) would then hit an internal
    assert. Not on a CUDA, ROCm or XPU build (Dynamo asks ``torch.cuda.is_available()``, which initialises the
    driver, and a forked child cannot use CUDA after that), off Linux, nor while the user's ``TORCH_LOGS``,
    ``TORCH_TRACE`` or ``TORCH_COMPILE_DEBUG`` would log it. One thread and no compile workers (a fork cannot copy
    threads). What a stage reads is put back as a fresh process has it:
    - Dynamo's caches and counters (``torch._dynamo.reset``), Inductor's metrics, the compilation metrics, torch's
      module-level id counters and FX's generated-source cache (``<eval_with_key>.N`` names and their lines);
    - the snapshots of torch a first compile caches (Dynamo's trace rules, Inductor's per-device backends): a model
      file or a device plugin imported later may add to torch;
    - the global RNGs, the structured trace's interned and dumped file names, tqdm's thread and its lock (a
      multiprocessing lock every fork would share);
    - the monkeypatches Dynamo applies at its first ``torch.compile`` in a process (``TorchPatcher.patch``:
      distributions stop validating arguments, ``torch.jit.trace`` and FX's tracer are wrapped;
      ``install_generation_tagging_init``: ``nn.Module.__init__`` is wrapped) are held off, so an eager, vmap or
      export stage runs torch unpatched; a torch without these hooks gets no warm-up.
    C++ warn-once warnings stay unspent (``torch.set_warn_always`` during the compile)."""
    import linecache
    import random
    import sys
    import warnings
    from unittest import mock

    if sys.platform != "linux" or torch.version.cuda or torch.version.hip or getattr(torch.version, "xpu", None) \
            or any(os.environ.get(v) for v in ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG")):
        return None
    hooks = compat.dynamo_first_compile_hooks()
    if hooks is None:
        return None
    patcher, eval_frame = hooks

    threads_before = native_threads()
    structured = compat.structured_trace_module()
    interned = dict(getattr(structured, "INTERN_TABLE", None) or {})
    dumped = set(getattr(structured, "DUMPED_FILES", None) or ())
    ids = _id_counters()
    generated = getattr(getattr(sys.modules.get("torch.fx.graph_module"), "_loader", None), "eval_cache", None)
    generated = generated if isinstance(generated, dict) else {}
    sources, generated_before = set(linecache.cache), set(generated)
    snapshots = _snapshot_caches()
    tqdm_locks = _tqdm_locks()
    rng, py_rng = torch.random.get_rng_state(), random.getstate()
    threads, warn_always = torch.get_num_threads(), torch.is_warn_always_enabled()
    torch.set_num_threads(1)  # no OpenMP pool before the fork: a child's first parallel region would hang
    compat.set_single_compile_thread()  # Inductor's compile workers are processes and threads a fork cannot copy
    torch.set_warn_always(True)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w).softmax(-1).sum(0)

    raised: list[str] | None = None
    try:
        with warnings.catch_warnings(record=True) as caught, \
                mock.patch.object(patcher, "patch", staticmethod(lambda: None)), \
                mock.patch.object(eval_frame, "install_generation_tagging_init", lambda: None):
            warnings.simplefilter("always")  # recorded, and no once-registry entry left behind
            torch.compile(f, backend="inductor")(torch.randn(4, 8), torch.randn(8, 8))
        raised = [str(w.message) for w in caught]
    except Exception:  # no C++ compiler, say: each stage process warms itself, and the stage reports it
        pass
    finally:
        compat.dynamo_reset()
        compat.counters().clear()
        for module, name in (("torch._inductor.metrics", "reset"), ("torch._dynamo.utils", "clear_compilation_metrics")):
            getattr(sys.modules.get(module), name, lambda: None)()
        for fn, size in snapshots.items():
            if fn.cache_info().currsize > size:
                fn.cache_clear()
        for (module, name), value in ids.items():
            setattr(module, name, value)
        for name in set(linecache.cache) - sources:  # the restored counter hands these names out again
            if name.startswith("<eval_with_key>"):
                del linecache.cache[name]
        for name in set(generated) - generated_before:
            del generated[name]
        torch.random.set_rng_state(rng)
        random.setstate(py_rng)
        torch.set_num_threads(threads)
        torch.set_warn_always(warn_always)
        for name, value in (("INTERN_TABLE", interned), ("DUMPED_FILES", dumped)):
            table = getattr(structured, name, None)
            if table is not None:
                table.clear()
                table.update(value)
        _stop_tqdm_monitor(keep_locks=tqdm_locks)
        settle_threads(threads_before)
    return raised


_TASKS = "/proc/self/task"  # Linux: one entry per native thread, Python's and the libraries' alike


def native_threads() -> int | None:
    """This process's native threads (Python's and the libraries' alike); None where /proc does not say."""
    return len(os.listdir(_TASKS)) if os.path.isdir(_TASKS) else None


def settle_threads(baseline: int | None, limit_s: float = 5.0) -> None:
    """Wait, up to ``limit_s``, for threads started since ``baseline`` (``native_threads``) to end (a stopped tqdm
    monitor, a compile's helper thread winding down): a fork copies the calling thread only, and a lock another
    thread holds at that moment stays held in every child. CI, under load, has seen one such thread still ending
    right after the warm-up; a quiet machine never shows it."""
    deadline = time.monotonic() + limit_s
    while baseline is not None and (native_threads() or 0) > baseline and time.monotonic() < deadline:
        time.sleep(0.02)


def _snapshot_caches() -> dict[Any, int]:
    """The caches a first compile fills with a snapshot of torch's namespace or its registered devices (Dynamo's
    trace rules, Inductor's per-device backends), with their sizes now: ``warm_compile`` empties those it filled, so
    that a stage process takes its snapshot after its model file and device plugins have loaded, as it would fresh."""
    import sys

    rules = sys.modules.get("torch._dynamo.trace_rules")
    fns = [getattr(rules, n) for n in dir(rules)] if rules is not None else []
    fns.append(getattr(sys.modules.get("torch._inductor.codegen.common"), "init_backend_registration", None))
    return {fn: fn.cache_info().currsize for fn in fns if callable(getattr(fn, "cache_info", None))}


def _id_counters() -> dict[tuple[Any, str], Any]:
    """Fresh copies of torch's module-level id counters as they stand now (``itertools.count`` objects, and the
    FX loader's ``next_id`` behind ``<eval_with_key>.N``), to be put back after the warm-up compile."""
    import itertools
    import re
    import sys

    out: dict[tuple[Any, str], Any] = {}
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith("torch.") or module is None:
            continue
        for name, value in list(vars(module).items()):
            if type(value) is itertools.count:
                start = re.fullmatch(r"count\((-?\d+)\)", repr(value))
                if start:
                    out[(module, name)] = itertools.count(int(start.group(1)))
    loader = getattr(sys.modules.get("torch.fx.graph_module"), "_loader", None)
    if loader is not None and isinstance(getattr(loader, "next_id", None), int):
        out[(loader, "next_id")] = loader.next_id
    return out


def _tqdm_locks() -> tuple[bool, bool]:
    """Whether tqdm's write lock and its multiprocessing lock exist yet (``_stop_tqdm_monitor`` keeps only those)."""
    import sys

    tqdm = sys.modules.get("tqdm.std")
    bar, lock = getattr(tqdm, "tqdm", None), getattr(tqdm, "TqdmDefaultWriteLock", None)
    return bar is None or "_lock" in vars(bar), lock is None or "mp_lock" in vars(lock)


def _stop_tqdm_monitor(keep_locks: tuple[bool, bool]) -> None:
    """torch.fx's Interpreter opens a (disabled) tqdm bar, which starts tqdm's monitor thread once per process and
    makes tqdm's write lock, a multiprocessing lock: made before a fork, every stage process would share it, and
    one killed while holding it would hang the others. The locks that existed before (``keep_locks``) stay."""
    import sys

    tqdm = sys.modules.get("tqdm.std")
    monitor = getattr(getattr(tqdm, "tqdm", None), "monitor", None)
    if monitor is not None:
        try:
            monitor.exit()
        finally:
            getattr(tqdm, "tqdm").monitor = None
    for keep, owner, name in zip(keep_locks, ("tqdm", "TqdmDefaultWriteLock"), ("_lock", "mp_lock")):
        cls = getattr(tqdm, owner, None)
        if not keep and cls is not None and name in vars(cls):
            delattr(cls, name)


def _pick_vec_isa(cpu_vec_isa: Any) -> None:
    """Inductor finds the CPU's vector ISAs by compiling and loading a probe library per candidate, each load
    in a fresh Python (about 1.3 s on x86). The verdict is kept beside Inductor's cache: when every ISA the CPU
    flags allow passed before, with this torch and compiler, only the ISA Inductor picks is probed again.
    Inductor's config is left as it was, so compiled code and cache keys are those of a plain torch.compile."""
    config = compat.inductor_config()

    path = os.path.join(compat.inductor_cache_dir(), "tracecheck_vec_isa.json")
    key = _vec_isa_key()
    try:
        with open(path) as f:
            verdicts = json.load(f)
    except (OSError, ValueError):
        verdicts = {}
    passed = verdicts.get(key)
    if passed is not None and config.cpp.vec_isa_ok is None:
        config.cpp.vec_isa_ok = True  # the CPU-flag filter alone: no probe
        try:
            allowed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
            if sorted(allowed) == sorted(passed):
                cpu_vec_isa.valid_vec_isa_list()  # cached for the process and every fork
        finally:
            config.cpp.vec_isa_ok = None
    bool(cpu_vec_isa.pick_vec_isa())  # on a miss or a stale verdict, every candidate is probed here
    found = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    if found != passed:  # new, or stale: keep what was found
        verdicts[key] = found
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(verdicts, f)
        os.replace(tmp, path)


def _vec_isa_key() -> str:
    """What the ISA verdict depends on: this torch, the CPU's flags and the C++ compiler Inductor calls."""
    import hashlib
    import platform
    import shutil

    config = compat.inductor_config()

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    cxx = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    compilers = [shutil.which(c) for c in cxx if c]
    stamps = [(c, os.stat(c).st_mtime_ns) for c in compilers if c]
    raw = repr((torch.__version__, torch.__file__, platform.machine(), flags, os.environ.get("CXX"), stamps))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]
