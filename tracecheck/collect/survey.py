"""The ``discover`` task, run in a task process: one file's probes, called once each to check what they return
and what they register."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from types import ModuleType
from typing import Any, Callable

from ..model.exitcodes import UsageError
from ..model.probe import ProbeShapeError, to_case
from ..model.report import IMPORT_PROBE
from ..model.reportio import Json
from ..model.tasks import ProcessTask
from . import cache
from .casemaker import call_probe
from .loadfile import find_probes, load_module, matches
from .locate import probe_id


@dataclass(frozen=True, kw_only=True)
class SurveyTask(ProcessTask):
    """The ``discover`` task of one model file (``inspect_file``)."""

    file: str
    #: ``-k``: matched against probe ids relative to ``root`` (``rootdir``)
    select: str | None = None
    #: probe names asked for by ``file.py::name`` (None: every probe)
    only: tuple[str, ...] | None = None
    root: str | None = None
    #: run as a template process (isolate/template.py, the runner's ``Task.serve``): stay up after discovery to
    #: fork the file's stage processes; False: exit after it (``--fresh-imports``, files past the first eight)
    stay: bool = True
    #: how many of its probes' children may stay up as their own templates (each holds what its call imported until
    #: the file's stages are done), the first that can; the others' stages fork from the file's
    probe_templates: int = 4
    #: record what the file's import and its probes' calls load (collect/cache.py), for a run whose cache is on
    record_deps: bool = False

    def run(self) -> Json:
        return inspect_file(self).to_json()


@dataclass(frozen=True)
class ProbeEntry:
    """What discovery found of one probe: the parent makes its ``load`` pseudo-stage of it
    (classify/results.load_result) and refuses a ``bad_shape``."""

    name: str
    #: why the probe cannot run (it takes arguments, returns no case): a usage error in the parent
    bad_shape: str | None = None
    #: what calling the probe (or importing the file) raised: evidence/exceptions.error_record, as it crosses to the
    #: parent (classified there, once, with every other record)
    setup_error: Json | None = None
    #: the op registrations the file's import and the probe's call made: evidence/opwatch's events, as they cross
    registrations: list[Json] | None = None
    #: the file did not import: the loader's message (the usage error, unless a kind explains the exception)
    import_error: str | None = None
    #: what the file's import and this call loaded (collect/cache.py: path or variable -> fingerprint)
    deps: dict[str, str | None] | None = None

    def to_json(self) -> Json:
        """The entry as the discovery message holds it: the fields it has."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, d: Json) -> "ProbeEntry":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(frozen=True)
class Discovery:
    """The ``discover`` task's result for one file: the selected probes' entries, the names of every probe it has
    (``n_candidates`` of them: before ``-k`` and ``file.py::name`` select), and the custom ops registered by the file,
    its imports or its probes that were not before the import."""

    probes: list[ProbeEntry]
    n_candidates: int
    names: list[str] = field(default_factory=list)
    custom_ops: list[str] = field(default_factory=list)

    def to_json(self) -> Json:
        return {"probes": [e.to_json() for e in self.probes], "n_candidates": self.n_candidates, "names": self.names,
                "custom_ops": self.custom_ops}

    @classmethod
    def from_json(cls, d: Json) -> "Discovery":
        return cls([ProbeEntry.from_json(e) for e in d["probes"]], d["n_candidates"], d.get("names") or [],
                   d.get("custom_ops", []))


def inspect_file(task: SurveyTask) -> Discovery:
    """The ``discover`` task in one process: load one model file; call each selected probe once to check what it
    returns and what it registers (``opwatch.OpRegistrationWatch``). The runner runs discovery in a template process
    instead (isolate/template.py: ``load_file`` in itself, each probe's ``call_one`` in a forked child of its own),
    which calls ``call_probes`` only where it cannot fork."""
    return call_probes(load_file(task))


@dataclass
class Loaded:
    """A model file imported (``load_file``), its probes not called yet."""

    task: SurveyTask
    #: the custom ops registered before the file imported
    ops_before: set[str]
    #: sees the registrations of the import; ``call_probes`` watches the probes with it (same schemas)
    watch: Any
    module: ModuleType | None = None
    #: the whole discovery when the import failed (nothing to call)
    result: Discovery | None = None
    #: how many of ``watch.events`` the import made (the rest: the probes')
    import_events: int = 0
    #: what the import and the probes' calls load (collect/cache.py: the key of a reused result); None: not recorded
    recorder: "cache.Recorder | None" = None


