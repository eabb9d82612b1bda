"""Pure classifier: raw evidence from a stage worker -> one ``Finding`` / ``GraphBreak`` kind.

No torch import: rules read plain data (exception type names and messages along the cause chain,
``Unsupported.gb_type``, the GB code) so they can be unit-tested on recorded messages from several torch
versions (tests/test_classify.py). The rules are data: each kind's ``detect`` in kinds.json (exception types,
message patterns newest wording first) with its gb_types from gb_types.json, tried in their declared ``order``;
the first match labels the evidence. When nothing fits, the label is ``unknown`` (or ``eager-error``/``backend-error`` where the stage
alone says whose failure it is) and the raw evidence is kept.
Wording per version: ../shared/torch_failure_wording.md sections 4 and 7.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..model import taxonomy
from ..model.taxonomy import K
from ..evidence.source import classmethod_function, in_autograd_function
from ..evidence.wording import EMULATOR_GAP, TORCH_NAMESPACES, gb_code_from_text, gb_type_from_text
from ..model.context import Context
from ..model.errors import ErrorRecord
from ..model.evidence import BreakEvidence, ExceptionEvidence, MessageEvidence
from ..model.records import BreakRecord, Frame
from ..model.reportio import Json
from ..model.report import Finding, GraphBreak, headline, is_generated, op_name
from .facts import (Facts, called_from_user_code, generated_frame, raising_frame, innermost, short_type,
                    transform_in_traceback, trim)


# ---------------------------------------------------------------------------------------------------------
# Detection rules are data: kinds.json "detect" (taxonomy.Detect), tried in their declared order. Code here only
# adds what data cannot say (the pybind11 and autograd.Function flags of a builtin).

#: the C++ autograd fallback's warning (classify_warning): the second missing-autograd wording
_AUTOGRAD_FALLBACK = re.compile(
    r"(?<![\w.:])(?P<op>[\w.:]{1,300}): an autograd kernel was not registered to the Autograd key")
_BACKEND_TYPES = {"BackendCompilerFailed", "InductorError", "LoweringException", "CppCompileError"}
_AUTOGRAD_FN = re.compile(r"Higher Order Operator: autograd\.Function|autograd_function\.py|in (forward|backward)\(ctx")


# ---------------------------------------------------------------------------------------------------------
# The rule engine


# Exceptions torch raises for compile-time problems; message patterns that a user could also write (torch_only)
# are trusted only when one of these is in the chain (or the evidence is a graph break, or an opcheck test).
_TORCH_TYPES = {"Unsupported", "TorchRuntimeError", "UserError", "BackendCompilerFailed", "InductorError",
                "InternalTorchDynamoError", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                "DynamicOutputShapeException", "UnsupportedOperatorException", "OpCheckError",
                "ConstraintViolationError"}


def _from_torch(types: set[str], raw: Facts) -> bool:
    return bool(types & _TORCH_TYPES) or raw.is_break or str(raw.phase or "").startswith("test_")


#: named groups of kinds.json's patterns that only the classifier reads (``_stub``, ``_functorch``), never the report
_SCRATCH_GROUPS = ("stub", "transform_key")


@dataclass(frozen=True)
class _Match:
    """A rule's match: the context it names, and what the classifier alone reads of it."""

    context: Context
    #: the named groups of the pattern that matched (``_SCRATCH_GROUPS`` among them)
    groups: Mapping[str, str] = field(default_factory=dict)
    #: a fake impl that raised: its own line, where the fix goes (the finding's user frame)
    fake_frame: Frame | None = None
    #: torch-internal-error: the frame of torch's own code (or the generated graph's line) that raised
    torch_frame: Frame | None = None


