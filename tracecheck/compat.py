"""Every torch-version difference tracecheck depends on, in one place (tested in tests/test_compat.py).

Supported and run in CI: torch 2.13 and 2.14 (pyproject, docs/compat.md). Paths taken per version are noted at
each shim; older paths are kept where they cost nothing, untested.
"""
from __future__ import annotations

import contextlib
import json
import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import torch
from torch.utils import _pytree as pytree  # noqa: F401  (re-exported: torch's pytree, private by name)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401  (re-exported: the dispatch-mode base class)

from .model.frame import Frame

if TYPE_CHECKING:
    from torch._library.custom_ops import CustomOpDef

GB_SITE = "https://meta-pytorch.github.io/compile-graph-break-site/gb/"


@lru_cache(maxsize=1)
def gb_registry() -> dict[str, str]:
    """gb_type -> GB code from torch/_dynamo/graph_break_registry.json (all historical wordings).

    The registry ships with torch 2.8+; an older or stripped install gives an empty map, and codes then
    come from the doc link in the message (wording.gb_code_from_text).
    """
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    try:
        with open(path) as f:
            registry = json.load(f)
    except (OSError, ValueError):
        return {}
    mapping: dict[str, str] = {}
    for code, entries in registry.items():
        for entry in entries:  # newest first; keep the first code seen for a wording
            mapping.setdefault(entry.get("Gb_type", ""), code)
    return mapping


def gb_code(gb_type: str | None) -> str | None:
    return gb_registry().get(gb_type) if gb_type else None


def gb_doc_link(code: str | None) -> str | None:
    return f"{GB_SITE}gb{code[2:]}.html" if code else None


