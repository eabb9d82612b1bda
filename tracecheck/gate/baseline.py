"""CI gate: baselines, and comparing two runs (sharding and merging: shards.py; reading files: reportio.py).

A *baseline* is a run report reduced to what must not get worse, and nothing that differs between
machines: no timings, no absolute paths, no message text. Layout (docs/ci.md has the JSON schema)::

    {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0+cpu", "stages": [...],
     "probes": {"<file>::<name>": {"stages": {"<stage>": {
         "status": "fail", "kinds": ["graph-break"], "graph_count": 2, "graph_break_count": 1,
         "graph_break_sites": 1,
         "breaks": [{"kind": "graph-break", "gb_type": "...", "file": "model.py", "line": 12, "gb_code": "GB0001"}],
         "recompiles": null, "phases": ["forward", "backward"], "compiled_autograd": {...},
         "coverage": {"calls_captured": 84, "unique_graphs": 2, "frames_eager": 0}}}}},
     "tolerance": {"calls_captured": 0.0}}

Probe ids are the report's rootdir-relative ``file::name``; break files are made relative the same way (see
``relative_location``). ``compare`` works on two such documents (a full ``--json`` report is reduced first),
so a baseline, a report and a merged shard report all compare the same way. Its changes are one per probe,
stage and aspect; ``Comparison.causes`` groups them by root cause (``root_causes``: one new break is one cause,
however many stages' status, kinds and counts it moved), which the diff, the summary line and the GitHub
annotations count. Pure: no torch import.

Advice kinds (taxonomy severity ``advice``: ``no-batching-rule``, ``opaque-op``) are kept apart, under a stage's
``advice``: a new one is shown but is no regression, unless the run was ``--strict`` or the baseline's own
``severity`` object, which the user edits and ``--update-baseline`` keeps, says ``{"opaque-op": "error"}``.

Targets (targets.py): each stage snapshot names its ``target``; only stages of a required target regress. The
required targets are the run's ``--require`` joined with the baseline's own ``"require"`` list (which the user
edits and ``--update-baseline`` keeps, as ``severity``); a stage of another target that gets worse is a
``changed`` line, saying how to require it.
"""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from ..model import taxonomy
from ..model.exitcodes import UsageError
from ..model.evidence import LIBRARY
from ..model.payloads import PAYLOADS, Coverage
from ..model.report import CRASH, FAIL, FAILED, IMPORT_PROBE, INTERNAL, PASS, SKIP, TIMEOUT, ProbeReport, RunReport, StageResult, upgraded_break_counts
from ..model.verdict import StageOutcome, decide
from ..model.reportio import BASELINE_FORMAT, is_baseline, read_json, write_json_atomic
from .shards import shard_from_command
from ..stages import LOWER_IS_BETTER, NEUTRAL, REGISTRY, target_of
from ..stages import order as stage_order
from ..model.targets import DEFAULT_REQUIRE, Gate, normalized

BASELINE_SCHEMA_VERSION = 1

#: Counts a stage adds to StageResult.extra (``StageSpec.counts``) that must not grow, and those that are shown
#: when they change but are neither better nor worse. A stage's ``recompiles`` is compared once, on its own.
COUNTS_LOWER_IS_BETTER = tuple(dict.fromkeys(k for s in REGISTRY.values() for k, how in s.counts.items()
                                             if how == LOWER_IS_BETTER))
COUNTS_NEUTRAL = tuple(dict.fromkeys(k for s in REGISTRY.values() for k, how in s.counts.items() if how == NEUTRAL))

REGRESSED, IMPROVED, CHANGED = "regressed", "improved", "changed"
#: the change aspects of compile coverage: ops captured (more is better) and frames run in eager (fewer is)
CAPTURED, EAGER_FRAMES = "coverage.calls_captured", "coverage.frames_eager"

#: the stage that measures a probe's compile coverage (model/payloads.Coverage), and the counts a snapshot keeps:
#: torch's own counters, the ones PyTorch's CI gates on (benchmarks/dynamo/check_graph_breaks.py TRACKED_METRICS)
COVERAGE_STAGE = "explain"
COVERAGE_METRICS = ("calls_captured", "unique_graphs", "frames_eager", "torch_calls_eager")
#: the baseline's ``tolerance`` setting: how far ops captured may drop (a fraction of the baseline's count) before
#: it regresses. 0 by default: the counts are exact for one torch and one model (no run-to-run noise), so any drop
#: is a real change; a project that upgrades torch often may allow a few percent, as one of PyTorch's own gates did
TOLERANCES = {"calls_captured": 0.0}
_FAILED = FAILED


# ---------------------------------------------------------------------------------------------------------
# Baseline documents


def package_relative(file: str) -> str | None:
    """``site-packages/pkg/mod.py`` for a file inside an installed package, else None."""
    norm = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in norm:
            return marker + norm.split(marker, 1)[1]
    return None


def relative_location(file: str | None, probe: ProbeReport) -> str | None:
    """A break's file, relative the way the probe id is, so that it is the same on every machine.

    ``probe.file`` is absolute and the id's file part is relative to the run's rootdir; the break's file
    is re-anchored on the id's directory (``/ci/repo/probes/mhc/model.py`` for the probe
    ``probes/mhc_probes.py::probe`` becomes ``probes/mhc/model.py``). Files inside an installed package keep
    the part after ``site-packages/``.
    """
    if not file:
        return None
    installed = package_relative(file)
    if installed or not os.path.isabs(file):
        return installed or file.replace("\\", "/")
    id_dir = os.path.dirname(probe.id.split("::", 1)[0])
    rel = os.path.relpath(file, os.path.dirname(probe.file))
    return os.path.normpath(os.path.join(id_dir, rel)).replace("\\", "/")


def stage_snapshot(s: StageResult, probe: ProbeReport) -> dict[str, Any]:
    found = {f.kind for f in s.findings or ([s.failure] if s.failure else [])}
    plain = Gate()  # recorded as a plain run sees them (--strict aside)
    kinds = sorted(k for k in found if plain.fails_on(k))
    advice = sorted(k for k in found if not plain.fails_on(k))
    breaks = sorted(
        ({"kind": b.kind, "gb_type": b.gb_type, "file": relative_location(b.file, probe), "line": b.line,
          **({"gb_code": b.gb_code} if b.gb_code else {}),  # informative (root causes name it); not compared
          # the line's source text: with file, kind and gb_type, what the break is, whatever line it moves to
          **({"code": source_text(b.context["code"])} if isinstance(b.context.get("code"), str)
             and source_text(b.context["code"]) else {}),
          # whose code (informative): a new break in a library names the library and its version
          **({"owner": b.owner.label} if b.owner is not None and b.owner.who == LIBRARY else {})}
         for b in s.breaks),
        key=_break_sort_key,
    )
    # a stage that --strict failed for advice alone is recorded as passing: advice is gated through its kinds
    # (gated_advice), so a strict and a plain run of the same code compare equal
    status = PASS if s.status == FAIL and not kinds and advice else s.status
    # where each failure kind points (the user frames of its findings): not compared, only grouped by, so that one
    # line's failure in a stage that records no breaks (vmap, export) is one root cause across probes
    sites: dict[str, list[dict[str, Any]]] = {}
    for f in s.findings or ([s.failure] if s.failure else []):
        frame = f.user_frame
        if f.kind in kinds and frame is not None and frame.file:
            site = {"file": relative_location(frame.file, probe), "line": frame.line}
            if site not in sites.setdefault(f.kind, []):
                sites[f.kind].append(site)
    snap: dict[str, Any] = {
        "status": status,
        "kinds": kinds,
        "graph_count": s.graph_count,
        "graph_break_count": s.graph_break_count,
        "graph_break_sites": s.graph_break_sites,
        "breaks": breaks,
        "recompiles": s.recompile_count,
        "phases": s.phases,
        "target": s.target or target_of(s.stage),
    }
    if advice:
        snap["advice"] = advice
    if sites:
        snap["sites"] = {k: sorted(v, key=lambda x: (x["file"] or "", x["line"] or 0)) for k, v in sorted(sites.items())}
    spec, payload_type = REGISTRY.get(s.stage), PAYLOADS.get(s.stage)
    payload = payload_type.of(s.extra) if spec is not None and spec.counts and payload_type else None
    ca = {k: getattr(payload, k) for k in spec.counts if payload.written(k)} if payload is not None else {}
    if ca:
        snap["compiled_autograd"] = ca
    cov = Coverage.of(s.extra) if s.stage == COVERAGE_STAGE else None
    counts = {k: getattr(cov, k) for k in COVERAGE_METRICS if getattr(cov, k) is not None} if cov else {}
    if counts:
        snap["coverage"] = counts
    return snap


