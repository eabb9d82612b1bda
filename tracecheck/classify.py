"""Pure classifier: raw evidence from a stage worker -> one ``Finding`` / ``GraphBreak`` kind.

No torch import: rules read plain data (exception type names and messages along the cause chain,
``Unsupported.gb_type``, the GB code) so they can be unit-tested on recorded messages from several torch
versions (tests/test_classify.py). Structured fields are read first; message patterns second, for older
wording. When nothing fits, the label is ``unknown`` (or ``eager-error``/``backend-error`` where the stage
alone says whose failure it is) and the raw evidence is kept.
Wording per version: ../shared/torch_failure_wording.md sections 4 and 7.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from . import taxonomy
from .report import Finding, GraphBreak, op_name

# Namespaces that belong to PyTorch itself: ops elsewhere are the user's custom ops (opcheck targets).
TORCH_NAMESPACES = {"aten", "prims", "prim", "rngprims", "_c10d_functional", "c10d", "c10d_functional",
                    "profiler", "quantized", "_quantized", "inductor", "debugprims", "higher_order",
                    "_refs", "mkldnn", "mkl", "onednn", "_inductor_test", "_dynamo_testing", "streams"}


# ---------------------------------------------------------------------------------------------------------
# Patterns. Newest wording first inside each list.

_PYBIND = [
    # 2.8-2.14: SkipFunctionVariable explanation; the qualname keeps a trailing "." inside the backticks.
    re.compile(r"Dynamo does not know how to trace the builtin `(?P<name>[^`]+?)\.?`"),
    re.compile(r"Dynamo cannot trace optree C/C\+\+ function (?P<name>\S+?)\.?(\s|$)"),
    # <=2.3: "Graph break due to unsupported builtin flash_attn_2_cuda.PyCapsule.fwd"
    re.compile(r"unsupported builtin (?P<name>\w+(?:\.\w+)*)"),
]
_NO_FAKE = [
    re.compile(r"There was no fake impl registered for <CustomOpDef\((?P<op>[^)]+)\)>"),
    re.compile(r"unsupported operator: (?P<op>[\w.:]+)"),
    re.compile(r"UnsupportedOperatorException\(func=<OpOverload\(op='(?P<op>[^']+)'"),
    re.compile(r"torch\.ops\.(?P<op>\S+) is missing a fake kernel implementation"),
    re.compile(r"we cannot infer a Fake kernel"),
]
_NO_FAKE_GB = {"Operator does not support running with fake tensors"}
# Bounded op-name quantifiers keep matching linear on long messages (a probe may raise a 200 kB message).
_NO_AUTOGRAD = [
    re.compile(r"Trying to backward through (?P<op>\S{1,300}) but no autograd formula was registered"),
    re.compile(r"(?<![\w.:])(?P<op>[\w.:]{1,300}): an autograd kernel was not registered to the Autograd key"),
    re.compile(r"(?<![\w.:])(?P<op>[\w.:]{1,300}): at least one output of this operator has requires_grad=True "
               r"but the operator does not have an autograd kernel"),
]
_MUTATES = [
    re.compile(r"Argument (?P<arg>\w+) is not defined as mutable but was mutated"),
    re.compile(r"Argument (?P<arg>\w+) is not defined to alias output but was aliasing"),
    re.compile(r"Outputs \d+ and \d+ alias unexpectedly"),
    re.compile(r"Dispatcher operators below autograd are not allowed to directly return inputs"),
    re.compile(r"different from what was provided to us in `mutates_args`"),
]
_FAKE_MISMATCH = [
    re.compile(r"When comparing the output of (?P<op>\S+) on FakeTensor and concrete Tensors"),
    re.compile(r"Mismatched fake kernel"),
    re.compile(r"Real tensor propagation found an output size mismatch"),
]
# Inductor's size/stride assertion blames "a custom op" even when the op is an input (`.data` swaps), so it
# counts only when it names a non-aten op.
_INDUCTOR_FAKE_ASSERT = re.compile(
    r"Error in op: torch\.ops\.(?!aten\.)(?P<op>\S+)[\s\S]*incorrect fake \(aka meta\) kernel for a custom op")
_FAKE_MISMATCH_TYPES = {"MetadataMismatchError"}
_DATA_DEP = [
    re.compile(r"Could not guard on data-dependent expression"),
    re.compile(r"Could not extract specialized integer from data-dependent expression"),
    re.compile(r"Consider annotating your code using torch\._check"),
    re.compile(r"generic_jump (Tensor|SymNode)Variable"),
    re.compile(r"Dynamic control flow is not supported"),  # <=2.4 wording
]
_DATA_DEP_GB = {
    "Data-dependent branching",
    "Data-dependent branching with non-constant __bool__",
    "Data-dependent assertion failed (cannot compile partial graph)",
    "Unsupported Tensor.item() call with capture_scalar_outputs=False",
    "Dynamic shape operator",
    "Dynamic shape operator (no meta kernel)",
    "Data dependent operator",
}
_DATA_DEP_TYPES = {"GuardOnDataDependentSymNode", "DataDependentOutputException", "DynamicOutputShapeException"}
_BACKEND_TYPES = {"BackendCompilerFailed", "InductorError", "LoweringException", "CppCompileError"}
_GB_CODE = re.compile(r"/gb/gb(\d{4})\.html")
_AUTOGRAD_FN = re.compile(r"Higher Order Operator: autograd\.Function|autograd_function\.py|in (forward|backward)\(ctx")

def _short_type(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def _search(patterns: list[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for p in patterns:
        m = p.search(text)
        if m:
            return m
    return None


def _group(m: re.Match[str] | None, name: str) -> str | None:
    if m is None or name not in m.re.groupindex:
        return None
    return m.group(name)


def gb_code_from_text(text: str) -> str | None:
    m = _GB_CODE.search(text)
    return f"GB{m.group(1)}" if m else None


# ---------------------------------------------------------------------------------------------------------
# Rules. Each takes (text, types, gb_type, raw) and returns (kind, context) or None.

Rule = Callable[[str, set[str], "str | None", dict[str, Any]], "tuple[str, dict[str, Any]] | None"]


def _rule_pybind(text, types, gb_type, raw):
    if gb_type not in (None, "", "Attempted to call function marked as skipped",
                       "Attempted to inline function marked as skipped"):
        return None
    m = _search(_PYBIND, text)
    if not m:
        return None
    name = m.group("name")
    ctx: dict[str, Any] = {"builtin": name}
    if "pybind11_detail_function_record" in name or ".PyCapsule." in name:
        ctx["pybind11"] = True
    if _AUTOGRAD_FN.search(text + "\n" + raw.get("traceback", "")):
        ctx["in_autograd_function"] = True
    return "pybind-builtin", ctx


# Exceptions torch raises for compile-time problems; message patterns that a user could also write are only
# trusted when one of these is in the chain (or the evidence is a graph break).
_TORCH_TYPES = {"Unsupported", "TorchRuntimeError", "UserError", "BackendCompilerFailed", "InductorError",
                "InternalTorchDynamoError", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                "DynamicOutputShapeException", "UnsupportedOperatorException", "OpCheckError"}


def _from_torch(types: set[str], raw: dict[str, Any]) -> bool:
    return bool(types & _TORCH_TYPES) or bool(raw.get("is_break")) or str(raw.get("phase", "")).startswith("test_")


def _rule_missing_fake(text, types, gb_type, raw):
    m = _search(_NO_FAKE, text)
    if m and m.re is _NO_FAKE[1] and not _from_torch(types, raw):
        m = None  # "unsupported operator: x" in a user's own exception is not evidence
    if m or gb_type in _NO_FAKE_GB or "UnsupportedOperatorException" in types:
        op = _group(m, "op")
        return "missing-fake", ({"op": op} if op else {})
    return None


def _rule_missing_autograd(text, types, gb_type, raw):
    m = _search(_NO_AUTOGRAD, text)
    return ("missing-autograd", {"op": m.group("op")}) if m else None


def _rule_mutates(text, types, gb_type, raw):
    m = _search(_MUTATES, text)
    if not m:
        return None
    arg = _group(m, "arg")
    return "mutates-args-mismatch", ({"argument": arg} if arg else {})


def _rule_fake_mismatch(text, types, gb_type, raw):
    m = _search(_FAKE_MISMATCH + [_INDUCTOR_FAKE_ASSERT], text)
    if m or types & _FAKE_MISMATCH_TYPES:
        op = _group(m, "op")
        return "fake-mismatch", ({"op": op} if op else {})
    return None


def _rule_data_dependent(text, types, gb_type, raw):
    if gb_type in _DATA_DEP_GB or types & _DATA_DEP_TYPES or (_from_torch(types, raw) and _search(_DATA_DEP, text)):
        return "data-dependent", {}
    return None


def _rule_graph_break(text, types, gb_type, raw):
    # Any other Dynamo "unsupported" with a gb_type is an ordinary graph break with its registry entry.
    if gb_type and ("Unsupported" in types or raw.get("is_break")):
        return "graph-break", {}
    return None


RULES: list[Rule] = [
    _rule_missing_autograd,  # before pybind: its message can quote a skipped builtin
    _rule_mutates,
    _rule_missing_fake,
    _rule_fake_mismatch,
    _rule_pybind,
    _rule_data_dependent,
    _rule_graph_break,
]


def _gb_type_from_text(text: str) -> str | None:
    """The gb_type is the line right before ``  Explanation:`` in Dynamo's formatted messages (2.7+)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  Explanation:"):
            # fullgraph inside a HOP inserts "  Higher Order Operator: ..." between gb_type and Explanation
            j = i - 1
            while j >= 0 and lines[j].startswith("  Higher Order Operator"):
                j -= 1
            return lines[j].strip() or None if j >= 0 else None
    return None


