"""Runs tasks in isolated processes, ``jobs`` at a time, with a per-task timeout.

Processes come from a multiprocessing fork server that has already imported torch and the compiler stack
(tracecheck/preload.py): each task is a fresh fork (fresh Dynamo counters, caches, warn-once state and op
registry) without paying the ~5 s import again. A child that dies (signal, ``sys.exit``, OOM kill) or
overruns its timeout becomes an outcome like any other; the others are unaffected.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator

from . import protocol, worker


@dataclass
class Task:
    key: Any
    payload: dict[str, Any]
    timeout_s: float


@dataclass
class Outcome:
    """What came back from one task process. ``message`` is None when the process died or timed out."""

    task: Task
    message: protocol.Message | None
    exitcode: int | None
    timed_out: bool
    seconds: float
    log_tail: str
    #: the child never created its log file: tracecheck's own set-up failed, not the probe
    setup_failed: bool = False

    @property
    def died(self) -> str | None:
        """Human-readable cause of death, or None."""
        if self.timed_out:
            return f"killed after the {self.task.timeout_s:g} s timeout"
        if self.message is not None:
            return None
        code = self.exitcode
        if self.setup_failed:
            return ("tracecheck could not set up the stage process (its run folder was removed?); this is not "
                    "the probe's fault")
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"process killed by {name}"
        return f"process exited with code {code} without a result (sys.exit or os._exit in the probe?)"

    def checked(self, what: str) -> dict[str, Any]:
        """The task's result, or the error a caller reports: the process died running user code, or the worker
        said the input was bad -> UsageError (exit 2); tracecheck's own bug inside the worker -> RuntimeError."""
        from .exitcodes import UsageError

        msg = self.message
        if msg is None:
            raise UsageError(f"{what} {self.died}", self.log_tail)
        if isinstance(msg, protocol.UsageErrorMessage):
            raise UsageError(msg.message, msg.detail)
        if isinstance(msg, protocol.InternalErrorMessage):
            lines = msg.traceback.strip().splitlines() or [""]
            raise RuntimeError(f"{what} {lines[-1]}\n{msg.traceback}")  # the cause on the first line
        return msg.value


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tracecheck.preload"])
    # The server is a `python -c` interpreter: the current directory comes first on its sys.path, and Python 3.11
    # ignores the sys_path multiprocessing hands it. A ./tracecheck/ folder (a clone, a checkout) would then stand
    # in for the installed tracecheck in every stage process. PYTHONSAFEPATH keeps the directory off.
    if "PYTHONSAFEPATH" not in os.environ:
        from multiprocessing import forkserver

        os.environ["PYTHONSAFEPATH"] = os.environ[worker.SAFEPATH_MARK] = "1"
        try:
            forkserver.ensure_running()
        finally:
            del os.environ["PYTHONSAFEPATH"], os.environ[worker.SAFEPATH_MARK]
    return ctx


class Runner:
    """Run ``Task``s ``jobs`` at a time; ``run`` yields ``Outcome``s as they finish."""

    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)
        self.threads = max(1, (os.cpu_count() or 1) // self.jobs)  # torch threads per stage: no oversubscription
        self._ctx = _context()
        self._tmp = tempfile.TemporaryDirectory(prefix="tracecheck-")
        self._counter = 0

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, tasks: list[Task], on_start: Callable[[Task], None] | None = None) -> Iterator[Outcome]:
        """Yield an Outcome per task as it finishes. On any exit (an exception, Ctrl-C, SIGTERM/SIGHUP turned
        into KeyboardInterrupt by the CLI, or the caller abandoning the iterator) every running task's process group is
        killed, so no probe keeps running behind tracecheck."""
        running: dict[int, tuple[Task, Any, float, str, str]] = {}
        try:
            yield from self._schedule(deque(tasks), running, on_start)
        finally:
            for _, proc, _, _, _ in running.values():
                _kill_group(proc)
                proc.join(timeout=5)

    def _schedule(self, pending: deque, running: dict, on_start: Callable[[Task], None] | None) -> Iterator[Outcome]:
        while pending or running:
            while pending and len(running) < self.jobs:
                task = pending.popleft()
                self._counter += 1  # unique over the Runner's life: discovery and stage files never collide
                # a run folder under /tmp can be removed by tmp cleaners mid-run: recreate it, don't blame probes
                os.makedirs(self._tmp.name, exist_ok=True)
                result_path = os.path.join(self._tmp.name, f"{self._counter}.json")
                log_path = os.path.join(self._tmp.name, f"{self._counter}.log")
                proc = self._ctx.Process(target=worker.child_main,
                                         args=(task.payload, result_path, log_path, self.threads), daemon=True)
                proc.start()
                running[proc.sentinel] = (task, proc, time.monotonic(), result_path, log_path)
                if on_start:
                    on_start(task)
            now = time.monotonic()
            next_deadline = min(start + t.timeout_s for t, _, start, _, _ in running.values())
            ready = wait(list(running), timeout=max(0.0, min(next_deadline - now, 1.0)))
            now = time.monotonic()
            for sentinel in list(running):
                task, proc, start, result_path, log_path = running[sentinel]
                timed_out = False
                if sentinel not in ready:
                    if now - start < task.timeout_s:
                        continue
                    timed_out = True
                proc.join(timeout=0 if timed_out else None)
                _kill_group(proc)  # also reaps what the probe spawned into its group and left running
                proc.join()
                del running[sentinel]
                yield Outcome(task, None if timed_out else _read_message(result_path), proc.exitcode, timed_out,
                              now - start, _tail(log_path), setup_failed=not os.path.exists(log_path))


def _kill_group(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child called setpgrp(): pgid == pid
    except (ProcessLookupError, PermissionError):
        if proc.exitcode is None:
            proc.kill()


def _read_message(path: str) -> protocol.Message | None:
    """The task's message; None when the process wrote none (it died) or a torn one."""
    import json

    try:
        with open(path) as f:
            return protocol.from_json(json.load(f))
    except (OSError, ValueError):
        return None


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
