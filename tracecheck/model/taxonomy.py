"""The failure taxonomy, read from kinds.json: the one registry of kinds.

Each kind has a stable id, a title, a summary template (filled from the finding's context), a fix (one per
cause the evidence can name: ``fix_by_cause``), a snippet, and ``code_fix`` when ``tracecheck fix``
generates code for it. ``report.Finding`` refuses an id that is not here. Pure: no torch import.

Every kind has a ``severity``: ``error`` (a finding fails its stage, the probe, the exit code and a baseline) or
``advice`` (shown in every report, but it fails nothing unless the user asks: ``--strict``, or the baseline's
``severity`` setting; docs/ci.md).
"""
from __future__ import annotations

import difflib
import json
import os
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Protocol

from .context import Context
from .evidence import Evidence
from .exitcodes import UsageError
from .records import Frame
from .reportio import Json


class FindingLike(Protocol):
    """What the kind's facts read of a finding (model/report.Finding, which imports this module)."""

    kind: str
    #: Finding.context: the classifier's facts, which the kind's templates are filled from (``to_json``)
    context: Context
    evidence: Evidence

    @property
    def user_frame(self) -> Frame | None: ...

#: ``Kind.severity`` values
ERROR, ADVICE = "error", "advice"
SEVERITIES = (ERROR, ADVICE)


class K:
    """Kind ids as code names them: the one spelling outside kinds.json (tests/test_house.py: each is an id there,
    every id has one, and no other module writes a kind id as a string literal)."""

    PYBIND_BUILTIN = "pybind-builtin"
    MISSING_FAKE = "missing-fake"
    MISSING_AUTOGRAD = "missing-autograd"
    MUTATES_ARGS_MISMATCH = "mutates-args-mismatch"
    OP_REDEFINED = "op-redefined"
    MISSING_DEVICE_KERNEL = "missing-device-kernel"
    FAKE_MISMATCH = "fake-mismatch"
    COMPILE_SEMANTICS = "compile-semantics"
    DATA_DEPENDENT = "data-dependent"
    GRAPH_BREAK = "graph-break"
    TORCH_INTERNAL_ERROR = "torch-internal-error"
    WRONG_GRADIENT = "wrong-gradient"
    DYNAMIC_SHAPE = "dynamic-shape"
    NON_PYTREE_OUTPUT = "non-pytree-output"
    FUNCTORCH_INCOMPATIBLE = "functorch-incompatible"
    UNTRACEABLE_TENSOR_STATE = "untraceable-tensor-state"
    DEVICE_MISMATCH = "device-mismatch"
    NO_BATCHING_RULE = "no-batching-rule"
    OPAQUE_OP = "opaque-op"
    RECOMPILE = "recompile"
    NUMERIC_MISMATCH = "numeric-mismatch"
    BACKEND_ERROR = "backend-error"
    EAGER_ERROR = "eager-error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    UNKNOWN = "unknown"


#: kinds ``tracecheck fix`` answers with a rewrite of the probe's own file (fix/model_code.py), where the finding's
#: user frame lies in it; the other kinds with a ``code_fix`` get a fixed registration
MODEL_CODE_KINDS = (K.GRAPH_BREAK, K.DATA_DEPENDENT)