def explain(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``torch._dynamo.explain(fn)(*args)``; the curried form is the only one left since 2.2."""
    return torch._dynamo.explain(fn)(*args, **kwargs)


@contextlib.contextmanager
def compiled_autograd(compiler: Callable[..., Any] | str = "aot_eager", dynamic: bool = False) -> Iterator[None]:
    """Turn compiled autograd on for every backward run inside the block (forward compiles included).

    ``compiler`` is the compiled-autograd compiler fn (it receives the captured backward ``GraphModule`` and
    returns a callable) or a backend name, wrapped as ``torch.compile(gm, backend=name)`` (not fullgraph, so
    a graph break in the backward, e.g. inside a hook, is a break and not an error, as with the config flag).
    ``dynamic=False`` starts the captured sizes static and lets compiled autograd mark a size dynamic when it
    changes, which is what ``torch._dynamo.config.compiled_autograd = True`` with a plain ``torch.compile``
    does (``dynamic = not assume_static_by_default``).

    Paths, tried in this order (the installed one is checked by tests/test_compiled_autograd.py):

    * ``torch._dynamo.compiled_autograd._enable(compiler_fn, dynamic=...)``: torch 2.13.0 has only this
      one (``_enable(compiler_fn, dynamic=True, ignore_active_disable_ctx=True)``, no ``enable``). Public
      source snapshots show ``enable`` still next to the ``set_stance("force_eager")`` code that came in
      2.6, then ``_enable(compiler_fn, dynamic=False)`` in place of it: the supported releases (2.8 - 2.14)
      are expected to take this path, but only 2.13.0 was run here, hence the probing.
    * ``torch._dynamo.compiled_autograd.enable(compiler_fn)``: the tutorials' name (2.4 - 2.6 era source),
      no ``dynamic`` parameter (sizes start static, as ``dynamic=False`` here).
    * Not a path here: ``torch._dynamo.config.compiled_autograd = True``. It turns compiled autograd on only
      while a frame compiled by ``torch.compile`` runs, so the backward must be called inside the compiled
      function (on 2.13 ``loss.backward()`` there is a graph break, GB0123, but still runs under compiled
      autograd); it cannot wrap a backward called outside, which is what a stage needs.

    ``dynamic`` is passed only where the signature has it. Raises AttributeError when torch has neither
    name (compiled autograd removed).
    """
    import inspect

    from torch._dynamo import compiled_autograd as ca

    compiler_fn = _compiled_with(compiler) if isinstance(compiler, str) else compiler
    enable = getattr(ca, "_enable", None) or getattr(ca, "enable")
    kwargs = {"dynamic": dynamic} if "dynamic" in inspect.signature(enable).parameters else {}
    with enable(compiler_fn, **kwargs):
        yield


def _compiled_with(backend: str) -> Callable[[torch.fx.GraphModule], Callable[..., Any]]:
    """A compiled-autograd compiler fn (it wants a callable) that compiles the captured backward with ``backend``."""

    def compiler(gm: torch.fx.GraphModule) -> Callable[..., Any]:
        return torch.compile(gm, backend=backend)

    return compiler


@contextlib.contextmanager
def log_artifacts_enabled(*names: str) -> Iterator[None]:
    """Mark torch log artifacts as enabled, without adding a handler or printing anything.

    torch code asks ``log_state.is_artifact_enabled(name)`` before doing costly logging work: compiled
    autograd installs its verbose C++ logger (and so logs its cache-miss reasons to the structured trace
    as ``compiled_autograd_compile_reasons``) only when ``compiled_autograd_verbose`` is enabled at
    ``_enable`` time. The artifact loggers' own levels are left alone, so nothing reaches stderr.
    ``torch._logging._internal.log_state`` (a private name, checked on 2.13.0) predates 2.8; without it this
    is a no-op and the stage reports captures without their reasons.
    """
    try:
        from torch._logging._internal import log_state
    except ImportError:
        yield
        return
    added = [n for n in names if not log_state.is_artifact_enabled(n)]
    for n in added:
        log_state.enable_artifact(n)
    try:
        yield
    finally:
        for n in added:
            log_state.artifact_names.discard(n)


def set_single_compile_thread() -> None:
    """Inductor spawns a compile-worker pool per process by default; one stage process needs none."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1


def trace_filenames() -> dict[int, str]:
    """Index -> file name of the structured trace's interned file names (its stack frames carry the index).

    torch emits each name once per process as a ``str`` record; the table it keeps
    (``torch._logging.structured.INTERN_TABLE``, name -> index, 2.2+) also holds the names emitted before a
    listener was installed."""
    table = getattr(getattr(torch._logging, "structured", None), "INTERN_TABLE", None) or {}
    return {i: name for name, i in table.items()}


@contextlib.contextmanager
def intercept_function_apply(hook: Callable[..., Any]) -> Iterator[None]:
    """Every ``torch.autograd.Function.apply`` call inside the block goes through ``hook(cls, apply, *args,
    **kwargs)``, where ``apply`` is the original bound to ``cls``.

    2.13 defines ``apply`` as a Python ``classmethod``; 2.14 as a C ``classmethod_descriptor`` (no ``__func__``).
    Both bind with ``__get__(None, cls)``, and the original object is put back as it was."""
    import inspect

    owner = torch.autograd.Function
    own = "apply" in owner.__dict__
    original = inspect.getattr_static(owner, "apply")

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        return hook(cls, original.__get__(None, cls), *args, **kwargs)

    setattr(owner, "apply", classmethod(apply))  # (mypy refuses assigning to a method)
    try:
        yield
    finally:
        if own:
            setattr(owner, "apply", original)
        else:
            del owner.apply


def defines_setup_context(cls: type) -> bool:
    """Does this ``autograd.Function`` subclass override ``setup_context`` (the form torch.func transforms
    take), as torch's own ``_is_setup_context_defined`` decides (2.13, 2.14); the base class's stub otherwise."""
    import torch.autograd.function as function

    check = getattr(function, "_is_setup_context_defined", None)
    if check is not None:
        return bool(check(getattr(cls, "setup_context", None)))
    base = getattr(function, "_SingleLevelFunction", torch.autograd.Function)
    return getattr(cls, "setup_context", None) is not getattr(base, "setup_context", None)


def has_dispatch_kernel(op: str, key: str) -> bool:
    """Does the dispatcher hold a kernel for ``ns::op`` at dispatch key ``key`` (a fallback does not count)."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, key))


@contextlib.contextmanager
def vmap_fallback_disabled() -> Iterator[None]:
    """functorch's per-sample fallback turned off inside the block: an op without a batching rule raises
    ``ns::op hit the vmap fallback which is currently disabled`` instead of looping (2.13, 2.14)."""
    functorch = torch._C._functorch  # its vmap-fallback switches are not in torch's stubs
    is_enabled: Callable[[], bool] = getattr(functorch, "_is_vmap_fallback_enabled")
    set_enabled: Callable[[bool], None] = getattr(functorch, "_set_vmap_fallback_enabled")
    enabled = is_enabled()
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(enabled)



#: FakeTensorMode's dispatch, whose ``func`` local is the op being run on FakeTensors (2.13, 2.14)
_FAKE_DISPATCH_FILE = "torch/_subclasses/fake_tensor.py"


def fake_dispatch_op(frame: Any) -> Any:
    """The op a traceback frame of FakeTensorMode's dispatch was running (its ``func`` local), else None: how
    evidence/exceptions.fake_impl_raised tells which op's fake impl raised."""
    if not frame.f_code.co_filename.replace("\\", "/").endswith(_FAKE_DISPATCH_FILE):
        return None
    func = frame.f_locals.get("func")
    return func if getattr(func, "namespace", None) else None


def tensor_hooks(t: Any) -> dict[str, int]:
    """How many gradient hooks a tensor carries, by the method that registered them (``_backward_hooks``,
    ``_post_accumulate_grad_hooks``: private, the same on 2.13 and 2.14)."""
    return {"register_hook": len(getattr(t, "_backward_hooks", None) or {}),
            "register_post_accumulate_grad_hook": len(getattr(t, "_post_accumulate_grad_hooks", None) or {})}


def is_training_batchnorm(module: Any) -> bool:
    """A BatchNorm module (``torch.nn.modules.batchnorm._BatchNorm``: BatchNorm1d/2d/3d, SyncBatchNorm, lazy ones)
    in training mode, which normalizes by the batch's statistics."""
    import torch

    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.training


# ---------------------------------------------------------------------------------------------------------
# Private torch names the rest of tracecheck uses, each behind one function here (tests/test_house.py checks
# that no other module names a private torch attribute or module; tests/test_compat.py calls each shim on the
# installed torch). The same names on 2.13 and 2.14 unless a shim says otherwise.


def profiler_events(prof: Any) -> Iterator[tuple[str, int, int, int]]:
    """(name, start ns, end ns, thread id) of each event a finished ``torch.profiler.profile`` recorded, from its raw
    Kineto results: ``prof.events()`` builds a FunctionEvent tree in Python, seconds for the 300,000 Python-function
    events of a few transformers forwards. A name that is no UTF-8 (a builtin's repr with odd bytes) is left out."""
    for e in prof.profiler.kineto_results.events():
        try:
            name = e.name()
        except UnicodeDecodeError:
            continue
        yield name, e.start_ns(), e.end_ns(), e.start_thread_id()


def dynamo_reset() -> None:
    """``torch._dynamo.reset()``: Dynamo's caches, and compiled autograd's (``compiled_autograd.reset``)."""
    torch._dynamo.reset()


def maybe_mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """``torch._dynamo.maybe_mark_dynamic``: ``dim`` of ``t`` symbolic from the first compile; code that forces it to
    a constant specializes it (``mark_dynamic`` would raise instead). Both 2.13 and 2.14 have it."""
    torch._dynamo.maybe_mark_dynamic(t, dim)


def counters() -> Any:
    """``torch._dynamo.utils.counters``: the process-wide ``stats``/``compiled_autograd`` counters."""
    from torch._dynamo.utils import counters as c

    return c


def graph_break_counter() -> int:
    """Dynamo's own graph-break count so far in this process, ``sum(counters["graph_break"].values())``: one per
    break Dynamo took (the same line twice is two), as PyTorch's CI reads it."""
    return int(sum(counters()["graph_break"].values()))


def dynamo_config_patch(**changes: Any) -> Any:
    """``torch._dynamo.config.patch(...)``, a context manager."""
    return torch._dynamo.config.patch(**changes)


def inductor_config_patch(**changes: Any) -> Any:
    """``torch._inductor.config.patch(...)``, a context manager."""
    import torch._inductor.config as config

    return config.patch(**changes)


def dynamo_suppresses_errors() -> bool:
    """``torch._dynamo.config.suppress_errors``: compile errors fall back to eager silently."""
    return bool(torch._dynamo.config.suppress_errors)


def lookup_backend(name: str) -> Callable[..., Any]:
    """The compiler function registered under a backend name (``torch._dynamo.backends.registry``)."""
    from torch._dynamo.backends.registry import lookup_backend as lookup

    return lookup(name)


def same(ref: Any, res: Any, fp64_ref: Any = None, **kwargs: Any) -> bool:
    """``torch._dynamo.utils.same``: PyTorch's benchmark accuracy check."""
    from torch._dynamo.utils import same as same_

    return bool(same_(ref, res, fp64_ref, **kwargs))


def rmse(ref: Any, res: Any) -> Any:
    """``torch._dynamo.utils.rmse``."""
    from torch._dynamo.utils import rmse as rmse_

    return rmse_(ref, res)


def is_op_overload(func: Any) -> bool:
    """A dispatcher op as Python sees it: ``torch.ops.ns.op`` (a packet) or ``torch.ops.ns.op.default``."""
    return isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def is_higher_order_op(func: Any) -> bool:
    """``torch.cond``, ``while_loop`` and the other higher-order ops (``torch._ops.HigherOrderOperator``)."""
    return isinstance(func, torch._ops.HigherOrderOperator)


def is_traceable_wrapper_subclass(t: Any) -> bool:
    """A tensor subclass that names its inner tensors (``__tensor_flatten__``/``__tensor_unflatten__``: DTensor,
    TwoTensor, optimum-quanto's QTensors), as ``torch.utils._python_dispatch`` decides (2.1+)."""
    from torch.utils import _python_dispatch

    return bool(_python_dispatch.is_traceable_wrapper_subclass(t))


def is_infra_tensor(t: Any) -> bool:
    """A tensor of torch's own tracing machinery: a ``FakeTensor`` or a ``FunctionalTensor``
    (``torch._subclasses``), never a user's subclass."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return isinstance(t, (FakeTensor, FunctionalTensor))


def infra_dispatch_mode_active() -> bool:
    """Is one of torch's infra dispatch modes (fake, functionalization, proxy tracing:
    ``torch._C._TorchDispatchModeKey``) on the stack: a probe's own ``FakeTensorMode`` block, ``torch.compile``'s and
    ``torch.export``'s tracing (2.2+)."""
    keys = torch._C._TorchDispatchModeKey
    return any(torch._C._get_dispatch_mode(getattr(keys, k)) is not None
               for k in ("FAKE", "FUNCTIONAL", "PROXY") if hasattr(keys, k))


