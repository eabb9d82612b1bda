"""Tabular exports of a report with pandas (``tracecheck show report.json --format table|csv``).

``stages_frame``: one row per probe x stage (long form; the CSV export).
``findings_frame``: one row per finding.
``verdict_frame``: probes x stages, each cell ``pass`` (``pass (fwd)`` when only the forward ran) / ``skip`` /
the failure kinds (``not required: kinds`` for a target the run does not require; the table export).
"""
from __future__ import annotations

import pandas as pd

from ..model.report import INTERNAL, RunReport
from . import view

#: columns added since the first layout come last, so a script reading the CSV by position keeps working
STAGE_COLUMNS = ["probe", "file", "name", "stage", "status", "phases", "kinds", "advice", "first_kind", "graph_count",
                 "graph_break_count", "graph_break_sites", "dynamo_graph_break_count", "gb_types", "seconds", "skip_reason", "target",
                 "required"]
FINDING_COLUMNS = ["probe", "stage", "kind", "summary", "gb_type", "gb_code", "user_file", "user_line", "op",
                   "builtin"]


def stages_frame(report: RunReport) -> pd.DataFrame:
    rows = []
    for p in report.probes:
        for stage, s in p.stages.items():
            found = view.gated_kinds(s, report.gate)
            advice = s.outcome.advice
            rows.append({
                "probe": p.id, "file": p.id_file, "name": p.name, "stage": stage,
                "target": s.target or "", "required": view.cell(s, report.gate).required, "status": s.status, "phases": ";".join(s.phases or []), "kinds": ";".join(found), "advice": ";".join(advice), "first_kind": s.failure.kind if s.failure else "",
                "graph_count": s.graph_count, "graph_break_count": s.graph_break_count,
                "graph_break_sites": s.graph_break_sites, "dynamo_graph_break_count": s.dynamo_graph_break_count,
                "gb_types": ";".join(dict.fromkeys(b.gb_type or "" for b in s.breaks)),
                "seconds": s.seconds, "skip_reason": s.skip_reason or "",
            })
    df = pd.DataFrame(rows, columns=STAGE_COLUMNS)
    for col in ("graph_count", "graph_break_count", "graph_break_sites", "dynamo_graph_break_count"):
        df[col] = df[col].astype("Int64")  # nullable: "not measured" stays empty, not NaN-float
    return df


def findings_frame(report: RunReport) -> pd.DataFrame:
    rows = []
    for p in report.probes:
        for stage, s in p.stages.items():
            for f in s.findings:
                frame = f.user_frame
                rows.append({
                    "probe": p.id, "stage": stage, "kind": f.kind, "summary": f.summary,
                    "gb_type": f.evidence.gb_type, "gb_code": f.evidence.gb_code,
                    "user_file": frame and frame.file, "user_line": frame and frame.line,
                    "op": f.context.op, "builtin": f.context.builtin,
                })
    df = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    df["user_line"] = df["user_line"].astype("Int64")
    return df


def verdict_frame(report: RunReport) -> pd.DataFrame:
    """Probes (index) x stages (columns); a cell is ``pass`` (``pass (fwd)``: forward only), ``skip``, or the
    failure kinds joined by ``;`` (a timeout or crash without a kind: its status). Cells from ``view.cell``."""
    columns = view.columns(report)

    def text(c: view.Cell | None) -> str:
        if c is None:
            return ""
        if c.status == "pass":  # a pass with advice names it: "pass; advice opaque-op"
            text = "pass (fwd)" if c.forward_only else "pass"
            return text + (f"; advice {';'.join(c.advice)}" if c.advice else "")
        if c.status == "skip":
            return "skip"
        failed = c.label if c.status == INTERNAL else ";".join(c.kinds) or c.status
        return f"not required: {failed}" if c.shown == view.NOT_REQUIRED else failed

    rows = {p.id: [text(view.cell(p.stages.get(col), report.gate)) for col in columns] for p in report.probes}
    return pd.DataFrame.from_dict(rows, orient="index", columns=columns) if rows else pd.DataFrame(columns=columns)


def to_csv(report: RunReport) -> str:
    return stages_frame(report).to_csv(index=False)


def to_table(report: RunReport, width: int = 250) -> str:
    """The verdict frame as text ``width`` columns wide: pandas wraps the stage columns into blocks of that width
    (``to_string(line_width=...)``) rather than letting the terminal fold every row."""
    table = verdict_frame(report)
    if table.empty:
        return "(no probes)\n"
    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.max_colwidth", 80):
        return table.to_string(line_width=width) + "\n"
