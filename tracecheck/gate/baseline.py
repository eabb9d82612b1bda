"""CI gate: baselines, and comparing two runs (sharding and merging: shards.py; reading files: reportio.py).

A *baseline* is a run report reduced to what must not get worse, and nothing that differs between
machines: no timings, no absolute paths, no message text. Layout (docs/ci.md has the JSON schema)::

    {"format": "tracecheck-baseline", "schema_version": 1, "torch": "2.13.0+cpu", "stages": [...],
     "probes": {"<file>::<name>": {"stages": {"<stage>": {
         "status": "fail", "kinds": ["graph-break"], "graph_count": 2, "graph_break_count": 1,
         "breaks": [{"kind": "graph-break", "gb_type": "...", "file": "model.py", "line": 12}],
         "recompiles": null, "phases": ["forward", "backward"], "compiled_autograd": {...}}}}}}

Probe ids are the report's rootdir-relative ``file::name``; break files are made relative the same way (see
``relative_location``). ``compare`` works on two such documents (a full ``--json`` report is reduced first),
so a baseline, a report and a merged shard report all compare the same way. Pure: no torch import.

Advice kinds (taxonomy severity ``advice``: ``no-batching-rule``, ``opaque-op``) are kept apart, under a stage's
``advice``: a new one is shown but is no regression, unless the run was ``--strict`` or the baseline's own
``severity`` object, which the user edits and ``--update-baseline`` keeps, says ``{"opaque-op": "error"}``.

Targets (targets.py): each stage snapshot names its ``target``; only stages of a required target regress. The
required targets are the run's ``--require`` joined with the baseline's own ``"require"`` list (which the user
edits and ``--update-baseline`` keeps, as ``severity``); a stage of another target that gets worse is a
``changed`` line, saying how to require it.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..model import taxonomy
from ..model.exitcodes import UsageError
from ..model.payloads import PAYLOADS
from ..model.report import CRASH, FAIL, FAILED, IMPORT_PROBE, INTERNAL, PASS, SKIP, TIMEOUT, ProbeReport, RunReport, StageResult
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
        ({"kind": b.kind, "gb_type": b.gb_type, "file": relative_location(b.file, probe), "line": b.line}
         for b in s.breaks),
        key=_break_sort_key,
    )
    # a stage that --strict failed for advice alone is recorded as passing: advice is gated through its kinds
    # (gated_advice), so a strict and a plain run of the same code compare equal
    status = PASS if s.status == FAIL and not kinds and advice else s.status
    snap: dict[str, Any] = {
        "status": status,
        "kinds": kinds,
        "graph_count": s.graph_count,
        "graph_break_count": s.graph_break_count,
        "breaks": breaks,
        "recompiles": s.recompile_count,
        "phases": s.phases,
        "target": s.target or target_of(s.stage),
    }
    if advice:
        snap["advice"] = advice
    spec, payload_type = REGISTRY.get(s.stage), PAYLOADS.get(s.stage)
    payload = payload_type.of(s.extra) if spec is not None and spec.counts and payload_type else None
    ca = {k: getattr(payload, k) for k in spec.counts if payload.written(k)} if payload is not None else {}
    if ca:
        snap["compiled_autograd"] = ca
    return snap


def _break_sort_key(b: dict[str, Any]) -> tuple:
    return (b.get("kind") or "", b.get("gb_type") or "", b.get("file") or "", b.get("line") or 0)


def from_report(report: RunReport, severity: dict[str, str] | None = None,
                require: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The baseline document of a run report (sorted, so rewriting an unchanged baseline is a no-op diff).
    ``severity``: the per-kind setting to keep (``severity_setting`` of the baseline being rewritten);
    ``require``: the required targets the document records: the baseline's own setting when one is written (the
    run's ``--require`` is the CI command's, like ``--strict``, and is not recorded), the run's (None) when the
    document is the new side of a comparison."""
    probes = {}
    for p in sorted(report.probes, key=lambda p: p.id):
        probes[p.id] = {"stages": {name: stage_snapshot(s, p) for name, s in p.stages.items()}}
    doc: dict[str, Any] = {
        "format": BASELINE_FORMAT,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "torch": report.environment.get("torch"),
        "stages": list(report.stages),
        "probes": probes,
    }
    if severity:
        doc["severity"] = dict(sorted(severity.items()))
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
        _check_probes(doc["probes"])
        return doc
    if "probes" in doc and "schema_version" in doc:
        return from_report(RunReport.from_dict(doc), require=())  # a report as a baseline: its --require was its run's
    raise ValueError("neither a tracecheck baseline nor a tracecheck JSON report")


