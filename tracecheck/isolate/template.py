"""A template process: one model file imported once; the file's stage processes are forked from it, or from
the child of it that called their probe once (the probe's template).

The runner starts it like any task process (from the fork server, torch preloaded) with the file's discovery
task. It imports the file (``survey.load_file``) and calls no probe itself: each selected probe is called once
(``survey.call_one``) in a forked child of its own, which sends its discovery entry back. That child then stays up
as the probe's template (the first ``SurveyTask.probe_templates`` that can), remembering what the call warned and
registered (``casemaker.record_first_call``) and dropping the value it returned. One that cannot exits: the call
failed, or left something a fork does not copy or must not inherit (a thread, an initialised device or CUDA's
driver, SIGCHLD ignored, an alarm set), or more than ``MAX_GROWTH`` bytes of memory of its own. Then the template
stays up, and each (probe, stage) of the file is an ``os.fork()`` of the probe's template (``Task.probe``: what the
probe's first call imports and builds once, ``transformers``' lazy modules say, is built once per probe), or of
the file's template when the probe has none: the file's imports load once per file, not once per stage. A stage
process calls the probe for each case it builds, its first included (cheap there: a second call), so whatever a
case holds (a model in shared memory, an open file, a pipe, a subprocess) is its own. It thus inherits what a fresh
process that imported the file and called its own probe once has: no other probe's factory, forward or compile ever
ran where it was forked, so a cache one probe fills is cold for every other probe, as in a fresh process.

Forking is unsafe once a device runtime is initialised (CUDA, an NPU), threads run or SIGCHLD is ignored: a
template whose file did that at import calls the probes itself, says so and exits, and the runner starts that
file's stages the plain way (from the fork server, each importing the file afresh). A child that dies calling its
probe (a segfault, ``sys.exit``) takes the template with it, the same way: the runner reports the loading
process's death.

Messages on ``conn`` (template_protocol.py): template -> runner ``Ready`` once, then ``Pid`` answering each
``Fork``, and ``Exit`` when a forked stage process ends (the runner is not its parent, so it cannot wait for it).
``Release``: no stage of that probe is left, its template may go. A probe's template sends ``Entry`` once, then
speaks the same protocol to the file's template, which passes it on.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Callable, Literal, NoReturn

from .. import machine
from ..model.reportio import Json
from . import protocol, worker
from .template_protocol import Entry, Exit, Fork, FromProbe, FromTemplate, Launch, Pid, Ready, Release, ToTemplate

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..collect.survey import Loaded, ProbeEntry, SurveyTask

    #: a connection a template forks on requests from: the runner's (the file's template) or the file's template's (a
    #: probe's template)
    Requests: TypeAlias = Connection[Pid | Exit, ToTemplate]
    #: the file's template's end of a probe's template's connection
    ToProbe: TypeAlias = Connection[Fork, FromProbe]

#: how often the template looks for stage processes that ended (the runner learns of an exit this late at most)
POLL_S = 0.02
#: how long the file's template waits for a probe's template to answer a fork (less than the runner waits for the
#: file's template: runner.Template.fork)
RELAY_S = 10
#: the most memory (resident bytes) a probe's call may leave in its process for it to stay up as the probe's template,
#: until the file's stages are done (the modules a tiny transformers model's call imports: about 150 MB)
MAX_GROWTH = 512 << 20

#: why a template that was not asked to stay up (``SurveyTask.stay``) does not
NOT_ASKED = "not asked to stay up"

#: the file's template's ends of its connections to the probes' templates: a process forked from it closes them
#: (else a probe's template would not see the file's template close its connection)
_PROBE_ENDS: list[ToProbe] = []


@dataclass
class _ProbeTemplate:
    """The file's template's side of a probe's template: its pid, its connection, the stage processes it forked
    that have not ended."""

    pid: int
    conn: ToProbe
    pids: set[int] = field(default_factory=set)


def serve(task: "SurveyTask", result_path: str, log_path: str, threads: int,
          conn: Connection[FromTemplate, ToTemplate]) -> None:
    """Run the discovery ``task`` like any task process, each probe called in a forked child (no probe's code runs
    in this process), then fork the file's stage processes on request.

    Discovery runs with one torch thread, whatever ``threads`` says: an OpenMP parallel region run here with
    more threads (importing a model can run one) leaves libgomp's pool behind, and a forked child's first
    parallel region would hang. Each stage process sets its own thread count."""
    from ..collect import survey

    before = _native_threads()
    worker.enter(log_path)
    loaded: list[survey.Loaded] = []

    def load() -> Json:  # the file's discovery when it did not import; else a placeholder, replaced once called
        worker.set_up(task, 1)
        loaded.append(survey.load_file(task))
        result = loaded[0].result
        return result.to_json() if result is not None else {}

    message = worker.perform(load)
    why_not = None
    probes: dict[str, _ProbeTemplate] = {}
    if isinstance(message, protocol.Result) and loaded[0].result is None:  # imported: its probes are to call
        device = machine.initialised_device()
        if device:
            why_not = f"the file initialised {device} at import; forking would break it"
        elif _native_threads() > before:
            why_not = "the file started threads while loading; forking would not copy them"
        elif signal.getsignal(signal.SIGCHLD) != signal.SIG_DFL:
            why_not = "the file changed how SIGCHLD is handled; the forked processes' ends could not be waited for"
        most = task.probe_templates if task.stay else 0
        called = None if why_not else _call_probes(loaded[0], conn, probes, most, result_path)
        if called is None:  # not forking, or out of processes or memory: called here, so this process forks none
            why_not = why_not or "the template process could not fork"
            called = worker.perform(lambda: survey.call_probes(loaded[0]).to_json())
        message = called
    if not isinstance(message, protocol.Result):
        why_not = why_not or "the file did not load"  # a more specific reason (could not fork) is kept
    elif not task.stay:
        why_not = why_not or NOT_ASKED
    worker.write_message(message, result_path)
    conn.send(Ready(why_not, tuple(sorted(probes))))
    if why_not is None:
        _fork_on_request(conn, probes)


def _call_probes(loaded: Loaded, conn: Connection[FromTemplate, ToTemplate], probes: dict[str, _ProbeTemplate],
                 most: int, result_path: str) -> protocol.Message | None:
    """The discovery result of the imported file, each probe called in a forked child (``_probe_child``); those that
    stay up as their probe's template (the first ``most`` that can) are put in ``probes``. None when a fork failed
    (none is left up then). A child that died without a result ends this process the same way (its exit code, its
    signal)."""
    from ..collect import survey
    from ..evidence.oprecorder import registered_custom_ops

    entries: list[ProbeEntry] = []
    registered = registered_custom_ops()
    for i, (entry, fn) in enumerate(survey.selected(loaded)):
        if fn is None:
            entries.append(entry)
            continue
        fallback = f"{result_path}.probe{i}"
        sys.stdout.flush()
        sys.stderr.flush()
        mine: ToProbe
        theirs: Connection[FromProbe, Fork]
        try:
            mine, theirs = Pipe()
        except OSError:  # out of file descriptors
            _close(probes)
            return None
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            _close(probes)
            return None
        if pid == 0:  # stays in this process group: a timeout kills it with the template
            mine.close()
            _child(conn, lambda: _probe_child(loaded, entry, fn, theirs, len(probes) < most, fallback))
        theirs.close()
        reply = _entry_of(pid, mine)
        if reply is None:
            mine.close()
            code = _wait(pid)
            written = protocol.read_message(fallback)
            if written is None:  # died calling the probe
                _close(probes)
                _exit_like(1 if code is None else code)
            reply = Entry(written, False)
        message = reply.message
        if reply.staying:
            probes[entry.name] = _ProbeTemplate(pid, mine)
            _PROBE_ENDS.append(mine)
        else:
            mine.close()
            _wait(pid)  # (None when reaped above)
        if not isinstance(message, protocol.Result):  # tracecheck's own error: the discovery's
            _close(probes)
            return message
        entries.append(survey.ProbeEntry.from_json(message.value["entry"]))
        registered |= set(message.value["registered"])
    return protocol.Result(survey.summary(loaded, entries, registered).to_json())


def _entry_of(pid: int, conn: ToProbe) -> Entry | None:
    """The ``Entry`` message of the probe's child ``pid``; None when it ended without one (watched by its pid too: a
    process its probe forked may hold the connection open)."""
    while True:
        try:
            if conn.poll(POLL_S):
                return _as_entry(conn.recv())
        except (EOFError, OSError):
            return None
        if _ended(pid):
            try:  # it may have sent its entry just before exiting
                return _as_entry(conn.recv()) if conn.poll(0) else None
            except (EOFError, OSError):
                return None


def _as_entry(msg: FromProbe) -> Entry | None:
    """A probe's child sends its ``Entry`` first: anything else means it has none."""
    return msg if isinstance(msg, Entry) else None


