"""What runs inside one isolated process: a task's ``run()`` (model/tasks.py: a ``stages.StageTask`` for one
(probe, stage), a ``collect.survey.SurveyTask``, a ``fix.jobs`` record, ...).

The parent (runner.py) starts ``child_main`` in a fresh process per task; the child writes one JSON
``protocol`` message and exits. Probe code may print, segfault, hang or call ``sys.exit``: its stdout/stderr go to a log file
the parent tails, and a missing result file is how the parent learns the child died.
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import Callable

from . import protocol
from ..model.exitcodes import InternalError, UsageError
from ..model.reportio import Json
from ..model.tasks import ProcessTask

#: the variables tracecheck (runner._context), not the user, set in the fork server's environment, comma-separated:
#: stage processes drop them and this one, so a probe's own subprocesses see the user's environment
SERVER_ENV_MARK = "TRACECHECK_SERVER_ENV"
#: read by the fork server's preload (isolate/preload.py): "0" skips its warm-up compile
WARM_COMPILE_VAR = "TRACECHECK_WARM_COMPILE"
#: set in the fork server's environment only (dropped by its children like the others): its preload registers a fast exit
FORK_SERVER_VAR = "TRACECHECK_FORK_SERVER"


#: Largest file a stage process may write (its log included): a probe printing in a loop must not fill the disk.
MAX_FILE_BYTES = 1 << 30


def child_main(task: ProcessTask, result_path: str, log_path: str, threads: int) -> protocol.Message:
    """Entry point of a task process: run ``task.run()`` and write its ``protocol`` message to
    ``result_path`` (JSON), unless the process dies first. Returns the message."""
    enter(log_path)

    def run() -> Json:
        set_up(task, threads)
        return task.run()

    message = perform(run)
    write_message(message, result_path)
    return message


def enter(log_path: str) -> None:
    """The start of a task process (template.serve's too): its own process group, the user's environment, its
    output to ``log_path``."""
    os.setpgrp()  # own process group: the parent can kill whatever the probe spawned on timeout
    for name in filter(None, os.environ.pop(SERVER_ENV_MARK, "").split(",")):  # the fork server's, not the probe's
        os.environ.pop(name, None)
    try:
        _redirect_output(log_path)
    except OSError:
        os._exit(1)  # no log file: the parent knows it was tracecheck's set-up, not the probe
    faulthandler.enable()  # a segfault in the probe leaves its Python stack in the stderr tail
    _limit_file_size()


def set_up(task: ProcessTask, threads: int) -> None:
    """What a task process sets once, before the model file imports (call it inside ``perform``: a failed
    set-up is a UsageError). A process forked after it (template.py) inherits it."""
    import torch

    torch.set_num_threads(max(1, threads))
    from .. import compat

    compat.set_single_compile_thread()
    if task.emulate_npu:  # before the model file imports: it may name the device or register for it
        from ..devices import emulated_npu

        try:
            emulated_npu.install()
        except Exception as e:  # no C++ compiler, or PrivateUse1 taken: the set-up failed, not the probe
            raise UsageError(f"--emulate-npu: {type(e).__name__}: {e}".splitlines()[0]) from e
    if task.trace_dir:
        compat.keep_structured_trace(task.trace_dir)  # this process's TORCH_TRACE, for tlparse


def perform(run: Callable[[], Json]) -> protocol.Message:
    """``run()``'s value as a ``protocol`` message: a Result, the user's bad input, or tracecheck's own error."""
    message: protocol.Message
    try:
        value = run()
        from ..evidence import parsers

        parsers.check_parsers()  # a parser that failed found nothing: an internal error, never an empty result
        message = protocol.Result(value)
    except UsageError as e:
        cause = e.__cause__ or e
        message = protocol.UsageErrorMessage(str(e), "".join(traceback.format_exception(cause)))
    except (Exception, InternalError):  # InternalError: tracecheck's own, raised past the probe's handlers
        message = protocol.InternalErrorMessage(traceback.format_exc())
    return message


def write_message(message: protocol.Message, result_path: str) -> None:
    """Write the task's message where the runner reads it (atomically: a torn file is a dead process)."""
    tmp = result_path + ".tc-tmp"
    with open(tmp, "w") as f:
        json.dump(protocol.to_json(message), f, default=str)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()


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
