"""``tracecheck repro``: a standalone script that reproduces a finding with plain torch, checked by running it.

Diagnose (``api.run``), write the script for the first failing stage (repro_script.py: only what the probe's call
needs from its file), run it with the same Python in a fresh process whose ``tracecheck`` import is blocked, and
compare what it raised with the finding's exception type and gb_type. A cut script that does not fail the same way
is replaced by one with the whole file, and the outcome says so. ``owner`` reads from the evidence whose code the
fix belongs in: torch's (an issue upstream), the user's (file:line), or an installed library's. Lives beside
``fix`` because it is the same shape of work: code tracecheck writes, then proves.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache

from .. import api
from ..model.progress import Progress
from ..model import taxonomy
from ..model.evidence import NumericEvidence
from ..model.exitcodes import UsageError
from ..model.report import FAILED, LOAD_STAGE, Finding, is_generated, op_name
from ..model.reportio import write_text_atomic
from ..model.taxonomy import K
from ..model.tasks import DEFAULT_TIMEOUT_S
from . import repro_script as template
from .prelude import read_source
from .prune import op_sites
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
    timeout_s: float = DEFAULT_TIMEOUT_S


#: ``Owner.party``: whose code the evidence blames
TORCH, YOURS, LIBRARY, UNPLACED = "torch", "yours", "library", "unplaced"


@dataclass
class Owner:
    """Whose code the fix belongs in, as the finding's evidence tells: ``party``, ``where`` (file:line, or the
    library's name) and ``why`` (the evidence that says so)."""

    party: str
    where: str = ""
    why: str = ""

    def line(self) -> str:
        """One line for the terminal and the script; "for upstream" only where the evidence points at torch."""
        if self.party == TORCH:
            return f"torch's, for upstream (a pytorch/pytorch issue): {self.why}" + \
                (f" ({self.where})" if self.where else "")
        if self.party == YOURS:
            return f"yours, not torch's: fix it at {self.where} ({self.why})"
        if self.party == LIBRARY:
            return f"{self.where}'s, not torch's: report it to {self.where} ({self.why})"
        return f"not placed: {self.why}; read the traceback before reporting it to torch"


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
    #: why ``stage``: the first failing stage, or ``--stage``, or the first a script can be written for
    stage_note: str = ""
    #: the script's length; ``pruned``: the probe file cut to what the call needs (``kept_lines`` of ``file_lines``)
    lines: int = 0
    pruned: bool = False
    kept_lines: int = 0
    file_lines: int = 0
    #: why the whole file was written instead of the cut one ("" when the cut one reproduced or none was tried)
    fallback: str = ""
    owner: Owner | None = None


def _expected(finding: Finding) -> dict[str, str]:
    ev = finding.evidence
    message = ev.message.strip().splitlines()
    return {"kind": finding.kind, "exception_type": ev.exception_type or "", "gb_type": ev.gb_type or "",
            "message": message[0][:200] if message else "", "op": finding.context.op or "",
            "phase": str(ev.phase or "")}


#: kinds about a custom op's registration: its fix goes where the op is registered, whatever frame torch stopped in
_REGISTRATION = (K.MISSING_FAKE, K.MISSING_AUTOGRAD, K.MUTATES_ARGS_MISMATCH, K.OP_REDEFINED, K.MISSING_DEVICE_KERNEL,
                 K.FAKE_MISMATCH, K.WRONG_GRADIENT, K.NO_BATCHING_RULE, K.OPAQUE_OP)
#: the statement of an op's registration that each kind's fix edits (the definition where none matches)
_FAKE_SITE, _AUTOGRAD_SITE = r"register_fake|impl_abstract|\bMeta\b", r"register_autograd|autograd"
_SITE = {K.FAKE_MISMATCH: _FAKE_SITE, K.MISSING_FAKE: _FAKE_SITE, K.WRONG_GRADIENT: _AUTOGRAD_SITE,
         K.MISSING_AUTOGRAD: _AUTOGRAD_SITE, K.NO_BATCHING_RULE: r"register_vmap"}
#: torch says the failure is its own: Dynamo's hint for its bugs (torch/_dynamo/graph_break_hints.py DYNAMO_BUG), and
#: the exception Dynamo wraps an error of its own in
_TORCH_SAYS = ("This is likely to be a Dynamo bug",)
_TORCH_INTERNAL_TYPES = ("InternalTorchDynamoError",)


@lru_cache(maxsize=1)
def _torch_dir() -> str:
    """torch's folder, found without importing it (the CLI process runs no torch)."""
    spec = importlib.util.find_spec("torch")
    return os.path.realpath(list(spec.submodule_search_locations)[0]) + os.sep if spec and \
        spec.submodule_search_locations else "\0"


def _in_torch(path: str) -> bool:
    return is_generated(path) or os.path.realpath(path).startswith(_torch_dir())