def source_text(code: str) -> str:
    """A break's source line as its identity and as shown: stripped, its comment dropped (``y = f(x)  # note`` is
    ``y = f(x)``), so that editing a comment changes nothing; a line that does not tokenize on its own (a piece of
    a longer statement) is only stripped."""
    line = code.strip()
    try:
        for t in tokenize.generate_tokens(io.StringIO(line).readline):
            if t.type == tokenize.COMMENT:
                return line[:t.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return line


def _break_sort_key(b: dict[str, Any]) -> tuple:
    return (b.get("kind") or "", b.get("gb_type") or "", b.get("file") or "", b.get("line") or 0)


def from_report(report: RunReport, severity: dict[str, str] | None = None,
                require: tuple[str, ...] | None = None, tolerance: dict[str, float] | None = None) -> dict[str, Any]:
    """The baseline document of a run report (sorted, so rewriting an unchanged baseline is a no-op diff).
    ``severity``: the per-kind setting to keep (``severity_setting`` of the baseline being rewritten);
    ``require``: the required targets the document records: the baseline's own setting when one is written (the
    run's ``--require`` is the CI command's, like ``--strict``, and is not recorded), the run's (None) when the
    document is the new side of a comparison; ``tolerance``: the baseline's (``tolerance_setting``) to keep."""
    probes = {}
    for p in sorted(report.probes, key=lambda p: p.id):
        probes[p.id] = {"stages": {name: stage_snapshot(s, p) for name, s in p.stages.items()}}
    doc: dict[str, Any] = {
        "format": BASELINE_FORMAT,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "torch": report.environment.get("torch"),
        # informative, as torch: a new tracecheck may check more (a stage that asks more), said in a note
        **({"tracecheck": report.tracecheck_version} if report.tracecheck_version else {}),
        "stages": list(report.stages),
        "probes": probes,
    }
    if severity:
        doc["severity"] = dict(sorted(severity.items()))
    if tolerance:
        doc["tolerance"] = dict(sorted(tolerance.items()))
    required = normalized(report.require if require is None else require)
    if required != DEFAULT_REQUIRE:
        doc["require"] = list(required)
    if report.strict:
        doc["strict"] = True
    return doc


def severity_setting(doc: dict[str, Any]) -> dict[str, str]:
    """A baseline's ``severity`` object: advice kind -> ``error`` (gate on it) or ``advice``. Raises ValueError."""
    setting = doc.get("severity", {})
    if not isinstance(setting, dict):
        raise ValueError("'severity' must be an object such as {\"opaque-op\": \"error\"}")
    for kind, value in setting.items():
        if kind not in taxonomy.ids():
            raise ValueError(f"severity: {kind!r} is not a kind (advice kinds: "
                             f"{', '.join(sorted(taxonomy.advice_ids()))})")
        if not taxonomy.is_advice(kind):
            raise ValueError(f"severity: {kind!r} is an error kind, which always gates; only advice kinds can be "
                             f"set ({', '.join(sorted(taxonomy.advice_ids()))})")
        if value not in taxonomy.SEVERITIES:
            raise ValueError(f"severity: {kind!r} is {value!r}; expected one of {', '.join(taxonomy.SEVERITIES)}")
    return dict(setting)


def require_setting(doc: dict[str, Any]) -> tuple[str, ...]:
    """A baseline's (or a reduced report's) ``require`` list: the targets it gates on. Raises ValueError."""
    from ..model.targets import TARGETS

    value = doc.get("require", [])
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError("'require' must be a list of targets such as [\"compile\", \"func\"]")
    unknown = [t for t in value if t not in TARGETS]
    if unknown:
        raise ValueError(f"require: {', '.join(map(repr, unknown))} is not a target ({', '.join(TARGETS)})")
    return normalized(value)


def tolerance_setting(doc: dict[str, Any]) -> dict[str, float]:
    """A baseline's ``tolerance`` object, e.g. ``{"calls_captured": 0.05}``: how far (a fraction of the baseline's
    count) a count whose drop is a regression may drop before it regresses. Raises ValueError."""
    setting = doc.get("tolerance", {})
    if not isinstance(setting, dict):
        raise ValueError("'tolerance' must be an object such as {\"calls_captured\": 0.05}")
    for key, value in setting.items():
        if key not in TOLERANCES:
            raise ValueError(f"tolerance: {key!r} has no tolerance (only {', '.join(TOLERANCES)})")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise ValueError(f"tolerance: {key!r} is {value!r}; expected a fraction from 0 to below 1, such as 0.05")
    return {k: float(v) for k, v in setting.items()}


#: the top-level settings of a baseline that the user edits and ``--update-baseline`` keeps (choices, not
#: measurements), each with its reader
SETTINGS = ("severity", "require", "tolerance")


def gated_advice(base: dict[str, Any], new: dict[str, Any]) -> frozenset[str]:
    """The advice kinds that regress like errors: all of them when the new run is ``--strict`` (its ``strict``;
    how the baseline was recorded does not matter: the gate is the CI command's), else those the baseline's
    ``severity`` sets to ``error``."""
    if new.get("strict"):
        return taxonomy.advice_ids()
    return frozenset(k for k, v in severity_setting(base).items() if v == taxonomy.ERROR)


def empty() -> dict[str, Any]:
    """A baseline with no probes (what ``--update-baseline`` compares with when the file does not exist)."""
    return {"format": BASELINE_FORMAT, "schema_version": BASELINE_SCHEMA_VERSION, "torch": None, "stages": [],
            "probes": {}}


def to_baseline(doc: dict[str, Any]) -> dict[str, Any]:
    """A baseline document from either a baseline or a full ``--json`` report. Raises ValueError."""
    if is_baseline(doc):
        version = doc.get("schema_version")
        if version != BASELINE_SCHEMA_VERSION:
            raise ValueError(f"baseline schema_version {version!r} is not supported "
                             f"(expected {BASELINE_SCHEMA_VERSION}); rewrite it with --update-baseline")
        if not isinstance(doc.get("probes"), dict):
            raise ValueError("baseline has no 'probes' object")
        severity_setting(doc)
        require_setting(doc)
        tolerance_setting(doc)
        _check_probes(doc["probes"])
        _upgrade_break_counts(doc["probes"])
        return doc
    if "probes" in doc and "schema_version" in doc:
        return from_report(RunReport.from_dict(doc), require=())  # a report as a baseline: its --require was its run's
    raise ValueError("neither a tracecheck baseline nor a tracecheck JSON report")


_STATUSES = (PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL)


def _upgrade_break_counts(probes: dict[str, Any]) -> None:
    """A baseline written before ``graph_break_sites``: its counts read as a report's are (upgraded_break_counts)."""
    for probe in probes.values():
        for stage, snap in probe["stages"].items():
            if "graph_break_sites" not in snap:
                counts = upgraded_break_counts(stage, snap)
                snap["graph_break_count"], snap["graph_break_sites"] = (counts["graph_break_count"],
                                                                        counts["graph_break_sites"])


def _check_probes(probes: dict[str, Any]) -> None:
    """The shape ``compare`` reads: probe -> {"stages": {stage -> {...}}}, each field of the type it is written with.
    A hand-edited baseline that breaks it is refused when it is loaded, before a run whose results it would lose."""
    from ..model.targets import TARGETS

    for pid, probe in probes.items():
        stages = probe.get("stages") if isinstance(probe, dict) else None
        if not isinstance(stages, dict):
            raise ValueError(f"probe {pid!r}: expected an object with a 'stages' object")
        for stage, snap in stages.items():
            where = f"probe {pid!r}, stage {stage!r}"
            if not isinstance(snap, dict):
                raise ValueError(f"{where}: expected an object")
            if snap.get("status") not in _STATUSES:
                raise ValueError(f"{where}: 'status' must be one of {', '.join(_STATUSES)}")
            if "target" in snap and snap["target"] not in TARGETS:
                raise ValueError(f"{where}: 'target' must be one of {', '.join(TARGETS)}")
            for key in ("kinds", "advice"):
                value = snap.get(key, [])
                if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
                    raise ValueError(f"{where}: '{key}' must be a list of kind names")
            sites = snap.get("sites", {})
            if not isinstance(sites, dict) or not all(
                    isinstance(v, list) and all(isinstance(x, dict) and _is(x.get("file"), str)
                                                and _is(x.get("line"), int) for x in v) for v in sites.values()):
                raise ValueError(f"{where}: 'sites' must map kinds to lists of {{file, line}} objects")
            breaks = snap.get("breaks", [])
            if not isinstance(breaks, list) or not all(isinstance(b, dict) and isinstance(b.get("kind"), str)
                                                       for b in breaks):
                raise ValueError(f"{where}: 'breaks' must be a list of {{kind, gb_type, file, line}} objects")
            for i, b in enumerate(breaks):
                for key, types, what in _BREAK_FIELDS:
                    if not _is(b.get(key), types):
                        raise ValueError(f"{where}: breaks[{i}].{key} must be {what} or null")
            for key in ("graph_count", "graph_break_count", "graph_break_sites", "recompiles"):
                if not _is(snap.get(key), int):
                    raise ValueError(f"{where}: '{key}' must be a count or null")
            phases = snap.get("phases")
            if phases is not None and (not isinstance(phases, list) or not all(isinstance(x, str) for x in phases)):
                raise ValueError(f"{where}: 'phases' must be a list such as [\"forward\", \"backward\"] or null")
            ca = snap.get("compiled_autograd")
            if ca is not None and (not isinstance(ca, dict) or not all(_is(v, (int, list)) for v in ca.values())):
                raise ValueError(f"{where}: 'compiled_autograd' must be an object of counts")
            cov = snap.get("coverage")
            if cov is not None and not isinstance(cov, dict):
                raise ValueError(f"{where}: 'coverage' must be an object of counts such as {{\"calls_captured\": 84}}")
            for key in COVERAGE_METRICS:  # another key is kept and not read (a newer tracecheck's)
                value = (cov or {}).get(key)
                if not _is(value, int) or (value is not None and value < 0):
                    raise ValueError(f"{where}: coverage.{key} must be a count (0 or more) or null")


#: a snapshot break's fields after ``kind``: (key, type, what it must be)
_BREAK_FIELDS = (("gb_type", str, "a string"), ("file", str, "a relative path"), ("line", int, "a line number"),
                 ("gb_code", str, "a GB code such as \"GB0025\""), ("code", str, "the line's source text"),
                 ("owner", str, "a library and its version"))


def _is(value: Any, types: Any) -> bool:
    """``value`` is null or of ``types`` (a bool is no count)."""
    return value is None or (isinstance(value, types) and not isinstance(value, bool))


def load_baseline(path: str, what: str = "baseline") -> dict[str, Any]:
    """Read a baseline (or a full report, reduced to one). Raises UsageError."""
    doc = read_json(path, what)
    try:
        return to_baseline(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{what} {path}: {e}") from e


# ---------------------------------------------------------------------------------------------------------
# Comparison


@dataclass
class Change:
    """One difference between baseline and new run. ``effect`` is regressed, improved or changed (neutral).

    ``location`` is ``{"file", "line"}`` (relative) for a graph break, so CI can annotate the user's line;
    ``graph_break`` the break itself (kind, gb_type, gb_code where the snapshot has it, file, line), which
    ``root_causes`` groups on.
    """

    probe: str
    stage: str | None
    aspect: str
    before: Any
    after: Any
    effect: str
    detail: str
    location: dict[str, Any] | None = None
    graph_break: dict[str, Any] | None = None
    #: why a count's move is not what it seems (within the tolerance; outweighed), also said at the end of ``detail``
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Comparison:
    """All differences of a new run against a baseline, in probe/stage order; ``causes`` groups them."""

    changes: list[Change] = field(default_factory=list)
    compared_probes: int = 0
    notes: list[str] = field(default_factory=list)
    #: each probe's Dynamo metrics (graph_breaks, calls_captured, ...) as PyTorch's CI gates them
    metrics: list["MetricCheck"] = field(default_factory=list)

    @property
    def causes(self) -> list[ChangeCause]:
        """The changes grouped by root cause (``root_causes``): what the diff table and annotations show."""
        return root_causes(self.changes)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.effect == REGRESSED]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.effect == IMPROVED]

    @property
    def regressed(self) -> bool:
        """True when anything got worse; the CLI exits 1."""
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        """``changes``: one per probe x stage x aspect; ``causes``: their root causes, each listing its changes
        by index into ``changes``."""
        index = {id(c): i for i, c in enumerate(self.changes)}
        return {"compared_probes": self.compared_probes, "regressed": self.regressed, "notes": self.notes,
                "changes": [c.to_dict() for c in self.changes],
                "causes": [cause.to_dict(index) for cause in self.causes],
                "metrics": [m.to_dict() for m in self.metrics]}