def _matches(rule: taxonomy.Detect, text: str, types: set[str], gb_type: str | None,
             raw: Facts) -> _Match | None:
    """The match when the evidence matches the rule (named groups of the pattern that matched), else None."""
    if types & rule.not_with_types:
        return None
    if rule.only_with_gb_types is not None and (gb_type or "") not in rule.only_with_gb_types:
        return None
    if rule.only_under_transform and not raw.transform:
        return None
    fake = raw.fake_impl
    if rule.fake_impl_raised and fake is not None:
        raised, cause = rule.fake_impl_raised
        if "*" in raised or fake.exception_type in raised:
            return _Match(Context(op=fake.op, cause=cause), fake_frame=fake.frame)
    if rule.raised_in_torch and _raised_in_torch(rule.raised_in_torch, types, raw):
        return _Match(Context())
    trusted = _from_torch(types, raw)
    for p in rule.patterns:
        if p.torch_only and not trusted:
            continue
        if p.generated and not (raw.phase == "backward" and generated_frame(text)):
            continue  # a graph torch generated while the backward ran: compiled autograd's, not an FX graph of the user's
        m = p.regex.search(text)
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v}
            if p.cause == "raises" and re.split(r"::|\.", groups.get("op", ""))[0] in TORCH_NAMESPACES:
                continue  # torch's own op: its meta kernel raised, not a custom op's fake
            if any(rx.search(groups.get(k, "")) for k, rx in rule.exclude.items()):
                return None  # e.g. a builtin of torch's own: not this kind
            # the groups are text a pattern named: read as a report's context is (a group with no field kept as such)
            cx = Context.of({k: v for k, v in groups.items() if k not in _SCRATCH_GROUPS})
            return _Match(replace(cx, cause=p.cause) if p.cause else cx, groups)
    if (gb_type and gb_type in rule.gb_types) or types & rule.exception_types:
        return _Match(Context())
    if rule.any_gb_type and gb_type and ("Unsupported" in types or raw.is_break):
        return _Match(Context())
    return None


def _raised_in_torch(rule: tuple[frozenset[str], frozenset[str], re.Pattern[str], re.Pattern[str] | None],
                     types: set[str], raw: Facts) -> bool:
    """The innermost exception was raised by torch's own compiler (``rule``: Detect.raised_in_torch): an exception of
    ``types`` raised there, or any exception wrapped by one of ``wrapped_by`` (InternalTorchDynamoError: Dynamo's own
    word that the error is internal). An assert in the user's or a library's code is not; neither is one whose raising
    frame lies outside torch under Dynamo's wrapper (Dynamo ran the user's ``__eq__``, say), one torch raised under a
    call the user's or a library's code made (``_called_from_user_code``), nor torch's words for a misuse of its APIs
    (``not_message``: a real tensor mixed into FakeTensorMode, a wrong ``__metadata_guard__``)."""
    raised, wrapped_by, files, not_message = rule
    root_type = short_type(raw.root.type)
    wrapped = bool(types & wrapped_by)
    if root_type not in raised and not wrapped:
        return False
    if not_message is not None and any(not_message.search(c.message) for c in raw.chain):
        return False
    if called_from_user_code(raw):
        return False
    frame = raising_frame(raw)
    if frame is None or not frame.file:
        return wrapped and root_type in wrapped_by  # Dynamo's wrapper alone, nothing under it to place
    return bool(files.search(frame.file.replace("\\", "/")))


#: Dynamo's quote of a failed fake run: the node and what it raised
_FAKE_RUN_GOT = re.compile(r"call_function (?P<op>[\w.]+\(\*\([^\n]{0,200}?\), \*\*\{[^\n]{0,100}?\}\)): "
                           r"got (?P<type>\w+)\((?P<q>['\"])(?P<message>[^\n]+?)(?P=q)\)")


#: compiled autograd's assert on an autograd.Function whose backward (or forward) is a classmethod
_CLASSMETHOD_FN = re.compile(r"Expected FunctionType, got <class 'method'>")