def _library(path: str) -> str | None:
    """The installed package a file belongs to (``flash_attn`` for .../site-packages/flash_attn/x.py)."""
    parts = os.path.realpath(path).split(os.sep)
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            return parts[i + 1].removesuffix(".py")
    return None


def _shown(path: str) -> str:
    """A path as the user typed theirs: relative to the current folder when inside it."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


def _op_library(op: str) -> str | None:
    """The installed package an op's namespace names (``flash_attn::fwd``: flash_attn), found without importing it."""
    ns = op.split("::", 1)[0]
    try:
        spec = importlib.util.find_spec(ns) if ns.isidentifier() else None
    except (ImportError, ValueError):
        return None
    return _library(spec.origin) if spec is not None and spec.origin else None


def owner(f: Finding, probe_file: str) -> Owner:
    """Whose code finding ``f`` blames (``Owner``). Torch's only where the evidence says so: a kind that is the
    compiler's (backend-error, a numeric mismatch with no custom op), torch's own words (an internal error, Dynamo's
    "likely to be a Dynamo bug"), or the frame it is placed at lying inside torch. A custom op's registration
    problem is where the op is registered; other failures are where the user frame lies."""
    ev, cx = f.evidence, f.context
    title = taxonomy.kinds()[f.kind].title if f.kind in taxonomy.kinds() else f.kind
    frame = f.user_frame
    here = f"{_shown(frame.file)}:{frame.line}" if frame else ""
    if f.kind == K.BACKEND_ERROR and cx.cause == "suspect_code":  # classify/attribute.upstream_advice
        return Owner(UNPLACED, "", f"{f.kind}, with other findings of the probe that can make a backend fail "
                                   f"({cx.suspect or 'see the report'}): fix those first, then rerun")
    if f.kind == K.BACKEND_ERROR:
        return Owner(TORCH, here, f"{f.kind}: the compiler backend raised on code that runs eagerly")
    if f.kind == K.COMPILE_SEMANTICS:  # the user's line raised, on a value the compiler changed: eager runs it
        return Owner(TORCH, here, f"{f.kind}: eager runs this line; under compile a value it uses has another type "
                                  f"({cx.cause or 'see the message'})")
    if f.kind == K.TORCH_INTERNAL_ERROR and cx.cause == "classmethod":  # torch asserts on a documented misuse
        lib = _library(frame.file) if frame is not None else None
        if lib:
            return Owner(LIBRARY, lib, f"{f.kind}: {cx.function or 'an autograd.Function'} is written with "
                                       "classmethods where torch documents @staticmethod")
        return Owner(YOURS, here or "the autograd.Function's forward/backward",
                     f"{f.kind}: a classmethod where torch documents @staticmethod (torch should have said so clearly)")
    if f.kind == K.TORCH_INTERNAL_ERROR:  # raised in torch's own code (or a graph it generated): evidence.torch_frame
        return Owner(TORCH, cx.torch_frame or here, f"{f.kind}: {cx.exception or 'torch raised'}")
    if f.kind == K.NUMERIC_MISMATCH and cx.cause == "backend":
        return Owner(TORCH, "", f"{f.kind}: no custom op ran, and the compiled result is further from float64 than "
                                "eager's")
    said = next((s for s in _TORCH_SAYS if s in ev.message), None)
    if said or (ev.exception_type or "").rsplit(".", 1)[-1] in _TORCH_INTERNAL_TYPES:
        return Owner(TORCH, here, f"torch's own words: \"{said}\"" if said else
                     f"torch's internal error {ev.exception_type}")
    op = op_name(cx.op).split(".")[0] if cx.op else ""  # (an overload: its op's sites)
    if f.kind in _REGISTRATION and op:
        if f.kind == K.FAKE_MISMATCH and cx.cause == "raises" and frame and not _in_torch(frame.file):
            lib = _library(frame.file)  # the line the fake impl raised at
            return Owner(LIBRARY, lib, f"{title}: {op}'s fake impl raises at {here}") if lib else \
                Owner(YOURS, here, f"{title}: {op}'s fake impl raises")
        sites = op_sites(probe_file, op)
        site = next((s for s in sites if re.search(_SITE.get(f.kind, "$^"), s[1])), sites[0] if sites else None)
        if site is not None:
            return Owner(YOURS, f"{_shown(probe_file)}:{site[0]}", f"{title}: {op}")
        outside = frame.file if frame is not None and not _in_torch(frame.file) else None  # the caller's file
        lib = _op_library(op) or (_library(outside) if outside is not None else None)
        called = f", called at {here}" if outside is not None else ""
        if lib:
            return Owner(LIBRARY, lib, f"{title}: {op}{called}")
        return Owner(YOURS, f"the registration of {op}{called}", title)
    if f.kind == K.NUMERIC_MISMATCH and cx.cause == "custom-op":
        ops = ev.custom_ops if isinstance(ev, NumericEvidence) else None  # (a numeric mismatch's evidence lists them)
        return Owner(YOURS, f"the registration of {', '.join(ops or []) or 'the custom ops'}",
                     f"{title}, with custom ops in the graph")
    if frame is None:
        return Owner(UNPLACED, "", f"{f.kind}: nothing in the evidence places it")
    if _in_torch(frame.file):
        return Owner(TORCH, here, f"{title}, placed inside torch's own code")
    lib = _library(frame.file)
    if lib:
        return Owner(LIBRARY, lib, f"{title} at {here}")
    return Owner(YOURS, here, title)


