"""Runs tasks in isolated processes, ``jobs`` at a time, with a per-task timeout.

Processes come from a multiprocessing fork server that has already imported torch and the compiler stack
(tracecheck/isolate/preload.py): each task is a fresh fork (fresh Dynamo counters, caches, warn-once state and op
registry) without paying the ~5 s import again. A task marked ``serve`` runs as a template process (template.py:
it imports the model file; each probe is called in a child of its own, never in it) and may stay up once its result
is in; tasks naming that template are forked from it, or from the child that called their probe (``Task.probe``), so
the file's imports load once, a probe's first call is made once, and no probe sees another's state. A child that
dies (signal, ``sys.exit``, OOM kill) or overruns its timeout becomes an outcome like any other; the others are
unaffected.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator, Protocol, Union

from . import protocol, worker
from .deadline import Deadline
from .template_protocol import Exit, Fork, FromTemplate, Launch, Pid, Ready, Release, ToTemplate
from ..model.reportio import Json
from ..model.tasks import ProcessTask


@dataclass
class Task:
    key: Any
    #: what the process runs (model/tasks.py: a frozen record whose ``run`` it calls)
    work: ProcessTask
    timeout_s: float
    #: the process runs as a template (``template.serve``: a discovery task) and, when it can and its task asks,
    #: stays up once its result is written (``Outcome.template``)
    serve: bool = False
    #: fork the task from this template; from the fork server when None or when the template is gone
    template: "Template | None" = None
    #: fork it from this probe's template (a child of ``template`` that called the probe: ``Template.probes``), else
    #: from ``template``
    probe: str | None = None


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
    #: forked from a template (or a probe's template) that died before this process's exit (tracecheck's fault)
    template_died: bool = False
    #: a ``serve`` task's process, up and ready to fork; None when it could not serve (``why_not_template``)
    template: "Template | None" = None
    why_not_template: str | None = None
    #: the deadline it ran under (``Runner.run``'s ``deadline``; the task's ``timeout_s`` by default)
    limit: Deadline | None = None
    #: CPU seconds its process group used (None: not measurable here), what a deadline counts (``_busy``)
    cpu_seconds: float | None = None

    @property
    def died(self) -> str | None:
        """Human-readable cause of death, or None."""
        if self.timed_out:
            limit = self.limit or _cap(self.task)
            if self.cpu_seconds is not None and self.seconds >= wall_cap(limit.seconds) \
                    and self.cpu_seconds < limit.seconds:
                return (f"was killed after {self.seconds:.0f} s of wall-clock time in which it used "
                        f"{self.cpu_seconds:.0f} s of CPU: waiting, not computing (a deadlock, a sleep, a lost "
                        f"subprocess, or one started in a new session, whose CPU time is not the stage's?); a stage "
                        f"may wait {WALL_FACTOR:g}x its deadline ({limit.why})")
            if self.cpu_seconds is None:  # no /proc: the clock is the measure
                return f"was killed after {limit.why}" if limit.is_cap else \
                    f"was killed after {self.seconds:.0f} s, over {limit.why}"
            used = f"{min(self.seconds, self.cpu_seconds):.0f} s of CPU time ({self.seconds:.0f} s on the clock)"
            return f"was killed after {limit.why} ({used})" if limit.is_cap else \
                f"was killed after {used}, over {limit.why}"
        if self.message is not None:
            return None
        code = self.exitcode
        if self.setup_failed:
            return ("tracecheck could not set up the stage process (its run folder was removed?); this is not "
                    "the probe's fault")
        if self.template_died:
            return ("was lost with its template process (the model file's imported copy, or its probe's, killed or "
                    "out of memory?); rerun with --fresh-imports")
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"process killed by {name}"
        return f"process exited with code {code} without a result (sys.exit or os._exit in the probe?)"

    def checked(self, what: str) -> Json:
        """The task's result, or the error a caller reports: the process died running user code, or the worker
        said the input was bad -> UsageError (exit 2); tracecheck's own bug inside the worker -> RuntimeError."""
        from ..model.exitcodes import UsageError

        msg = self.message
        if msg is None:
            raise UsageError(f"{what} {self.died}", self.log_tail)
        if isinstance(msg, protocol.UsageErrorMessage):
            raise UsageError(msg.message, msg.detail)
        if isinstance(msg, protocol.InternalErrorMessage):
            lines = msg.traceback.strip().splitlines() or [""]
            raise RuntimeError(f"{what} {lines[-1]}\n{msg.traceback}")  # the cause on the first line
        return msg.value


