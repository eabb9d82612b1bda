"""A template process: one model file imported once; the file's stage processes are forked from it.

The runner starts it like any task process (from the fork server, torch preloaded) with the file's discovery
task, which imports the file and calls each probe once. After writing that result it stays up, and each
(probe, stage) of the file is an ``os.fork()`` of it: ``transformers``, a C++ extension and the rest of the
file's imports load once per file, not once per stage. The template itself never runs a forward or compiles.

Forking is unsafe once a device runtime is initialised (CUDA, an NPU): a template whose file did that, at
import or while building a probe, says so and exits, and the runner starts that file's stages the plain way.

Messages on ``conn``: template -> runner ``("ready", why_not | None)`` once, then ``("pid", pid)`` answering
each ``("fork", task, result_path, log_path, threads)``, and ``("exit", pid, exitcode)`` when a forked
stage process ends (the runner is not its parent, so it cannot wait for it).
"""
from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection, wait
from typing import Any

from .. import environment
from . import protocol, worker

#: how often the template looks for stage processes that ended (the runner learns of an exit this late at most)
POLL_S = 0.02


def serve(task: dict[str, Any], result_path: str, log_path: str, threads: int, conn: Connection) -> None:
    """Run the discovery ``task`` like any task process, then fork the file's stage processes on request.

    Discovery runs with one torch thread, whatever ``threads`` says: an OpenMP parallel region run here with
    more threads (building a model can run one) leaves libgomp's pool behind, and a forked child's first
    parallel region would hang. Each stage process sets its own thread count."""
    before = _native_threads()
    message = worker.child_main(task, result_path, log_path, 1)
    why_not = None
    if not isinstance(message, protocol.Result):
        why_not = "the file did not load"
    else:
        device = environment.initialised_device()
        if device:
            why_not = f"the file initialised {device} at import or while building a probe; forking would break it"
        elif _native_threads() > before:
            why_not = "the file started threads while loading or building a probe; forking would not copy them"
    conn.send(("ready", why_not))
    if why_not is None:
        _fork_on_request(conn)


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _fork_on_request(conn: Connection) -> None:
    children: set[int] = set()
    try:
        while True:
            if wait([conn], timeout=POLL_S):
                try:
                    request = conn.recv()
                except EOFError:
                    return  # the runner is gone
                if request[0] != "fork":
                    return
                try:
                    pid = os.fork()
                except OSError:  # out of processes or memory: the runner starts this one from the fork server
                    conn.send(("pid", None))
                    continue
                if pid == 0:
                    _child(conn, *request[1:])
                children.add(pid)
                conn.send(("pid", pid))
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                    conn.send(("exit", pid, os.waitstatus_to_exitcode(status)))
    finally:
        for pid in children:  # the runner went away mid-run: take the stage processes with us
            for kill in (os.killpg, os.kill):  # os.kill: a child that has not called setpgrp() yet
                try:
                    kill(pid, signal.SIGKILL)
                    break
                except OSError:
                    pass
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


def _child(conn: Connection, task: dict[str, Any], result_path: str, log_path: str, threads: int) -> None:
    """The forked stage process: exit codes as multiprocessing gives them (``sys.exit(n)`` in a probe -> n,
    ``sys.exit("message")`` -> the message on stderr and 1). Never returns into the template's loop."""
    code = 1
    try:
        from multiprocessing import process, util

        conn.close()  # only the template talks to the runner; the runner sees EOF when the template dies
        # what multiprocessing does around a process it forks: the template's finalizers and children are
        # not ours; ours (semaphores torch creates, say) must run at exit, or the resource tracker reports
        # them leaked
        util._finalizer_registry.clear()
        util._run_after_forkers()
        process._children = set()
        worker.child_main(task, result_path, log_path, threads)
        code = 0
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            sys.stderr.write(f"{e.code}\n")
    finally:
        try:
            from multiprocessing import util

            util._exit_function()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