def _fallback(stage: str, types: set[str]) -> str:
    if stage == "eager":
        return "eager-error"
    if types & _BACKEND_TYPES:
        return "backend-error"
    return "unknown"


def short_builtin(name: str) -> str:
    """``mod.pybind11_detail_function_record_v1_….fn`` / ``mod.PyCapsule.fn`` -> ``mod.fn`` (for reading)."""
    parts = [p for p in name.split(".") if not p.startswith("pybind11_detail_function_record") and p != "PyCapsule"]
    return ".".join(parts)


def _summary(kind: str, ctx: dict[str, Any], stage: str) -> str:
    """The kind's summary template (kinds.json) filled from the context and a few derived values."""
    derived = {
        "stage": stage,
        "builtin_short": short_builtin(ctx.get("builtin", "?")),
        "where": " inside a torch.autograd.Function" if ctx.get("in_autograd_function") else "",
        "argument_note": f": it mutates input `{ctx['argument']}`, which the schema does not declare"
        if ctx.get("argument") else "",
        "op": ctx.get("op") or "(unnamed)",
        "gb_type": ctx.get("gb_type") or "unspecified",
    }
    return taxonomy.summary(kind, {**ctx, **derived})


def classify_error(stage: str, raw: dict[str, Any], op: str | None = None) -> Finding:
    """Label one stage exception.

    ``raw`` is the worker's error record: ``type`` (qualified name), ``message``, ``chain`` (list of
    ``{"type", "message"}`` for the exception, its ``inner_exception``/``__cause__``/``__context__``),
    optional ``gb_type``, ``gb_code``, ``user_frame`` and ``traceback``. ``op`` names the op when the caller
    knows it (opcheck) and the message does not. Never raises.
    """
    chain = raw.get("chain") or [{"type": raw.get("type", ""), "message": raw.get("message", "")}]
    types = {_short_type(c.get("type", "")) for c in chain}
    text = "\n".join(_head_tail(c.get("message", "")) for c in chain)
    gb_type = raw.get("gb_type") or _gb_type_from_text(text)
    kind, ctx = _apply_rules(text, types, gb_type, raw) or (_fallback(stage, types), {})
    if op and not ctx.get("op"):
        ctx["op"] = op_name(op)
    if gb_type:
        ctx.setdefault("gb_type", gb_type)
    evidence = {
        "exception_type": raw.get("type"),
        "exception_chain": [c.get("type") for c in chain],
        "gb_type": gb_type,
        "gb_code": raw.get("gb_code") or gb_code_from_text(text),
        "user_frame": raw.get("user_frame"),
        "phase": raw.get("phase"),
        "message": _trim(raw.get("message", "")),
        "traceback": raw.get("traceback", ""),
    }
    return Finding(kind, _summary(kind, ctx, stage), ctx, evidence)