def compare(base: dict[str, Any], new: dict[str, Any], only: Iterable[str] | None = None) -> Comparison:
    """Compare two baseline documents (see ``to_baseline``).

    Per probe and stage: status, failure kinds, graph count, graph breaks (count, and each by kind, gb_type
    and relative location), recompiles and compiled-autograd counts, and the explain stage's compile coverage. A
    regression is a new failure or kind, more breaks, more graphs, more recompiles or compiled-autograd graphs,
    fewer ops captured (beyond the baseline's ``tolerance``), more frames run in eager, or a probe that went
    missing. More of the model captured outweighs new breaks and more graphs (``_outweigh``).
    ``only`` restricts the comparison to those probe ids (a shard compares the probes it ran).
    """
    cmp = Comparison()
    gated = gated_advice(base, new)
    tolerance = {**TOLERANCES, **tolerance_setting(base)}
    upgrades = _library_upgrades(base, new)
    cmp.notes += [f"{name} {was} -> {now} since the baseline: a new break in its files may come with the upgrade"
                  for name, (was, now) in sorted(upgrades.items())]
    was, now = base.get("tracecheck"), new.get("tracecheck")
    if was and now and was != now:
        cmp.notes.append(f"tracecheck {was} -> {now} since the baseline: a stage may check more than it did (its "
                         "release notes say what); rewrite the baseline with --update-baseline once reviewed")
    gate = Gate(normalized([*require_setting(base), *require_setting(new)]))
    base_probes: dict[str, Any] = base.get("probes", {})
    new_probes: dict[str, Any] = new.get("probes", {})
    ids = sorted(set(base_probes) | set(new_probes))
    if only is not None:
        keep = set(only)
        ids = [i for i in ids if i in keep]
    for pid in ids:
        b, n = base_probes.get(pid), new_probes.get(pid)
        if n is None and pid.endswith(f"::{IMPORT_PROBE}"):  # the file's import failure is gone: it imports now
            cmp.changes.append(Change(pid, None, "probe", "fail", "absent", IMPROVED,
                                      "the file imports now (its import failure is gone)"))
            continue
        if n is None:
            cmp.changes.append(Change(pid, None, "probe", "present", "missing", REGRESSED,
                                      "probe went missing (not found in the new run)"))
            continue
        if b is None:
            failing = _failing_kinds(n, gated, gate)
            if failing:
                cmp.changes.append(Change(pid, None, "probe", "absent", "fail", REGRESSED,
                                          f"new probe fails: {', '.join(failing)}"))
            else:
                cmp.changes.append(Change(pid, None, "probe", "absent", "pass", CHANGED, "new probe, passes"))
            continue
        cmp.compared_probes += 1  # in both: a new probe is shown (it fails or passes), not compared
        b_stages, n_stages = b.get("stages", {}), n.get("stages", {})
        probe_changes: list[Change] = []
        for stage in sorted(set(b_stages) | set(n_stages), key=stage_order):
            changes = _compare_stage(pid, stage, b_stages.get(stage), n_stages.get(stage), gated, tolerance)
            target = _target(stage, b_stages.get(stage), n_stages.get(stage))
            probe_changes += changes if gate.requires(target) else [_not_required(c, target, gate) for c in changes]
        probe_changes = _with_new_breaks(_outweigh(_upgraded(probe_changes, upgrades), b_stages.get(COVERAGE_STAGE),
                                                   n_stages.get(COVERAGE_STAGE)))
        cmp.changes += probe_changes
        cmp.metrics += _metrics(pid, b_stages.get(COVERAGE_STAGE), n_stages.get(COVERAGE_STAGE), probe_changes)
    moved = _moved_ids([c.probe for c in cmp.changes if c.aspect == "probe" and c.after == "missing"],
                       [c.probe for c in cmp.changes if c.aspect == "probe" and c.before == "absent"])
    if moved:
        cmp.notes.append(f"the probe ids moved ({moved[0][0]} -> {moved[0][1]}"
                         + (f" and {len(moved) - 1} more" if len(moved) > 1 else "") + "): the baseline was recorded "
                         "with another rootdir (the folder with pyproject.toml, setup.cfg, tox.ini, pytest.ini or .git "
                         "above the model files); run where that marker exists, or rewrite the baseline")
    return cmp