def _probe_child(loaded: Loaded, entry: ProbeEntry, fn: Callable[[], Any],
                 conn: Connection[FromProbe, Fork], stay: bool, fallback: str) -> None:
    """In a child of the file's template: call the probe of ``entry``, send its ``Entry`` (to the file ``fallback``
    when the connection is gone: a probe that closed every descriptor), and when ``stay`` allows and
    forking stays safe, stay up as the probe's template. The value the call returned is dropped: each stage process
    builds its own cases (a model in shared memory, an open file, a pipe or a subprocess it holds stays its own)."""
    from ..collect import casemaker, survey
    from ..evidence.oprecorder import registered_custom_ops
    from ..model.probe import to_case
    from . import warmup

    def first(value: Any, warnings: list[str], registered: list[str]) -> None:
        casemaker.record_first_call(warnings, registered)
        warmup.warm_source_names(to_case(value).fn)

    rss, driver = _resident_bytes(), _cuda_driver_loaded()
    # the child's Result, to the file's template (template_protocol.Entry): its probe's entry and the ops registered
    message = worker.perform(lambda: {"entry": survey.call_one(loaded, entry, fn, first if stay else None).to_json(),
                                      "registered": sorted(registered_custom_ops())})
    stay = stay and casemaker.first_call() is not None and isinstance(message, protocol.Result) \
        and not machine.initialised_device() and _cuda_driver_loaded() == driver \
        and _native_threads() <= 1 and signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL \
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0 and _resident_bytes() - rss <= MAX_GROWTH
    # (an alarm the call set would go off here, not in the stage processes: forks do not inherit it; CUDA's driver,
    # loaded by torch.cuda.is_available(), cannot be used in a forked child)
    try:
        conn.send(Entry(message, stay))
    except OSError:
        worker.write_message(message, fallback)
        return
    if stay:
        _fork_on_request(conn, {})


