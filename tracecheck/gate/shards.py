"""CI sharding, the gate's side: reading ``--shard K/N`` (given, or from a report's command) and joining shard reports
(``tracecheck merge``); which probes a shard runs is collect/sharding.py. Pure: no torch import."""
from __future__ import annotations

import os
import re

from ..model.exitcodes import UsageError
from ..model.report import ProbeReport, RunReport
from ..stages import order as stage_order


_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N), 1 <= K <= N. Raises UsageError."""
    m = _SHARD.match(text or "")
    if not m:
        raise UsageError(f"--shard {text}: expected K/N, e.g. 2/4")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: K must be between 1 and N (N >= 1)")
    return k, n


def shard_from_command(command: list[str]) -> tuple[int, int] | None:
    """The ``--shard K/N`` a report was run with, read back from its recorded command line."""
    for i, arg in enumerate(command):
        value = None
        if arg == "--shard" and i + 1 < len(command):
            value = command[i + 1]
        elif arg.startswith("--shard="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                return parse_shard(value)
            except UsageError:
                return None
    return None


def merge(reports: list[RunReport], sources: list[str]) -> RunReport:
    """Join shard reports into one. A probe id found in two inputs is a UsageError (shards are disjoint)."""
    if not reports:
        raise UsageError("merge: no reports given")
    seen: dict[str, str] = {}
    probes: list[ProbeReport] = []
    stages: list[str] = []
    for report, src in zip(reports, sources):
        for p in report.probes:
            if p.id in seen:
                raise UsageError(f"merge: probe {p.id} is in both {seen[p.id]} and {src} (overlapping shards?)")
            seen[p.id] = src
            probes.append(p)
        stages += [s for s in report.stages if s not in stages]
    first = reports[0]
    if len({r.strict for r in reports}) > 1:
        raise UsageError("merge: some shard reports were run with --strict and some without; rerun them alike")
    if len({tuple(r.require) for r in reports}) > 1:
        raise UsageError("merge: the shard reports require different targets (--require); rerun them alike")
    torch_versions = sorted({str(r.environment.get("torch")) for r in reports})
    environment = dict(first.environment)
    if len(torch_versions) > 1:
        environment["merged_torch_versions"] = torch_versions
    roots = sorted({r.rootdir for r in reports if r.rootdir})
    if len(roots) > 1:  # shards of one CI matrix on several machines: ids are relative to each one's checkout
        environment["merged_rootdirs"] = roots
    return RunReport(
        probes=sorted(probes, key=lambda p: p.id),
        environment=environment,
        stages=sorted(stages, key=stage_order),
        command=["tracecheck", "merge", *[os.path.basename(s) for s in sources]],
        tracecheck_version=first.tracecheck_version,
        seconds=round(sum(r.seconds for r in reports), 2),
        rootdir=first.rootdir,
        strict=first.strict,
        require=first.require,
        # an ``ops`` run's shards each ran the same test command: its audit is the first shard's
        ops=next((r.ops for r in reports if r.ops is not None), None),
    )
