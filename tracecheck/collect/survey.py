"""The ``discover`` task, run in a task process: one file's probes, called once each to check what they return
and what they register."""
from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from ..model.exitcodes import UsageError
from ..model.probe import ProbeShapeError, to_case
from ..model.report import IMPORT_PROBE
from ..model.tasks import ProcessTask
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

    def run(self) -> dict[str, Any]:
        return inspect_file(self)


def inspect_file(task: SurveyTask) -> dict[str, Any]:
    """The ``discover`` task: load one model file; call each selected probe once to check what it returns and
    what it registers (``opwatch.OpRegistrationWatch``). A template process (isolate/template.py) runs the two
    halves apart: ``load_file`` in itself, ``call_probes`` in a forked child, so no probe's factory runs where stage
    processes are forked from."""
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
    result: dict[str, Any] | None = None


def load_file(task: SurveyTask) -> Loaded:
    """Import the model file of the ``discover`` task, watching what it registers; call no probe."""
    from ..evidence import exceptions, opwatch
    from ..evidence.oprecorder import registered_custom_ops

    ops_before = registered_custom_ops()
    loaded = Loaded(task, ops_before, opwatch.OpRegistrationWatch())
    with loaded.watch as watch:
        try:
            loaded.module = load_module(task.file)
        except UsageError as e:
            if e.__cause__ is None:
                raise
            # the parent classifies the import's exception (once, with every other record) and decides: torch
            # refused what the file registers or runs at import (an op defined twice, say) is a finding; the
            # user's own Python error (import, syntax, name) is bad input, exit 2 with this message
            entry = {"name": IMPORT_PROBE, "setup_error": exceptions.error_record(e.__cause__, "setup"),
                     "registrations": list(watch.events), "import_error": str(e)}
            loaded.result = {"probes": [entry], "n_candidates": 1, "names": [IMPORT_PROBE],
                             "custom_ops": sorted(registered_custom_ops() - ops_before)}
    return loaded


def call_probes(loaded: Loaded) -> dict[str, Any]:
    """The ``discover`` task's result for a file ``load_file`` imported: each selected probe called once."""
    from ..evidence import exceptions
    from ..evidence.oprecorder import registered_custom_ops

    if loaded.result is not None:
        return loaded.result
    task, module = loaded.task, loaded.module
    path, select = task.file, task.select
    only = set(task.only) if task.only else None  # probe names asked for by ``file.py::name``
    root = task.root or os.path.dirname(path)
    file_events = list(loaded.watch.events)  # the import's
    with loaded.watch as watch:
        probes = []
        for name, fn in find_probes(module):
            pid = probe_id(path, name, root)
            if not matches(select, pid) or (only is not None and name not in only):
                continue
            before = len(watch.events)
            entry: dict[str, Any] = {"name": name}
            required = _required_params(fn)
            if required:
                entry["bad_shape"] = f"{pid}: a probe takes no arguments, this one requires {', '.join(required)}"
                probes.append(entry)
                continue
            try:
                to_case(call_probe(fn))
            except ProbeShapeError as e:
                entry["bad_shape"] = f"{pid}: {e}"
            except Exception as e:
                entry["setup_error"] = exceptions.error_record(e, "setup")
            entry["registrations"] = file_events + watch.events[before:]
            probes.append(entry)
    names = [name for name, _ in find_probes(module)]
    # no custom op registered by the file, its imports or its probes: the runner can skip opcheck (api.py)
    return {"probes": probes, "n_candidates": len(names), "names": names,
            "custom_ops": sorted(registered_custom_ops() - loaded.ops_before)}


def _required_params(fn: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                           p.KEYWORD_ONLY)]
