"""Terminal output: the probes x stages verdict table and the findings, as rich renderables."""
from __future__ import annotations

import os

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..taxonomy import fix_text, kinds
from ..report import (CRASH, FAIL, PASS, SKIP, TIMEOUT, Finding, RunReport, StageResult,
                      group_findings)
from . import view
from .evidence import numeric_lines


_ICON = {PASS: "✓", SKIP: "–", FAIL: "✗", TIMEOUT: "⏱", CRASH: "✗"}
_STYLE = {PASS: "green", SKIP: "dim", FAIL: "red", TIMEOUT: "magenta", CRASH: "magenta"}


def cell(result: StageResult | None) -> Text:
    c = view.cell(result)
    if c is None:
        return Text("")
    return Text(" ".join(x for x in (_ICON[c.status], c.label) if x), style=_STYLE[c.status])


def short_labels(report: RunReport) -> dict[str, str]:
    """``file.py::name`` per probe id; the full id where two files share a base name."""
    base = {p.id: f"{os.path.basename(p.file)}::{p.name}" for p in report.probes}
    clash = {b for b in base.values() if list(base.values()).count(b) > 1}
    return {pid: (pid if b in clash else b) for pid, b in base.items()}


def verdict_table(report: RunReport) -> Table:
    columns = view.columns(report)
    table = Table(title="tracecheck verdicts", title_justify="left", caption_justify="left",
                  caption="✓ fwd: passed, forward only (nothing trains: no input or parameter requires grad, or no "
                          "floating output). graph breaks: "
                          "tracecheck's count in the explain stage (structured trace, deduplicated by gb_type and "
                          "user line); explain()'s own number is noted where it differs; – not measured")
    table.add_column("probe", overflow="fold", min_width=24)
    for c in columns:
        table.add_column(c)
    table.add_column("graph breaks", justify="right")
    labels = short_labels(report)
    for p in report.probes:
        table.add_row(labels[p.id], *[cell(p.stages.get(c)) for c in columns],
                      _dash(p.graph_breaks))
    return table


def _frame(f: Finding) -> str:
    fr = f.evidence.get("user_frame") or {}
    if not fr or not fr.get("file"):
        return ""
    code = f"  `{fr['code']}`" if fr.get("code") else ""
    return f"{fr['file']}:{fr.get('line')}{code}"


def findings(report: RunReport, verbose: bool = False) -> Group:
    parts: list = []
    for p in report.probes:
        v = p.verdict
        if v.status == PASS:
            continue
        parts.append(Text(f"\n{p.id}: first failing stage {v.first_failing_stage}; kinds {', '.join(v.kinds)}",
                          style="bold"))
        for stages, f in group_findings(p):
            parts.append(_finding_text(", ".join(stages), f, verbose))
        for stage, s in p.stages.items():
            if s.explain_graph_break_count is not None and s.graph_break_count is not None:
                parts.append(Text(f"    note: explain() reported {s.explain_graph_break_count} graph break(s); "
                                  f"the structured trace shows {s.graph_break_count}", style="dim"))
        skipped = [f"{stage} ({s.skip_reason})" for stage, s in p.stages.items() if s.status == SKIP]
        if skipped:
            parts.append(Text("    skipped: " + "; ".join(skipped), style="dim"))
    return Group(*parts)


