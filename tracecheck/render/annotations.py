"""GitHub Actions workflow commands: ``::error file=…,line=…::`` at the user frame of each new graph break.

Emitted on stdout only when ``GITHUB_ACTIONS=true`` (the runner sets it). With a baseline comparison, one
``::error`` per regressed root cause (``Comparison.causes``), at its file:line when it has one, naming the probes
and stages it covers; the breaks of a probe or stage the baseline did not have are all new. Without one, every
graph break in the report is new. Files are made relative to ``GITHUB_WORKSPACE`` (else the working directory)
so GitHub can place them on the diff.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from ..gate.changes import REGRESSED
from ..model.report import RunReport
from . import view

#: probe ids (stage names) a root cause's annotation lists before counting the rest
_LISTED = 10


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    return (environ if environ is not None else os.environ).get("GITHUB_ACTIONS") == "true"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def _workspace_relative(file: str, environ: Mapping[str, str]) -> str:
    if not os.path.isabs(file):
        return file.replace("\\", "/")
    root = environ.get("GITHUB_WORKSPACE") or os.getcwd()
    rel = os.path.relpath(file, root)
    return (file if rel.startswith("..") else rel).replace("\\", "/")


def command(file: str | None, line: int | None, title: str, message: str) -> str:
    props = []
    if file:
        props.append(f"file={_escape_property(file)}")
        if line:
            props.append(f"line={int(line)}")
    props.append(f"title={_escape_property(title)}")
    return f"::error {','.join(props)}::{_escape_data(message)}"


def _listed(names: list[str]) -> str:
    more = len(names) - _LISTED
    return ", ".join(names[:_LISTED]) + (f" and {more} more" if more > 0 else "")


def cause_line(cause: Any) -> str:
    """One regressed root cause: at its break's file:line, naming what it is and every probe and stage it covers."""
    gb_type = f": {cause.gb_type}" if cause.gb_type else ""
    where = f"probes: {_listed(cause.probes)}" + (f"; stages: {_listed(cause.stages)}" if cause.stages else "")
    title = "tracecheck: new graph break" if cause.aspect == "break" else "tracecheck: regression"
    # where it regressed only: a stage of a target the gate does not require is no part of the failure
    return command(cause.file, cause.line, title, f"{cause.what} in {cause.scope}{gb_type} [{where}]")


def lines(report: RunReport | None, comparison: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The workflow-command lines to print: one per regressed root cause with a comparison; one per break location
    of the report's breaks that are new (all, without a comparison), naming the probes and stages that saw it."""
    env = environ if environ is not None else os.environ
    out: list[str] = []
    found: dict[tuple, tuple[list[str], list[str]]] = {}  # (file, line, what) -> (probes, stages)
    # a probe or stage the baseline did not have: its breaks, from the report, are new; the cause itself is
    # annotated only when none of them is (a stage that fails without a break, or two baselines compared)
    everything_new: set[tuple[str, str | None]] = set()
    new_causes: list[Any] = []
    for cause in comparison.causes if comparison is not None else []:
        if cause.effect != REGRESSED:
            continue
        if report is not None and cause.aspect in ("probe", "stage") and \
                all(c.before in ("absent", "not run") for c in cause.changes):
            everything_new.update(cause.covers)
            new_causes.append(cause)
            continue
        out.append(cause_line(cause))
    annotated: set[tuple[str, str]] = set()
    for p in report.probes if report is not None else []:
        for stage, s in p.stages.items():
            if comparison is not None and (p.id, None) not in everything_new and (p.id, stage) not in everything_new:
                continue
            if not view.cell(s, p.gate).required:  # a target the run does not require gates nothing: no ::error
                continue
            for b in s.breaks:
                file = _workspace_relative(b.file, env) if b.file else None
                what = f"{b.kind} ({b.gb_type or 'no gb_type'})" + (f" at {file}:{b.line}" if file else "")
                probes, stages = found.setdefault((file, b.line, what), ([], []))
                if p.id not in probes:
                    probes.append(p.id)
                if stage not in stages:
                    stages.append(stage)
                annotated.add((p.id, stage))
    # a new probe's or stage's cause is annotated unless its breaks already are, in every probe and stage it covers
    out += [cause_line(cause) for cause in new_causes
            if not all((probe, stage) in annotated or (stage is None and any(a[0] == probe for a in annotated))
                       for probe, stage in cause.covers)]
    # one per break location, across probes (a print on one line that two probes reach is one annotation)
    return out + [command(file, line, "tracecheck: new graph break",
                          f"{what} [probes: {_listed(probes)}; stages: {', '.join(stages)}]")
                  for (file, line, what), (probes, stages) in found.items()]