def classify_break(raw: dict[str, Any]) -> GraphBreak:
    """Label one graph break from the structured trace (``dynamo_graph_break_reason`` artifact)."""
    text = raw.get("reason", "")
    gb_type = raw.get("gb_type") or _gb_type_from_text(text)
    found = _apply_rules(text, {"Unsupported"}, gb_type,
                         {**raw, "is_break": True, "traceback": raw.get("user_stack", "")})
    kind, ctx = found if found else ("graph-break" if gb_type else "unknown", {})
    if raw.get("code"):
        ctx["code"] = raw["code"]
    return GraphBreak(
        kind=kind, gb_type=gb_type, gb_code=raw.get("gb_code") or gb_code_from_text(text),
        file=raw.get("file"), line=raw.get("line"), reason=_trim(text, 1500), doc=raw.get("doc"),
        context=ctx,
    )


def break_finding(b: GraphBreak) -> Finding:
    ctx = {**b.context, "gb_type": b.gb_type}
    return Finding(
        b.kind, _summary(b.kind, ctx, "compile"), ctx,
        {"gb_type": b.gb_type, "gb_code": b.gb_code, "doc": b.doc,
         "user_frame": {"file": b.file, "line": b.line, "code": b.context.get("code")}, "message": b.reason},
    )


def classify_warning(message: str) -> Finding | None:
    """Warnings that are findings: the C++ autograd-not-implemented fallback (gradients may be wrong)."""
    m = _NO_AUTOGRAD[1].search(message)
    if not m:
        return None
    ctx = {"op": m.group("op"), "warning": True}
    return Finding("missing-autograd",
                   f"Op {ctx['op']} has no autograd kernel; backward ran through the deprecated fallback and "
                   "gradients may be silently wrong.", ctx, {"message": _trim(message)})


