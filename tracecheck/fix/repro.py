"""``tracecheck repro``: a standalone script that reproduces a finding with plain torch, checked by running it.

Diagnose (``api.run`` on the one stage), write the script (repro_script.py), run it with the same Python in a
fresh process whose ``tracecheck`` import is blocked, and compare what it raised with the finding's exception type
and gb_type. Lives beside ``fix`` because it is the same shape of work: code tracecheck writes, then proves.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from .. import api
from ..model.exitcodes import UsageError
from ..model.reportio import write_text_atomic
from . import repro_script as template
from .prelude import read_source
from .pipeline import check_output, split_target, torch_version

#: stages a reproducer can be written for (repro_script.py), in run order
STAGES = tuple(template.STAGE_CALLS)
REPRODUCED, NOT_REPRODUCED, NOTHING = "reproduced", "not reproduced", "nothing to reproduce"
#: the script runs with ``import tracecheck`` made to fail, so a reproducer that needs tracecheck cannot pass
_BLOCKED = "import runpy, sys; sys.modules['tracecheck'] = None; sys.argv = sys.argv[1:]; " \
           "runpy.run_path(sys.argv[0], run_name='__main__')"


@dataclass
class ReproOptions:
    target: str
    output: str = "repro.py"
    stage: str | None = None
    jobs: int = 1
    timeout_s: float = 300.0


@dataclass
class ReproOutcome:
    status: str
    probe_id: str
    stage: str | None = None
    expected: dict[str, str] = field(default_factory=dict)
    written: str | None = None
    #: the script's run: exit code and the end of its stderr
    returncode: int | None = None
    tail: str = ""
    reason: str = ""


def _expected(finding: Any) -> dict[str, str]:
    ev = finding.evidence
    message = str(ev.get("message") or "").strip().splitlines()
    return {"kind": finding.kind, "exception_type": ev.get("exception_type") or "", "gb_type": ev.get("gb_type") or "",
            "message": message[0][:200] if message else "", "op": str(finding.context.get("op") or "")}


def _sibling_imports(path: str) -> bool:
    """Does the file import a module that lives next to it (``import mhc`` beside ``mhc/``)?"""
    here = os.path.dirname(os.path.abspath(path))
    names = set()
    for node in ast.walk(ast.parse(read_source(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return any(os.path.exists(os.path.join(here, n + ".py")) or os.path.isdir(os.path.join(here, n)) for n in names)


def reproduced(expected: dict[str, str], stderr: str) -> bool:
    """The script raised the finding's exception type (qualified or bare name, as the traceback's last lines
    print it) and, when the finding has one, its gb_type."""
    want = expected.get("exception_type") or ""
    names = {want, want.rsplit(".", 1)[-1]} - {""}
    lines = [line.strip() for line in stderr.splitlines()]
    gb = expected.get("gb_type") or ""
    if not names:  # a graph break with no exception (explain): its gb_type, in whatever the script raised
        return bool(gb) and gb in stderr
    return any(line.split(":", 1)[0] in names for line in lines) and (not gb or gb in stderr)


def repro(opts: ReproOptions, progress: api.Progress | None = None) -> ReproOutcome:
    path, name = split_target(opts.target)
    if opts.stage is not None and opts.stage not in STAGES:
        raise UsageError(f"--stage {opts.stage}: a reproducer can be written for {', '.join(STAGES)}")
    out_abs = os.path.abspath(opts.output)
    if out_abs == os.path.abspath(path):
        raise UsageError(f"-o {opts.output}: is the probe file itself")
    check_output(opts.output, "-o", template.REPRO_MARK, module=False, written_by="tracecheck repro")
    stem = os.path.splitext(os.path.basename(out_abs))[0]
    if stem.isidentifier() and importlib.util.find_spec(stem) is not None:  # `python repro.py` puts its folder first
        raise UsageError(f"-o {opts.output}: would shadow the module {stem!r} when the script runs; choose another name")
    stages = [opts.stage] if opts.stage else list(STAGES)
    report = api.run(api.RunOptions([path], stages=stages, only=name, jobs=opts.jobs, timeout_s=opts.timeout_s,
                                    command=["repro", opts.target]), progress)
    probe = report.probes[0]
    out = ReproOutcome(NOTHING, probe.id)
    failing = [r for r in probe.stages.values() if r.status == "fail" and r.failure is not None and r.stage in STAGES]
    stuck = [f"{r.stage} ({r.status})" for r in probe.stages.values() if r.status in ("timeout", "crash")]
    if not failing and stuck:  # a hang or a crash has no plain-torch call to write
        out.reason = f"{', '.join(stuck)}: no script is written for a stage that timed out or crashed; its stderr " \
                     f"tail is in `tracecheck run {opts.target} --json`"
        return out
    if not failing:
        out.reason = f"the {opts.stage} stage does not fail for {probe.id}" if opts.stage else \
            f"no stage a reproducer can be written for ({', '.join(STAGES)}) fails for {probe.id}"
        return out
    result = failing[0]
    out.stage, out.expected = result.stage, _expected(result.failure)
    text = template.script(path, name, result.stage, out.expected, torch_version(), _sibling_imports(path),
                           os.path.basename(opts.output))
    write_text_atomic(opts.output, text)
    out.written = opts.output
    try:
        proc = subprocess.run([sys.executable, "-c", _BLOCKED, out_abs], capture_output=True, text=True,
                              timeout=opts.timeout_s, cwd=os.path.dirname(out_abs),
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    except subprocess.TimeoutExpired:
        out.status, out.reason = NOT_REPRODUCED, f"the script ran past {opts.timeout_s:g} s"
        return out
    out.returncode, out.tail = proc.returncode, "\n".join(proc.stderr.strip().splitlines()[-12:])
    if proc.returncode != 0 and reproduced(out.expected, proc.stderr):
        out.status = REPRODUCED
    else:
        out.status = NOT_REPRODUCED
        out.reason = "the script exited 0" if proc.returncode == 0 else "the script failed differently"
    return out
