"""The tasks ``tracecheck fix`` runs in task processes (the probe's code never runs in the CLI process): one frozen
record per kind (model/tasks.py), each ``run`` importing the code it calls there. That code returns its task's typed
result (fix/task_results.py); ``run`` writes it as JSON, the one place it crosses to the parent, which reads it back
with the record's ``of``. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..model.reportio import Json
from ..model.tasks import ProcessTask
from .call_facts import CallAsk

#: one task in a stage process, with a line saying what it does; what its ``run`` returned, as it came back over
#: the pipe (pipeline._one): read it with its result's ``of``
TaskRunner = Callable[[ProcessTask, str], Json]


@dataclass(frozen=True, kw_only=True)
class ProbeTask(ProcessTask):
    """A task on one probe of one model file."""

    file: str
    probe: str


@dataclass(frozen=True, kw_only=True)
class AnalyzeTask(ProbeTask):
    """Plan and render the fix for the kinds the diagnosis found (``fix.analysis.analyze``)."""

    namespace: str
    kinds: tuple[str, ...]
    #: ops the diagnosis found without an autograd formula
    autograd_ops: tuple[str, ...]
    #: the fixed module's import name (``-o``'s file name without ``.py``)
    module_name: str
    target: str
    patched_path: str
    fixed_path: str
    #: ``{"tracecheck": ..., "torch": ...}``: written into the generated file's header
    versions: dict[str, str]

    def run(self) -> Json:
        from .analysis import analyze

        return analyze(self.file, self.probe, namespace=self.namespace, kinds=self.kinds,
                       autograd_ops=self.autograd_ops, module_name=self.module_name, target=self.target,
                       patched_path=self.patched_path, fixed_path=self.fixed_path,
                       versions=self.versions).to_json()


@dataclass(frozen=True, kw_only=True)
class EagerDumpTask(ProbeTask):
    """Run the original probe eagerly and save its outputs and gradients to ``dump`` (``fix.analysis.eager_dump``)."""

    dump: str
    #: a file whose lines that ran are reported (``lines``): do the probe's inputs reach a rewritten line
    lines_of: str | None = None

    def run(self) -> Json:
        from .analysis import eager_dump

        return eager_dump(self.file, self.probe, self.dump, self.lines_of).to_json()


@dataclass(frozen=True, kw_only=True)
class EagerCompareTask(ProbeTask):
    """Run the patched probe eagerly and compare it with ``dump`` (``fix.analysis.eager_compare``)."""

    dump: str

    def run(self) -> Json:
        from .analysis import eager_compare

        return eager_compare(self.file, self.probe, self.dump).to_json()


@dataclass(frozen=True, kw_only=True)
class DirectionalCheckTask(ProbeTask):
    """The patched probe's gradients against finite differences (``fix.analysis.directional_check``)."""

    def run(self) -> Json:
        from .analysis import directional_check

        return directional_check(self.file, self.probe).to_json()


@dataclass(frozen=True, kw_only=True)
class ObserveCallsTask(ProbeTask):
    """Record the C calls at ``sites`` in one eager run, at the probe's and perturbed inputs (``fix.c_call``)."""

    namespace: str
    #: the call sites to observe (fix/model_code.py)
    sites: tuple[CallAsk, ...]

    def run(self) -> Json:
        from .c_call import observe_calls

        return observe_calls(self.file, self.probe, self.namespace, self.sites).to_json()


@dataclass(frozen=True, kw_only=True)
class ShapeCheckTask(ProbeTask):
    """The generated fakes of ``ops`` at shapes the probe never used (``fix.shape_check.run``)."""

    ops: tuple[str, ...]

    def run(self) -> Json:
        from .shape_check import run

        return run(self.file, self.probe, self.ops).to_json()