def _sibling_imports(path: str) -> bool:
    """Does the file import a module that lives next to it (``import mhc`` beside ``mhc/``)?"""
    here = os.path.dirname(os.path.abspath(path))
    names: set[str] = set()
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


def repro(opts: ReproOptions, progress: Progress | None = None) -> ReproOutcome:
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
    # with --stage, opcheck beside it (it starts no process without a custom op): a backend's failure is torch's
    # only when no custom op's fake or registration can explain it (classify/attribute.upstream_advice, ``owner``)
    stages = [opts.stage, *(["opcheck"] if opts.stage != "opcheck" else [])] if opts.stage else list(STAGES)
    report = api.run(api.RunOptions([path], stages=stages, only=name, jobs=opts.jobs, timeout_s=opts.timeout_s,
                                    command=["repro", opts.target]), progress)
    probe = report.probes[0]
    out = ReproOutcome(NOTHING, probe.id)
    failing = [(r, r.failure) for r in probe.stages.values() if r.status == "fail" and r.failure is not None
               and r.stage in STAGES and r.stage == (opts.stage or r.stage)]
    stuck = [f"{r.stage} ({r.status})" for r in probe.stages.values() if r.status in ("timeout", "crash")]
    if not failing and stuck:  # a hang or a crash has no plain-torch call to write
        out.reason = f"{', '.join(stuck)}: no script is written for a stage that timed out or crashed; its stderr " \
                     f"tail is in `tracecheck run {opts.target} --json`"
        return out
    if not failing:
        out.reason = f"the {opts.stage} stage does not fail for {probe.id}" if opts.stage else \
            f"no stage a reproducer can be written for ({', '.join(STAGES)}) fails for {probe.id}"
        return out
    result, failure = failing[0]
    out.stage, out.expected = result.stage, _expected(failure)
    first = next((r.stage for r in probe.stages.values() if r.stage != LOAD_STAGE and r.status in FAILED), None)
    out.stage_note = "--stage" if opts.stage else "the first failing stage" if first == result.stage else \
        f"the first failing stage a script can be written for; {first} fails first"
    out.owner = owner(failure, path)
    args = (path, name, result.stage, out.expected, torch_version(), _sibling_imports(path),
            os.path.basename(opts.output))
    note, whose = out.stage_note, out.owner.line()
    script = template.build(*args, minimal=True, stage_note=note, whose=whose)
    _check(script, out, out_abs, opts)
    if script.pruned and out.status != REPRODUCED:  # the cut missed something the call needs: the whole file
        out.fallback = f"the script cut to what {name}'s call needs did not fail the same way ({out.reason}); " \
                       f"written with the whole of {os.path.basename(path)} instead"
        _check(template.build(*args, minimal=False, stage_note=note, whose=whose), out, out_abs, opts)
    return out


def _check(script: template.Script, out: ReproOutcome, out_abs: str, opts: ReproOptions) -> None:
    """Write ``script`` and run it (plain python, ``tracecheck`` unimportable): did it fail as the finding did?"""
    write_text_atomic(opts.output, script.text)
    out.written, out.lines = opts.output, len(script.text.splitlines())
    out.pruned, out.kept_lines, out.file_lines = script.pruned, script.kept_lines, script.total_lines
    out.returncode, out.tail, out.reason = None, "", ""
    try:
        proc = subprocess.run([sys.executable, "-c", _BLOCKED, out_abs], capture_output=True, text=True,
                              timeout=opts.timeout_s, cwd=os.path.dirname(out_abs),
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    except subprocess.TimeoutExpired:
        out.status, out.reason = NOT_REPRODUCED, f"the script ran past {opts.timeout_s:g} s"
        return
    out.returncode, out.tail = proc.returncode, "\n".join(proc.stderr.strip().splitlines()[-12:])
    if proc.returncode != 0 and reproduced(out.expected, proc.stderr):
        out.status = REPRODUCED
    else:
        out.status = NOT_REPRODUCED
        out.reason = "the script exited 0" if proc.returncode == 0 else "the script failed differently"
