"""What runs inside one isolated process: discovering a file's probes, or one (probe, stage).

The parent (runner.py) starts ``child_main`` in a fresh process per task; the child writes one JSON result
file and exits. Probe code may print, segfault, hang or call ``sys.exit``: its stdout/stderr go to a log file
the parent tails, and a missing result file is how the parent learns the child died.
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import Any, Callable

from .exitcodes import UsageError
from .probe import Case, ProbeShapeError, to_case

#: set with PYTHONSAFEPATH in the fork server's environment by tracecheck (runner._context), not by the user:
#: stage processes drop both, so a probe's own subprocesses see the user's environment
SAFEPATH_MARK = "TRACECHECK_SET_PYTHONSAFEPATH"


#: Largest file a stage process may write (its log included): a probe printing in a loop must not fill the disk.
MAX_FILE_BYTES = 1 << 30


def child_main(task: dict[str, Any], result_path: str, log_path: str, threads: int) -> None:
    """Entry point of a task process. Writes ``result_path`` (JSON) unless the process dies first."""
    os.setpgrp()  # own process group: the parent can kill whatever the probe spawned on timeout
    if os.environ.pop(SAFEPATH_MARK, None):  # tracecheck's, for the fork server only: not the probe's
        os.environ.pop("PYTHONSAFEPATH", None)
    try:
        _redirect_output(log_path)
    except OSError:
        os._exit(1)  # no log file: the parent knows it was tracecheck's set-up, not the probe
    faulthandler.enable()  # a segfault in the probe leaves its Python stack in the stderr tail
    _limit_file_size()
    try:
        import torch

        torch.set_num_threads(max(1, threads))
        from . import compat

        compat.set_single_compile_thread()
        if task.get("trace_dir"):
            _keep_structured_trace(task["trace_dir"])
        result = handle(task)
    except UsageError as e:
        cause = e.__cause__ or e
        result = {"usage_error": str(e), "detail": "".join(traceback.format_exception(cause))}
    except Exception:
        result = {"internal_error": traceback.format_exc()}
    tmp = result_path + ".tc-tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, default=str)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()


def _keep_structured_trace(trace_dir: str) -> None:
    """Write this process's structured trace (TORCH_TRACE) under ``trace_dir``, for tlparse.

    torch reads TORCH_TRACE once, in ``torch._logging._init_logs()`` at import; this process was forked from a
    server that imported torch without it, so set the variable, drop the trace handler made then, and
    re-run ``_init_logs`` (torch 2.8 - 2.14 keep the handler in ``_internal.LOG_TRACE_HANDLER``).
    """
    from torch._logging import _internal

    os.makedirs(trace_dir, exist_ok=True)
    os.environ["TORCH_TRACE"] = trace_dir
    _internal.LOG_TRACE_HANDLER = None
    _internal._init_logs()


def _limit_file_size() -> None:
    """Past MAX_FILE_BYTES a write fails with EFBIG (an error in the probe) instead of growing the file."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def handle(task: dict[str, Any]) -> dict[str, Any]:
    if task["op"] == "discover":
        return discover_file(task["file"], task.get("select"), task.get("only"),
                             task.get("root") or os.path.dirname(task["file"]))
    if task["op"] == "stage":
        return run_stage(task)
    if task["op"] in ("fix-analyze", "eager-dump", "eager-compare", "directional-check"):
        from .fix import analysis

        return {"fix-analyze": analysis.analyze, "eager-dump": analysis.eager_dump,
                "eager-compare": analysis.eager_compare,
                "directional-check": analysis.directional_check}[task["op"]](task)
    raise ValueError(f"unknown task {task['op']!r}")


def discover_file(path: str, select: str | None, only: str | None = None, root: str | None = None) -> dict[str, Any]:
    """Load one model file; call each selected probe once to check what it returns and what it registers.
    ``-k`` (``select``) matches probe ids relative to ``root`` (discover.rootdir)."""
    from . import capture, discover

    root = root or os.path.dirname(path)

    with capture.OpRegistrationWatch() as watch:
        module = discover.load_module(path)
        file_events = list(watch.events)
        probes = []
        for name, fn in discover.find_probes(module):
            pid = discover.probe_id(path, name, root)
            if not discover.matches(select, pid) or (only and name != only):
                continue
            before = len(watch.events)
            entry: dict[str, Any] = {"name": name}
            required = _required_params(fn)
            if required:
                entry["bad_shape"] = (f"{pid}: a probe takes no arguments, this one "
                                      f"requires {', '.join(required)}")
                probes.append(entry)
                continue
            try:
                to_case(_call_probe(fn))
            except ProbeShapeError as e:
                entry["bad_shape"] = f"{pid}: {e}"
            except Exception as e:
                entry["setup_error"] = capture.error_record(e, "setup")
            entry["registrations"] = file_events + watch.events[before:]
            probes.append(entry)
    return {"probes": probes, "n_candidates": len(discover.find_probes(module))}


def _required_params(fn: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                           p.KEYWORD_ONLY)]


def _call_probe(fn: Callable[[], Any]) -> Any:
    import torch

    torch.manual_seed(0)
    return fn()


def _to_device(case: Case, device: str) -> Case:
    if device == "cpu":
        return case
    import torch
    from torch.utils import _pytree as pytree

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t

    fn = case.fn.to(device) if isinstance(case.fn, torch.nn.Module) else case.fn
    return Case(fn, pytree.tree_map(move, case.args), pytree.tree_map(move, case.kwargs), case.grad)


def run_stage(task: dict[str, Any]) -> dict[str, Any]:
    from . import discover, stages

    module = discover.load_module(task["file"])
    probe_fn = dict(discover.find_probes(module))[task["probe"]]
    device = task.get("device", "cpu")

    def make_case() -> Case:
        return _to_device(to_case(_call_probe(probe_fn)), device)

    stage = task["stage"]
    if stage == "eager":
        return stages.stage_eager(make_case)
    if stage == "explain":
        return stages.stage_explain(make_case)
    if stage in ("aot_eager", "inductor"):
        return stages.stage_compile(make_case, stage)
    if stage == "fullgraph":
        return stages.stage_compile(make_case, "aot_eager", fullgraph=True)
    if stage == "opcheck":
        return stages.stage_opcheck(make_case, device)
    if stage == "compiled_autograd":
        from .compiled_autograd import stage_compiled_autograd

        return stage_compiled_autograd(make_case, steps=int(task.get("steps", 3)),
                                       dynamic=bool(task.get("dynamic", False)))
    raise UsageError(f"unknown stage {stage!r}")
