"""What a run shows while it runs: the board that draws the callbacks a live display gets (``LiveProgress``, a
model/progress.Progress): on a terminal the probes x stages table filling in above a progress
bar, elsewhere (a CI log) a plain line per finished stage and per settled verdict."""
from __future__ import annotations

import os
from typing import Any, Iterable

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from ..model.report import PASS, ProbeReport, StageResult
from ..model.progress import Progress
from ..model.targets import Gate
from ..stages import STAGES


class Board(RichProgress):
    """rich's progress bar with, above it, the probes x stages table filling in as stages finish, and each probe's
    verdict as soon as its required targets' stages are done (``get_renderables`` is rich's hook for this)."""

    def __init__(self, *columns: str | ProgressColumn, **kwargs: Any) -> None:
        self.cells: dict[str, dict[str, Text]] = {}  # probe id -> stage -> cell, in the order probes started
        self.verdicts: dict[str, Text] = {}
        #: "table" or "list", chosen once per run (``choose``) so the board does not switch mid-run; None: per render
        self.mode: str | None = None
        super().__init__(*columns, **kwargs)  # may render already

    def choose(self, stages: list[str]) -> None:
        """Table or list for the whole run: the table when it fits with every stage's column as wide as its longest
        possible cell (``✗`` and the longest kind id), else the list."""
        from ..model import taxonomy
        from . import terminal

        widest = 2 + max(len(k) for k in taxonomy.ids())
        # a probe's name (up to 40 columns, as the verdict table allows), the verdict, each stage's widest cell
        need = 40 + len("verdict") + sum(max(len(terminal.stage_heading(s)), widest) + 1 for s in stages)
        self.mode = "table" if need <= self.console.width else "list"

    def get_renderables(self) -> Iterable[RenderableType]:
        if self.cells:
            yield self._view()
        yield self.make_tasks_table(self.tasks)

    def _view(self) -> RenderableType:
        """The newest probes that fit the screen: the probes x stages table where it fits the width whole (no kind
        cut), else a line per probe (its stages grouped by outcome), which wraps between words only."""
        from . import terminal

        rows = list(self.cells.items())[-max(3, self.console.height - 8):]
        stages = [s for s in STAGES if any(s in row for _, row in rows)]
        table = Table(box=None, pad_edge=False, show_edge=False)
        table.add_column("probe", no_wrap=True)
        for s in stages:
            table.add_column(terminal.stage_heading(s), no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        for pid, row in rows:
            table.add_row(pid.split("::")[-1], *(row.get(s, Text("")) for s in stages),
                          self.verdicts.get(pid, Text("…", style="dim")))
        unclamped = self.console.options.update(max_width=10_000)  # the table's natural width, not the screen's
        if self.mode != "list":
            if Measurement.get(self.console, unclamped, table).maximum <= self.console.width:
                return table
            if self.mode == "table":
                self.mode = "list"  # a cell wider than foreseen: the list from now on, never back
        lines = []
        for pid, row in rows[-max(2, (self.console.height - 8) // 2):]:
            line = Text(pid.split("::")[-1], style="bold")
            line.append(" ")
            line.append_text(self.verdicts.get(pid, Text("…", style="dim")))
            groups: dict[str, list[str]] = {}
            for stage, cell in row.items():
                groups.setdefault(cell.plain, []).append(stage)
            for said, where in groups.items():
                line.append(" · ", style="dim")
                line.append(f"{said} ", style=row[where[0]].style)
                line.append(", ".join(where), style="dim")
            lines.append(line)
        return Group(*lines)


class LiveProgress(Progress):
    """On a terminal: a live board (``Board``), transient, so only the results stay on screen. Elsewhere (a CI
    log): a plain line per finished stage and per settled verdict."""

    def __init__(self, console: Console) -> None:
        self.bar = Board(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), console=console, transient=True,
                         disable=not console.is_terminal)
        self.task = self.bar.add_task("discovering probes", total=None)
        self.running: list[str] = []
        self.gate = Gate()

    def _line(self, text: str) -> None:
        """CI logs (not a terminal) get plain lines instead of the live bar, from the first second on."""
        if not self.bar.console.is_terminal:
            self.bar.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def discovered(self, n_files: int) -> None:
        # a new run (``tracecheck fix`` makes several on one display): its own count of stages, not the last one's
        self.bar.update(self.task, completed=0, total=None, description="discovering probes")
        self._line(f"tracecheck: {n_files} model file(s); starting the stage processes (torch preloads once)")

    def loading(self, path: str) -> None:
        self.bar.update(self.task, description=f"loading {os.path.basename(path)}")
        self._line(f"loading {os.path.relpath(path)} (its imports run; a C++ extension may build now)")

    def note(self, line: str) -> None:
        # wrapped between words on a terminal; one line in a log
        self.bar.console.print(line, highlight=False, markup=False, soft_wrap=not self.bar.console.is_terminal)

    def layout(self, stages: list[str], gate: Gate) -> None:
        self.gate = gate  # a failure of a target the run does not require is drawn ○, as in the final table
        self.bar.choose(stages)

    def revised(self, probe_id: str, result: StageResult) -> None:
        from . import terminal

        self.bar.cells.setdefault(probe_id, {})[result.stage] = terminal.cell(result, self.gate)
        self.bar.update(self.task)
        if result.failure is not None:
            self._line(f"{probe_id} [{result.stage}] {result.failure.kind} (its kind, now that the probe's other "
                       "stages have ended)")

    def planned(self, n_tasks: int) -> None:
        self.bar.update(self.task, total=n_tasks, description="running stages")
        self._line(f"running {n_tasks} (probe, stage) task(s)")

    def started(self, probe_id: str, stage: str) -> None:
        self.running.append(f"{probe_id.split('::')[-1]}:{stage}")
        self.bar.cells.setdefault(probe_id, {})[stage] = Text("…", style="yellow")
        self.bar.update(self.task, description=", ".join(self.running[-2:]))

    def finished(self, probe_id: str, result: StageResult) -> None:
        from . import terminal, view

        key = f"{probe_id.split('::')[-1]}:{result.stage}"
        if key in self.running:
            self.running.remove(key)
        pending = bool(result.notes.kind_pending)  # api._as_settled: a stage still running may explain it
        # a kind pending is not stated (✗ and a pending mark); a target not required is ○ (the run's gate)
        self.bar.cells.setdefault(probe_id, {})[result.stage] = \
            Text("✗ …", style="red") if pending and view.cell(result, self.gate).required else \
            Text("○ …", style="dim") if pending else terminal.cell(result, self.gate)
        self.bar.update(self.task, advance=1, description=", ".join(self.running[-2:]) or "running stages")
        status = result.status if result.status == PASS or not result.failure else \
            f"{result.status}, kind pending (the other stages may explain it)" if pending else result.failure.kind
        self._line(f"{probe_id} [{result.stage}] {status} ({result.seconds:.1f} s)")

    def verdict(self, probe: ProbeReport, running: list[str]) -> None:
        from . import terminal

        v = probe.verdict
        targets = ", ".join(probe.gate.require)
        said = f"{v.status}" + (f" ({', '.join(v.kinds)}; first at {v.first_failing_stage})" if v.kinds else "")
        self.bar.verdicts[probe.id] = terminal.status_text(v.status)
        self.bar.update(self.task)
        rest = f"; still running: {', '.join(running)} (targets not required)" if running else ""
        self._line(f"{probe.id} verdict ({targets}): {said}{rest}")