#: the resource tracker's "There appear to be N leaked semaphore objects" (a PYTHONWARNINGS filter)
_TRACKER_WARNING = "ignore:resource_tracker:UserWarning"


def _context(warm_compile: bool) -> ForkServerContext | SpawnContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tracecheck.isolate.preload"])
    # The server is a `python -c` interpreter: the current directory comes first on its sys.path, and Python 3.11
    # ignores the sys_path multiprocessing hands it. A ./tracecheck/ folder (a clone, a checkout) would then stand
    # in for the installed tracecheck in every stage process. PYTHONSAFEPATH keeps the directory off.
    # The server's preload compiles once (warmup.warm_compile), worth it only when a stage compiles; the variable
    # is also the user's (=0: no warm-up, for A/B timing). The server starts once per tracecheck process.
    env = {} if warm_compile or worker.WARM_COMPILE_VAR in os.environ else {worker.WARM_COMPILE_VAR: "0"}
    if "PYTHONSAFEPATH" not in os.environ:
        env["PYTHONSAFEPATH"] = "1"
    env[worker.FORK_SERVER_VAR] = "1"  # preload.py: the server's own exit
    # The resource tracker (started here, with the server) warns at exit of semaphores a stage process made and
    # never released: every stage process killed on Ctrl-C or a timeout leaves some. The tracker frees them either
    # way; the warning is noise to a user, so its interpreter (and only that message) is told to ignore it. A user's
    # own PYTHONWARNINGS is left as it is (the variables set here are removed again, from this process and the
    # stage processes).
    if "PYTHONWARNINGS" not in os.environ:
        env["PYTHONWARNINGS"] = _TRACKER_WARNING
    if env:
        from multiprocessing import forkserver

        os.environ.update(env, **{worker.SERVER_ENV_MARK: ",".join(env)})  # the stage processes drop these
        env[worker.SERVER_ENV_MARK] = ""
        try:
            forkserver.ensure_running()
        finally:
            for name in env:
                del os.environ[name]
    return ctx


class Template:
    """The runner's side of a template process (template.py): ask it to fork a task, hear when those exit."""

    def __init__(self, proc: BaseProcess, conn: Connection[ToTemplate, FromTemplate],
                 probes: tuple[str, ...] = ()) -> None:
        self.proc, self.conn = proc, conn
        #: the probes with a template of their own, a child of this one (``Task.probe``)
        self.probes = frozenset(probes)
        self.exits: dict[int, int | None] = {}  # pid -> exit code, as the template reported them (None: lost)
        self.alive = True

    def fork(self, launch: Launch, probe: str | None = None) -> int | None:
        """The pid of a new process running ``launch`` (forked from ``probe``'s template when it has one); None if
        the template could not fork (the caller starts the task from the fork server)."""
        if not self.alive:
            return None
        try:
            self.conn.send(Fork(probe, launch))
            while self.conn.poll(30):
                msg = self.conn.recv()
                if isinstance(msg, Pid):
                    return msg.pid
                self._note(msg)
        except (OSError, EOFError):
            pass
        self.alive = False  # gone or stuck; its connection stays open until close(): others may wait on it
        return None

    def release(self, probe: str) -> None:
        """No task of this run forks from the probe's template any more: it may end."""
        try:
            if self.alive:
                self.conn.send(Release(probe))
        except OSError:
            self.alive = False

    def drain(self) -> None:
        """Read what the template reported so far (exits), without blocking."""
        try:
            while self.alive and self.conn.poll():
                self._note(self.conn.recv())
        except (OSError, EOFError):
            self.alive = False  # died: what it forked is orphaned; the runner kills those by process group

    def _note(self, msg: FromTemplate) -> None:
        if isinstance(msg, Exit):
            self.exits[msg.pid] = msg.exitcode

    def close(self) -> None:
        """Stop the template (its running stage processes are the runner's to kill)."""
        self.alive = False
        try:
            self.conn.close()
        except OSError:
            pass
        self.proc.join(timeout=2)
        if self.proc.exitcode is None:
            _kill_group(self.proc)
        self.proc.join()