def _cuda_driver_loaded() -> bool:
    """CUDA's driver library is mapped in this process (torch loads it when it first asks CUDA anything)."""
    try:
        with open("/proc/self/maps") as f:
            return "libcuda.so" in f.read()
    except OSError:
        return False


def _exit_like(code: int) -> NoReturn:
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


def _resident_bytes() -> int:
    """This process's resident memory (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _fork_on_request(conn: Requests, probes: dict[str, _ProbeTemplate]) -> None:
    """Fork a stage process for each request on ``conn`` (from the probe's template when the request names one of
    ``probes``) and report its pid, then its exit; pass on what the probes' templates report."""
    children: set[int] = set()
    retired: set[int] = set()  # probes' templates released or lost, to reap
    try:
        while True:
            ready = wait([conn, *(t.conn for t in probes.values())], timeout=POLL_S)
            for name, probe in list(probes.items()):
                if (probe.conn in ready and not _relay(probe, conn)) or _ended(probe.pid):
                    _lost(probes.pop(name), conn, retired)
            if conn in ready:
                try:
                    request = conn.recv()
                except EOFError:
                    return  # the runner is gone
                if isinstance(request, Release):
                    released = probes.pop(request.probe, None)
                    if released is not None:
                        _drop(released)  # it ends at EOF
                        retired.add(released.pid)
                    continue
                if not isinstance(request, Fork):
                    return
                pid: int | None | Literal[_State.GONE] = None
                if request.probe in probes:
                    pid = _fork_via(probes[request.probe], request.launch, conn)
                    if pid is _State.GONE:
                        _lost(probes.pop(request.probe), conn, retired)
                if pid is None or pid is _State.GONE:
                    pid = _fork_here(conn, request.launch)
                    if pid is not None:
                        children.add(pid)
                conn.send(Pid(pid))
            for child in list(children):
                code = _reap(child)
                if code is not _State.RUNNING:
                    children.discard(child)
                    conn.send(Exit(child, code))
            retired = {pid for pid in retired if _reap(pid) is _State.RUNNING}
    finally:
        for pid in children:  # the runner went away mid-run: take the stage processes with us
            _kill(pid)
            _wait(pid)
        _close(probes)
        for pid in retired:
            _kill(pid)
            _wait(pid)


class _State(Enum):
    """The answers beside a pid or an exit code."""

    #: ``_fork_via``'s answer when the probe's template is gone or stuck
    GONE = "gone"
    #: ``_reap``'s for a process still running
    RUNNING = "running"