def _moved_ids(missing: list[str], new: list[str]) -> list[tuple[str, str]]:
    """Missing and new probes whose ids differ only in the file's leading folders (``probes/m.py::p`` and
    ``m.py::p``): the ids' rootdir changed, not the probes."""
    out = []
    for was in missing:
        file, _, name = was.partition("::")
        for now in new:
            f2, _, n2 = now.partition("::")
            if n2 == name and f2 != file and (file.endswith("/" + f2) or f2.endswith("/" + file)):
                out.append((was, now))
                break
    return out


def _target(stage: str, *snaps: dict[str, Any] | None) -> str:
    """A stage's target: the registry's (a hand-edited snapshot cannot move a stage out of compile); a stage this
    tracecheck does not know takes its snapshot's."""
    if stage in REGISTRY:
        return target_of(stage)
    return next((s["target"] for s in snaps if s and isinstance(s.get("target"), str)), target_of(stage))


def _not_required(c: Change, target: str, gate: Gate) -> Change:
    """A change in a stage of a target the gate does not require: shown, never a regression."""
    if c.effect != REGRESSED:
        return c
    return replace(c, effect=CHANGED,
                   detail=f"{c.detail} (target {target} not required; {gate.how_to_require(target)} gates on it)")


def _failing_kinds(probe: dict[str, Any], gated: frozenset[str] = frozenset(), gate: Gate = Gate()) -> list[str]:
    """What fails a snapshot's probe: the report's own rule (model/verdict.decide) on its stages' outcomes."""
    return list(decide((_outcome(stage, s, gated) for stage, s in probe.get("stages", {}).items()), gate,
                       gated).kinds)


def _outcome(stage: str, snap: dict[str, Any], gated: frozenset[str]) -> StageOutcome:
    """A snapshot's stage as the verdict reads it. A snapshot records a stage that advice alone failed as a pass
    (``stage_snapshot``): advice the comparison gates fails it again here, as --strict did in the run."""
    kinds, advice = tuple(snap.get("kinds", [])), tuple(snap.get("advice", []))
    status = snap.get("status", "")
    if status == PASS and any(k in gated for k in advice):
        status = FAIL
    return StageOutcome(stage, status, _target(stage, snap), kinds + advice)


def _gated(snap: dict[str, Any], gated: frozenset[str]) -> list[str]:
    return [k for k in snap.get("advice", []) if k in gated]


def _compare_stage(pid: str, stage: str, b: dict[str, Any] | None, n: dict[str, Any] | None,
                   gated: frozenset[str] = frozenset(), tolerance: dict[str, float] = TOLERANCES) -> list[Change]:
    if n is None:
        return [Change(pid, stage, "stage", b.get("status") if b else None, "not run", CHANGED,
                       "stage not run in the new run; not compared")]
    if b is None:
        if n.get("status") in _FAILED:
            return [Change(pid, stage, "stage", "not run", n.get("status"), REGRESSED,
                           f"stage not in the baseline, now fails: {', '.join(n.get('kinds', [])) or n['status']}")]
        return [Change(pid, stage, "stage", "not run", n.get("status"), CHANGED, "stage not in the baseline")]
    out: list[Change] = []
    bs, ns = b.get("status"), n.get("status")
    if INTERNAL in (bs, ns):  # a stage that failed inside tracecheck checked nothing: nothing to compare with it
        side = "the new run" if ns == INTERNAL else "the baseline"
        return [Change(pid, stage, "status", bs, ns, CHANGED,
                       f"not compared: the stage failed inside tracecheck in {side} (status internal-error)")]
    if bs != ns:
        if bs == PASS and ns in _FAILED:
            effect = REGRESSED
        elif bs in _FAILED and ns == PASS:
            effect = IMPROVED
        else:
            effect = CHANGED  # to/from skip, or between fail/timeout/crash (the kinds tell the rest)
        out.append(Change(pid, stage, "status", bs, ns, effect, f"status {bs} -> {ns}"))
    bk, nk = set(b.get("kinds", [])) | set(_gated(b, gated)), set(n.get("kinds", [])) | set(_gated(n, gated))
    for k in sorted(nk - bk):
        out.append(Change(pid, stage, "kind", None, k, REGRESSED, f"new failure kind {k}" + (
            " (advice, gated by --strict or the baseline's severity)" if k in gated else ""), _site_of(n, k)))
    # a stage that stops at its first error (fullgraph, export) and now stops earlier, at a new kind, no longer
    # reaches the old one: that is no improvement, the old kind is only hidden
    hidden = bool(nk - bk) and n.get("status") in _FAILED
    for k in sorted(bk - nk):
        out.append(Change(pid, stage, "kind", k, None, CHANGED, f"failure kind {k} no longer reached (the stage "
                          f"now fails first on {', '.join(sorted(nk - bk))})") if hidden else
                   Change(pid, stage, "kind", k, None, IMPROVED, f"failure kind {k} gone", _site_of(b, k)))
    ba, na = set(b.get("advice", [])) - gated, set(n.get("advice", [])) - gated
    for k in sorted(na - ba):
        out.append(Change(pid, stage, "advice", None, k, CHANGED, f"new advice {k} (advice: no regression)"))
    for k in sorted(ba - na):
        out.append(Change(pid, stage, "advice", k, None, CHANGED, f"advice {k} gone"))
    out += _lower_is_better(pid, stage, "graph_count", b.get("graph_count"), n.get("graph_count"), "graphs")
    out += _lower_is_better(pid, stage, "graph_break_count", b.get("graph_break_count"),
                            n.get("graph_break_count"), "graph breaks")
    out += _compare_breaks(pid, stage, b.get("breaks", []), n.get("breaks", []))
    out += _lower_is_better(pid, stage, "recompiles", b.get("recompiles"), n.get("recompiles"), "recompiles")
    if "backward" in (b.get("phases") or []) and n.get("phases") == ["forward"] and ns not in _FAILED:
        # a stage that checked training now checks the forward only: its pass no longer covers backward
        out.append(Change(pid, stage, "phases", b["phases"], n["phases"], REGRESSED,
                          "backward no longer runs (forward only)"))
    bca, nca = b.get("compiled_autograd") or {}, n.get("compiled_autograd") or {}
    for key in COUNTS_LOWER_IS_BETTER:
        out += _lower_is_better(pid, stage, f"compiled_autograd.{key}", bca.get(key), nca.get(key),
                                f"compiled autograd {key.replace('_', ' ')}")
    for key in COUNTS_NEUTRAL:
        if key in bca and key in nca and bca[key] != nca[key]:
            out.append(Change(pid, stage, f"compiled_autograd.{key}", bca[key], nca[key], CHANGED,
                              f"compiled autograd {key.replace('_', ' ')} {bca[key]} -> {nca[key]}"))
    # compile coverage (the explain stage), a count a baseline predating it lacks is not compared (as PyTorch's gate)
    bcov, ncov = b.get("coverage") or {}, n.get("coverage") or {}
    out += _more_is_better(pid, stage, CAPTURED, bcov.get("calls_captured"), ncov.get("calls_captured"),
                           _COUNT_NOUNS[CAPTURED], tolerance["calls_captured"])
    out += _lower_is_better(pid, stage, EAGER_FRAMES, bcov.get("frames_eager"), ncov.get("frames_eager"),
                            _COUNT_NOUNS[EAGER_FRAMES])
    return out