def _torch_internal(cx: Context, text: str, raw: Facts) -> tuple[Context, Frame | None]:
    """The innermost exception (``Type: first line``) and the torch frame it was raised at, or the generated graph's
    line: in words in the context, and as the frame (the evidence's ``torch_frame``)."""
    root = raw.root
    exception = headline({"type": short_type(root.type), "message": root.message})
    cause, function = cx.cause, cx.function
    if _CLASSMETHOD_FN.search(exception):  # a classmethod where torch documents @staticmethod: cheapest fixed in user code
        cause = "classmethod"
    got = _FAKE_RUN_GOT.search(text)
    frame_at = raw.user_frame
    named = classmethod_function(frame_at.file, frame_at.line) if frame_at is not None else None
    if named and cause != "generated":  # the same assert from Dynamo on a classmethod Function (entmax)
        cause, function = "classmethod", named
    if cause == "generated" and got:  # the fake run's own error, as Dynamo quotes it
        exception = f"{got.group('op')}: {got.group('type')}: {got.group('message')[:200]}"
    frame = generated_frame(text) if cause == "generated" else raising_frame(raw)
    if frame:
        file = frame.file.replace("\\", "/")
        file = file[file.rindex("/torch/") + 1:] if "/torch/" in file and not is_generated(file) else file
        torch_frame = f"{file}:{frame.line}" + (f" in {frame.function}" if frame.function else "")
    else:
        torch_frame = "a frame the evidence does not name"
    return replace(cx, exception=exception, cause=cause, function=function, torch_frame=torch_frame), frame


_UNKNOWN_MODULE = "<unknown module>."


def _torch_builtin(builtin: str, raw: Facts) -> bool:
    """Is a builtin Dynamo names without a module (``<unknown module>.TensorBase._make_wrapper_subclass``,
    ``<unknown module>.pybind11_object.__new__``) torch's own? Only the call site tells a user's extension from torch
    itself: torch's code made the call (a break Dynamo places inside torch: flex_attention's fallback), or the user's
    line calls it through ``torch.`` (a tensor subclass's ``torch.Tensor._make_wrapper_subclass(...)``)."""
    if not builtin.startswith(_UNKNOWN_MODULE):
        return False
    # evidence/tracelog.py (frames.caller_outside_torch): the call was made from torch's own code; Dynamo's polyfills (object construction, say) re-enact
    # the user's own Python, so a break placed there is still the user's call
    in_torch = raw.caller is not None and "/_dynamo/polyfills/" not in str(raw.file or "").replace("\\", "/")
    if in_torch or raw.traced_in_torch:
        return True
    method = builtin.rsplit(".", 1)[-1]
    frame = raw.user_frame
    code = str(raw.code or (frame and frame.code) or "")
    return bool(re.search(rf"\btorch(\.\w+)*\.{re.escape(method)}\b", code))


#: Dynamo's debug context of a method call it refused: ``call_method UserDefinedObjectVariable(_Modes) from_object
#: [ConstantVariable(str: 'zero')] {}``; and one constant argument's value
_CONSTANT_CALL = re.compile(r"call_method \w+\([^)]*\) \w+ \[(?P<args>[^\]\n]*)\] \{(?P<kwargs>[^}\n]*)\}")
_CONSTANT_ARG = re.compile(r"ConstantVariable\(\w+: ([^()]*)\)")
_SEPARATORS = re.compile(r"[\s,]|'\w+':")  # between the arguments, and a keyword's name


def _stdlib_builtin(builtin: str) -> bool:
    """Is the builtin a C function of Python's standard library (``_pickle.dumps``, ``_warnings.warn``)? No custom op
    can wrap what returns bytes or warns: Dynamo's own hint for it (file an issue, or keep it out of the compiled
    code) is the advice. Not ``sys``: ``sys.call_tracing(kernel, args)`` runs a Python function from C, as an
    extension's kernel call does (the shared reproducers stand it in for one), and a custom op around it works."""
    module = builtin.split(".", 1)[0]
    return module in sys.stdlib_module_names and module != "sys"