#: what a spawned template's end reads as, had it no ``Ready`` of its own to send (it died first)
_ENDED = Ready("the process ended")


class _Spawned:
    """A task process from the fork server. ``serve``: it reports ``Ready`` on ``conn``, after which it is done
    (stays up as a template, or exits)."""

    def __init__(self, proc: BaseProcess, conn: Connection[ToTemplate, FromTemplate] | None = None) -> None:
        if proc.pid is None:
            raise RuntimeError("a task process that was not started")
        self.proc, self.conn, self.pid = proc, conn, proc.pid
        self.ready: Ready | None = None
        self.waitable: Connection[ToTemplate, FromTemplate] | int = conn if conn is not None else proc.sentinel

    def done(self) -> bool:
        if self.conn is None or self.ready is not None:
            return self.proc.exitcode is not None
        try:
            if self.conn.poll():
                msg = self.conn.recv()
                self.ready = msg if isinstance(msg, Ready) else _ENDED  # (its first message is its Ready)
                return True
        except (OSError, EOFError):
            self.ready = _ENDED
        return self.ready is not None or self.proc.exitcode is not None

    def kill(self) -> None:
        if self.proc.exitcode is None:
            self.proc.kill()

    def serving(self) -> bool:
        return self.ready is not None and self.ready.why_not is None

    def finish(self, timed_out: bool) -> int | None:
        if self.serving() and not timed_out:
            return None  # the template lives on
        self.proc.join(timeout=0 if timed_out else 5)
        _kill_group(self)  # also reaps what the probe spawned into its group and left running
        self.proc.join()
        if self.conn is not None:
            self.conn.close()
        return self.proc.exitcode


class _Forked:
    """A task process forked from a template: the template is its parent and reports its exit."""

    def __init__(self, template: Template, pid: int) -> None:
        self.template, self.pid = template, pid
        self.waitable: Connection[ToTemplate, FromTemplate] | int = template.conn

    def kill(self) -> None:
        self.template.drain()
        if self.template.alive and self.pid not in self.template.exits:  # else the pid may be reused
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def done(self) -> bool:
        self.template.drain()
        return self.pid in self.template.exits or not self.template.alive

    def finish(self, timed_out: bool) -> int | None:
        _kill_group(self)  # also what the probe spawned into its group
        deadline = time.monotonic() + 5
        while self.template.alive and self.pid not in self.template.exits and time.monotonic() < deadline:
            self.template.conn.poll(0.05)
            self.template.drain()
        return self.template.exits.pop(self.pid, None)


#: a running task's process: spawned by the fork server, or forked by a template
_Handle = Union[_Spawned, _Forked]
#: a running task: its handle, when it started (``time.monotonic``), its result and log files
_Running = tuple[Task, _Handle, float, str, str]


def _no_deadline(key: Any) -> Deadline | None:
    return None  # the task's own timeout_s