def mismatch_finding(raw: dict[str, Any], stage: str = "compile") -> Finding:
    """One phase's compiled-vs-eager disagreement (stages.compare / numerics.judge): ``phase``, ``worst``
    (the worst tensor: ``what``, and ``detail`` or its errors), ``disagreeing`` of ``compared`` tensors,
    ``fp64_reference``, and the ``custom_ops``/``random_ops`` one eager forward called. The cause is the one
    the evidence supports: custom ops only when the probe calls one."""
    phase = raw.get("phase", "forward")
    worst = raw.get("worst") or {}
    what = worst.get("what", "?")
    if worst.get("detail") and worst.get("max_abs_diff") is None:
        how = worst["detail"]
    else:
        bits = [f"max abs diff {worst.get('max_abs_diff'):.3g}" if worst.get("max_abs_diff") is not None else "",
                f"RMSE vs float64: compiled {worst['rmse_compiled_vs_fp64']:.3g}, eager "
                f"{worst['rmse_eager_vs_fp64']:.3g}" if worst.get("rmse_compiled_vs_fp64") is not None
                and worst.get("rmse_eager_vs_fp64") is not None else "",
                f"cosine {worst['cos_similarity']:.4f}" if worst.get("cos_similarity") is not None else "",
                f"dtype {worst.get('dtype')}" if worst.get("dtype") else ""]
        how = ", ".join(b for b in bits if b)
    n, total = raw.get("disagreeing", 1), raw.get("compared", 1)
    tensors = "outputs" if phase == "forward" else "gradients"
    custom, random_ops = raw.get("custom_ops") or [], raw.get("random_ops") or []
    ctx: dict[str, Any] = {"what": f"{phase} {tensors}", "phase": phase, "tensor": what, "stage": stage,
                           "cause": "custom-op" if custom else "random" if random_ops else "backend"}
    if custom:
        ctx["custom_ops"] = custom
    if random_ops:
        ctx["random_ops"] = random_ops
    summary = (f"Compiled {tensors} differ from eager: {n} of {total} disagree; worst {what} ({how})."
               if n > 1 or total > 1 else f"Compiled {what} differs from eager ({how}).")
    return Finding("numeric-mismatch", summary, ctx, dict(raw))


def _apply_rules(text, types, gb_type, raw):
    for rule in RULES:
        found = rule(text, types, gb_type, raw)
        if found:
            kind, ctx = found
            if ctx.get("op"):
                ctx["op"] = op_name(ctx["op"])
            return kind, ctx
    return None


def _head_tail(text: str, limit: int = 40000) -> str:
    """What the rules read of one message: torch's wording sits at the start and end, never 40 kB deep."""
    return text if len(text) <= limit else text[: limit // 2] + "\n" + text[-limit // 2:]


def _trim(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"