def _fork_here(conn: Requests, launch: Launch) -> int | None:
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: the runner starts this one from the fork server
        return None
    if pid == 0:
        _child(conn, lambda: worker.child_main(launch.task, launch.result_path, launch.log_path, launch.threads))
    return pid


def _fork_via(probe: _ProbeTemplate, launch: Launch, conn: Requests) -> int | None | Literal[_State.GONE]:
    """The pid of a stage process the probe's template forked (None: it could not fork; ``GONE``: it is gone or
    stuck); what it reported meanwhile is passed on."""
    try:
        probe.conn.send(Fork(None, launch))
        while probe.conn.poll(RELAY_S):
            msg = probe.conn.recv()
            if isinstance(msg, Pid):
                if msg.pid is not None:
                    probe.pids.add(msg.pid)
                return msg.pid
            _pass_on(probe, msg, conn)
    except (OSError, EOFError):
        pass
    return _State.GONE


def _relay(probe: _ProbeTemplate, conn: Requests) -> bool:
    """Pass on what the probe's template reported; False when it is gone."""
    try:
        while probe.conn.poll():
            _pass_on(probe, probe.conn.recv(), conn)
    except (OSError, EOFError):
        return False
    return True


def _pass_on(probe: _ProbeTemplate, msg: FromProbe, conn: Requests) -> None:
    if isinstance(msg, Exit):
        probe.pids.discard(msg.pid)
        conn.send(msg)


def _lost(probe: _ProbeTemplate, conn: Requests, retired: set[int]) -> None:
    """A probe's template died or hangs (killed, out of memory): it is killed, and so are the stage processes it
    forked, reported lost with it (those it reported ended are not touched: their pids may be another's now)."""
    _kill(probe.pid)
    for pid in probe.pids:
        _kill(pid)
        conn.send(Exit(pid, None))
    _drop(probe)
    retired.add(probe.pid)


def _drop(probe: _ProbeTemplate) -> None:
    probe.conn.close()
    if probe.conn in _PROBE_ENDS:
        _PROBE_ENDS.remove(probe.conn)


def _close(probes: dict[str, _ProbeTemplate]) -> None:
    """End the probes' templates (each kills its stage processes when its connection closes), within 2 s in all."""
    for probe in probes.values():
        _drop(probe)
    deadline = time.monotonic() + 2
    for probe in probes.values():
        while _reap(probe.pid) is _State.RUNNING:
            if time.monotonic() > deadline:
                _kill(probe.pid)
                _wait(probe.pid)
                break
            time.sleep(0.01)
    probes.clear()


_PROC = os.path.exists("/proc/self/stat")


def _ended(pid: int) -> bool:
    """The child ``pid`` has ended (it is a zombie, or gone): read without reaping it. False where /proc is missing
    (its connection's end tells then)."""
    if not _PROC:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _reap(pid: int) -> int | None | Literal[_State.RUNNING]:
    """The exit code of the child ``pid`` once it has ended (None: unknown, it was reaped elsewhere), else
    ``RUNNING``."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else _State.RUNNING


def _wait(pid: int) -> int | None:
    """The exit code of the child ``pid``, once it has ended (None: unknown, it was reaped elsewhere)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):  # os.kill: a child that has not called setpgrp() yet
        try:
            kill(pid, signal.SIGKILL)
            return
        except OSError:
            pass


def _child(conn: Requests, body: Callable[[], Any]) -> None:
    """A forked process running ``body`` (a stage: ``worker.child_main``; a probe's call, ``_probe_child``): exit
    codes as multiprocessing gives them (``sys.exit(n)`` in a probe -> n, ``sys.exit("message")`` -> the message
    on stderr and 1). Never returns into the template's code."""
    code = 1
    try:
        from multiprocessing import process, util

        conn.close()  # only the template talks to the runner; the runner sees EOF when the template dies
        for other in _PROBE_ENDS:  # the file's template's connections to its probes' templates
            other.close()
        _PROBE_ENDS.clear()
        # what multiprocessing does around a process it forks: the template's finalizers and children are
        # not ours; ours (semaphores torch creates, say) must run at exit, or the resource tracker reports
        # them leaked
        # (private, unannotated names: through getattr/setattr)
        getattr(util, "_finalizer_registry").clear()
        getattr(util, "_run_after_forkers")()
        setattr(process, "_children", set())
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

            getattr(util, "_exit_function")()  # multiprocessing's own atexit function (private, unannotated)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
