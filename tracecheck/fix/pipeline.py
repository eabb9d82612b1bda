"""Parent side of ``tracecheck fix`` (no user code runs here: analysis and checks run in stage processes)."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from .. import __version__, api, classify
from ..exitcodes import UsageError
from ..report import STAGES, RunReport, write_text_atomic
from ..runner import Runner, Task

#: stages that tell the kinds this command fixes apart, fastest first (inductor adds nothing to the diagnosis)
DIAGNOSE_STAGES = ["eager", "explain", "fullgraph", "opcheck"]
#: kinds with a code fix, and the fixer that handles them
CODE_FIXES = {
    "pybind-builtin": "autograd.Function -> forward and backward custom ops",
    "missing-fake": "register_fake inferred from perturbed eager runs",
    "mutates-args-mismatch": "mutates_args from observed mutation",
    "missing-autograd": "register_autograd wired to an existing backward op, else a skeleton",
}
VERIFIED, NOT_VERIFIED, NO_CODE_FIX, NOTHING_TO_FIX = "verified", "not verified", "no code fix", "nothing to fix"


@dataclass
class FixOptions:
    """``target`` is ``path/to/model.py::probe_name`` (``::name`` may be left out when the file has one probe)."""

    target: str
    output: str = "fixed_ops.py"
    patched: str | None = None
    namespace: str = "tracecheck_fix"
    jobs: int = os.cpu_count() or 1
    timeout_s: float = 300.0
    verify: bool = True


@dataclass
class FixOutcome:
    """What ``fix`` did. ``status`` is one of VERIFIED, NOT_VERIFIED, NO_CODE_FIX, NOTHING_TO_FIX."""

    status: str
    probe_id: str
    kinds: list[str]
    functions: list[dict[str, Any]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    #: kinds found that have no code fix: kind -> doc page
    no_code_fix: dict[str, str] = field(default_factory=dict)
    diagnosis: RunReport | None = None
    verification: RunReport | None = None
    eager_mismatches: list[dict[str, Any]] = field(default_factory=list)
    #: when the original has no working backward: <grad, v> vs a central finite difference (analysis.py)
    gradient_check: dict[str, Any] | None = None
    reasons: list[str] = field(default_factory=list)


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "unknown"


def _split_target(target: str) -> tuple[str, str | None]:
    path, sep, name = target.rpartition("::") if "::" in target else (target, "", "")
    if not path.endswith(".py") or not os.path.isfile(path):
        raise UsageError(f"{target}: expected path/to/model.py::probe_name with an existing .py file")
    if sep and not name.isidentifier():
        raise UsageError(f"{target}: {name!r} is not a probe function name")
    return path, name or None


def _check_output(path: str, option: str, module: bool = True) -> None:
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext != ".py" or (module and not stem.isidentifier()):
        what = "a .py file whose name is a Python module name" if module else "a .py file"
        raise UsageError(f"{option} {path}: must be {what}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: cannot write there")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(f"{option} {path}: exists and is not a regular file")


def _one(runner: Runner, payload: dict[str, Any], timeout_s: float, what: str) -> dict[str, Any]:
    outcome = next(runner.run([Task(what, payload, timeout_s)]))
    res = outcome.result
    if res is None:
        raise RuntimeError(f"{what}: the process {outcome.died}\n{outcome.log_tail}")
    if "usage_error" in res:
        raise UsageError(res["usage_error"], res.get("detail"))
    if "internal_error" in res:
        raise RuntimeError(f"{what}:\n{res['internal_error']}")
    return res


def fix(opts: FixOptions, progress: api.Progress | None = None) -> FixOutcome:
    """Diagnose ``opts.target``, generate the fix for the kinds that have one, verify it. Raises UsageError."""
    path, name = _split_target(opts.target)
    _check_output(opts.output, "-o")
    patched = opts.patched or os.path.join(os.path.dirname(opts.output) or ".",
                                           f"{os.path.splitext(os.path.basename(path))[0]}_fixed.py")
    _check_output(patched, "--patched", module=False)  # tracecheck loads it by path
    if os.path.abspath(patched) in (os.path.abspath(path), os.path.abspath(opts.output)):
        raise UsageError(f"--patched {patched}: must differ from the probe file and from -o")
    if not opts.namespace.isidentifier():
        raise UsageError(f"--namespace {opts.namespace!r}: must be a Python identifier")

    # Inductor's FX-graph and AOTAutograd caches do not key on a custom op's fake impl: a regenerated fix with
    # the same op names would reuse graphs compiled against the previous fakes (seen on torch 2.13: "mismatch in
    # length of strides and shape"). Verify from scratch. Set before the stage fork server starts (it keeps the
    # environment it started with).
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    diagnosis = api.run(api.RunOptions([path], stages=DIAGNOSE_STAGES, only=name, jobs=opts.jobs,
                                       timeout_s=opts.timeout_s, command=["fix", opts.target]), progress)
    if len(diagnosis.probes) != 1:
        raise UsageError(f"{opts.target}: {len(diagnosis.probes)} probes in the file; name one with ::probe_name")
    probe = diagnosis.probes[0]
    kinds = probe.verdict.kinds
    out = FixOutcome(NOTHING_TO_FIX, probe.id, kinds, diagnosis=diagnosis)
    if not kinds:
        return out
    out.no_code_fix = {k: classify.kinds()[k].doc if k in classify.kinds() else "" for k in kinds
                       if k not in CODE_FIXES}
    if not any(k in CODE_FIXES for k in kinds):
        out.status = NO_CODE_FIX
        return out

    with Runner(1) as runner:
        autograd_ops = sorted({f.context["op"] for s in probe.stages.values() for f in s.findings
                               if f.kind == "missing-autograd" and f.context.get("op")})
        res = _one(runner, {"op": "fix-analyze", "file": path, "probe": probe.name, "namespace": opts.namespace,
                            "kinds": kinds, "autograd_ops": autograd_ops,
                            "module_name": os.path.splitext(os.path.basename(opts.output))[0],
                            "target": opts.target, "patched_path": patched, "fixed_path": opts.output,
                            "versions": {"tracecheck": __version__, "torch": _torch_version()}},
                   opts.timeout_s, "analysing the probe")
        out.functions = res["functions"]
        if "fixed_module" not in res:
            out.status = NO_CODE_FIX
            out.reasons = [f"{f['function']}: {f['action']}" for f in out.functions] or [
                "tracecheck found no autograd.Function or custom op to fix: the failing call is elsewhere (see the "
                "doc page of the kind)"]
            return out
        write_text_atomic(opts.output, res["fixed_module"])
        write_text_atomic(patched, res["patched_probe"])
        out.written = [opts.output, patched]
        out.reasons = [f"{f['function']}: {t}" for f in out.functions for t in f.get("todo", [])]
        if not opts.verify:
            out.status = NOT_VERIFIED
            out.reasons.append("--no-verify: the fix was not run")
            return out
        with tempfile.TemporaryDirectory(prefix="tracecheck-fix-") as tmp:
            dump = os.path.join(tmp, "eager.pt")
            ref = _one(runner, {"op": "eager-dump", "file": path, "probe": probe.name, "dump": dump},
                       opts.timeout_s, "running the original probe eagerly")
            if "error" in ref and ref["error"].get("phase") == "backward":
                # no reference gradients (missing-autograd): check the new ones against finite differences
                fd = _one(runner, {"op": "directional-check", "file": os.path.abspath(patched), "probe": probe.name},
                          opts.timeout_s, "checking gradients against finite differences")
                out.gradient_check = fd
                if "error" in fd:
                    out.reasons.append(f"the patched probe's {fd['error']['phase']} fails eagerly: "
                                       f"{fd['error']['type']}: {fd['error']['message'][:300]}")
                elif "skip" in fd:
                    out.reasons.append(f"no gradient check possible: {fd['skip']}")
                elif not fd["ok"]:
                    out.reasons.append(f"the patched probe's gradients disagree with finite differences ("
                                       f"{fd['analytic']:.6g} vs {fd['numeric']:.6g} along a random direction)")
            elif "error" in ref:
                out.reasons.append(f"the original probe fails eagerly ({ref['error']['type']}), so the fix cannot be "
                                   "compared with it")
            else:
                got = _one(runner, {"op": "eager-compare", "file": os.path.abspath(patched), "probe": probe.name,
                                    "dump": dump}, opts.timeout_s, "running the patched probe eagerly")
                out.eager_mismatches = got.get("mismatches", [])
                if "error" in got:
                    out.reasons.append(f"the patched probe fails eagerly: {got['error']['type']}: "
                                       f"{got['error']['message'][:300]}")
    out.verification = api.run(api.RunOptions([patched], stages=list(STAGES), only=probe.name, jobs=opts.jobs,
                                              timeout_s=opts.timeout_s, command=["fix", "--verify", patched]),
                               progress)
    verdict = out.verification.probes[0].verdict
    if verdict.status != "pass":
        out.reasons.append(f"the patched probe still fails: {', '.join(verdict.kinds)} (first at "
                           f"{verdict.first_failing_stage})")
    if out.eager_mismatches:
        out.reasons.append(f"the patched probe's eager outputs/gradients differ from the original's "
                           f"({len(out.eager_mismatches)} mismatches)")
    out.status = NOT_VERIFIED if out.reasons else VERIFIED
    return out
