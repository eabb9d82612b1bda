"""What ``tracecheck fix`` is asked (``FixOptions``) and what it did (``FixOutcome``): the records the pipeline and
its fixers (model_code.py) fill and render/fix.py draws. Pure: no torch."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..model.evidence import NumericMismatch
from ..model.report import RunReport
from ..model.tasks import DEFAULT_TIMEOUT_S
from .task_results import FunctionFix, GradientCheck, OpShapes


@dataclass(frozen=True)
class Tried:
    """One candidate rewrite tried at a site, and what came of it: ``kept``, or why it was not."""

    rewrite: str
    result: str


@dataclass
class SiteOutcome:
    """What happened to one break site: the rewrite kept (if any), and every candidate tried with why it failed."""

    line: int
    kind: str
    gb_type: str
    code: str
    rewrite: str | None = None
    note: str = ""
    doc: str = ""
    tried: list[Tried] = field(default_factory=list)
    #: the rewrite kept for an earlier site took this one in (its lines were rewritten with that site's)
    covered: bool = False
    #: the library file the line is in ("" for the probe's own file)
    file: str = ""


@dataclass
class FixOptions:
    """``target`` is ``path/to/model.py::probe_name`` (``::name`` may be left out when the file has one probe)."""

    target: str
    output: str = "fixed_ops.py"
    patched: str | None = None
    namespace: str = "tracecheck_fix"
    jobs: int = os.cpu_count() or 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    verify: bool = True
    #: model-code rewrites: also write the unified diff against the probe file here
    diff: str | None = None


@dataclass
class FixOutcome:
    """What ``fix`` did. ``status`` is one of VERIFIED, NOT_VERIFIED, NO_CODE_FIX, NOTHING_TO_FIX."""

    status: str
    probe_id: str
    kinds: list[str]
    #: the autograd.Functions and custom ops the analysis looked at, and what was done with each
    functions: list[FunctionFix] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    #: kinds found that have no code fix: kind -> the command that prints its page (Kind.explain_command)
    no_code_fix: dict[str, str] = field(default_factory=dict)
    diagnosis: RunReport | None = None
    verification: RunReport | None = None
    #: the patched probe's eager outputs and gradients against the original's: one record per phase that differs
    eager_mismatches: list[NumericMismatch] = field(default_factory=list)
    #: when the original has no working backward: <grad, v> vs a central finite difference (analysis.py)
    gradient_check: GradientCheck | None = None
    reasons: list[str] = field(default_factory=list)
    #: model-code rewrites (model_code.py): one SiteOutcome per break site in the probe's file, and the diff
    sites: list[SiteOutcome] = field(default_factory=list)
    diff: str = ""
    #: per op whose fake tracecheck wrote: the shapes beyond the probe's it was checked at
    shapes: list[OpShapes] = field(default_factory=list)
    #: kinds without a code fix of their own that no stage finds on the patched probe: the fix written for another
    #: kind cured them (a backend error that a wrong fake caused)
    cured: list[str] = field(default_factory=list)
    #: model-code rewrites that replace another file's function: per upstream diff written, its text
    upstream: dict[str, str] = field(default_factory=dict)
    #: how to apply the fix in the user's own code, a line each (model_code.how_to_apply)
    apply: list[str] = field(default_factory=list)
    #: what was not written, and why (an upstream diff's path held a file tracecheck did not write)
    notes: list[str] = field(default_factory=list)