def all_op_names() -> list[str]:
    """Every op the dispatcher holds, ``ns::name`` (``torch._C._dispatch_get_all_op_names``)."""
    return [str(n) for n in torch._C._dispatch_get_all_op_names()]


def custom_op_defs() -> Mapping[str, CustomOpDef]:
    """The ``torch.library.custom_op`` definitions of this process, by qualified name
    (``torch._library.custom_ops.OPDEFS``)."""
    import torch._library.custom_ops as custom_ops

    return custom_ops.OPDEFS


def custom_op_fake_impl(qualname: str) -> Any:
    """The fake impl registered on a ``torch.library.custom_op`` (``CustomOpDef._abstract_fn``), or None (an op
    defined with ``Library.define`` keeps it elsewhere)."""
    return getattr(custom_op_defs().get(qualname), "_abstract_fn", None)


def fake_impl_location(qualname: str) -> Frame | None:
    """Where the fake impl of a custom op is defined (the def line of the function ``register_fake`` got), for a ``torch.library.custom_op`` (``_abstract_fn``) or an op defined with
    ``Library.define`` (``torch._library.simple_registry``'s ``fake_impl.kernel``); None when it has none or it is not
    Python (a Meta kernel in C++)."""
    import inspect
    import linecache

    fn = custom_op_fake_impl(qualname)
    if fn is None:
        try:
            from torch._library.simple_registry import singleton

            entry = singleton.find(qualname)
            fn = getattr(getattr(entry, "fake_impl", None), "kernel", None)
        except Exception:
            fn = None
    try:
        fn = inspect.unwrap(fn) if fn is not None else None
        code = getattr(fn, "__code__", None)
        if code is None:
            return None
        file, line = code.co_filename, code.co_firstlineno
        # the def line, past its decorators (``@op.register_fake`` above it, maybe over several lines)
        lines = linecache.getlines(file)
        first = line
        while line <= len(lines) and line < first + 50 and \
                not lines[line - 1].lstrip().startswith(("def ", "async def ")):
            line += 1
        if line > len(lines) or line >= first + 50:
            line = first
        return Frame.of(file, line, code.co_name, linecache.getline(file, line).strip())
    except Exception:
        return None