def rewrites_model_code(f: FindingLike, probe_file: str) -> bool:
    """Does ``tracecheck fix`` answer finding ``f`` with a rewrite of ``probe_file`` (fix/model_code.py): a kind of
    MODEL_CODE_KINDS whose user frame lies in that file, or a C/pybind11 function called straight from model code
    (inside an autograd.Function the Function becomes custom ops instead): from that file, or from a library's,
    where the probe's file installs the custom op in the library's module."""
    if f.kind not in MODEL_CODE_KINDS and (f.kind != K.PYBIND_BUILTIN or f.context.in_autograd_function):
        return False
    if _stays_constant(f):
        return False
    frame = f.user_frame
    if frame is None or not frame.file:
        return False
    if os.path.realpath(frame.file) == os.path.realpath(probe_file):
        return True
    if frame.line is None or not os.path.isfile(frame.file):
        return False
    # another file's break (a user frame is never torch's own: evidence/frames.py): a library's C call, or a break
    # that a setting of torch's or a rewrite of the function that holds it answers (fix/library.py)
    if f.kind == K.PYBIND_BUILTIN:
        return _called_by_name(frame, f.context.builtin or "")
    gb_type = f.context.gb_type or f.evidence.gb_type or ""
    return frame.file.endswith(".py") and (f.kind == K.DATA_DEPENDENT or gb_type.startswith(LIBRARY_GB_TYPES) or (
        gb_type.startswith("Failed to trace builtin operator") and "print(" in (frame.code or "")))


#: gb_type prefixes of the breaks fix's rewrites answer (fix/rewrites.py reads them here): a scalar read into Python,
#: an op whose output shape or value the data decides, a branch on a tensor, a logger call
SCALAR_GB = ("Unsupported Tensor.item() call", "Tensor.tolist()")
DYNAMIC_SHAPE_GB = ("Dynamic shape operator", "Data dependent operator")
BRANCH_GB = ("Data-dependent branching",)
LOGGING_GB = "logging.Logger method not supported"
#: the gb_types of a break in another file than the probe's that ``tracecheck fix`` answers (fix/library.py)
LIBRARY_GB_TYPES = (*SCALAR_GB, *DYNAMIC_SHAPE_GB, *BRANCH_GB, LOGGING_GB)


def _called_by_name(frame: Any, builtin: str) -> bool:
    """Does the frame's line call the C function through a module-level name (``ext.fwd(...)``, ``fwd(...)``), which
    the custom-op rewrite can rebind? Not through ``self.`` or ``torch.`` (fix/rewrites.c_call_at refuses the same
    when it parses the call)."""
    import linecache
    import re

    code = frame.code or linecache.getline(frame.file, frame.line)
    last = builtin.removesuffix(".__call__").rpartition(".")[2]
    m = re.search(rf"(?<![\w.])((?:[A-Za-z_]\w*\.)*){re.escape(last)}\s*\(", code) if last else None
    return m is not None and (m.group(1) or last).split(".")[0] not in ("self", "torch")


def _stays_constant(f: FindingLike) -> bool:
    """A C builtin called with constants only (cause ``constant_args``): its cheapest fix is to keep the value a
    constant (computed outside, or torch.compiler.assume_constant_result), which the kind's fix says; a custom op
    (what ``tracecheck fix`` generates) would be the wrong change."""
    return f.kind == K.PYBIND_BUILTIN and f.context.cause == "constant_args"


def needs_registration_fix(f: FindingLike, probe_file: str) -> bool:
    """Is finding ``f`` one ``tracecheck fix`` answers with a fixed registration (``-o fixed_ops.py``): a kind with a
    ``code_fix`` that no rewrite of the probe's file answers."""
    if f.kind == K.PYBIND_BUILTIN:  # a direct call elsewhere has no Function to convert: no fix at all
        return f.context.in_autograd_function and not _stays_constant(f)
    return f.kind in kinds() and bool(kinds()[f.kind].code_fix) and f.kind not in MODEL_CODE_KINDS