_STATUSES = (PASS, FAIL, SKIP, TIMEOUT, CRASH, INTERNAL)


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
            breaks = snap.get("breaks", [])
            if not isinstance(breaks, list) or not all(
                    isinstance(b, dict) and isinstance(b.get("kind"), str) and _is(b.get("gb_type"), str)
                    and _is(b.get("file"), str) and _is(b.get("line"), int) for b in breaks):
                raise ValueError(f"{where}: 'breaks' must be a list of {{kind, gb_type, file, line}} objects")
            for key in ("graph_count", "graph_break_count", "recompiles"):
                if not _is(snap.get(key), int):
                    raise ValueError(f"{where}: '{key}' must be a count or null")
            phases = snap.get("phases")
            if phases is not None and (not isinstance(phases, list) or not all(isinstance(x, str) for x in phases)):
                raise ValueError(f"{where}: 'phases' must be a list such as [\"forward\", \"backward\"] or null")
            ca = snap.get("compiled_autograd")
            if ca is not None and (not isinstance(ca, dict) or not all(_is(v, (int, list)) for v in ca.values())):
                raise ValueError(f"{where}: 'compiled_autograd' must be an object of counts")


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

    ``location`` is ``{"file", "line"}`` (relative) for a graph break, so CI can annotate the user's line.
    """

    probe: str
    stage: str | None
    aspect: str
    before: Any
    after: Any
    effect: str
    detail: str
    location: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class Comparison:
    """All differences of a new run against a baseline, in probe/stage order."""

    changes: list[Change] = field(default_factory=list)
    compared_probes: int = 0
    notes: list[str] = field(default_factory=list)

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
        return {"compared_probes": self.compared_probes, "regressed": self.regressed, "notes": self.notes,
                "changes": [c.to_dict() for c in self.changes]}


def compare(base: dict[str, Any], new: dict[str, Any], only: Iterable[str] | None = None) -> Comparison:
    """Compare two baseline documents (see ``to_baseline``).

    Per probe and stage: status, failure kinds, graph count, graph breaks (count, and each by kind, gb_type
    and relative location), recompiles and compiled-autograd counts. A regression is a new failure or kind,
    more breaks, more graphs, more recompiles or compiled-autograd graphs, or a probe that went missing.
    ``only`` restricts the comparison to those probe ids (a shard compares the probes it ran).
    """
    cmp = Comparison()
    gated = gated_advice(base, new)
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
        cmp.compared_probes += 1
        if b is None:
            failing = _failing_kinds(n, gated, gate)
            if failing:
                cmp.changes.append(Change(pid, None, "probe", "absent", "fail", REGRESSED,
                                          f"new probe fails: {', '.join(failing)}"))
            else:
                cmp.changes.append(Change(pid, None, "probe", "absent", "pass", CHANGED, "new probe, passes"))
            continue
        b_stages, n_stages = b.get("stages", {}), n.get("stages", {})
        for stage in sorted(set(b_stages) | set(n_stages), key=stage_order):
            changes = _compare_stage(pid, stage, b_stages.get(stage), n_stages.get(stage), gated)
            target = _target(stage, b_stages.get(stage), n_stages.get(stage))
            cmp.changes += changes if gate.requires(target) else [_not_required(c, target, gate) for c in changes]
    return cmp


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
    return Change(c.probe, c.stage, c.aspect, c.before, c.after, CHANGED,
                  f"{c.detail} (target {target} not required; {gate.how_to_require(target)} gates on it)",
                  c.location)


def _failing_kinds(probe: dict[str, Any], gated: frozenset[str] = frozenset(), gate: Gate = Gate()) -> list[str]:
    kinds: list[str] = []
    for stage, s in probe.get("stages", {}).items():
        if not gate.requires(_target(stage, s)):
            continue
        found = [*(s.get("kinds", []) if s.get("status") in _FAILED else []), *_gated(s, gated)]
        kinds += [k for k in found if k not in kinds]
    return kinds


def _gated(snap: dict[str, Any], gated: frozenset[str]) -> list[str]:
    return [k for k in snap.get("advice", []) if k in gated]


def _compare_stage(pid: str, stage: str, b: dict[str, Any] | None, n: dict[str, Any] | None,
                   gated: frozenset[str] = frozenset()) -> list[Change]:
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
            " (advice, gated by --strict or the baseline's severity)" if k in gated else "")))
    for k in sorted(bk - nk):
        out.append(Change(pid, stage, "kind", k, None, IMPROVED, f"failure kind {k} gone"))
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
    return out


def _lower_is_better(pid: str, stage: str, aspect: str, before: Any, after: Any, what: str) -> list[Change]:
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or before == after:
        return []
    effect = REGRESSED if after > before else IMPROVED
    return [Change(pid, stage, aspect, before, after, effect, f"{what} {before} -> {after}")]


def _break_key(b: dict[str, Any]) -> tuple:
    return (b.get("kind"), b.get("gb_type"), b.get("file"), b.get("line"))


def _describe_break(b: dict[str, Any]) -> str:
    where = f" at {b['file']}:{b['line']}" if b.get("file") else ""
    return f"{b.get('kind')} ({b.get('gb_type') or 'no gb_type'}){where}"


def _compare_breaks(pid: str, stage: str, before: list[dict], after: list[dict]) -> list[Change]:
    """Breaks matched by (kind, gb_type, file, line); an unmatched pair in the same file with the same
    kind and gb_type is a break that *moved* (lines shifted by an edit), which is neither better nor worse."""
    added = Counter(_break_key(b) for b in after) - Counter(_break_key(b) for b in before)
    removed = Counter(_break_key(b) for b in before) - Counter(_break_key(b) for b in after)
    added_l, removed_l = sorted(added.elements(), key=str), sorted(removed.elements(), key=str)
    out: list[Change] = []
    for a in list(added_l):
        match = next((r for r in removed_l if r[:3] == a[:3]), None)
        if match is not None:
            removed_l.remove(match)
            added_l.remove(a)
            out.append(Change(pid, stage, "break", f"line {match[3]}", f"line {a[3]}", CHANGED,
                              f"graph break moved: {_describe_break(_as_break(a))} (was line {match[3]})",
                              {"file": a[2], "line": a[3]}))
    for a in added_l:
        out.append(Change(pid, stage, "break", None, _describe_break(_as_break(a)), REGRESSED,
                          f"new graph break {_describe_break(_as_break(a))}", {"file": a[2], "line": a[3]}))
    for r in removed_l:
        out.append(Change(pid, stage, "break", _describe_break(_as_break(r)), None, IMPROVED,
                          f"graph break gone: {_describe_break(_as_break(r))}", {"file": r[2], "line": r[3]}))
    return out


def _as_break(key: tuple) -> dict[str, Any]:
    return dict(zip(("kind", "gb_type", "file", "line"), key))


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
    rewritten) ``severity`` and ``require`` settings: the user's choices, not measurements."""
    write_json_atomic(path, from_report(report, severity_setting(keep) if keep else None,
                                        require_setting(keep) if keep else ()))