def _pybind_flags(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    name = cx.builtin or ""
    if gb_type == "call to a callable object with no traceable __call__":  # 2.14: the object's class is named
        cx = replace(cx, builtin=f"{name}.__call__")
        name = cx.builtin or ""
    if any(mark in name for mark in ("pybind11_detail_function_record", ".PyCapsule.", "pybind11_")):
        cx = replace(cx, pybind11=True)
    # an error's frame, or a structured-trace break's own location
    frame = raw.user_frame or (Frame(raw.file, raw.line) if raw.file else None)
    if _AUTOGRAD_FN.search(text + "\n" + raw.traceback) or \
            (frame is not None and in_autograd_function(frame.file, frame.line)):
        cx = replace(cx, in_autograd_function=True)
    args = _CONSTANT_CALL.search(text)
    listed = args.group("args") + ", " + args.group("kwargs") if args else ""
    if args and not _SEPARATORS.sub("", _CONSTANT_ARG.sub("", listed)):
        # Dynamo's debug context lists the call's arguments: constants only (a mode string turned into an int, as
        # pywt's Modes.from_object does) make a constant result, which no custom op is needed for
        cx = replace(cx, cause="constant_args", args=", ".join(_CONSTANT_ARG.findall(listed)) or "no arguments")
    return cx


_HINT = re.compile(r"^\s*Hint: (?P<hint>.+)$", re.M)
#: Dynamo's stock hints (torch/_dynamo/graph_break_hints.py: SUPPORTABLE, USER_ERROR, DYNAMO_BUG, ...): the same
#: for hundreds of gb_types, they say nothing about this one
_STOCK_HINTS = re.compile(r"^(It may be possible to write Dynamo tracing rules|Your code may result in an error "
                          r"when running in eager|This is likely to be a Dynamo bug|Please report an issue to PyTorch|"
                          r"This graph break may be difficult to debug|This graph break is fundamental|This graph break may have "
                          r"been caused by an earlier graph break)")


def _hints(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """Dynamo's hints for the gb_type (the ``Hint:`` lines of its message, less the stock ones) become the fix."""
    found = (m.group("hint").strip() for m in _HINT.finditer(text))
    hints = list(dict.fromkeys(h for h in found if not _STOCK_HINTS.match(h)))[:3]
    if hints:
        return replace(cx, hints=" ".join(h if h.endswith(".") else h + "." for h in hints), cause="hints")
    return cx


def _read_values(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """A data-dependent break that reads values into Python (.item(), .tolist()) gets that fix, not the branch's."""
    if ".item()" in gb_type or ".tolist()" in gb_type:
        return replace(cx, cause="read", gb_type=gb_type)
    return cx


def _stub(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """A fake impl that exists but raises NotImplementedError (the pattern's ``stub`` group): the fix is to write it,
    not to register one."""
    return replace(cx, cause="stub") if groups.get("stub") else cx


#: higher-order ops by module, as users call them (their files name them in a traceback)
_HOP_NAMES = {"cond": "torch.cond", "while_loop": "torch._higher_order_ops.while_loop", "scan": "torch._higher_order_ops.scan",
              "map": "torch._higher_order_ops.map", "associative_scan": "torch._higher_order_ops.associative_scan",
              "flex_attention": "flex_attention", "invoke_subgraph": "torch._higher_order_ops.invoke_subgraph"}
_HOP_FILE = re.compile(rf"torch/_higher_order_ops/(?P<hop>{'|'.join(_HOP_NAMES)})\.py")


#: a Function torch.func refused that the evidence does not name
SOME_FUNCTION = "The autograd.Function"


def _functorch(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """The transform that refused (the vmap stage says; else the traceback), and for a higher-order op without a
    rule for it, which op."""
    transform = cx.transform if cx.transform is not None else raw.transform or "vmap"
    key = groups.get("transform_key")
    if key:  # KeyError: <TransformType.Grad: 2>: the transform the HOP has no rule for
        transform = {"Grad": "grad", "Vmap": "vmap", "Jvp": "jvp", "Functionalize": "functionalize"}.get(
            key, transform)
    cause, function, hop = cx.cause, cx.function, cx.hop
    if cause in ("setup_context", "vmap_rule") and not function:
        function = SOME_FUNCTION  # the fix text names it; the vmap stage names the class when it finds it
    hops = _HOP_FILE.findall((raw.traceback + "\n" + text).replace("\\", "/"))
    if cause == "storage" and hops:  # a higher-order op without a rule compiles itself under the transform
        cause = "hop"
    frame = raw.user_frame
    if cause == "storage" and frame is not None and ".numpy()" in (frame.code or ""):  # the user's line hands the tensor to NumPy
        cause = "numpy"
    if cause == "hop":
        hop = _HOP_NAMES[hops[-1]] if hops else "a higher-order op"
    return replace(cx, transform=transform, cause=cause, function=function, hop=hop)


def _fake_raises(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """A fake impl that raised: what it raised, and its line (the finding's frame: where the fix goes)."""
    fake = raw.fake_impl
    if cx.cause == "raises" and fake is not None:
        first = next((ln.strip() for ln in fake.message.splitlines() if ln.strip()), "")
        return replace(cx, exception=f"{fake.exception_type}: {first[:160]}" if first else fake.exception_type)
    return cx


def _where(cx: Context, groups: Mapping[str, str], text: str, raw: Facts, gb_type: str) -> Context:
    """The user line a dimension marked dynamic was specialized at (the summary's ``{by}``)."""
    frame = raw.user_frame
    if cx.cause in ("marked", "constraint"):
        return replace(cx, by=(f" at `{frame.code}` ({frame.location})" if frame.code else f" at {frame.location}")
                       if frame else "")
    return cx


#: what code adds to a kind's context after its rule matched: (its context, the pattern's named groups, the message
#: text, the facts, the gb_type) -> the context
_Enrich = Callable[[Context, Mapping[str, str], str, Facts, str], Context]
_ENRICH: dict[str, _Enrich] = {K.PYBIND_BUILTIN: _pybind_flags, K.GRAPH_BREAK: _hints, K.DATA_DEPENDENT: _read_values,
           K.MISSING_FAKE: _stub, K.FUNCTORCH_INCOMPATIBLE: _functorch, K.FAKE_MISMATCH: _fake_raises,
           K.DYNAMIC_SHAPE: _where}


def _fallback(stage: str, types: set[str], text: str) -> str:
    if EMULATOR_GAP in text:  # an aten op the emulated NPU cannot run on the host: not the probe's bug
        return K.UNKNOWN
    if stage == "eager":
        return K.EAGER_ERROR
    if types & _BACKEND_TYPES:
        return K.BACKEND_ERROR
    return K.UNKNOWN


def short_builtin(name: str) -> str:
    """``mod.pybind11_detail_function_record_v1_….fn`` / ``mod.PyCapsule.fn`` -> ``mod.fn`` (for reading)."""
    parts = [p for p in name.split(".") if not p.startswith("pybind11_detail_function_record") and p != "PyCapsule"]
    return ".".join(parts)


def fill_summary(kind: str, cx: Context, stage: str) -> str:
    """The kind's summary template (kinds.json) filled from the context and a few derived values."""
    derived = {
        "stage": stage,
        "builtin_short": short_builtin(cx.builtin if cx.builtin is not None else "?"),
        "where": " inside a torch.autograd.Function" if cx.in_autograd_function else "",
        "argument_note": f": it mutates input `{cx.argument}`, which the schema does not declare"
        if cx.argument else "",
        "op": cx.op or "(unnamed)",
        "has_fake": "has a fake impl that raises NotImplementedError" if cx.cause == "stub"
        else "has no fake impl",
        "gb_type": cx.gb_type or "unspecified",
    }
    if kind == K.FUNCTORCH_INCOMPATIBLE and cx.what is None:
        derived["what"] = refused_what(cx)
    return taxonomy.summary(kind, cx, derived)


#: stages that run no compiler: compile-semantics cannot be theirs
_NO_COMPILER = ("eager", "load", "gradcheck", "opcheck", "vmap")


def classify_error(stage: str, error: "ErrorRecord | Json", op: str | None = None) -> Finding:
    """Label one stage exception.

    ``error`` is the worker's error record (model/errors.ErrorRecord: its type, message and chain, gb_type, user
    frame, traceback...), or its wire form (a survey's ``setup_error``, a recorded message in a test). ``op`` names
    the op when the caller knows it (opcheck) and the message does not. Never raises.
    """
    rec = ErrorRecord.of(error) or ErrorRecord()
    chain = rec.links
    raw = Facts.of_error(rec)
    if stage in ("eager", "load") and not rec.transform:  # the probe's own torch.func call refused it
        raw = dataclasses.replace(raw, transform=transform_in_traceback(rec.traceback))
    types = {short_type(c.type) for c in chain}
    text = "\n".join(_head_tail(c.message) for c in chain)
    gb_type = rec.gb_type or gb_type_from_text(text)
    kind, match = _apply_rules(text, types, gb_type, raw) or (_fallback(stage, types, text), _Match(Context()))
    if kind == K.COMPILE_SEMANTICS and stage in _NO_COMPILER:  # no compiler ran: not the compiler's doing
        kind, match = _fallback(stage, types, text), _Match(Context())
    ctx = match.context
    if op and not ctx.op:
        ctx = replace(ctx, op=op_name(op))
    if gb_type and ctx.gb_type is None:
        ctx = replace(ctx, gb_type=gb_type)
    if kind == K.TORCH_INTERNAL_ERROR and ctx.stage is None:
        ctx = replace(ctx, stage=stage)  # the fix's ``tracecheck repro ... --stage``
    evidence = ExceptionEvidence(
        exception_type=rec.type or None,
        exception_chain=tuple(c.type for c in chain if c.type),
        gb_type=gb_type or None,
        gb_code=rec.gb_code or gb_code_from_text(text),
        # a fake impl that raised: its own line is where the fix goes; a fake that returns wrong metadata: its def
        # (opcheck records it)
        user_frame=match.fake_frame or rec.user_frame
        or (rec.fake_def if kind == K.FAKE_MISMATCH else None),
        phase=rec.phase,
        message=trim(rec.message),
        traceback=rec.traceback,
        root=innermost(rec.chain),
        # torch-internal-error: the frame of torch's own code (or graph) that raised, never the user's
        torch_frame=match.torch_frame)
    return Finding(kind, fill_summary(kind, ctx, stage), ctx, evidence)


def classify_break(brk: "BreakRecord | Json") -> GraphBreak:
    """Label one graph break from the structured trace (``dynamo_graph_break_reason`` artifact): its record
    (model/records.BreakRecord), or its wire form (a recorded reason in a test)."""
    rec = BreakRecord.of(brk) or BreakRecord()
    text = rec.reason
    gb_type = rec.gb_type or gb_type_from_text(text)
    found = _apply_rules(text, {"Unsupported"}, gb_type, Facts.of_break(rec))
    kind, ctx = (found[0], found[1].context) if found else (K.GRAPH_BREAK if gb_type else K.UNKNOWN, Context())
    if rec.code:
        ctx = replace(ctx, code=rec.code)
    if rec.caller is not None:  # the break sits inside torch: the user's line that led there (caller_outside_torch)
        ctx = replace(ctx, caller=rec.caller)
    # a break inside torch's Function machinery: the user's .apply line
    at_file, at_line = (rec.caller.file, rec.caller.line) if rec.caller is not None else (rec.file, rec.line)
    named = classmethod_function(at_file, at_line) if kind == K.GRAPH_BREAK else None
    if named:  # Dynamo cannot inline a classmethod forward/backward (GB7312): @staticmethod, as torch documents
        ctx = replace(ctx, cause="classmethod", function=named)
    return GraphBreak(
        kind=kind, gb_type=gb_type, gb_code=rec.gb_code or gb_code_from_text(text),
        file=rec.file, line=rec.line, reason=trim(text, 1500), doc=rec.doc,
        context=ctx,
    )


def break_finding(b: GraphBreak, generated_strings: bool = False) -> Finding:
    """``generated_strings``: the stage's ``<string>`` code is torch's (compiled autograd execs its backward graph's
    code), not the user's exec'd code."""
    ctx = replace(b.context, caller=None, gb_type=b.gb_type)
    frame = b.context.caller or (Frame.of(b.file, b.line, code=b.context.code) if b.file else None)
    evidence = BreakEvidence(gb_type=b.gb_type, gb_code=b.gb_code, doc=b.doc, user_frame=frame, message=b.reason)
    generated = b.file is not None and (is_generated(b.file) or (generated_strings and b.file == "<string>"))
    if generated and b.context.caller is None:
        # a break in code torch generated (compiled autograd's graph), with no user or library line under it:
        # said as such, never as the user's frame
        evidence = dataclasses.replace(evidence, user_frame=None, generated_frame=frame)
        ctx = replace(ctx, generated=f"{b.file}:{b.line}")
    return Finding(b.kind, fill_summary(b.kind, ctx, "compile"), ctx, evidence)


def classify_warning(message: str) -> Finding | None:
    """Warnings that are findings: the C++ autograd-not-implemented fallback (gradients may be wrong)."""
    m = _AUTOGRAD_FALLBACK.search(message)
    if not m:
        return None
    ctx = Context(op=m.group("op"), warning=True)
    return Finding(K.MISSING_AUTOGRAD,
                   f"Op {ctx.op} has no autograd kernel; backward ran through the deprecated fallback and "
                   "gradients may be silently wrong.", ctx, MessageEvidence(message=trim(message)))


def refused_what(cx: Context) -> str:
    """The functorch-incompatible summary's ``{what}``: the cause in words, with the Function(s) or op named."""
    functions = [x for x in (cx.function or "").split(", ") if x and x != SOME_FUNCTION]
    many = len(functions) > 1
    named = f"autograd.Function{'s' if many else ''} {', '.join(functions)}" if functions else "an autograd.Function"
    return taxonomy.kinds()[K.FUNCTORCH_INCOMPATIBLE].refused_by_cause.get(str(cx.cause), "").format(
        function=named, op=cx.op if cx.op is not None else "?", defines="define" if many else "defines",
        hop=cx.hop if cx.hop is not None else "a higher-order op",
        transform=cx.transform if cx.transform is not None else "vmap")


def _apply_rules(text: str, types: set[str], gb_type: str | None,
                 raw: Facts) -> tuple[str, _Match] | None:
    """The first kind whose rule matches: its id and its match, the context enriched (``_ENRICH``; a torch-internal
    error's with the frame that raised, which the match carries)."""
    for kind in taxonomy.rules():
        if kind.detect is None:  # rules() returns only kinds with one
            continue
        m = _matches(kind.detect, text, types, gb_type, raw)
        if m is None:
            continue
        cx = m.context
        if kind.id == K.PYBIND_BUILTIN and (_torch_builtin(cx.builtin or "", raw) or _stdlib_builtin(cx.builtin or "")):
            continue  # torch's or Python's own C function, not the user's extension: graph-break says what it is
        if kind.id in _ENRICH:
            cx = _ENRICH[kind.id](cx, m.groups, text, raw, gb_type or "")
        elif kind.id == K.TORCH_INTERNAL_ERROR:
            cx, frame = _torch_internal(cx, text, raw)
            m = replace(m, torch_frame=frame)
        if cx.op:
            cx = replace(cx, op=op_name(cx.op))
        return kind.id, replace(m, context=cx)
    return None


def _head_tail(text: str, limit: int = 40000) -> str:
    """What the rules read of one message: torch's wording sits at the start and end, never 40 kB deep."""
    return text if len(text) <= limit else text[: limit // 2] + "\n" + text[-limit // 2:]
