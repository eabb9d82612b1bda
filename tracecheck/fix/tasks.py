"""The tasks ``tracecheck fix`` runs in task processes (the probe's code never runs in the CLI process): one frozen
record per kind (model/tasks.py), each ``run`` importing the code it calls there. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.tasks import ProcessTask


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

    def run(self) -> dict[str, Any]:
        from .analysis import analyze

        return analyze(self)


@dataclass(frozen=True, kw_only=True)
class EagerDumpTask(ProbeTask):
    """Run the original probe eagerly and save its outputs and gradients to ``dump`` (``fix.analysis.eager_dump``)."""

    dump: str
    #: a file whose lines that ran are reported (``lines``): do the probe's inputs reach a rewritten line
    lines_of: str | None = None

    def run(self) -> dict[str, Any]:
        from .analysis import eager_dump

        return eager_dump(self)


@dataclass(frozen=True, kw_only=True)
class EagerCompareTask(ProbeTask):
    """Run the patched probe eagerly and compare it with ``dump`` (``fix.analysis.eager_compare``)."""

    dump: str

    def run(self) -> dict[str, Any]:
        from .analysis import eager_compare

        return eager_compare(self)


@dataclass(frozen=True, kw_only=True)
class DirectionalCheckTask(ProbeTask):
    """The patched probe's gradients against finite differences (``fix.analysis.directional_check``)."""

    def run(self) -> dict[str, Any]:
        from .analysis import directional_check

        return directional_check(self)


@dataclass(frozen=True, kw_only=True)
class ObserveCallsTask(ProbeTask):
    """Record the C calls at ``sites`` in one eager run, at the probe's and perturbed inputs (``fix.c_call``)."""

    namespace: str
    #: the call sites to observe (fix/model_code.py: line, callee, file, ...)
    sites: tuple[dict[str, Any], ...]

    def run(self) -> dict[str, Any]:
        from .c_call import observe_calls

        return observe_calls(self)


@dataclass(frozen=True, kw_only=True)
class ShapeCheckTask(ProbeTask):
    """The generated fakes of ``ops`` at shapes the probe never used (``fix.shape_check.run``)."""

    ops: tuple[str, ...]

    def run(self) -> dict[str, Any]:
        from .shape_check import run

        return run(self)
