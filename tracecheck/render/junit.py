"""JUnit XML (``--junit-xml PATH``): one ``<testcase>`` per probe x stage, for Jenkins, GitLab and GitHub.

Shape (the common JUnit schema that those tools read)::

    <testsuites name="tracecheck" tests= failures= errors= skipped= time=>
      <testsuite name="<probe file>" tests= failures= errors= skipped= time= timestamp=>
        <properties><property name="torch" value="2.13.0+cpu"/>...</properties>
        <testcase classname="<probe file, dotted>" name="<probe>[<stage>]" file="<probe file>" time="1.2">
          <properties><property name="calls_captured" value="8"/>...</properties>   explain: compile coverage
          <failure type="<kind>" message="<summary>">findings</failure>   a failing stage
          <error type="timeout|crash" message="...">stderr tail</error>   a stage whose process died
          <skipped message="reason"/>                                     a skipped stage
          <error type="internal-error" message="...">traceback</error>    tracecheck's own failure in the stage
          <system-out>advice: ...</system-out>                            a passing stage with advice, or a
                                                                          failed stage of a target not required
        </testcase>

With a baseline comparison, a testcase fails only where a root cause regressed it (``Comparison.causes``, a
stage of a required target): its ``type`` and ``message``, which CI test views show, name that cause (kind,
file:line, GB code and gb_type), and the body labels the stage's findings the baseline already has as known. A
failure the baseline already has is ``<skipped>`` ("known failure"), so the job's test view shows only
regressions as failures; a probe that went missing gets a failing ``<probe>[missing]`` testcase. Files are
relative to the rootdir, as probe ids are.

``tracecheck ops``: its probes' testcases are ``classname="tracecheck.ops" name="<ns>::<op>[<stage>]"`` in a suite
``tracecheck.ops``, where each op or Function no probe covered is a ``<testcase classname="tracecheck.ops.not_covered"
name="<target>">`` with ``<skipped message="not covered: <why>"/>``: never a pass, never a failure.

Each finding in a body is ``[kind] summary``, then the lines of its view (render/cause.sighting) in the terminal's
``-v`` order (render/cause.lines: its line relative to the rootdir, no ``message:``; a fix once a body), then its
traceback (docs/ci.md says the whole layout).
"""
from __future__ import annotations

import os
import re
import time
import xml.etree.ElementTree as ET
from typing import Any

from ..gate.causes import ChangeCause
from ..gate.changes import REGRESSED
from ..gate.comparison import Comparison
from ..gate.snapshot import relative_location
from ..model.report import CRASH, FAILED, FAIL, INTERNAL, SKIP, TIMEOUT, Finding, ProbeReport, RunReport, StageResult
from ..model.ops import ID_PREFIX
from ..model.reportio import write_text_atomic
from . import cause, view

_XML_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_MAX_TEXT = 20000


def _clean(text: Any, limit: int = _MAX_TEXT) -> str:
    s = _XML_ILLEGAL.sub("", str(text if text is not None else ""))
    return s if len(s) <= limit else s[:limit] + f"\n... [{len(s) - limit} more characters]"


def _classname(file_part: str) -> str:
    stem = os.path.splitext(file_part)[0].lstrip("./")
    return re.sub(r"[\\/]+", ".", stem) or "tracecheck"


#: the classname of ``tracecheck ops``' testcases (its probe ids, ``ops::ns::name``, name no file), and of the ops
#: and Functions no probe covered (one skipped testcase each)
OPS_CLASS = "tracecheck.ops"
NOT_COVERED_CLASS = "tracecheck.ops.not_covered"


def _place(probe_id: str) -> tuple[str, str, str | None]:
    """A probe's (suite, classname, its name in its testcases' names): its id's file, dotted, and its name; a
    ``tracecheck ops`` id: the ops suite and the id without its prefix (``tcops::my_op``)."""
    file_part, _, name = probe_id.partition("::")
    if probe_id.startswith(ID_PREFIX):
        return OPS_CLASS, OPS_CLASS, probe_id.removeprefix(ID_PREFIX)
    return file_part, _classname(file_part), name or None


def _evidence_text(s: StageResult, p: ProbeReport, findings: list[Finding] | None = None) -> str:
    """The stage's findings (or ``findings``), each laid out from its view (render/cause.sighting)."""
    out: list[str] = []
    # a fix is said once a body: a stage's findings of one kind often share it (its kind's page, ``more:``, with it)
    fixes: set[tuple[str | None, str | None]] = set()
    for f in findings if findings is not None else s.findings or ([s.failure] if s.failure else []):
        v = cause.sighting(p, [s.stage], f)
        out += [*_finding_lines(v, show_fix=(v.fix, v.more) not in fixes), ""]
        fixes.add((v.fix, v.more))
    return "\n".join(out)