def load_file(task: SurveyTask) -> Loaded:
    """Import the model file of the ``discover`` task, watching what it registers; call no probe."""
    from ..evidence import exceptions, opwatch
    from ..evidence.oprecorder import registered_custom_ops

    ops_before = registered_custom_ops()
    loaded = Loaded(task, ops_before, opwatch.OpRegistrationWatch(),
                    recorder=cache.Recorder.start() if task.record_deps else None)
    with loaded.watch as watch:
        try:
            loaded.module = load_module(task.file)
        except UsageError as e:
            if e.__cause__ is None:
                raise
            # the parent classifies the import's exception (once, with every other record) and decides: torch
            # refused what the file registers or runs at import (an op defined twice, say) is a finding; the
            # user's own Python error (import, syntax, name) is bad input, exit 2 with this message
            entry = ProbeEntry(IMPORT_PROBE, setup_error=exceptions.error_record(e.__cause__, "setup").to_wire(),
                               registrations=list(watch.events), import_error=str(e))
            loaded.result = Discovery([entry], 1, [IMPORT_PROBE], sorted(registered_custom_ops() - ops_before))
    loaded.import_events = len(loaded.watch.events)
    return loaded


def call_probes(loaded: Loaded) -> Discovery:
    """The ``discover`` task's result for a file ``load_file`` imported: each selected probe called once, in this
    process. (A template process calls each in a child of its own instead: isolate/template.py.)"""
    if loaded.result is not None:
        return loaded.result
    from ..evidence.oprecorder import registered_custom_ops

    entries = [entry if fn is None else call_one(loaded, entry, fn) for entry, fn in selected(loaded)]
    return summary(loaded, entries, registered_custom_ops())


def selected(loaded: Loaded) -> list[tuple[ProbeEntry, Callable[[], Any] | None]]:
    """The probes of the imported file the task selects, in the file's order: each one's discovery entry so far,
    and the function to call (None: the entry is complete, a probe that takes arguments)."""
    task, module = loaded.task, loaded.module
    only = set(task.only) if task.only else None  # probe names asked for by ``file.py::name``
    root = task.root or os.path.dirname(task.file)
    chosen: list[tuple[ProbeEntry, Callable[[], Any] | None]] = []
    assert module is not None, "selected() runs on a file that imported"
    for name, fn in find_probes(module):
        pid = probe_id(task.file, name, root)
        if not matches(task.select, pid) or (only is not None and name not in only):
            continue
        required = _required_params(fn)
        if required:
            chosen.append((ProbeEntry(name, bad_shape=f"{pid}: a probe takes no arguments, this one requires "
                                                      f"{', '.join(required)}"), None))
        else:
            chosen.append((ProbeEntry(name), fn))
    return chosen


def call_one(loaded: Loaded, entry: ProbeEntry, fn: Callable[[], Any],
             first: Callable[[Any, list[str], list[str]], None] | None = None) -> ProbeEntry:
    """``entry`` completed by calling its probe once, watching what it registers. ``first``: when the call returned
    a case, it gets what the call returned, warned and registered (the probe's template: isolate/template.py)."""
    from ..evidence import exceptions
    from ..evidence.oprecorder import registered_custom_ops

    root = loaded.task.root or os.path.dirname(loaded.task.file)
    file_events = loaded.watch.events[:loaded.import_events]
    with loaded.watch as watch:
        before = len(watch.events)
        ops = registered_custom_ops()
        try:
            with exceptions.WarningCollector() as warned:  # as the eager stage's own first call would see them
                value = call_probe(fn)
            to_case(value)
            if first is not None:
                first(value, warned.messages, sorted(registered_custom_ops() - ops))
        except ProbeShapeError as e:
            entry = replace(entry, bad_shape=f"{probe_id(loaded.task.file, entry.name, root)}: {e}")
        except Exception as e:
            entry = replace(entry, setup_error=exceptions.error_record(e, "setup").to_wire())
        entry = replace(entry, registrations=file_events + watch.events[before:])
    try:  # what the file's import and this call loaded, as it is now: the key of its results (collect/cache.py)
        deps = loaded.recorder.deps() if loaded.recorder is not None else None
    except Exception:  # no key: the results are not stored
        deps = None
    return replace(entry, deps=deps)


def summary(loaded: Loaded, entries: list[ProbeEntry], registered: set[str]) -> Discovery:
    """The ``discover`` result: the probes' ``entries``, every probe name, and the custom ops ``registered`` (the
    op registry's names, after the import and the probe calls) that were not before the import."""
    names = [name for name, _ in find_probes(loaded.module)] if loaded.module is not None else []
    # no custom op registered by the file, its imports or its probes: the runner can skip opcheck (api.py)
    return Discovery(entries, len(names), names, sorted(registered - loaded.ops_before))


def _required_params(fn: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                           p.KEYWORD_ONLY)]
