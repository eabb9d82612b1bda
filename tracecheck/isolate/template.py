"""A template process: one model file imported once; the file's stage processes are forked from it.

The runner starts it like any task process (from the fork server, torch preloaded) with the file's discovery
task. It imports the file (``survey.load_file``) and nothing more: the probes are called once each
(``survey.call_probes``) in a forked child of it, which writes the discovery result and exits. Then the
template stays up, and each (probe, stage) of the file is an ``os.fork()`` of it: ``transformers``, a C++
extension and the rest of the file's imports load once per file, not once per stage. A stage process thus
inherits what a fresh process that imported the file has (the file's module-level state, torch and the compiler
stack as the fork server left them) and nothing a probe did: no probe's factory, forward or compile ever ran in
the template, so a cache one probe fills (a library's first call) is cold for every other probe, as in a fresh
process. The child costs one fork per file.

Forking is unsafe once a device runtime is initialised (CUDA, an NPU) or threads run: a template whose file did
that at import calls the probes itself, says so and exits, and the runner starts that file's stages the plain
way (from the fork server, each importing the file afresh). A child that dies calling the probes (a segfault,
``sys.exit``) takes the template with it, the same way: the runner reports the loading process's death.

Messages on ``conn``: template -> runner ``("ready", why_not | None)`` once, then ``("pid", pid)`` answering
each ``("fork", task, result_path, log_path, threads)``, and ``("exit", pid, exitcode)`` when a forked
stage process ends (the runner is not its parent, so it cannot wait for it).
"""
from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Callable

from .. import environment
from . import protocol, worker

if TYPE_CHECKING:
    from ..collect.survey import SurveyTask

#: how often the template looks for stage processes that ended (the runner learns of an exit this late at most)
POLL_S = 0.02


def serve(task: "SurveyTask", result_path: str, log_path: str, threads: int, conn: Connection) -> None:
    """Run the discovery ``task`` like any task process, its probes in a forked child (no probe's code runs in
    this process), then fork the file's stage processes on request.

    Discovery runs with one torch thread, whatever ``threads`` says: an OpenMP parallel region run here with
    more threads (importing a model can run one) leaves libgomp's pool behind, and a forked child's first
    parallel region would hang. Each stage process sets its own thread count."""
    from ..collect import survey

    before = _native_threads()
    worker.enter(log_path)
    loaded: list[survey.Loaded] = []

    def load() -> dict[str, Any]:
        worker.set_up(task, 1)
        loaded.append(survey.load_file(task))
        return loaded[0].result or {}

    message = worker.perform(load)
    why_not = None
    if isinstance(message, protocol.Result) and loaded[0].result is None:  # imported: its probes are to call
        device = environment.initialised_device()
        if device:
            why_not = f"the file initialised {device} at import; forking would break it"
        elif _native_threads() > before:
            why_not = "the file started threads while loading; forking would not copy them"
        message = _call_probes(loaded[0], result_path, conn, why_not is None)
        if message is None:  # out of processes or memory: called here, so this process forks no stage
            why_not = "the template process could not fork"
            message = worker.perform(lambda: survey.call_probes(loaded[0]))
    if not isinstance(message, protocol.Result):
        why_not = why_not or "the file did not load"  # a more specific reason (could not fork) is kept
    if not os.path.exists(result_path):  # the forked child wrote its own
        worker.write_message(message, result_path)
    conn.send(("ready", why_not))
    if why_not is None:
        _fork_on_request(conn)


def _call_probes(loaded: Any, result_path: str, conn: Connection, fork: bool) -> protocol.Message | None:
    """The discovery result of the imported file: its probes called in a forked child that writes it to
    ``result_path`` (``fork``), else here. None when the fork failed. A child that died without a result ends
    this process the same way (its exit code, its signal)."""
    from ..collect import survey

    if not fork:
        return worker.perform(lambda: survey.call_probes(loaded))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:  # stays in this process group: a timeout kills it with the template
        _child(conn, lambda: worker.write_message(worker.perform(lambda: survey.call_probes(loaded)), result_path))

    _, status = os.waitpid(pid, 0)
    message = protocol.read_message(result_path)
    if message is None:
        _exit_like(os.waitstatus_to_exitcode(status))
    return message


def _exit_like(code: int) -> None:
    """End this process as the child that called the probes ended: killed by the same signal, or the same code."""
    if code < 0:
        import faulthandler

        faulthandler.disable()  # the child's stack is in the log; this process's would only mislead
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), -code)
        code = 1  # a signal that does not kill: exit anyway
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
                    _child(conn, lambda: worker.child_main(*request[1:]))
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


def _child(conn: Connection, body: Callable[[], Any]) -> None:
    """A forked process running ``body`` (a stage: ``worker.child_main``; the discovery's probe calls): exit
    codes as multiprocessing gives them (``sys.exit(n)`` in a probe -> n, ``sys.exit("message")`` -> the message
    on stderr and 1). Never returns into the template's code."""
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
        body()
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