def fake_tensor_mode(**kwargs: Any) -> Any:
    """A ``FakeTensorMode`` (``torch._subclasses.fake_tensor``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(**kwargs)


def draft_export_report(ep: Any) -> Any:
    """The report ``torch.export.draft_export`` attaches to its ExportedProgram (``ep._report``), or None."""
    return getattr(ep, "_report", None)


def keep_structured_trace(trace_dir: str) -> None:
    """Write this process's structured trace (TORCH_TRACE) under ``trace_dir``, for tlparse.

    torch reads TORCH_TRACE once, in ``torch._logging._init_logs()`` at import; a process forked from a server that
    imported torch without it sets the variable, drops the trace handler made then and re-runs ``_init_logs``
    (torch 2.8 - 2.14 keep the handler in ``_internal.LOG_TRACE_HANDLER``)."""
    from torch._logging import _internal

    os.makedirs(trace_dir, exist_ok=True)
    os.environ["TORCH_TRACE"] = trace_dir
    _internal.LOG_TRACE_HANDLER = None
    _internal._init_logs()


# What the fork server's warm-up (tracecheck/isolate/warmup.py) reads of torch's internals: the warm-up itself lives
# there; the lookups, and the probes for names a torch may lack, here.


def dynamo_first_compile_hooks() -> tuple[Any, Any] | None:
    """The monkeypatching Dynamo does at its first ``torch.compile`` in a process, as ``(TorchPatcher, eval_frame)``
    (``torch._dynamo.eval_frame``): ``TorchPatcher.patch`` and ``eval_frame.install_generation_tagging_init`` (2.13,
    2.14). None on a torch without either hook: the warm-up then compiles nothing."""
    from torch._dynamo import eval_frame

    patcher = getattr(eval_frame, "TorchPatcher", None)
    if not hasattr(patcher, "patch") or not hasattr(eval_frame, "install_generation_tagging_init"):
        return None
    return patcher, eval_frame


def source_names_cache() -> Callable[[str, int], Any] | None:
    """Dynamo's ``funcname_cache.get_funcname(filename, lineno)`` (2.13, 2.14): the name of the function at a line,
    from the file tokenized once per process (the first lookup of a file fills the cache). None on a torch without
    it."""
    try:
        from torch._dynamo import funcname_cache
    except ImportError:
        return None
    get = getattr(funcname_cache, "get_funcname", None)
    return get if callable(get) else None


def structured_trace_module() -> Any:
    """``torch._logging.structured``, whose ``INTERN_TABLE`` (2.2+) and ``DUMPED_FILES`` hold the file names the
    structured trace has interned and dumped in this process; None on a torch without it."""
    return getattr(torch._logging, "structured", None)


def inductor_cpu_modules() -> tuple[Any, Any]:
    """``torch._inductor.codecache`` (``torch_key``: the FX graph cache's hash of torch's sources) and
    ``torch._inductor.cpu_vec_isa`` (``pick_vec_isa``, ``valid_vec_isa_list``: the CPU's vector ISAs). Raises on a
    torch without Inductor."""
    from torch._inductor import codecache, cpu_vec_isa

    return codecache, cpu_vec_isa


def inductor_config() -> Any:
    """``torch._inductor.config``, the module (``cpp.vec_isa_ok``, ``cpp.cxx``)."""
    import torch._inductor.config as config

    return config


def inductor_cache_dir() -> str:
    """Inductor's cache directory (``torch._inductor.runtime.cache_dir_utils.cache_dir``)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def op_schema(op: Any) -> Any:
    """A dispatcher op's ``FunctionSchema`` (``op._schema``: ``.arguments``, ``.returns``)."""
    return op._schema


def tensor_version(t: Any) -> int:
    """A tensor's in-place version counter (``t._version``): it moves when the tensor is written."""
    return int(t._version)


@contextlib.contextmanager
def engine_runs_counted(hits: list[int]) -> Iterator[None]:
    """Count runs of the autograd engine inside the block (``torch.autograd.grad`` and ``.backward`` both call
    ``_engine_run_backward``, held by ``torch.autograd.graph`` and ``torch.autograd`` on 2.13 and 2.14)."""
    import torch.autograd.graph as graph

    original = graph._engine_run_backward

    def counting(*args: Any, **kwargs: Any) -> Any:
        hits.append(1)
        return original(*args, **kwargs)

    patched = [(m, "_engine_run_backward") for m in (graph, torch.autograd) if hasattr(m, "_engine_run_backward")]
    for m, attr in patched:
        setattr(m, attr, counting)
    try:
        yield
    finally:
        for m, attr in patched:
            setattr(m, attr, original)


def devices_without_inductor(device_types: Any) -> list[str]:
    """Those of ``device_types`` (``"npu"``, ``"cpu"`` or ``"npu:0"``) that Inductor cannot compile for, sorted."""
    types = {d.partition(":")[0] for d in device_types} - {"cpu"}
    return sorted(t for t in types if not inductor_has_codegen(t))


def inductor_has_codegen(device_type: str) -> bool:
    """Does Inductor have a code generator (a registered scheduling) for ``device_type``? False for a
    PrivateUse1 device whose backend registers none (tracecheck's emulated NPU)."""
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration

    init_backend_registration()
    return get_scheduling_for_device(device_type) is not None


def privateuse1_backend_name() -> str:
    """The name of the PrivateUse1 device: ``privateuseone`` until a backend renames it (torch_npu: ``npu``)."""
    return torch._C._get_privateuse1_backend_name()


def setup_privateuse1_backend(name: str, module: Any) -> None:
    """Rename PrivateUse1 to ``name`` and give it a device guard, hooks and ``torch.<name>`` = ``module`` from Python
    (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, experimental on 2.13 and 2.14)."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(name, backend_module=module)


def extensions_root() -> str:
    """Where ``torch.utils.cpp_extension`` builds extensions: ``$TORCH_EXTENSIONS_DIR`` or its per-Python default."""
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return root or os.path.dirname(cpp_extension._get_build_directory("tracecheck", verbose=False))


def op_call_types() -> tuple[type, type]:
    """``OpOverload`` (``torch.ops.ns.op.default``, a ``custom_op`` object's call) and ``OpOverloadPacket``
    (``torch.ops.ns.op``): their ``__call__`` runs a dispatcher op called from Python (2.13, 2.14)."""
    return torch._ops.OpOverload, torch._ops.OpOverloadPacket


def packet_overload(qualname: str, args: Any, kwargs: Any) -> str | None:
    """The overload the dispatcher picks for ``torch.ops.ns.op(*args, **kwargs)``, or None where none fits."""
    try:
        return str(torch._C._jit_resolve_packet(qualname, *args, **kwargs)) or "default"
    except RuntimeError:
        return None


def functorch_transforms_active() -> bool:
    """Is a torch.func transform (vmap, grad, jvp) running: its tensors are functorch's wrappers."""
    return bool(torch._C._are_functorch_transforms_active())


@contextlib.contextmanager
def user_modes_off() -> Iterator[None]:
    """The dispatch modes popped and ``__torch_function__`` off inside the block: the user's modes do not see it."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield


def dtype_abbr(dtype: Any) -> str:
    """``f32``, ``bf16``, ``i64``, ``b8``: the short dtype names torch prints in graphs."""
    from torch.utils._dtype_abbrs import dtype_abbrs

    return str(dtype_abbrs.get(dtype) or str(dtype).removeprefix("torch."))