@dataclass(frozen=True)
class Kind:
    id: str
    title: str
    summary: str
    fix: str
    #: ERROR or ADVICE (module docstring)
    severity: str = ERROR
    snippet: str = ""
    #: a fix per cause the evidence supports (``Finding.context.cause``); ``fix`` when none is named
    fix_by_cause: dict[str, str] = field(default_factory=dict)
    #: a summary per cause, where a cause's evidence reads otherwise (``summary`` for the rest)
    summary_by_cause: dict[str, str] = field(default_factory=dict)
    #: what ``tracecheck fix`` generates for this kind; "" when it has no code fix
    code_fix: str = ""
    #: how evidence is recognised as this kind (``Detect``); None: only code makes it (timeout, crash, ...)
    detect: "Detect | None" = None
    #: a finding of this kind can explain another stage's bare failure of the same op or line (classify/attribute.unknowns)
    explains_others: bool = False
    #: an import error this kind explains is the file's load finding, not a failed import (classify/results.load_result)
    at_import: bool = False
    #: ``torch.export.draft_export`` failure types this kind labels, and the summary it gets then
    draft_failure_types: tuple[str, ...] = ()
    draft_summary: str = ""
    #: functorch-incompatible: what a refusal is about, per cause (the summary's ``{what}``)
    refused_by_cause: dict[str, str] = field(default_factory=dict)

    @property
    def explain_command(self) -> str:
        """Where output sends a reader for this kind: a command that works wherever tracecheck is installed (the
        pages ship in the package; a repository path would not exist after ``pip install``)."""
        return f"tracecheck explain {self.id}"

    def page(self) -> str:
        """The kind's page (Markdown), read from the installed package: ``failures/<id>.md`` beside kinds.json."""
        text = (resources.files("tracecheck.model") / "failures" / f"{self.id}.md").read_text(encoding="utf-8")
        return _installed_links(text)


def _installed_links(page: str) -> str:
    """A page's links as they work where tracecheck is installed: another kind's page is its ``tracecheck explain``
    command; a page of the source tree's docs/ (not installed) is named, not linked; web links stay."""
    page = re.sub(r"\[([^\]]+)\]\(([a-z-]+)\.md\)", r"\1 (`tracecheck explain \2`)", page)
    return re.sub(r"\[([^\]]+)\]\((?:\.\./)+docs/([^)#]+)(?:#[^)]*)?\)", r"\1 (docs/\2 in tracecheck's source)", page)


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    #: trusted only when a torch exception or a graph break carries the text (user code could write it)
    torch_only: bool = False
    #: the cause a match names (``Finding.context.cause``, which picks the kind's ``fix_by_cause``)
    cause: str = ""
    #: counts only where the innermost frame of Dynamo's ``from user code:`` block is code torch generated
    #: (``<eval_with_key>``: compiled autograd's backward graph), no line of the user's
    generated: bool = False


@dataclass(frozen=True)
class Detect:
    """A kind's detection rule (kinds.json ``detect``); classify/detect.py applies the rules by ``order``."""

    order: int
    patterns: tuple[Pattern, ...] = ()
    gb_types: frozenset[str] = frozenset()
    exception_types: frozenset[str] = frozenset()
    #: the kind applies only to evidence with one of these gb_types, or none ("" stands for none)
    only_with_gb_types: frozenset[str] | None = None
    #: any Dynamo graph break (a gb_type on an Unsupported exception or a trace break) is this kind
    any_gb_type: bool = False
    #: a match is refused when a named group matches this pattern (``{"builtin": "^torch\\."}``: torch's own)
    exclude: dict[str, re.Pattern[str]] = field(default_factory=dict)
    #: the rule applies only to an error raised under a torch.func transform (evidence with ``transform``)
    only_under_transform: bool = False
    #: an exception of one of these types (``*``: any) raised by a custom op's own fake impl (the error record's
    #: ``fake_impl``, evidence/exceptions.py) is this kind, with this cause: (types, cause)
    fake_impl_raised: tuple[frozenset[str], str] | None = None
    #: the rule never applies to evidence with one of these exception types in its chain (a hard error is no break)
    not_with_types: frozenset[str] = frozenset()
    #: ``(types, wrapped_by, file, not_message)``: the innermost exception of the chain was raised at a frame whose
    #: file matches ``file`` (torch's own compiler), and it is one of ``types`` or an exception of ``wrapped_by`` wraps
    #: it; never when a message of the chain matches ``not_message`` (torch's words for the user's misuse)
    raised_in_torch: "tuple[frozenset[str], frozenset[str], re.Pattern[str], re.Pattern[str] | None] | None" = None


