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