def _finding_text(stage: str, f: Finding, verbose: bool) -> Text:
    ev = f.evidence
    t = Text(f"  [{stage}] ", style="cyan")
    t.append(f"{f.kind}", style="red")
    t.append(f": {f.summary}\n")
    bits = []
    if ev.get("exception_type"):
        bits.append(f"exception {ev['exception_type']}")
    if ev.get("gb_type"):
        bits.append(f"gb_type {ev['gb_type']!r}" + (f" ({ev['gb_code']})" if ev.get("gb_code") else ""))
    if ev.get("opcheck_test"):
        bits.append(f"opcheck {ev['opcheck_test']}")
    if bits:
        t.append("    " + "; ".join(bits) + "\n", style="dim")
    first_line = next((ln.strip() for ln in str(ev.get("message") or "").splitlines() if ln.strip()), "")
    if first_line and not verbose and f.kind in ("eager-error", "backend-error", "unknown"):
        t.append(f"    message: {first_line[:200]}\n", style="dim")
    frame = _frame(f)
    if frame:
        t.append(f"    at {frame}\n", style="dim")
    if ev.get("doc"):
        t.append(f"    gb_type doc: {ev['doc']}\n", style="dim")
    for line in numeric_lines(f):
        t.append(f"    {line}\n", style="dim")
    kind = kinds().get(f.kind)
    if kind:
        t.append(f"    fix: {fix_text(f)}  ({kind.doc})\n")
    if verbose:
        detail = ev.get("traceback") or ev.get("message") or ev.get("stderr_tail") or ""
        if detail:
            t.append("    " + detail.strip().replace("\n", "\n    ") + "\n", style="dim")
    return t


def environment_line(report: RunReport) -> Text:
    env = report.environment
    npu = f"torch_npu {env['torch_npu']}" if env.get("torch_npu") else (env.get("npu_note") or "no torch_npu")
    return Text(f"torch {env.get('torch')} · Python {env.get('python')} · device {env.get('device')} · {npu}",
                style="dim")


def compiled_autograd_table(report: RunReport) -> Table | None:
    """probe x (graphs without CA, with CA, captures, recompiles and why), when that stage ran."""
    rows = view.ca_rows(report)
    if not rows:
        return None
    table = Table(title="compiled autograd", title_justify="left")
    for col in ("probe", "steps", "graphs without CA", "graphs with CA", "backward graphs / capture", "captures",
                "hooks captured", "recompiles (steady-state: why)"):
        table.add_column(col, overflow="fold")
    labels = short_labels(report)
    for p, s, counts in rows:
        steady = [f.context.get("reason", "")[:80] for f in s.findings if f.kind == "recompile"]
        count = counts["recompiles"]
        why = _dash(count) + (f" (every step: {'; '.join(steady)})" if steady else " (warm-up only)"
                              if count else "")
        table.add_row(labels[p.id], *(_dash(counts[k]) for k in view.CA_COLUMNS), why)
    return table


def _dash(value: object) -> str:
    """``–`` for a count that was not measured (None), never ``None`` or 0."""
    return "–" if value is None else str(value)


def next_steps(report: RunReport) -> list[str]:
    """One line per failing probe: ``tracecheck fix FILE::PROBE`` when a kind it found has a code fix, else the
    page of its first kind; then how to make an attachment for an issue. Paths relative to the cwd."""
    lines = []
    for p in report.probes:
        v = p.verdict
        if v.status == PASS:
            continue
        node = f"{os.path.relpath(p.file)}::{p.name}"
        fixable = [k for k in v.kinds if k in kinds() and kinds()[k].code_fix]
        if fixable:
            lines.append(f"{node}: tracecheck fix {node} -o fixed_ops.py   ({', '.join(fixable)})")
        elif v.kinds and v.kinds[0] in kinds():
            lines.append(f"{node}: read {kinds()[v.kinds[0]].doc} ({v.kinds[0]})")
    if lines:
        lines.append("attach to an issue: rerun with --report report.md (a Markdown file under GitHub's size limit)")
    return lines


def render(report: RunReport, console: Console, verbose: bool = False) -> None:
    console.print(environment_line(report))
    console.print(verdict_table(report))
    ca = compiled_autograd_table(report)
    if ca is not None:
        console.print(ca)
    console.print(findings(report, verbose))
    steps = next_steps(report)
    if steps:
        console.print(Text("\nnext:", style="bold"))
        for line in steps:
            console.print(Text(f"  {line}"), soft_wrap=True)
    n_fail = sum(1 for p in report.probes if p.verdict.status != PASS)
    n = len(report.probes)
    console.print(f"\n{n} probe{'s' if n != 1 else ''}, {n_fail} failing, {report.seconds:.1f} s")