def _finding_lines(v: cause.CauseView, show_fix: bool = True) -> list[str]:
    """One finding in a testcase's body: ``[kind] summary``, then, indented, its long form (``cause.lines``, in the
    terminal's ``-v`` order, the line relative to the rootdir, the fix where ``show_fix``; ``more:`` is a command a
    CI log's reader can run wherever tracecheck installs), then its whole account (the traceback) unindented."""
    # no ``message:``: the traceback below holds it
    said = cause.lines(v, v.site.ci_location if v.site is not None else "", message=False, fix=show_fix)
    return [f"[{v.kind}] {v.summary}", *(f"  {line.text}" for line in said)] + ([v.detail] if v.detail else [])


def _regressions(causes: list[ChangeCause], probe_id: str, stage: str) -> list[ChangeCause]:
    """The root causes that regressed this (probe, stage), or the whole probe, in reading order (file, line)."""
    return sorted((c for c in causes if c.effect == REGRESSED
                   and any(pid == probe_id and st in (stage, None) for pid, st in c.covers)),
                  key=lambda c: (c.file is None, c.file or "", c.line or 0))


def _is_new(f: Finding, p: ProbeReport, causes: list[ChangeCause]) -> bool:
    """Is the finding one of ``causes`` (at its break's line, as CI outputs name it, or its kind's where the kind is
    the cause)."""
    site = cause.site(f, p)
    at = (site.ci_file, site.line) if site is not None else (None, None)
    return any((c.file, c.line) == at if c.file else f.kind == c.failure_kind for c in causes)


def _regression_failure(case: ET.Element, p: ProbeReport, s: StageResult, causes: list[ChangeCause]) -> None:
    """The failure of a (probe, stage) a change regressed: its ``type`` and ``message`` name the new root cause (what
    a CI system's test view shows), the body says each regressed cause, then the stage's findings: new ones, and
    those the baseline already has, labelled as known."""
    first = causes[0]
    more = f" (and {len(causes) - 1} more regression{'s' if len(causes) > 2 else ''})" if len(causes) > 1 else ""
    gb_type = f": {first.gb_type}" if first.gb_type else ""
    el = ET.SubElement(case, "failure", {"type": first.failure_kind or "regression",
                                         "message": _clean(f"{first.what}{gb_type}{more}", 1000)})
    findings = s.findings or ([s.failure] if s.failure else [])
    new = [f for f in findings if _is_new(f, p, causes)]
    known = [f for f in findings if f not in new]
    parts = ["Regressed against the baseline:"] + [f"- {c.what} in {c.scope}" for c in causes]
    if new:
        parts += ["", "New in this stage:", _evidence_text(s, p, new)]
    if known:
        parts += ["", "Known in the baseline (not a regression):", _evidence_text(s, p, known)]
    el.text = _clean("\n".join(parts))