def _site_of(snap: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """Where a kind's findings point in a snapshot (its first ``sites`` entry), None where nothing placed them (or a
    baseline from before sites)."""
    found = (snap.get("sites") or {}).get(kind) or []
    return {"file": found[0].get("file"), "line": found[0].get("line")} if found and found[0].get("file") else None


def _library_versions(doc: dict[str, Any]) -> dict[str, str]:
    """Library -> version, from the owners of a document's breaks (``transformers 5.24.0``)."""
    out = {}
    for probe in doc.get("probes", {}).values():
        for snap in probe.get("stages", {}).values():
            for b in snap.get("breaks", []):
                name, _, version = (b.get("owner") or "").rpartition(" ")
                if name and version:
                    out[name] = version
    return out


def _library_upgrades(base: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The libraries whose breaks the baseline and the new run both saw, at two versions: name -> (was, now)."""
    was, now = _library_versions(base), _library_versions(new)
    return {name: (was[name], now[name]) for name in was.keys() & now.keys() if was[name] != now[name]}


def _upgraded(changes: list[Change], upgrades: dict[str, tuple[str, str]]) -> list[Change]:
    """A new break in a library upgraded since the baseline says so: the upgrade is its likely cause."""
    out = []
    for c in changes:
        name = ((c.graph_break or {}).get("owner") or "").rpartition(" ")[0]
        if c.aspect == "break" and c.before is None and name in upgrades:
            c = replace(c, detail=f"{c.detail}, since {name} {upgrades[name][0]} -> {upgrades[name][1]}")
        out.append(c)
    return out


def _more_is_better(pid: str, stage: str, aspect: str, before: Any, after: Any, what: str,
                    tolerance: float) -> list[Change]:
    """A count that must not drop (ops captured): a rise improves; a drop regresses unless it is within
    ``tolerance`` (a fraction of ``before``), which is a change."""
    if not isinstance(before, int) or not isinstance(after, int) or before == after:
        return []
    if after > before:
        return [Change(pid, stage, aspect, before, after, IMPROVED, f"{what} {before} -> {after}")]
    drop = (before - after) / before if before else 1.0
    allowed = f"{tolerance * 100:g}%"
    if drop <= tolerance:
        why = f"-{drop:.1%}, within the baseline's tolerance of {allowed}"
        return [Change(pid, stage, aspect, before, after, CHANGED, f"{what} {before} -> {after} ({why})", why=why)]
    why = f"-{drop:.1%}; tolerance {allowed}"
    return [Change(pid, stage, aspect, before, after, REGRESSED, f"{what} {before} -> {after} ({why})", why=why)]


def _uncaptured(cov: dict[str, Any]) -> int | None:
    """Torch calls the eager forward makes that no captured graph has (0 when Dynamo captured more: getitem nodes)."""
    eager, captured = cov.get("torch_calls_eager"), cov.get("calls_captured")
    return max(0, eager - captured) if isinstance(eager, int) and isinstance(captured, int) else None


def _break_site(c: Change) -> tuple:
    b = c.graph_break or {}
    return b.get("kind"), b.get("gb_type"), b.get("file"), b.get("code") or b.get("line")


def _outweigh(changes: list[Change], b: dict[str, Any] | None, n: dict[str, Any] | None) -> list[Change]:
    """One probe's changes, where more of the same model runs inside graphs: its new breaks are changes, not
    regressions. With nested graph breaks (or a fix that lets Dynamo resume where it used to give up) a model can
    break more often while far more of it runs compiled (pytorch/pytorch#191357: ops captured 2 -> 84); a gate on
    the break count alone would fail that improvement, as PyTorch's check_graph_breaks.py does (it fails any metric
    that moves the wrong way).

    ``b``, ``n``: the explain stage's snapshots. "More of the same model": ops captured rose, the torch calls run
    outside graphs (eager calls less ops captured) fell, and no more frames run in eager; a model that only grew
    (a new layer with a print) captures more without running less outside graphs, and its new break regresses.
    Outweighed: the explain stage's new breaks, the same breaks (kind, gb_type, file, source line) in other stages,
    and the graph and break counts of a stage whose new breaks are all outweighed."""
    bc, nc = (b or {}).get("coverage") or {}, (n or {}).get("coverage") or {}
    gain = next((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == CAPTURED and c.effect == IMPROVED),
                None)
    was, now = _uncaptured(bc), _uncaptured(nc)
    if gain is None or was is None or now is None or now >= was \
            or any(c.aspect == EAGER_FRAMES and c.effect == REGRESSED for c in changes):
        return changes
    new_in_explain = {_break_site(c) for c in changes if c.stage == COVERAGE_STAGE and c.aspect == "break"
                      and c.effect == REGRESSED}
    why = (f"outweighed: {_COUNT_NOUNS[CAPTURED]} {gain.before} -> {gain.after}, torch calls outside graphs "
           f"{was} -> {now}")
    stages_all_outweighed = {c.stage for c in changes} - {
        c.stage for c in changes if c.aspect == "break" and c.effect == REGRESSED and _break_site(c) not in new_in_explain}

    def outweighed(c: Change) -> bool:
        if c.effect != REGRESSED:
            return False
        if c.aspect == "break":
            return _break_site(c) in new_in_explain
        return c.aspect in ("graph_count", "graph_break_count") and c.stage in stages_all_outweighed
    return [replace(c, effect=CHANGED, detail=f"{c.detail} ({why})", why=why) if outweighed(c) else c
            for c in changes]


#: how ``_with_new_breaks`` says ops captured rose with a new break (``root_causes`` folds such a change into it)
CAME_WITH = "came with"


def _at(c: Change) -> tuple[str, int]:
    """A change's place, for reading order (file, then line)."""
    loc = c.location or {}
    return (str(loc.get("file") or "~"), loc.get("line") or 0)


def _with_new_breaks(changes: list[Change]) -> list[Change]:
    """One probe's changes, where ops captured rose together with a new break that regresses: the line that added the
    break brought its ops along (``if h.mean().item() > 10``: one op more, one graph more), so the rise is no
    improvement; it is shown as a change that came with the break (and ``root_causes`` folds it into it)."""
    new = sorted((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == "break" and c.effect == REGRESSED),
                 key=_at)
    if not new:
        return changes
    sites = [f"{c.location['file']}:{c.location['line']}" for c in new if (c.location or {}).get("file")]
    why = f"{CAME_WITH} the new graph break{'s' if len(new) > 1 else ''}" + (f" at {', '.join(sites)}" if sites else "")
    return [replace(c, effect=CHANGED, detail=f"{c.detail} ({why})", why=why)
            if c.stage == COVERAGE_STAGE and c.aspect == CAPTURED and c.effect == IMPROVED else c for c in changes]


@dataclass(frozen=True)
class MetricCheck:
    """One of a probe's Dynamo metrics against the baseline, as PyTorch's CI prints them (``graph_breaks``,
    ``calls_captured``, ``unique_graphs``, ``fallbacks_to_eager``): ``result`` is PASS, FAIL or IMPROVED, read
    from the comparison's own change for it (never a second rule); CHANGED for ``unique_graphs``, which this gate
    shows but does not weigh (graphs follow the breaks and the frames in eager, both gated)."""

    probe: str
    metric: str
    #: "lower", "higher" (is better) or "shown"
    better: str
    expected: int | None
    actual: int | None
    result: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


#: metric (PyTorch's name) -> (the explain snapshot's key, where it is read, the change's aspect, which is better)
_METRICS = {
    "graph_breaks": ("graph_break_count", None, "graph_break_count", "lower"),
    "calls_captured": ("calls_captured", "coverage", CAPTURED, "higher"),
    "unique_graphs": ("unique_graphs", "coverage", None, "shown"),
    "fallbacks_to_eager": ("frames_eager", "coverage", EAGER_FRAMES, "lower"),
}
_RESULT = {REGRESSED: "FAIL", IMPROVED: "IMPROVED", CHANGED: "PASS"}


def _metrics(pid: str, b: dict[str, Any] | None, n: dict[str, Any] | None, changes: list[Change]) -> list[MetricCheck]:
    """The probe's metrics where both snapshots of its explain stage have them."""
    if not b or not n:
        return []
    out = []
    for metric, (key, under, aspect, better) in _METRICS.items():
        before, after = (b.get(under) or {}).get(key) if under else b.get(key), \
            (n.get(under) or {}).get(key) if under else n.get(key)
        if before is None or after is None:
            continue
        change = next((c for c in changes if c.stage == COVERAGE_STAGE and c.aspect == aspect), None) \
            if aspect else None
        if aspect is None:
            result, note = ("PASS", "") if before == after else ("CHANGED", "shown, not gated")
        else:
            result = _RESULT[change.effect] if change else "PASS"
            note = change.why if change else ""
        out.append(MetricCheck(pid, metric, better, before, after, result, note))
    return out


def _lower_is_better(pid: str, stage: str, aspect: str, before: Any, after: Any, what: str) -> list[Change]:
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or before == after:
        return []
    effect = REGRESSED if after > before else IMPROVED
    return [Change(pid, stage, aspect, before, after, effect, f"{what} {before} -> {after}")]


def _site(b: dict[str, Any]) -> tuple:
    return b.get("kind"), b.get("gb_type"), b.get("file")


def _describe_break(b: dict[str, Any]) -> str:
    where = f" at {b['file']}:{b['line']}" if b.get("file") else ""
    code = f" `{b['code']}`" if b.get("code") else ""
    return f"{b.get('kind')} ({b.get('gb_type') or 'no gb_type'}){where}{code}"


def _tokens(code: str) -> str:
    """Source text compared as tokens: spacing and the quotes of a string do not make another line."""
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type in _NO_TEXT:
                continue
            if t.type == tokenize.STRING:
                try:
                    out.append(repr(ast.literal_eval(t.string)))
                    continue
                except (ValueError, SyntaxError):
                    pass
            out.append(t.string)
    except (tokenize.TokenError, SyntaxError):
        return " ".join(code.split())
    return " ".join(out)


_NO_TEXT = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)


def _unchanged(r: dict[str, Any], a: dict[str, Any]) -> bool:
    """The same break at the same line (its source text the same, where both sides recorded it)."""
    return r.get("line") == a.get("line") and (r.get("code") is None or a.get("code") is None
                                               or _tokens(r["code"]) == _tokens(a["code"]))


def _same_code(r: dict[str, Any], a: dict[str, Any]) -> bool:
    return r.get("code") is not None and a.get("code") is not None and _tokens(r["code"]) == _tokens(a["code"])


def _same_line(r: dict[str, Any], a: dict[str, Any]) -> bool:
    return r.get("line") is not None and r.get("line") == a.get("line")


def _either_without_code(r: dict[str, Any], a: dict[str, Any]) -> bool:
    return r.get("code") is None or a.get("code") is None


def _compare_breaks(pid: str, stage: str, before: list[dict], after: list[dict]) -> list[Change]:
    """Breaks are matched by identity: kind, gb_type, file and the line's source text (``source_text``, compared as
    tokens). The same break at another line *moved* (an edit above it); a break of the same gb_type at the same
    line whose text was edited is that break edited; both are neither better nor worse. Otherwise a break with
    other code is another break (one gone, one new). A side recorded without source text (a baseline from before
    it) matches as it used to: by kind, gb_type and file, the line aside."""
    removed, added = list(before), []
    for a in after:
        match = next((r for r in removed if _site(r) == _site(a) and _unchanged(r, a)), None)
        if match is None:
            added.append(a)
        else:
            removed.remove(match)
    out: list[Change] = []
    for same in (_same_code, _either_without_code, _same_line):
        for a in list(added):
            match = next((r for r in removed if _site(r) == _site(a) and same(r, a)), None)
            if match is not None:
                removed.remove(match)
                added.remove(a)
                brk = _as_break(a, match)
                # the same gb_type at the same line, its text edited (reformatted, a name changed): the same break
                detail = (f"graph break moved: {_describe_break(brk)} (was line {match.get('line')})"
                          if same is not _same_line else
                          f"graph break's line edited: {_describe_break(brk)} (was `{match.get('code')}`)")
                out.append(Change(pid, stage, "break", f"line {match.get('line')}", f"line {a.get('line')}", CHANGED,
                                  detail, {"file": a.get("file"), "line": a.get("line")}, brk))
    for a in added:
        brk = _as_break(a)
        out.append(Change(pid, stage, "break", None, _describe_break(brk), REGRESSED,
                          f"new graph break {_describe_break(brk)}", {"file": a.get("file"), "line": a.get("line")},
                          brk))
    for r in removed:
        brk = _as_break(r)
        out.append(Change(pid, stage, "break", _describe_break(brk), None, IMPROVED,
                          f"graph break gone: {_describe_break(brk)}", {"file": r.get("file"), "line": r.get("line")},
                          brk))
    return out


def _as_break(b: dict[str, Any], other: dict[str, Any] | None = None) -> dict[str, Any]:
    """A snapshot break as a change carries it: kind, gb_type, file, line, its GB code (from ``other``, the
    baseline's side, when this one has none: older baselines do not), its source text and owner where known."""
    brk = {k: b.get(k) for k in ("kind", "gb_type", "file", "line")}
    brk["gb_code"] = b.get("gb_code") or (other or {}).get("gb_code")
    for key in ("code", "owner"):
        if b.get(key):
            brk[key] = b[key]
    return brk


# ---------------------------------------------------------------------------------------------------------
# Root causes: one new graph break shows up as ~5 changes per probe and stage (status, kind, graphs, breaks,
# the break); the table, the summary line and the annotations count causes, the JSON keeps both.

_WORSE, _BETTER = "worse", "better"
_COUNT_NOUNS = {"graph_count": "graphs", "graph_break_count": "graph breaks", "recompiles": "recompiles",
                CAPTURED: "ops captured", EAGER_FRAMES: "frames run in eager",
                **{f"compiled_autograd.{k}": f"compiled autograd {k.replace('_', ' ')}"
                   for k in (*COUNTS_LOWER_IS_BETTER, *COUNTS_NEUTRAL)}}
#: counts that move with a new (gone) break or failure kind in their stage, and fold into it
_LOWER_IS_BETTER_ASPECTS = ("graph_count", "graph_break_count", "recompiles", EAGER_FRAMES,
                            *(f"compiled_autograd.{k}" for k in COUNTS_LOWER_IS_BETTER))
#: what ``_not_required`` and ``_outweigh`` add to a change's detail (the cause says it once)
_NOT_REQUIRED_WHY = r"target [\w-]+ not required; .* gates on it"
_NOT_REQUIRED = re.compile(rf" \({_NOT_REQUIRED_WHY}\)$")
_SOFTENED_SUFFIX = re.compile(rf" \(({_NOT_REQUIRED_WHY}|outweighed: [^()]*)\)$")


@dataclass(frozen=True)
class ChangeCause:
    """One root cause of a comparison's changes, with every per-stage change it accounts for (``root_causes``).

    A new (gone, moved) graph break at one place, a new (gone) failure or advice kind, or a change nothing else
    explains (more graphs with no new break or kind). ``what`` says it without where, ``new graph break at
    model.py:14 (data-dependent, GB0124)``; ``description`` adds the probes and stages it covers.
    """

    #: regressed when any of its changes regressed (the exit code's rule), improved when all improved, else changed
    effect: str
    #: the explaining change's aspect: break, kind, advice, status, graph_count, ..., probe, stage
    aspect: str
    what: str
    #: ``{"file", "line"}`` (relative) of a graph break, else None
    location: dict[str, Any] | None
    #: the per-stage changes, in the comparison's order
    changes: tuple[Change, ...]

    @property
    def file(self) -> str | None:
        """Where it points (relative, as probe ids are): a break's file, or the file a kind's findings point at."""
        return (self.location or {}).get("file")

    @property
    def line(self) -> int | None:
        return (self.location or {}).get("line")

    @property
    def failure_kind(self) -> str | None:
        """The failure kind it is: a break's kind, or the new (gone) kind of a kind or advice cause; else None."""
        if self.aspect == "break":
            return (self.graph_break or {}).get("kind")
        if self.aspect in ("kind", "advice"):
            first = self.changes[0]
            return first.after or first.before
        return None

    @property
    def gb_type(self) -> str | None:
        return (self.graph_break or {}).get("gb_type")

    @property
    def gating(self) -> tuple[Change, ...]:
        """The changes that make its effect: for a cause that regressed, those that regressed (a stage of a target
        the gate does not require changed, and is named apart: ``also``); else all of them."""
        if self.effect != REGRESSED:
            return self.changes
        return tuple(c for c in self.changes if c.effect == REGRESSED)

    @property
    def probes(self) -> list[str]:
        return list(dict.fromkeys(c.probe for c in self.gating))

    @property
    def stages(self) -> list[str]:
        return sorted({c.stage for c in self.gating if c.stage}, key=stage_order)

    @property
    def covers(self) -> list[tuple[str, str | None]]:
        """The (probe, stage) pairs it changed where it gates; stage None for a probe-level change (missing, new)."""
        return list(dict.fromkeys((c.probe, c.stage) for c in self.gating))

    @property
    def also(self) -> list[str]:
        """The stages where a cause that regressed only changed something, in no probe regressing (a target not
        required, mostly): shown beside it, never counted as where it regressed."""
        where = set(self.stages)
        return sorted({c.stage for c in self.changes if c.stage and c.stage not in where}, key=stage_order)

    @property
    def also_text(self) -> str:
        """``also in vmap, export (targets not required)``, or ``""``; ``(changed, not regressed)`` where one of
        them is a required target's (a break outweighed there)."""
        also = self.also
        if not also:
            return ""
        required = any(c.stage in also and not _NOT_REQUIRED.search(c.detail) for c in self.changes)
        return f"also in {', '.join(also)}" + (" (changed, not regressed)" if required else
                                               f" ({'target' if len(also) == 1 else 'targets'} not required)")

    @property
    def scope(self) -> str:
        """``2 probes × 6 stages``, with ``(9 of 12 probe × stage pairs)`` when not every probe has every stage."""
        probes, stages = self.probes, self.stages
        if not stages:
            return _count(len(probes), "probe")
        pairs, full = len({ps for ps in self.covers if ps[1]}), len(probes) * len(stages)
        text = f"{_count(len(probes), 'probe')} × {_count(len(stages), 'stage')}"
        return text if pairs == full else f"{text} ({pairs} of {full} probe × stage pairs)"

    @property
    def description(self) -> str:
        return f"{self.what} in {self.scope}" + (f"; {self.also_text}" if self.also else "")

    @property
    def graph_break(self) -> dict[str, Any] | None:
        """A break cause's break (kind, gb_type, gb_code, file, line; code and owner where known), else None."""
        if self.aspect != "break":
            return None
        brk = next((c.graph_break for c in self.changes if c.aspect == "break" and c.graph_break), None)
        if brk is None:
            return None
        code = next((c.graph_break["gb_code"] for c in self.changes if (c.graph_break or {}).get("gb_code")), None)
        return {**brk, "gb_code": code}

    def to_dict(self, index: dict[int, int]) -> dict[str, Any]:
        """``index``: ``id(change)`` -> its position in ``Comparison.changes``, which ``changes`` lists."""
        return {"effect": self.effect, "aspect": self.aspect, "what": self.what, "description": self.description,
                "location": self.location, "probes": self.probes, "stages": self.stages, "also": self.also,
                "changes": [index[id(c)] for c in self.changes]}


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def root_causes(changes: Iterable[Change]) -> list[ChangeCause]:
    """Group per-stage changes by root cause, in the order each cause first appears.

    In each probe and stage, a new failure kind folds into a new break of that kind there; the status going
    pass -> fail, more graphs, recompiles and compiled-autograd counts fold into the first new break, else the
    first new kind (more graph breaks: into a new break only); gone breaks and kinds take the improvements the same
    way. A new kind left with no break of its own (fullgraph and export raise at the break; they record none) folds
    into the probe's new break of that kind in another stage when the probe has exactly one. What is left explains
    itself: a graph count that rises with no new break or kind is its own cause, "more graphs". Causes are then
    keyed across probes and stages: a break by (kind, gb_type, file, line) and whether it is new, gone or moved,
    a kind by its name, a count by its direction, anything else by what it says.
    """
    changes = list(changes)
    head: dict[int, Change] = {}  # id(change) -> the change that explains it, when another one does
    by_stage: dict[tuple[str, str | None], list[Change]] = {}
    for c in changes:
        by_stage.setdefault((c.probe, c.stage), []).append(c)
    for cs in by_stage.values():
        roots: dict[str, list[Change]] = {_WORSE: [], _BETTER: []}
        for c in cs:
            if c.aspect == "break" and _direction(c):
                roots[_direction(c)].append(c)
        for c in cs:
            d = _direction(c)
            if c.aspect == "kind" and d:
                same = [b for b in roots[d] if b.aspect == "break" and _break_kind(b) == (c.after or c.before)]
                if same:
                    head[id(c)] = same[0]
                else:
                    roots[d].append(c)
        for c in cs:
            d = _direction(c)
            if d and (c.aspect in ("status", CAPTURED) or c.aspect in _LOWER_IS_BETTER_ASPECTS):
                pool = [r for r in roots[d] if (r.aspect == "break" or c.aspect != "graph_break_count")
                        and (r.aspect != CAPTURED or r.effect == c.effect)]
                if c.aspect == CAPTURED and c.why.startswith(CAME_WITH):  # _with_new_breaks: the break's own
                    pool = [r for r in roots[_WORSE] if r.aspect == "break" and r.effect == REGRESSED]
                if pool:
                    head[id(c)] = pool[0]
                elif c.aspect == CAPTURED:  # ops captured with no break or kind to explain it: frames in eager join it
                    roots[d].append(c)
    _fold_kinds_into_the_probes_break(changes, head)
    groups: dict[tuple, list[Change]] = {}
    members: dict[tuple, list[Change]] = {}
    for c in changes:
        root = c
        while id(root) in head:
            root = head[id(root)]
        key = _cause_key(root)
        members.setdefault(key, []).append(c)
        if root is c:
            groups.setdefault(key, []).append(c)
    return [_cause(roots, tuple(members[key])) for key, roots in groups.items()]


def _direction(c: Change) -> str | None:
    """Whether a change makes its stage worse or better, whatever its effect (in a stage of a target that is not
    required a new break regresses nothing, but is still worse); None for neither (moved, neutral, skipped)."""
    if c.aspect in ("break", "kind"):
        return _WORSE if c.before is None else _BETTER if c.after is None else None
    if c.aspect == "status":
        return _WORSE if c.before == PASS and c.after in _FAILED else \
            _BETTER if c.before in _FAILED and c.after == PASS else None
    if c.aspect in (*_LOWER_IS_BETTER_ASPECTS, CAPTURED) and isinstance(c.before, (int, float)) \
            and isinstance(c.after, (int, float)) and c.before != c.after:
        return _WORSE if (c.after > c.before) == (c.aspect != CAPTURED) else _BETTER
    return None


def _break_kind(c: Change) -> str | None:
    return (c.graph_break or {}).get("kind")


def _break_identity(c: Change) -> tuple:
    b = c.graph_break or {}
    return b.get("kind"), b.get("gb_type"), b.get("file"), b.get("line")


def _fold_kinds_into_the_probes_break(changes: list[Change], head: dict[int, Change]) -> None:
    """A new (gone) kind that no break of its own stage explains, in a probe whose stages have exactly one new
    (gone) break of that kind: the same root cause, seen by a stage that records no breaks."""
    breaks: dict[tuple[str, str, str | None], dict[tuple, Change]] = {}  # (probe, direction, kind) -> identities
    for c in changes:
        if c.aspect == "break" and _direction(c):
            breaks.setdefault((c.probe, _direction(c), _break_kind(c)), {}).setdefault(_break_identity(c), c)
    at: dict[tuple[str, str, Any, Any], Change] = {}  # (probe, direction, file, line) -> the first break there
    for c in changes:
        if c.aspect == "break" and _direction(c) and c.location and c.location.get("file"):
            at.setdefault((c.probe, _direction(c), c.location["file"], c.location.get("line")), c)
    for c in changes:
        if c.aspect == "kind" and _direction(c) and id(c) not in head:
            found = breaks.get((c.probe, _direction(c), c.after or c.before), {})
            if len(found) == 1:
                head[id(c)] = next(iter(found.values()))
            elif c.location and c.location.get("file"):
                # another kind at the line of the probe's new break (vmap refusing the .item() that breaks the
                # graph): the same line, the same root cause
                brk = at.get((c.probe, _direction(c), c.location["file"], c.location.get("line")))
                if brk is not None:
                    head[id(c)] = brk


def _plain(detail: str) -> str:
    """A change's detail without the "(target ... not required ...)" that ``_not_required`` adds."""
    return _SOFTENED_SUFFIX.sub("", detail)


def _cause_key(c: Change) -> tuple:
    d = _direction(c)
    if c.aspect == "break":
        return ("break", d or "moved", *_break_identity(c), None if d else c.before)
    if c.aspect in ("kind", "advice"):
        # a kind no break explains, at a user line (its snapshot's ``sites``): one cause across probes; with no
        # place of its own, per probe, so that two probes' unrelated failures of one kind (two ops without a fake,
        # two crashes) are two causes, never one
        side = "new" if c.before is None else "gone"
        if c.location and c.location.get("file"):
            return (c.aspect, side, c.after or c.before, c.location["file"], c.location.get("line"))
        return (c.aspect, side, c.after or c.before, c.probe)
    if c.aspect in _COUNT_NOUNS:
        return (c.aspect, d or "changed")
    return (c.aspect, str(c.before), str(c.after), _plain(c.detail))


def _cause(roots: list[Change], changes: tuple[Change, ...]) -> ChangeCause:
    """The cause of ``roots`` (the changes of one key that nothing else explains) and all it accounts for."""
    first = roots[0]
    effects = {c.effect for c in changes}
    effect = REGRESSED if REGRESSED in effects else IMPROVED if effects == {IMPROVED} else CHANGED
    cause = ChangeCause(effect, first.aspect, _plain(first.detail), first.location, changes)
    d = _direction(first)
    if first.aspect == "break":
        b = cause.graph_break or {}
        where = (f" in {b['owner']}" if b.get("owner") else "") + (f" at {b['file']}:{b['line']}" if b.get("file")
                                                                    else "") + (f" `{b['code']}`" if b.get("code") else "")
        what = f"new graph break{where}" if d == _WORSE else f"graph break gone{where}" if d == _BETTER else \
            f"graph break moved to {b.get('file')}:{b.get('line')} from {first.before}"
        which = b.get("gb_code") or b.get("gb_type") or "no gb_type"
        cause = replace(cause, what=f"{what} ({b.get('kind')}, {which})")
    elif first.aspect in ("kind", "advice") and (first.location or {}).get("file"):
        kind, loc = first.after or first.before, first.location or {}
        cause = replace(cause, what=cause.what.replace(f" {kind}", f" {kind} at {loc['file']}:{loc.get('line')}", 1))
    elif first.aspect in _COUNT_NOUNS:
        noun = _COUNT_NOUNS[first.aspect]
        more, fewer = ("fewer", "more") if first.aspect == CAPTURED else ("more", "fewer")
        what = f"{more} {noun}" if d == _WORSE else f"{fewer} {noun}" if d == _BETTER else f"{noun} changed"
        moves = {(r.before, r.after) for r in roots}
        cause = replace(cause, what=what + (" ({} -> {})".format(*moves.pop()) if len(moves) == 1 else ""),
                        location=None)
    # worse only in stages of targets the gate does not require, or outweighed by more ops captured: say so, as
    # each change does
    softened = next((m for m in (_SOFTENED_SUFFIX.search(c.detail) for c in changes) if m), None)
    if effect == CHANGED and softened:
        cause = replace(cause, what=cause.what + softened.group(0))
    return cause


def compare_report(base: dict[str, Any], report: RunReport) -> Comparison:
    """Compare a run (or merged) report with a baseline document.

    A shard report (run with ``--shard K/N``, read back from its command line) is compared on the probes
    it ran only; probes that went missing are caught when the merged report is compared.
    """
    shard = shard_from_command(report.command)
    only = [p.id for p in report.probes] if shard else None
    cmp = compare(base, from_report(report), only=only)
    if shard:
        cmp.notes.append(f"shard {shard[0]}/{shard[1]}: compared the {len(report.probes)} probe(s) this shard ran; "
                         "compare the merged report (tracecheck merge) to catch probes that went missing")
    return cmp


def write_baseline(path: str, report: RunReport, keep: dict[str, Any] | None = None) -> None:
    """Rewrite the baseline at ``path`` from ``report`` (atomically), keeping ``keep``'s (the baseline being
    rewritten) settings (``SETTINGS``): the user's choices, not measurements."""
    write_json_atomic(path, from_report(report, severity_setting(keep) if keep else None,
                                        require_setting(keep) if keep else (),
                                        tolerance_setting(keep) if keep else None))

