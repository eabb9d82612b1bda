"""The messages on a template process's pipes (template.py), typed like protocol.py's: one frozen dataclass per
message, its ``tag`` explicit. They go over multiprocessing ``Connection``s, pickled: plain data at module level.
Pure: no torch import.

runner -> file's template: ``Fork`` (answered by ``Pid``), ``Release``. File's template -> runner: ``Ready`` once,
then ``Pid`` per ``Fork`` and ``Exit`` when a stage process it forked (or a probe's template forked) ends. A probe's
template -> the file's template: ``Entry`` once, then as a template ``Pid`` and ``Exit``, which the file's template
passes on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

from ..model.tasks import ProcessTask
from .protocol import Message


@dataclass(frozen=True)
class Launch:
    """What a stage process runs: ``worker.child_main(task, result_path, log_path, threads)``."""

    task: ProcessTask
    result_path: str
    log_path: str
    threads: int


@dataclass(frozen=True)
class Fork:
    """Fork a stage process that runs ``launch``: from ``probe``'s template when it has one, else from this
    template (None: this one)."""

    probe: str | None
    launch: Launch
    tag: Literal["fork"] = field(default="fork", init=False)


@dataclass(frozen=True)
class Release:
    """No task of this run forks from ``probe``'s template any more: it may end."""

    probe: str
    tag: Literal["release"] = field(default="release", init=False)


@dataclass(frozen=True)
class Ready:
    """The file's discovery result is written. ``why_not``: why this template does not stay up to fork (None: it
    does); ``probes``: the probes with a template of their own."""

    why_not: str | None
    probes: tuple[str, ...] = ()
    tag: Literal["ready"] = field(default="ready", init=False)


@dataclass(frozen=True)
class Pid:
    """The answer to a ``Fork``: the new stage process's pid; None when it could not fork."""

    pid: int | None
    tag: Literal["pid"] = field(default="pid", init=False)


@dataclass(frozen=True)
class Exit:
    """A stage process forked on request ended: its exit code as ``multiprocessing`` gives it (None: unknown, lost
    with the probe's template that forked it)."""

    pid: int
    exitcode: int | None
    tag: Literal["exit"] = field(default="exit", init=False)


@dataclass(frozen=True)
class Entry:
    """A probe's template, once its probe was called: the call's discovery ``message``, and whether it stays up as
    the probe's template (``staying``)."""

    message: Message
    staying: bool
    tag: Literal["entry"] = field(default="entry", init=False)


#: what a template is asked
ToTemplate = Union[Fork, Release]
#: what the file's template tells the runner
FromTemplate = Union[Ready, Pid, Exit]
#: what a probe's template tells the file's template
FromProbe = Union[Entry, Pid, Exit]
