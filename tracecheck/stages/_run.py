"""One (probe, stage) in its stage process: the ``StageTask`` that crosses to it, and what it runs there. The registry
(stages/__init__.py) does not import this module, so this one reads the registry for the stage's ``SPEC``."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model.reportio import Json
from ..model.tasks import ProcessTask
from . import get
from ._spec import StageContext, StageOptions


@dataclass(frozen=True, kw_only=True)
class StageTask(ProcessTask):
    """One (probe, stage) in its own process (``api.run`` makes one per pair): ``run`` calls ``run_stage`` there."""

    file: str
    probe: str
    stage: str
    device: str = "cpu"
    options: StageOptions = field(default_factory=StageOptions)

    def run(self) -> Json:
        return run_stage(self)


def run_stage(task: StageTask) -> Json:
    """The stage's ``run`` (its module's ``SPEC``), on cases built by ``collect.casemaker``: its
    ``model.records.StageRecord`` as it crosses to the parent (``to_wire``)."""
    from ..collect import casemaker
    from ..evidence import exceptions
    from ..model.records import StageRecord

    spec = get(task.stage)  # the registry checked each module's SPEC when it was built
    make_case = casemaker.case_factory(task.file, task.probe, task.device)
    try:
        record = spec.run(StageContext(make_case, task.device, task.options))
    except casemaker.ProbeCallError as e:  # the probe function failed when the stage called it again
        return StageRecord(error=exceptions.error_record(e.__cause__ or e, "setup")).to_wire()
    wire = record.to_wire()
    from ..collect import cache

    loaded = cache.stage_modules()  # the stage's own imports (a helper a forward imports) key a reused result too
    return {**wire, cache.LOADED_KEY: loaded} if loaded is not None else wire
