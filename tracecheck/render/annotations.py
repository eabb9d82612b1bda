"""GitHub Actions workflow commands: ``::error file=…,line=…::`` at the user frame of each new graph break.

Emitted on stdout only when ``GITHUB_ACTIONS=true`` (the runner sets it). With a baseline comparison, the
regressed graph breaks are annotated; without one, every graph break in the report is new. Files are made
relative to ``GITHUB_WORKSPACE`` (else the working directory) so GitHub can place them on the diff.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from ..model.report import RunReport


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


def lines(report: RunReport | None, comparison: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The workflow-command lines to print: one per (probe, break location), naming the stages that saw it."""
    env = environ if environ is not None else os.environ
    found: dict[tuple, list[str]] = {}  # (probe, file, line, what) -> stages
    # Without a baseline every break is new; with one, the regressed breaks are, and so are all the breaks
    # of a probe or stage the baseline did not have.
    everything_new: set[tuple[str, str | None]] = set()
    if comparison is not None:
        for c in comparison.regressions:
            if c.aspect == "break":
                loc = c.location or {}
                found.setdefault((c.probe, loc.get("file"), loc.get("line"), str(c.after)), []).append(c.stage)
            elif c.aspect in ("probe", "stage") and c.before in ("absent", "not run"):
                everything_new.add((c.probe, c.stage))
    for p in report.probes if report is not None else []:
        for stage, s in p.stages.items():
            if comparison is not None and (p.id, None) not in everything_new and (p.id, stage) not in everything_new:
                continue
            if not p.gate.requires(s.target):  # a target the run does not require gates nothing: no ::error
                continue
            for b in s.breaks:
                file = _workspace_relative(b.file, env) if b.file else None
                what = f"{b.kind} ({b.gb_type or 'no gb_type'})" + (f" at {file}:{b.line}" if file else "")
                found.setdefault((p.id, file, b.line, what), []).append(stage)
    return [command(file, line, "tracecheck: new graph break", f"{probe}: {what} [stages: {', '.join(stages)}]")
            for (probe, file, line, what), stages in found.items()]
