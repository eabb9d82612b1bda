"""What every renderer shows, decided once: the verdict table's columns and cells, the kinds of a stage, and
the compiled-autograd counts. The terminal, Markdown and table renderers read these, so they cannot
disagree (rich's ``Traceback.extract`` → ``Trace``, then drawing, is the model)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..report import LOAD_STAGE, PASS, SKIP, ProbeReport, RunReport, StageResult
from ..stages import forward_only

#: the compiled-autograd counts a row shows, in column order (StageResult.extra keys of that stage)
CA_COLUMNS = ("steps", "unique_graphs_without_ca", "unique_graphs_with_ca", "backward_graphs_per_capture",
              "captures", "hooks_captured")


def columns(report: RunReport) -> list[str]:
    """The verdict table's stage columns: ``load`` when any probe has it, then the stages that ran."""
    return ([LOAD_STAGE] if any(LOAD_STAGE in p.stages for p in report.probes) else []) + list(report.stages)


def stage_kinds(s: StageResult) -> list[str]:
    """The distinct kinds a stage found, in the order found."""
    return list(dict.fromkeys(f.kind for f in (s.findings or ([s.failure] if s.failure else []))))


@dataclass(frozen=True)
class Cell:
    """One verdict cell: ``status`` (pass, fail, skip, timeout, crash), the kinds found, and whether a pass
    ran the forward only."""

    status: str
    kinds: tuple[str, ...] = ()
    forward_only: bool = False

    @property
    def label(self) -> str:
        """The words of the cell: ``fwd`` for a forward-only pass, the kinds of a failure, else nothing."""
        if self.status == PASS:
            return "fwd" if self.forward_only else ""
        if self.status == SKIP:
            return ""
        return ", ".join(self.kinds) or self.status


def cell(s: StageResult | None) -> Cell | None:
    if s is None:
        return None
    return Cell(s.status, tuple(stage_kinds(s)), s.status == PASS and forward_only(s))


def ca_rows(report: RunReport) -> list[tuple[ProbeReport, StageResult, dict[str, Any]]]:
    """Probes whose compiled_autograd stage ran its steps, with the counts (None: not measured). A stage that
    was skipped or died measured nothing and has no row."""
    rows = []
    for p in report.probes:
        s = p.stages.get("compiled_autograd")
        if s is None or not s.extra.get("steps"):
            continue
        counts = {k: s.extra.get(k) for k in CA_COLUMNS}
        counts["recompiles"] = s.recompile_count
        rows.append((p, s, counts))
    return rows