def _detect(d: Json | None, gb_types: list[str]) -> Detect | None:
    """A kind's ``detect`` entry of kinds.json, read once into its typed rule."""
    if not d:
        return None
    only = d.get("only_with_gb_types")
    return Detect(
        order=int(d["order"]),
        patterns=tuple(Pattern(re.compile(p["regex"]), bool(p.get("torch_only")), p.get("cause", ""),
                               bool(p.get("generated")))
                       for p in d.get("patterns", [])),
        gb_types=frozenset(gb_types),
        exception_types=frozenset(d.get("exception_types", [])),
        only_with_gb_types=frozenset(only) if only is not None else None,
        any_gb_type=bool(d.get("any_gb_type")),
        exclude={k: re.compile(v) for k, v in d.get("exclude", {}).items()},
        only_under_transform=bool(d.get("only_under_transform")),
        fake_impl_raised=(frozenset(d["fake_impl_raised"]["types"]), d["fake_impl_raised"].get("cause", ""))
        if d.get("fake_impl_raised") else None,
        not_with_types=frozenset(d.get("not_with_types", [])),
        raised_in_torch=(frozenset(d["raised_in_torch"]["types"]), frozenset(d["raised_in_torch"].get("wrapped_by", [])),
                         re.compile(d["raised_in_torch"]["file"]),
                         re.compile(d["raised_in_torch"]["not_message"]) if d["raised_in_torch"].get("not_message")
                         else None) if d.get("raised_in_torch") else None)


@lru_cache(maxsize=1)
def gb_table() -> dict[str, list[str]]:
    """gb_types.json: kind id -> the gb_types of torch's graph-break registry that kind labels (graph-break
    holds the rest). The one place a gb_type is given a kind."""
    return json.loads(resources.files("tracecheck.model").joinpath("gb_types.json").read_text())["kinds"]


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    """All kinds by id, in taxonomy order."""
    data = json.loads(resources.files("tracecheck.model").joinpath("kinds.json").read_text())
    table = gb_table()
    out = {}
    for k in data["kinds"]:
        if k.get("severity") not in SEVERITIES:  # every kind states it: it decides whether a build fails
            raise ValueError(f"kinds.json: kind {k['id']!r} has severity {k.get('severity')!r}; "
                             f"expected one of {SEVERITIES}")
        draft = k.get("draft_export") or {}
        out[k["id"]] = Kind(k["id"], k["title"], k["summary"], k["fix"], k["severity"], k.get("snippet", ""),
                            k.get("fix_by_cause", {}), k.get("summary_by_cause", {}), k.get("code_fix", ""),
                            _detect(k.get("detect"), table.get(k["id"], [])), bool(k.get("explains_others")),
                            bool(k.get("at_import")), tuple(draft.get("failure_types", ())), draft.get("summary", ""),
                            k.get("refused_by_cause", {}))
    return out


def explaining_ids() -> frozenset[str]:
    return frozenset(k.id for k in kinds().values() if k.explains_others)


def import_ids() -> frozenset[str]:
    return frozenset(k.id for k in kinds().values() if k.at_import)


def draft_kind(failure_type: str) -> str:
    """The kind a ``draft_export`` failure type is, ``unknown`` when no kind claims it."""
    return next((k.id for k in kinds().values() if failure_type in k.draft_failure_types), "unknown")


def rules() -> list[Kind]:
    """The kinds that evidence can be recognised as, in the order their rules are tried."""
    return sorted((k for k in kinds().values() if k.detect is not None),
                  key=lambda k: k.detect.order if k.detect is not None else 0)


def ids() -> frozenset[str]:
    return frozenset(kinds())


