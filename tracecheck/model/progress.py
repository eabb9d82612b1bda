"""What a run tells a live display as it goes (``Progress``): in model/, below both the pipeline that calls it
(api.py, fix/) and the display that draws it (render/live.py)."""
from __future__ import annotations

from .report import ProbeReport, StageResult
from .targets import Gate


class Progress:
    """Callbacks for a live display; the default does nothing. api.run and tracecheck fix call them; the board
    (render/live.py) draws them."""

    def discovered(self, n_files: int) -> None: ...
    def loading(self, path: str) -> None: ...
    def note(self, line: str) -> None: ...
    def planned(self, n_tasks: int) -> None: ...
    def started(self, probe_id: str, stage: str) -> None: ...
    def finished(self, probe_id: str, result: StageResult) -> None: ...
    def layout(self, stages: list[str], gate: Gate) -> None:
        """The run's stages and how it is gated, before its stages start."""

    def revised(self, probe_id: str, result: StageResult) -> None:
        """A stage shown earlier with its kind pending (``notes.kind_pending``), as the final report will say it now
        that the probe's other stages have ended."""

    def verdict(self, probe: ProbeReport, running: list[str]) -> None:
        """Every stage of ``probe``'s required targets has finished: ``probe`` (a settled copy) has its verdict,
        before the stages of targets not required (``running``) and the rest of the run end."""


class Relay(Progress):
    """A ``Progress`` that passes every callback on to ``inner``: a subclass overrides those it watches or rewrites
    (tracecheck fix's judge of each finished stage, tracecheck ops' ids)."""

    def __init__(self, inner: Progress | None) -> None:
        self.inner = inner or Progress()

    def discovered(self, n_files: int) -> None:
        self.inner.discovered(n_files)

    def loading(self, path: str) -> None:
        self.inner.loading(path)

    def note(self, line: str) -> None:
        self.inner.note(line)

    def planned(self, n_tasks: int) -> None:
        self.inner.planned(n_tasks)

    def started(self, probe_id: str, stage: str) -> None:
        self.inner.started(probe_id, stage)

    def finished(self, probe_id: str, result: StageResult) -> None:
        self.inner.finished(probe_id, result)

    def layout(self, stages: list[str], gate: Gate) -> None:
        self.inner.layout(stages, gate)

    def revised(self, probe_id: str, result: StageResult) -> None:
        self.inner.revised(probe_id, result)

    def verdict(self, probe: ProbeReport, running: list[str]) -> None:
        self.inner.verdict(probe, running)