class Runner:
    """Run ``Task``s ``jobs`` at a time; ``run`` yields ``Outcome``s as they finish."""

    def __init__(self, jobs: int, warm_compile: bool = True) -> None:
        self.jobs = max(1, jobs)
        self.threads = max(1, (os.cpu_count() or 1) // self.jobs)  # torch threads per stage: no oversubscription
        self._ctx = _context(warm_compile)
        self._tmp = tempfile.TemporaryDirectory(prefix="tracecheck-")
        self._counter = 0
        self._templates: list[Template] = []

    def close(self) -> None:
        for t in self._templates:
            t.close()
        self._tmp.cleanup()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, tasks: list[Task], on_start: Callable[[Task], None] | None = None,
            deadline: Callable[[Any], Deadline | None] | None = None) -> Iterator[Outcome]:
        """Yield an Outcome per task as it finishes. ``deadline(task.key)``: how long a task may run, asked again
        while it runs (isolate/deadline.py), never more than the task's ``timeout_s``, which is the limit without it.
        On any exit (an exception, Ctrl-C, SIGTERM/SIGHUP turned into KeyboardInterrupt by the CLI, or the caller
        abandoning the iterator) every running task's process group is killed, so no probe keeps running behind
        tracecheck. A template is stopped once no task of this run needs it any more."""
        running: dict[int, _Running] = {}
        users: dict[tuple[int, str | None], int] = {}  # (template, None: any task / a probe's template) -> tasks left
        templates = {id(t.template): t.template for t in tasks if t.template is not None}
        for t in tasks:
            if t.template is not None:
                for key in {(id(t.template), None), (id(t.template), t.probe)}:
                    users[key] = users.get(key, 0) + 1
        for tpl in templates.values():  # probes this run has no task for (a shard, say): their templates may go
            for probe in sorted(tpl.probes):
                if (id(tpl), probe) not in users:
                    tpl.release(probe)
        try:
            for outcome in self._schedule(deque(tasks), running, on_start, deadline or _no_deadline):
                parent, probe_name = outcome.task.template, outcome.task.probe
                if parent is not None:
                    for key in {(id(parent), None), (id(parent), probe_name)}:
                        users[key] -= 1
                    if users[id(parent), None] == 0:
                        parent.close()
                    elif probe_name is not None and users[id(parent), probe_name] == 0:
                        parent.release(probe_name)
                yield outcome
        finally:
            for _, handle, _, _, _ in running.values():
                _kill_group(handle)
                handle.finish(True)

    def _start(self, task: Task, result_path: str, log_path: str) -> _Handle:
        args = (task.work, result_path, log_path, self.threads)
        if task.template is not None:
            pid = task.template.fork(Launch(*args), task.probe)
            if pid is not None:
                return _Forked(task.template, pid)
        if task.serve:
            from . import template

            mine: Connection[ToTemplate, FromTemplate]
            mine, theirs = self._ctx.Pipe()
            proc = self._ctx.Process(target=template.serve, args=(*args, theirs), daemon=True)
            proc.start()
            theirs.close()
            return _Spawned(proc, mine)
        proc = self._ctx.Process(target=worker.child_main, args=args, daemon=True)
        proc.start()
        return _Spawned(proc)

    def _schedule(self, pending: deque[Task], running: dict[int, _Running], on_start: Callable[[Task], None] | None,
                  deadline: Callable[[Any], Deadline | None]) -> Iterator[Outcome]:
        def limit(task: Task) -> Deadline:
            given = deadline(task.key)
            return given if given is not None and given.seconds <= task.timeout_s else _cap(task)

        while pending or running:
            while pending and len(running) < self.jobs:
                task = pending.popleft()
                self._counter += 1  # unique over the Runner's life: discovery and stage files never collide
                # a run folder under /tmp can be removed by tmp cleaners mid-run: recreate it, don't blame probes
                os.makedirs(self._tmp.name, exist_ok=True)
                result_path = os.path.join(self._tmp.name, f"{self._counter}.json")
                log_path = os.path.join(self._tmp.name, f"{self._counter}.log")
                handle = self._start(task, result_path, log_path)
                running[self._counter] = (task, handle, time.monotonic(), result_path, log_path)
                if on_start:
                    on_start(task)
            now = time.monotonic()
            limits = {key: limit(t) for key, (t, _, _, _, _) in running.items()}
            cpu, _ = _usage_by_group(set())
            busy = {key: _busy(now - start, cpu, h.pid) for key, (_, h, start, _, _) in running.items()}
            # the soonest a deadline can come: CPU time grows no faster than the clock (one thread each)
            next_deadline = now + min(min(limits[key].seconds - busy[key],
                                          start + wall_cap(limits[key].seconds) - now)
                                      for key, (_, _, start, _, _) in running.items())
            # a forked task whose template died is done now: do not wait on that template's connection
            orphaned = any(isinstance(h, _Forked) and not h.template.alive for _, h, _, _, _ in running.values())
            waitables = list({id(h.waitable): h.waitable for _, h, _, _, _ in running.values()
                              if not (isinstance(h, _Forked) and not h.template.alive)}.values())
            wait(waitables, timeout=0 if orphaned else max(0.0, min(next_deadline - now, 1.0)))
            now = time.monotonic()
            cpu, queued = _usage_by_group({h.pid for _, h, _, _, _ in running.values()})
            for key in list(running):
                task, handle, start, result_path, log_path = running[key]
                timed_out = False
                used = cpu.get(handle.pid)
                if not handle.done():
                    # the clock's cap counts the time the stage neither computed nor waited for a CPU: a machine
                    # loaded past 3x its cores starves a computing stage, which is not a hang
                    if _busy(now - start, cpu, handle.pid) < limits[key].seconds \
                            and now - start - queued.get(handle.pid, 0.0) < wall_cap(limits[key].seconds):
                        continue
                    timed_out = True
                    _kill_group(handle)
                exitcode = handle.finish(timed_out)
                del running[key]
                outcome = Outcome(task, None if timed_out else protocol.read_message(result_path), exitcode, timed_out,
                                  now - start, _tail(log_path), setup_failed=not os.path.exists(log_path),
                                  template_died=isinstance(handle, _Forked) and exitcode is None,
                                  limit=limits[key], cpu_seconds=used)
                if isinstance(handle, _Spawned) and task.serve and not timed_out:
                    if handle.serving() and handle.ready is not None and handle.conn is not None:
                        outcome.template = Template(handle.proc, handle.conn, handle.ready.probes)
                        self._templates.append(outcome.template)
                    else:
                        outcome.why_not_template = handle.ready.why_not if handle.ready is not None \
                            and handle.ready.why_not else _ENDED.why_not
                yield outcome