def kind_named(name: str) -> Kind:
    """The kind a user typed (``tracecheck explain KIND``). Any other name is a UsageError naming the closest ids,
    so that a typo (``missing_fake``) gets its answer in the one line."""
    if name in kinds():
        return kinds()[name]
    # a part of an id (``fake``) names the kinds holding it; a misspelling, the nearest
    close = [k for k in kinds() if name and name.lower() in k] or difflib.get_close_matches(name, list(kinds()), n=3)
    hint = f"did you mean {', '.join(close[:3])}? " if close else ""
    raise UsageError(f"unknown kind {name[:60]!r}; {hint}`tracecheck explain` lists the {len(kinds())} kinds")


def is_advice(kind: str) -> bool:
    """An advice kind: it never fails a stage by itself (``--strict`` and a baseline's setting aside)."""
    k = kinds().get(kind)
    return k is not None and k.severity == ADVICE


def advice_ids() -> frozenset[str]:
    return frozenset(k for k in kinds() if is_advice(k))


class _Blank(dict):
    """Placeholders the context lacks read as ``?``: a summary never fails to render."""

    def __missing__(self, key: str) -> str:
        return "?"


def _fill(template: str, context: Context, derived: Mapping[str, object] | None = None) -> str:
    """``template`` filled from the context's JSON (a list joined by ", "), then ``derived`` values over it."""
    values = {**context.to_json(), **(derived or {})}
    flat = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in values.items()}
    try:
        return string.Formatter().vformat(template, (), _Blank(flat))
    except (ValueError, IndexError, AttributeError):
        return template


def summary(kind: str, context: Context, derived: Mapping[str, object] | None = None) -> str:
    """The kind's one-sentence summary (its cause's, where it has one) filled from the finding's context and the
    ``derived`` values (classify/detect.fill_summary's: the stage, a short builtin name, ...), which win."""
    k = kinds()[kind]
    return _fill(k.summary_by_cause.get(str(context.cause), k.summary), context, derived)


def fix_text(f: FindingLike) -> str:
    """The fix for this finding (a ``report.Finding``): the kind's fix for the cause its evidence names, with the context's values
    (``{custom_ops}``, ``{random_ops}``, ``{stage}``) filled in."""
    kind = kinds().get(f.kind)
    if kind is None:
        return ""
    return _fill(kind.fix_by_cause.get(str(f.context.cause), kind.fix), f.context)


def snippet_for(f: FindingLike) -> str:
    """The kind's example code for this finding (a ``report.Finding``): only where its fix is the kind's own, not a
    cause's (a ``.item()`` under vmap gets no autograd.Function example)."""
    kind = kinds().get(f.kind)
    if kind is None or str(f.context.cause) in kind.fix_by_cause:
        return ""
    return kind.snippet


def gb_types_markdown() -> str:
    """docs/gb-types.md: the gb_type table per kind (``python -m tracecheck.model.taxonomy > docs/gb-types.md``)."""
    out = ["# gb_types and their kinds\n",
           "Every gb_type of torch's graph-break registry (torch 2.13.0 and 2.14.1), under the kind a graph break "
           "of that gb_type gets (`tracecheck/model/gb_types.json`). A kind's message patterns (`tracecheck/model/kinds.json`) "
           "are tried first and can say more: *Attempted to call function marked as skipped* is `graph-break` here "
           "and `pybind-builtin` when Dynamo's message names a C/pybind11 builtin from outside torch. At run time a "
           "gb_type that is not listed (a newer torch) is a `graph-break`; `tests/test_gb_types.py` fails until "
           "it is listed.\n"]
    for kind, types in gb_table().items():
        page = f"../tracecheck/model/failures/{kind}.md"  # docs/ to the shipped page
        out.append(f"\n## `{kind}` ({len(types)})\n\n[{kinds()[kind].title}]({page})\n")
        # CommonMark: a code span holding backticks takes a longer fence, padded where it starts or ends with one
        out += [f"- `` {t} ``" if "`" in t else f"- `{t}`" for t in types]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(gb_types_markdown(), end="")