def testcase(p: ProbeReport, stage: str, s: StageResult, comparison: Comparison | None = None,
             causes: list[ChangeCause] | None = None) -> ET.Element:
    """``causes``: ``comparison.causes``, computed once for every testcase (grouping is not free)."""
    file_part, classname, name = _place(p.id)
    case = ET.Element("testcase", {"classname": classname, "name": f"{name or p.name}[{stage}]",
                                   **({"file": file_part} if classname != OPS_CLASS else {}), "time": f"{s.seconds:.3f}"})
    cov = view.coverage(p) if stage == "explain" else None
    if cov is not None:  # the forward's compile coverage, as pytest's record_property writes a testcase's own
        props = ET.SubElement(case, "properties")
        for name in ("calls_captured", "unique_graphs", "frames_eager", "torch_calls_eager", "captured_share"):
            if getattr(cov, name) is not None:
                ET.SubElement(props, "property", {"name": name, "value": str(getattr(cov, name))})
        costs = view.break_costs(p)
        for c in [c for c in costs.breaks if not c.noisy] if costs is not None else ():  # costliest first: "share of
            # the compiled forward"; a noisy one is no measurement (BreakCost.noisy)
            ET.SubElement(props, "property", {"name": f"break_cost {relative_location(c.file, p)}:{c.line}",
                                              "value": f"{c.share:.4f}"})
    failed = s.status in FAILED
    shown = view.cell(s, p.gate)  # a failure of a target the run does not require gates nothing
    not_required = shown is not None and shown.shown == view.NOT_REQUIRED
    if comparison is not None:
        # against a baseline the comparison decides (its required targets and advice severity included)
        regressed = _regressions(causes if causes is not None else comparison.causes, p.id, stage)
        if regressed and s.status != INTERNAL:  # (a gated advice kind fails a stage that passed)
            _regression_failure(case, p, s, regressed)
            return case
        if failed and not regressed:
            why = f"target {s.target} not required, no regression" if not_required else \
                "known failure in the baseline"
            kinds = ", ".join(dict.fromkeys(f.kind for f in s.findings)) or s.status
            ET.SubElement(case, "skipped", {"message": _clean(f"{why}: {kinds}", 500)})
            return case
    elif not_required:  # shown with its evidence, failing nothing
        ET.SubElement(case, "system-out").text = _clean(
            f"target {s.target} not required ({p.gate.how_to_require(str(s.target))} gates on it); the stage "
            f"failed:\n" + _evidence_text(s, p))
        return case
    if s.status == INTERNAL:
        lines = (s.internal_error or "").strip().splitlines() or ["internal error"]
        el = ET.SubElement(case, "error", {"type": INTERNAL, "message": _clean(
            f"tracecheck's own code failed in this stage (not the probe's): {lines[-1]}", 1000)})
        el.text = _clean(s.internal_error or "")
        return case
    f = s.failure
    if s.status == FAIL:
        el = ET.SubElement(case, "failure", {"type": f.kind if f else "fail",
                                             "message": _clean(f.summary if f else "failed", 1000)})
        el.text = _clean(_evidence_text(s, p))
    elif s.status in (TIMEOUT, CRASH):
        el = ET.SubElement(case, "error", {"type": s.status, "message": _clean(f.summary if f else s.status, 1000)})
        el.text = _clean(_evidence_text(s, p))
    elif s.status == SKIP:
        ET.SubElement(case, "skipped", {"message": _clean(s.skip_reason or "skipped", 1000)})
    elif s.findings:  # a pass with advice (no-batching-rule, opaque-op): shown, not failed
        ET.SubElement(case, "system-out").text = _clean("advice (fails nothing unless --strict):\n"
                                                        + _evidence_text(s, p))
    return case


def to_element(report: RunReport, comparison: Comparison | None = None) -> ET.Element:
    root = ET.Element("testsuites", {"name": "tracecheck"})
    causes = comparison.causes if comparison is not None else None
    suites: dict[str, ET.Element] = {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    for p in report.probes:
        file_part = _place(p.id)[0]
        suite = suites.get(file_part)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", {"name": file_part, "timestamp": stamp})
            props = ET.SubElement(suite, "properties")
            env = report.env
            for key, value in (("torch", env.torch), ("python", env.python)):
                if value is not None:
                    ET.SubElement(props, "property", {"name": key, "value": _clean(value, 200)})
            if env.device is not None:
                ET.SubElement(props, "property", {"name": "device", "value": _clean(env.device_text, 200)})
            ET.SubElement(props, "property", {"name": "tracecheck", "value": report.tracecheck_version})
            suites[file_part] = suite
        for stage, s in p.stages.items():
            suite.append(testcase(p, stage, s, comparison, causes))
    for u in report.ops.not_covered if report.ops is not None else ():  # never a pass: skipped, with why
        suite = suites.get(OPS_CLASS)
        if suite is None:
            suite = suites[OPS_CLASS] = ET.SubElement(root, "testsuite", {"name": OPS_CLASS, "timestamp": stamp})
        case = ET.SubElement(suite, "testcase", {"classname": NOT_COVERED_CLASS, "name": u.target, "time": "0"})
        ET.SubElement(case, "skipped", {"message": _clean(f"not covered: {u.why}", 1000)})
    if comparison is not None:
        for c in comparison.regressions:
            if c.aspect == "probe" and c.after == "missing":
                file_part, classname, name = _place(c.probe)
                suite = suites.get(file_part)
                if suite is None:
                    suite = suites[file_part] = ET.SubElement(root, "testsuite", {"name": file_part,
                                                                                  "timestamp": stamp})
                case = ET.SubElement(suite, "testcase", {"classname": classname, "name": f"{name}[missing]",
                                                         **({"file": file_part} if classname != OPS_CLASS else {}),
                                                         "time": "0"})
                el = ET.SubElement(case, "failure", {"type": "missing", "message": c.detail})
                el.text = c.detail
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(1 for c in cases if c.find("failure") is not None),
            "errors": sum(1 for c in cases if c.find("error") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None),
            "time": sum(float(c.get("time", 0)) for c in cases),
        }
        for k, v in counts.items():
            suite.set(k, f"{v:.3f}" if k == "time" else str(v))
            total[k] += v
    for k, v in total.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    return root


def render(report: RunReport, comparison: Comparison | None = None) -> str:
    """The JUnit XML document as a string (UTF-8, with an XML declaration)."""
    root = to_element(report, comparison)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: str, report: RunReport, comparison: Comparison | None = None) -> None:
    write_text_atomic(path, render(report, comparison))