#: a stage that uses little CPU (it waits: a deadlock, a sleep) is killed after this many times its deadline on the
#: clock; one that computes, when its CPU time reaches the deadline (``_busy``)
WALL_FACTOR = 3.0


def wall_cap(seconds: float) -> float:
    return WALL_FACTOR * seconds


def _busy(wall: float, cpu: dict[int, float], pid: int) -> float:
    """What a deadline counts of a task's run: the CPU seconds its process group used, as ``ulimit -t`` counts them,
    so that a busy machine, which slows a stage, does not fail it; never more than the wall-clock seconds (a stage
    with several threads); the wall-clock seconds where CPU time cannot be read (no /proc)."""
    used = cpu.get(pid)
    return wall if used is None else min(wall, used)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100


def _cpu_by_group() -> dict[int, float]:
    """Process group -> CPU seconds its processes used (user + system, and their reaped children's), from
    ``/proc/<pid>/stat``: each task process leads its own group (it called setpgrp), so the group is the stage and
    what it spawned (a compiler). Empty where /proc is not there."""
    return _usage_by_group()[0]


def _usage_by_group(groups: set[int] | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """Per process group: the CPU seconds it used (``_cpu_by_group``), and the seconds its threads waited for a CPU
    while runnable (each ``/proc/<pid>/task/<tid>/schedstat``'s run-queue wait, for the ``groups`` asked): a stage
    starved by a busy machine waits there, whichever thread computes; a hung one does not."""
    cpu: dict[int, float] = {}
    queued: dict[int, float] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return cpu, queued
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            pgrp, ticks = int(fields[2]), sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        cpu[pgrp] = cpu.get(pgrp, 0.0) + ticks / _TICK
        if groups is not None and pgrp not in groups:
            continue
        try:
            tids = os.listdir(f"/proc/{name}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{name}/task/{tid}/schedstat", "rb") as f:
                    queued[pgrp] = queued.get(pgrp, 0.0) + int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                pass  # gone, or no schedstats (a kernel without them): the clock alone
    return cpu, queued


def _cap(task: Task) -> Deadline:
    return Deadline(task.timeout_s, f"the {task.timeout_s:g} s timeout", True)


class _Process(Protocol):
    """What ``_kill_group`` needs of a task process: its pid, which leads its group, and how to kill it alone."""

    @property
    def pid(self) -> int | None: ...
    def kill(self) -> None: ...


def _kill_group(proc: _Process) -> None:
    """SIGKILL a task process's group: a multiprocessing Process, or a handle (``_Spawned``, ``_Forked``)."""
    if proc.pid is None:  # never started: no group
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child called setpgrp(): pgid == pid
    except (ProcessLookupError, PermissionError):
        proc.kill()  # not in its own group yet: the process alone


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
