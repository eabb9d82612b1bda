"""The baseline document: a run report reduced to what must not get worse, its settings, and reading and writing it.

A baseline holds nothing that differs between machines: no timings, no absolute paths, no message text (its
snapshots: snapshot.py). Layout (docs/ci.md has the JSON schema)::

    {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0+cpu", "stages": [...],
     "probes": {"<file>::<name>": {"stages": {"<stage>": {
         "status": "fail", "kinds": ["graph-break"], "graph_count": 2, "graph_break_count": 1,
         "graph_break_sites": 1,
         "breaks": [{"kind": "graph-break", "gb_type": "...", "file": "model.py", "line": 12, "gb_code": "GB0001"}],
         "recompiles": null, "phases": ["forward", "backward"], "compiled_autograd": {...},
         "coverage": {"calls_captured": 84, "unique_graphs": 2, "frames_eager": 0}}}}},
     "tolerance": {"calls_captured": 0.0}}

Probe ids are the report's rootdir-relative ``file::name``. A document is read into a typed ``Baseline`` once, when
it is loaded (``load_baseline``: checked, and a document from before ``graph_break_sites`` upgraded), and written
back to JSON only when it is written (``write_baseline``, ``Baseline.to_json``). Comparing two: comparison.py.

Settings, which the user edits and ``--update-baseline`` keeps (``SETTINGS``): ``severity`` (advice kinds that
regress like errors, ``{"opaque-op": "error"}``), ``require`` (targets that gate besides ``compile``: a stage of
another target that gets worse is a change, saying how to require it) and ``tolerance`` (how far ops captured may
drop). Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ..model import taxonomy
from ..model.exitcodes import UsageError
from ..model.report import RunReport, upgraded_break_counts
from ..model.reportio import (BASELINE_FORMAT, Json, is_baseline, number, read_json, string, string_items, strings,
                              write_json_atomic)
from ..model.targets import DEFAULT_REQUIRE, TARGETS, normalized
from ..model.verdict import STATUSES
from .snapshot import COVERAGE_METRICS, ProbeSnapshot

BASELINE_SCHEMA_VERSION = 1

#: the baseline's ``tolerance`` setting: how far ops captured may drop (a fraction of the baseline's count) before
#: it regresses. 0 by default: the counts are exact for one torch and one model (no run-to-run noise), so any drop
#: is a real change; a project that upgrades torch often may allow a few percent, as one of PyTorch's own gates did
TOLERANCES = {"calls_captured": 0.0}

#: the top-level settings of a baseline that the user edits and ``--update-baseline`` keeps (choices, not
#: measurements), each with its reader
SETTINGS = ("severity", "require", "tolerance")


def severity_setting(doc: Mapping[str, object]) -> dict[str, str]:
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


def require_setting(doc: Mapping[str, object]) -> tuple[str, ...]:
    """A baseline's (or a reduced report's) ``require`` list: the targets it gates on. Raises ValueError."""
    value = strings(doc.get("require", []))
    if value is None:
        raise ValueError("'require' must be a list of targets such as [\"compile\", \"func\"]")
    unknown = [t for t in value if t not in TARGETS]
    if unknown:
        raise ValueError(f"require: {', '.join(map(repr, unknown))} is not a target ({', '.join(TARGETS)})")
    return normalized(value)


def tolerance_setting(doc: Mapping[str, object]) -> dict[str, float]:
    """A baseline's ``tolerance`` object, e.g. ``{"calls_captured": 0.05}``: how far (a fraction of the baseline's
    count) a count whose drop is a regression may drop before it regresses. Raises ValueError."""
    setting = doc.get("tolerance", {})
    if not isinstance(setting, dict):
        raise ValueError("'tolerance' must be an object such as {\"calls_captured\": 0.05}")
    for key, value in setting.items():
        if key not in TOLERANCES:
            raise ValueError(f"tolerance: {key!r} has no tolerance (only {', '.join(TOLERANCES)})")
        if (n := number(value)) is None or not 0 <= n < 1:
            raise ValueError(f"tolerance: {key!r} is {value!r}; expected a fraction from 0 to below 1, such as 0.05")
    return {k: float(v) for k, v in setting.items()}


#: the top-level keys a document is written with (any other is a newer tracecheck's: kept, not read)
_KEYS = frozenset(("format", "schema_version", "torch", "tracecheck", "stages", "probes", "strict", *SETTINGS))


@dataclass(frozen=True)
class Baseline:
    """A baseline document, typed. ``torch`` and ``tracecheck``: the versions it was recorded with (informative: a
    note when they differ); ``stages``: the stages the run asked for; ``strict``: the run was ``--strict`` (a
    comparison's new side gates every advice kind then). The settings as ``SETTINGS`` reads them: ``require``
    always holds ``compile``."""

    probes: Mapping[str, ProbeSnapshot]
    torch: str | None = None
    stages: tuple[str, ...] = ()
    tracecheck: str | None = None
    severity: Mapping[str, str] = field(default_factory=dict)
    require: tuple[str, ...] = DEFAULT_REQUIRE
    tolerance: Mapping[str, float] = field(default_factory=dict)
    strict: bool = False
    unread: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, report: RunReport, severity: Mapping[str, str] | None = None,
           require: tuple[str, ...] | None = None, tolerance: Mapping[str, float] | None = None) -> Baseline:
        """The baseline of a run report. ``severity``, ``tolerance``: the settings to keep (the baseline being
        rewritten's); ``require``: the required targets to record: the baseline's own setting when one is written
        (the run's ``--require`` is the CI command's, like ``--strict``, and is not recorded), the run's (None) when
        the document is the new side of a comparison."""
        return cls(probes={p.id: ProbeSnapshot.of(p) for p in sorted(report.probes, key=lambda p: p.id)},
                   torch=report.env.torch, stages=tuple(report.stages),
                   # informative, as torch: a new tracecheck may check more (a stage that asks more), said in a note
                   tracecheck=report.tracecheck_version or None,
                   severity=dict(severity or {}), require=normalized(report.require if require is None else require),
                   tolerance=dict(tolerance or {}), strict=report.strict)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Baseline:
        """A document as written. Its settings are checked (ValueError); its snapshots are read as they are, a field
        of another type as absent: ``read`` checks them first, where a document is loaded."""
        probes, stages = doc.get("probes"), doc.get("stages")
        return cls(probes={pid: ProbeSnapshot.from_json(p) for pid, p in probes.items()}
                   if isinstance(probes, dict) else {},
                   torch=string(doc.get("torch")),
                   stages=string_items(stages),
                   tracecheck=string(doc.get("tracecheck")), severity=severity_setting(doc),
                   require=require_setting(doc), tolerance=tolerance_setting(doc), strict=bool(doc.get("strict")),
                   unread={k: v for k, v in doc.items() if k not in _KEYS})

    def to_json(self) -> Json:
        """The document (sorted, so rewriting an unchanged baseline is a no-op diff)."""
        doc: Json = {
            "format": BASELINE_FORMAT,
            "schema_version": BASELINE_SCHEMA_VERSION,
            "torch": self.torch,
            **({"tracecheck": self.tracecheck} if self.tracecheck else {}),
            "stages": list(self.stages),
            "probes": {pid: p.to_json() for pid, p in self.probes.items()},
        }
        if self.severity:
            doc["severity"] = dict(sorted(self.severity.items()))
        if self.tolerance:
            doc["tolerance"] = dict(sorted(self.tolerance.items()))
        if self.require != DEFAULT_REQUIRE:
            doc["require"] = list(self.require)
        if self.strict:
            doc["strict"] = True
        return {**doc, **self.unread}

    def keeping(self, settings: Baseline | None) -> Baseline:
        """This document with the settings (``SETTINGS``) of ``settings``, the baseline it rewrites: the user's
        choices, not measurements (none where there is no baseline yet)."""
        return replace(self, severity=settings.severity if settings else {},
                       require=settings.require if settings else DEFAULT_REQUIRE,
                       tolerance=settings.tolerance if settings else {})


def as_baseline(doc: Baseline | Mapping[str, object]) -> Baseline:
    """A baseline, typed: ``doc`` itself, or a document as written (JSON) read by ``Baseline.from_json``."""
    return doc if isinstance(doc, Baseline) else Baseline.from_json(doc)


def from_report(report: RunReport, severity: Mapping[str, str] | None = None,
                require: tuple[str, ...] | None = None, tolerance: Mapping[str, float] | None = None) -> Json:
    """The baseline document (JSON) of a run report: ``Baseline.of``'s, written."""
    return Baseline.of(report, severity, require, tolerance).to_json()


def gated_advice(base: Baseline, new: Baseline) -> frozenset[str]:
    """The advice kinds that regress like errors: all of them when the new run is ``--strict`` (its ``strict``;
    how the baseline was recorded does not matter: the gate is the CI command's), else those the baseline's
    ``severity`` sets to ``error``."""
    if new.strict:
        return taxonomy.advice_ids()
    return frozenset(k for k, v in base.severity.items() if v == taxonomy.ERROR)


def empty() -> Baseline:
    """A baseline with no probes (what ``--update-baseline`` compares with when the file does not exist)."""
    return Baseline(probes={})


def checked(doc: Json) -> Json:
    """A baseline document as read, refused (ValueError) where it is not what tracecheck writes, and upgraded in
    place: break counts written before ``graph_break_sites`` read as a report's are (upgraded_break_counts)."""
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
    for probe in doc["probes"].values():
        for stage, snap in probe["stages"].items():
            if "graph_break_sites" not in snap:
                counts = upgraded_break_counts(stage, snap)
                snap["graph_break_count"], snap["graph_break_sites"] = (counts["graph_break_count"],
                                                                        counts["graph_break_sites"])
    return doc


def _is_report(doc: Json) -> bool:
    return "probes" in doc and "schema_version" in doc


_NEITHER = "neither a tracecheck baseline nor a tracecheck JSON report"


def to_baseline(doc: Json) -> Json:
    """A baseline document (JSON) from either a baseline (``checked``) or a full ``--json`` report. Raises
    ValueError."""
    if is_baseline(doc):
        return checked(doc)
    if _is_report(doc):
        return from_report(RunReport.from_dict(doc), require=())  # a report as a baseline: its --require was its run's
    raise ValueError(_NEITHER)


def read(doc: Json) -> Baseline:
    """``to_baseline``'s document, typed: read once, a report's snapshots taken from it directly."""
    if is_baseline(doc):
        return Baseline.from_json(checked(doc))
    if _is_report(doc):
        return Baseline.of(RunReport.from_dict(doc), require=())
    raise ValueError(_NEITHER)


def _check_probes(probes: dict[str, object]) -> None:
    """The shape the comparison reads: probe -> {"stages": {stage -> {...}}}, each field of the type it is written
    with. A hand-edited baseline that breaks it is refused when it is loaded, before a run whose results it would
    lose."""
    for pid, probe in probes.items():
        stages = probe.get("stages") if isinstance(probe, dict) else None
        if not isinstance(stages, dict):
            raise ValueError(f"probe {pid!r}: expected an object with a 'stages' object")
        for stage, snap in stages.items():
            where = f"probe {pid!r}, stage {stage!r}"
            if not isinstance(snap, dict):
                raise ValueError(f"{where}: expected an object")
            _check_stage(where, snap)


def _check_stage(where: str, snap: Json) -> None:
    if snap.get("status") not in STATUSES:
        raise ValueError(f"{where}: 'status' must be one of {', '.join(STATUSES)}")
    if "target" in snap and snap["target"] not in TARGETS:
        raise ValueError(f"{where}: 'target' must be one of {', '.join(TARGETS)}")
    for key in ("kinds", "advice"):
        value = snap.get(key, [])
        if strings(value) is None:
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
    if phases is not None and strings(phases) is None:
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
_BREAK_FIELDS: tuple[tuple[str, type, str], ...] = (
    ("gb_type", str, "a string"), ("file", str, "a relative path"), ("line", int, "a line number"),
    ("gb_code", str, "a GB code such as \"GB0025\""), ("code", str, "the line's source text"),
    ("owner", str, "a library and its version"))


def _is(value: object, types: type | tuple[type, ...]) -> bool:
    """``value`` is null or of ``types`` (a bool is no count)."""
    return value is None or (isinstance(value, types) and not isinstance(value, bool))


def load_baseline(path: str, what: str = "baseline") -> Baseline:
    """Read a baseline (or a full report, reduced to one), typed. Raises UsageError."""
    doc = read_json(path, what)
    try:
        return read(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{what} {path}: {e}") from e


def load_document(path: str, what: str = "baseline") -> Json:
    """Read a baseline (or a full report, reduced to one) as the JSON document ``to_baseline`` gives, for a writer
    that adds to it and writes it back as it is (the pytest plugin). Raises UsageError."""
    doc = read_json(path, what)
    try:
        return to_baseline(doc)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{what} {path}: {e}") from e


def write_baseline(path: str, report: RunReport, keep: Baseline | Mapping[str, object] | None = None) -> None:
    """Rewrite the baseline at ``path`` from ``report`` (atomically), keeping ``keep``'s (the baseline being
    rewritten) settings (``SETTINGS``): the user's choices, not measurements."""
    write_json_atomic(path, Baseline.of(report, require=()).keeping(as_baseline(keep) if keep else None).to_json())
