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
import os
import re
import sys
from typing import Any

from ..model import taxonomy
from ..model.taxonomy import K
from ..evidence.source import classmethod_function, in_autograd_function
from ..evidence.wording import EMULATOR_GAP, TORCH_NAMESPACES, gb_code_from_text, gb_type_from_text
from ..model.evidence import BreakEvidence, ExceptionEvidence, MessageEvidence, RootCause
from ..model.records import Frame
from ..model.report import Finding, GraphBreak, headline, is_generated, op_name, says_nothing


# ---------------------------------------------------------------------------------------------------------
# Detection rules are data: kinds.json "detect" (taxonomy.Detect), tried in their declared order. Code here only
# adds what data cannot say (the pybind11 and autograd.Function flags of a builtin).

#: the C++ autograd fallback's warning (classify_warning): the second missing-autograd wording
_AUTOGRAD_FALLBACK = re.compile(
    r"(?<![\w.:])(?P<op>[\w.:]{1,300}): an autograd kernel was not registered to the Autograd key")
_BACKEND_TYPES = {"BackendCompilerFailed", "InductorError", "LoweringException", "CppCompileError"}
_AUTOGRAD_FN = re.compile(r"Higher Order Operator: autograd\.Function|autograd_function\.py|in (forward|backward)\(ctx")


def _short_type(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


# ---------------------------------------------------------------------------------------------------------
# The rule engine


# Exceptions torch raises for compile-time problems; message patterns that a user could also write (torch_only)
# are trusted only when one of these is in the chain (or the evidence is a graph break, or an opcheck test).
_TORCH_TYPES = {"Unsupported", "TorchRuntimeError", "UserError", "BackendCompilerFailed", "InductorError",
                "InternalTorchDynamoError", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                "DynamicOutputShapeException", "UnsupportedOperatorException", "OpCheckError",
                "ConstraintViolationError"}


def _from_torch(types: set[str], raw: dict[str, Any]) -> bool:
    return bool(types & _TORCH_TYPES) or bool(raw.get("is_break")) or str(raw.get("phase", "")).startswith("test_")


def _matches(rule: taxonomy.Detect, text: str, types: set[str], gb_type: str | None,
             raw: dict[str, Any]) -> dict[str, Any] | None:
    """The context when the evidence matches the rule (named groups of the pattern that matched), else None."""
    if types & rule.not_with_types:
        return None
    if rule.only_with_gb_types is not None and (gb_type or "") not in rule.only_with_gb_types:
        return None
    if rule.only_under_transform and not raw.get("transform"):
        return None
    fake = raw.get("fake_impl")
    if rule.fake_impl_raised and isinstance(fake, dict):
        raised, cause = rule.fake_impl_raised
        if "*" in raised or fake.get("exception_type") in raised:
            return {"op": fake.get("op") or "", "cause": cause, **({"fake_frame": fake["frame"]}
                                                                    if fake.get("frame") else {})}
    if rule.raised_in_torch and _raised_in_torch(rule.raised_in_torch, types, raw):
        return {}
    trusted = _from_torch(types, raw)
    for p in rule.patterns:
        if p.torch_only and not trusted:
            continue
        if p.generated and not (raw.get("phase") == "backward" and _generated_frame(text)):
            continue  # a graph torch generated while the backward ran: compiled autograd's, not an FX graph of the user's
        m = p.regex.search(text)
        if m:
            ctx = {k: v for k, v in m.groupdict().items() if v}
            if p.cause == "raises" and re.split(r"::|\.", ctx.get("op", ""))[0] in TORCH_NAMESPACES:
                continue  # torch's own op: its meta kernel raised, not a custom op's fake
            if any(rx.search(ctx.get(k, "")) for k, rx in rule.exclude.items()):
                return None  # e.g. a builtin of torch's own: not this kind
            if p.cause:
                ctx["cause"] = p.cause
            return ctx
    if (gb_type and gb_type in rule.gb_types) or types & rule.exception_types:
        return {}
    if rule.any_gb_type and gb_type and ("Unsupported" in types or raw.get("is_break")):
        return {}
    return None


#: a frame of a Python traceback (``File "...", line N, in f``), and the line that names the exception raised
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?:\s*(?P<code>[^\n]*)\n)?', re.M)
_TB_SEPARATORS = re.compile(r"\n(?:The above exception was the direct cause of the following exception:|During handling "
                            r"of the above exception, another exception occurred:)\n")


def _root(raw: dict[str, Any]) -> dict[str, Any]:
    """The innermost exception of the evidence's chain (``{"type", "message", "raised_at"}``)."""
    chain = raw.get("chain") or [{"type": raw.get("type", ""), "message": raw.get("message", "")}]
    return chain[-1]


#: an exception that is Dynamo's own account of why it stopped (a graph break's Explanation/Hints): its words are the
#: root cause to show, whatever internal error it was raised from
_DYNAMO_VERDICT = re.compile(r"^\s*Explanation:", re.M)


#: torch's wrappers: their own words are a header over the error they wrap (``raise ... from`` it), which is the one
#: to show. Any other exception raised from another (a user's ValueError from a KeyError, Inductor's CppCompileError
#: from the compiler's CalledProcessError) says the more useful thing itself.
_TORCH_WRAPPERS = frozenset({"BackendCompilerFailed", "TorchRuntimeError", "InternalTorchDynamoError", "InductorError"})


def root_cause(raw: dict[str, Any]) -> dict[str, str] | None:
    """``{"type", "message"}`` of the exception the error comes down to, when that is not the outermost one: down
    BackendCompilerFailed's ``inner_exception``, down ``raise ... from`` out of torch's own wrappers
    (``_TORCH_WRAPPERS``), and past any exception whose own first line says nothing; stopping at Dynamo's own
    account of a graph break. A ``__context__`` (raised while another was handled) is followed only from an
    exception with nothing of its own to say: torch sometimes handles one error before raising the one that matters."""
    chain = raw.get("chain") or []
    if len(chain) < 2:
        return None
    at = 0
    for i in range(1, len(chain)):
        here, via = chain[at], chain[i].get("via")
        if _DYNAMO_VERDICT.search(str(here.get("message", ""))):
            break
        wrapper = _short_type(str(here.get("type", ""))) in _TORCH_WRAPPERS
        if via == "inner" or (via == "cause" and wrapper) or says_nothing(here.get("message")):
            at = i
        else:
            break
    if at == 0:
        return None
    return {"type": _short_type(str(chain[at].get("type", ""))), "message": trim(str(chain[at].get("message", "")), 2000)}


def raising_frame(raw: dict[str, Any]) -> dict[str, Any] | None:
    """Where the innermost exception was raised: its record's ``raised_at`` (evidence/exceptions.raised_at), else the
    innermost of its frames (``root_frames``)."""
    root = _root(raw)
    if root.get("raised_at"):
        return root["raised_at"]
    frames = root_frames(raw)
    return frames[-1] if frames else None


def _raised_in_torch(rule: tuple[frozenset[str], frozenset[str], re.Pattern[str], re.Pattern[str] | None],
                     types: set[str], raw: dict[str, Any]) -> bool:
    """The innermost exception was raised by torch's own compiler (``rule``: Detect.raised_in_torch): an exception of
    ``types`` raised there, or any exception wrapped by one of ``wrapped_by`` (InternalTorchDynamoError: Dynamo's own
    word that the error is internal). An assert in the user's or a library's code is not; neither is one whose raising
    frame lies outside torch under Dynamo's wrapper (Dynamo ran the user's ``__eq__``, say), one torch raised under a
    call the user's or a library's code made (``_called_from_user_code``), nor torch's words for a misuse of its APIs
    (``not_message``: a real tensor mixed into FakeTensorMode, a wrong ``__metadata_guard__``)."""
    raised, wrapped_by, files, not_message = rule
    root_type = _short_type(str(_root(raw).get("type", "")))
    wrapped = bool(types & wrapped_by)
    if root_type not in raised and not wrapped:
        return False
    chain = raw.get("chain") or [{"message": raw.get("message", "")}]
    if not_message is not None and any(not_message.search(str(c.get("message", ""))) for c in chain):
        return False
    if _called_from_user_code(raw):
        return False
    frame = raising_frame(raw)
    if frame is None or not frame.get("file"):
        return wrapped and root_type in wrapped_by  # Dynamo's wrapper alone, nothing under it to place
    return bool(files.search(str(frame["file"]).replace("\\", "/")))


#: torch's, the standard library's and tracecheck's own files (detect imports no torch: by path), and code torch or
#: Python generated (``<eval_with_key>.N``, ``<frozen genericpath>``, ``<string>``)
_TORCH_FILE = re.compile(r"(^|[/\\])torch[/\\]")
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_TRACECHECK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: where torch's compilers take over from running code: Dynamo's frame conversion (its callback intercepts a frame and
#: traces it symbolically), compiled autograd, AOTAutograd and torch.export's tracer
_COMPILER_ENTRY = re.compile(r"(^|[/\\])torch[/\\](_dynamo[/\\](convert_frame|compiled_autograd)\.py|"
                             r"_functorch[/\\]aot_autograd\.py|export[/\\]_trace\.py)$")


def _outside_torch(file: str) -> bool:
    """A frame of the user's or a library's code (site-packages included): not torch's, the standard library's,
    tracecheck's, nor generated code."""
    if not file or file.startswith("<"):
        return False
    full = os.path.abspath(file)
    if _TORCH_FILE.search(file) or full.startswith(_TRACECHECK_DIR):
        return False
    return not (full.startswith(_STDLIB_DIR) and not re.search(r"(site|dist)-packages", full))


def root_frames(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The innermost exception's traceback, outermost frame first: its record's ``frames`` (evidence/exceptions.tb_frames),
    else the frames of the first block of the formatted traceback (Python prints the innermost exception first)."""
    frames = _root(raw).get("frames")
    if isinstance(frames, list):
        return frames
    tb = str(raw.get("traceback") or "")
    if "Traceback (most recent call last)" not in tb:
        return []
    block = _TB_SEPARATORS.split(tb)[0].split("\nfrom user code:", 1)[0]
    return [{"file": m.group("file"), "line": int(m.group("line")), "function": m.group("func"),
             "code": (m.group("code") or "").strip()} for m in _TB_FRAME.finditer(block)]


def _called_from_user_code(raw: dict[str, Any]) -> bool:
    """Did torch raise under a call the user's or a library's code made for real: the innermost frame of theirs in the
    innermost exception's traceback has no compiler entry (``_COMPILER_ENTRY``) under it. Their code called torch
    directly (a real tensor mixed into a FakeTensorMode they made), or torch ran their code for real and it called torch
    (a fake impl, a ``__torch_function__``): theirs to look at first, never "a torch bug". Code Dynamo traces runs
    symbolically and leaves no frame; a frame it intercepts (a graph break's resume function) has the entry under it."""
    frames = root_frames(raw)
    mine = [i for i, f in enumerate(frames) if _outside_torch(str(f.get("file") or ""))]
    if not mine:
        return False
    below = frames[mine[-1] + 1:]
    return not any(_COMPILER_ENTRY.search(str(f.get("file") or "").replace("\\", "/")) for f in below)


def _generated_frame(text: str) -> dict[str, Any] | None:
    """The innermost frame of Dynamo's ``from user code:`` block when it is code torch generated (``<eval_with_key>``:
    an FX graph such as compiled autograd's backward), else None."""
    if "from user code:" not in text:
        return None
    block = text.split("from user code:", 1)[1].split("Set TORCHDYNAMO_VERBOSE", 1)[0]  # Dynamo's suffix ends it
    frames = list(_TB_FRAME.finditer(block))
    if not frames or not is_generated(frames[-1].group("file")):
        return None
    m = frames[-1]
    return {"file": m.group("file"), "line": int(m.group("line")), "code": (m.group("code") or "").strip()}


#: Dynamo's quote of a failed fake run: the node and what it raised
_FAKE_RUN_GOT = re.compile(r"call_function (?P<op>[\w.]+\(\*\([^\n]{0,200}?\), \*\*\{[^\n]{0,100}?\}\)): "
                           r"got (?P<type>\w+)\((?P<q>['\"])(?P<message>[^\n]+?)(?P=q)\)")


#: compiled autograd's assert on an autograd.Function whose backward (or forward) is a classmethod
_CLASSMETHOD_FN = re.compile(r"Expected FunctionType, got <class 'method'>")


def _torch_internal(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """The innermost exception (``Type: first line``) and the torch frame it was raised at, or the generated graph's line."""
    root = _root(raw)
    ctx["exception"] = headline({"type": _short_type(str(root.get("type", ""))), "message": root.get("message")})
    if _CLASSMETHOD_FN.search(ctx["exception"]):  # a classmethod where torch documents @staticmethod: cheapest fixed in user code
        ctx["cause"] = "classmethod"
    got = _FAKE_RUN_GOT.search(text)
    frame_at = Frame.from_dict(raw.get("user_frame"))
    named = classmethod_function(frame_at.file, frame_at.line) if frame_at is not None else None
    if named and ctx.get("cause") != "generated":  # the same assert from Dynamo on a classmethod Function (entmax)
        ctx["cause"], ctx["function"] = "classmethod", named
    if ctx.get("cause") == "generated" and got:  # the fake run's own error, as Dynamo quotes it
        ctx["exception"] = f"{got.group('op')}: {got.group('type')}: {got.group('message')[:200]}"
    frame = _generated_frame(text) if ctx.get("cause") == "generated" else raising_frame(raw)
    if frame:
        file = str(frame.get("file", "")).replace("\\", "/")
        file = file[file.rindex("/torch/") + 1:] if "/torch/" in file and not is_generated(file) else file
        ctx["torch_frame"] = f"{file}:{frame.get('line')}" + (f" in {frame['function']}" if frame.get("function") else "")
        ctx["torch_frame_record"] = frame
    else:
        ctx["torch_frame"] = "a frame the evidence does not name"


_UNKNOWN_MODULE = "<unknown module>."


def _torch_builtin(builtin: str, raw: dict[str, Any]) -> bool:
    """Is a builtin Dynamo names without a module (``<unknown module>.TensorBase._make_wrapper_subclass``,
    ``<unknown module>.pybind11_object.__new__``) torch's own? Only the call site tells a user's extension from torch
    itself: torch's code made the call (a break Dynamo places inside torch: flex_attention's fallback), or the user's
    line calls it through ``torch.`` (a tensor subclass's ``torch.Tensor._make_wrapper_subclass(...)``)."""
    if not builtin.startswith(_UNKNOWN_MODULE):
        return False
    # evidence/tracelog.py (frames.caller_outside_torch): the call was made from torch's own code; Dynamo's polyfills (object construction, say) re-enact
    # the user's own Python, so a break placed there is still the user's call
    in_torch = bool(raw.get("caller")) and "/_dynamo/polyfills/" not in str(raw.get("file", "")).replace("\\", "/")
    if in_torch or raw.get("traced_in_torch"):
        return True
    method = builtin.rsplit(".", 1)[-1]
    frame = Frame.from_dict(raw.get("user_frame"))
    code = str(raw.get("code") or (frame and frame.code) or "")
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


def _pybind_flags(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    name = ctx.get("builtin", "")
    if gb_type == "call to a callable object with no traceable __call__":  # 2.14: the object's class is named
        ctx["builtin"] = name = f"{name}.__call__"
    if any(mark in name for mark in ("pybind11_detail_function_record", ".PyCapsule.", "pybind11_")):
        ctx["pybind11"] = True
    # an error's frame, or a structured-trace break's own location
    frame = Frame.from_dict(raw.get("user_frame")) or Frame.from_dict({"file": raw.get("file"), "line": raw.get("line")})
    if _AUTOGRAD_FN.search(text + "\n" + raw.get("traceback", "")) or \
            (frame is not None and in_autograd_function(frame.file, frame.line)):
        ctx["in_autograd_function"] = True
    args = _CONSTANT_CALL.search(text)
    listed = args.group("args") + ", " + args.group("kwargs") if args else ""
    if args and not _SEPARATORS.sub("", _CONSTANT_ARG.sub("", listed)):
        # Dynamo's debug context lists the call's arguments: constants only (a mode string turned into an int, as
        # pywt's Modes.from_object does) make a constant result, which no custom op is needed for
        ctx.update(cause="constant_args", args=", ".join(_CONSTANT_ARG.findall(listed)) or "no arguments")


_HINT = re.compile(r"^\s*Hint: (?P<hint>.+)$", re.M)
#: Dynamo's stock hints (torch/_dynamo/graph_break_hints.py: SUPPORTABLE, USER_ERROR, DYNAMO_BUG, ...): the same
#: for hundreds of gb_types, they say nothing about this one
_STOCK_HINTS = re.compile(r"^(It may be possible to write Dynamo tracing rules|Your code may result in an error "
                          r"when running in eager|This is likely to be a Dynamo bug|Please report an issue to PyTorch|"
                          r"This graph break may be difficult to debug|This graph break is fundamental|This graph break may have "
                          r"been caused by an earlier graph break)")


def _hints(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """Dynamo's hints for the gb_type (the ``Hint:`` lines of its message, less the stock ones) become the fix."""
    found = (m.group("hint").strip() for m in _HINT.finditer(text))
    hints = list(dict.fromkeys(h for h in found if not _STOCK_HINTS.match(h)))[:3]
    if hints:
        ctx["hints"], ctx["cause"] = " ".join(h if h.endswith(".") else h + "." for h in hints), "hints"


def _read_values(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """A data-dependent break that reads values into Python (.item(), .tolist()) gets that fix, not the branch's."""
    if ".item()" in gb_type or ".tolist()" in gb_type:
        ctx["cause"], ctx["gb_type"] = "read", gb_type


def _stub(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """A fake impl that exists but raises NotImplementedError: the fix is to write it, not to register one."""
    if ctx.pop("stub", None):
        ctx["cause"] = "stub"


#: a frame of torch.func's own Python in a traceback, and the function that names the transform it runs
_FUNCTORCH_FRAME = re.compile(r'torch/_functorch/\w+\.py", line \d+, in (?P<func>\w+)')
_TRANSFORM_OF = {"_flat_vmap": "vmap", "vmap_impl": "vmap", "grad_impl": "grad", "grad_and_value_impl": "grad",
                 "_vjp_with_argnums": "vjp", "_jvp_with_argnums": "jvp", "jacrev": "jacrev", "jacfwd": "jacfwd",
                 "hessian": "hessian"}
#: higher-order ops by module, as users call them (their files name them in a traceback)
_HOP_NAMES = {"cond": "torch.cond", "while_loop": "torch._higher_order_ops.while_loop", "scan": "torch._higher_order_ops.scan",
              "map": "torch._higher_order_ops.map", "associative_scan": "torch._higher_order_ops.associative_scan",
              "flex_attention": "flex_attention", "invoke_subgraph": "torch._higher_order_ops.invoke_subgraph"}
_HOP_FILE = re.compile(rf"torch/_higher_order_ops/(?P<hop>{'|'.join(_HOP_NAMES)})\.py")


#: a Function torch.func refused that the evidence does not name
SOME_FUNCTION = "The autograd.Function"


def transform_in_traceback(raw: dict[str, Any]) -> str | None:
    """The torch.func transform an eager error was raised under (the probe called torch.func.vmap or grad itself),
    read from the frames of its traceback, innermost first; None when it ran under none. Only for an error raised
    in eager code: a compiled run's traceback holds the frames Dynamo traced (torch.vmap inlined), not transforms."""
    tb = str(raw.get("traceback", "")).replace("\\", "/")
    found = [_TRANSFORM_OF[m.group("func")] for m in _FUNCTORCH_FRAME.finditer(tb) if m.group("func") in _TRANSFORM_OF]
    return found[-1] if found else None


def _functorch(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """The transform that refused (the vmap stage says; else the traceback), and for a higher-order op without a
    rule for it, which op."""
    ctx.setdefault("transform", raw.get("transform") or "vmap")
    key = ctx.pop("transform_key", None)
    if key:  # KeyError: <TransformType.Grad: 2>: the transform the HOP has no rule for
        ctx["transform"] = {"Grad": "grad", "Vmap": "vmap", "Jvp": "jvp", "Functionalize": "functionalize"}.get(
            key, ctx["transform"])
    if ctx.get("cause") in ("setup_context", "vmap_rule") and not ctx.get("function"):
        ctx["function"] = SOME_FUNCTION  # the fix text names it; the vmap stage names the class when it finds it
    hops = _HOP_FILE.findall((str(raw.get("traceback", "")) + "\n" + text).replace("\\", "/"))
    if ctx.get("cause") == "storage" and hops:  # a higher-order op without a rule compiles itself under the transform
        ctx["cause"] = "hop"
    frame = Frame.from_dict(raw.get("user_frame"))
    if ctx.get("cause") == "storage" and frame is not None and ".numpy()" in (frame.code or ""):  # the user's line hands the tensor to NumPy
        ctx["cause"] = "numpy"
    if ctx.get("cause") == "hop":
        ctx["hop"] = _HOP_NAMES[hops[-1]] if hops else "a higher-order op"


def _fake_raises(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """A fake impl that raised: what it raised, and its line (the finding's frame: where the fix goes)."""
    fake = raw.get("fake_impl") or {}
    if ctx.get("cause") == "raises" and fake:
        first = next((ln.strip() for ln in str(fake.get("message", "")).splitlines() if ln.strip()), "")
        ctx["exception"] = f"{fake.get('exception_type')}: {first[:160]}" if first else str(fake.get("exception_type"))


def _where(ctx: dict[str, Any], text: str, raw: dict[str, Any], gb_type: str) -> None:
    """The user line a dimension marked dynamic was specialized at (the summary's ``{by}``)."""
    frame = Frame.from_dict(raw.get("user_frame"))
    if ctx.get("cause") in ("marked", "constraint"):
        ctx["by"] = (f" at `{frame.code}` ({frame.location})" if frame.code else f" at {frame.location}") \
            if frame else ""


#: what code adds to a kind's context after its rule matched
_ENRICH = {K.PYBIND_BUILTIN: _pybind_flags, K.GRAPH_BREAK: _hints, K.DATA_DEPENDENT: _read_values,
           K.MISSING_FAKE: _stub, K.FUNCTORCH_INCOMPATIBLE: _functorch, K.FAKE_MISMATCH: _fake_raises,
           K.DYNAMIC_SHAPE: _where, K.TORCH_INTERNAL_ERROR: _torch_internal}


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


def fill_summary(kind: str, ctx: dict[str, Any], stage: str) -> str:
    """The kind's summary template (kinds.json) filled from the context and a few derived values."""
    derived = {
        "stage": stage,
        "builtin_short": short_builtin(ctx.get("builtin", "?")),
        "where": " inside a torch.autograd.Function" if ctx.get("in_autograd_function") else "",
        "argument_note": f": it mutates input `{ctx['argument']}`, which the schema does not declare"
        if ctx.get("argument") else "",
        "op": ctx.get("op") or "(unnamed)",
        "has_fake": "has a fake impl that raises NotImplementedError" if ctx.get("cause") == "stub"
        else "has no fake impl",
        "gb_type": ctx.get("gb_type") or "unspecified",
    }
    if kind == K.FUNCTORCH_INCOMPATIBLE and "what" not in ctx:
        derived["what"] = refused_what(ctx)
    return taxonomy.summary(kind, {**ctx, **derived})


#: stages that run no compiler: compile-semantics cannot be theirs
_NO_COMPILER = ("eager", "load", "gradcheck", "opcheck", "vmap")


def classify_error(stage: str, raw: dict[str, Any], op: str | None = None) -> Finding:
    """Label one stage exception.

    ``raw`` is the worker's error record: ``type`` (qualified name), ``message``, ``chain`` (list of
    ``{"type", "message"}`` for the exception, its ``inner_exception``/``__cause__``/``__context__``),
    optional ``gb_type``, ``gb_code``, ``user_frame`` and ``traceback``. ``op`` names the op when the caller
    knows it (opcheck) and the message does not. Never raises.
    """
    chain = raw.get("chain") or [{"type": raw.get("type", ""), "message": raw.get("message", "")}]
    if stage in ("eager", "load") and not raw.get("transform"):  # the probe's own torch.func call refused it
        raw = {**raw, "transform": transform_in_traceback(raw)}
    types = {_short_type(c.get("type", "")) for c in chain}
    text = "\n".join(_head_tail(c.get("message", "")) for c in chain)
    gb_type = raw.get("gb_type") or gb_type_from_text(text)
    kind, ctx = _apply_rules(text, types, gb_type, raw) or (_fallback(stage, types, text), {})
    if kind == K.COMPILE_SEMANTICS and stage in _NO_COMPILER:  # no compiler ran: not the compiler's doing
        kind, ctx = _fallback(stage, types, text), {}
    if op and not ctx.get("op"):
        ctx["op"] = op_name(op)
    if gb_type:
        ctx.setdefault("gb_type", gb_type)
    torch_frame = ctx.pop("torch_frame_record", None)
    if kind == K.TORCH_INTERNAL_ERROR:
        ctx.setdefault("stage", stage)  # the fix's ``tracecheck repro ... --stage``
    root = root_cause(raw)
    evidence = ExceptionEvidence(
        exception_type=raw.get("type") or None,
        exception_chain=tuple(str(c.get("type")) for c in chain if c.get("type")),
        gb_type=gb_type or None,
        gb_code=raw.get("gb_code") or gb_code_from_text(text),
        # a fake impl that raised: its own line is where the fix goes; a fake that returns wrong metadata: its def
        # (opcheck records it)
        user_frame=Frame.from_dict(ctx.pop("fake_frame", None) or raw.get("user_frame")
                                   or (raw.get("fake_def") if kind == K.FAKE_MISMATCH else None)),
        phase=raw.get("phase"),
        message=trim(raw.get("message") or ""),
        traceback=raw.get("traceback") or "",
        root=RootCause(root["type"], root["message"]) if root else None,
        # torch-internal-error: the frame of torch's own code (or graph) that raised, never the user's
        torch_frame=Frame.from_dict(torch_frame))
    return Finding(kind, fill_summary(kind, ctx, stage), ctx, evidence)


def classify_break(raw: dict[str, Any]) -> GraphBreak:
    """Label one graph break from the structured trace (``dynamo_graph_break_reason`` artifact)."""
    text = raw.get("reason", "")
    gb_type = raw.get("gb_type") or gb_type_from_text(text)
    found = _apply_rules(text, {"Unsupported"}, gb_type,
                         {**raw, "is_break": True, "traceback": raw.get("user_stack", "")})
    kind, ctx = found if found else (K.GRAPH_BREAK if gb_type else K.UNKNOWN, {})
    ctx.pop("torch_frame_record", None)
    if raw.get("code"):
        ctx["code"] = raw["code"]
    if raw.get("caller"):  # the break sits inside torch: the user's line that led there (evidence/frames.caller_outside_torch)
        ctx["caller"] = raw["caller"]
    at = raw.get("caller") or raw  # a break inside torch's Function machinery: the user's .apply line
    named = classmethod_function(at.get("file"), at.get("line")) if kind == K.GRAPH_BREAK else None
    if named:  # Dynamo cannot inline a classmethod forward/backward (GB7312): @staticmethod, as torch documents
        ctx["cause"], ctx["function"] = "classmethod", named
    return GraphBreak(
        kind=kind, gb_type=gb_type, gb_code=raw.get("gb_code") or gb_code_from_text(text),
        file=raw.get("file"), line=raw.get("line"), reason=trim(text, 1500), doc=raw.get("doc"),
        context=ctx,
    )


def break_finding(b: GraphBreak, generated_strings: bool = False) -> Finding:
    """``generated_strings``: the stage's ``<string>`` code is torch's (compiled autograd execs its backward graph's
    code), not the user's exec'd code."""
    ctx = {**{k: v for k, v in b.context.items() if k != "caller"}, "gb_type": b.gb_type}
    frame = Frame.from_dict(b.context.get("caller") or {"file": b.file, "line": b.line, "code": b.context.get("code")})
    evidence = BreakEvidence(gb_type=b.gb_type, gb_code=b.gb_code, doc=b.doc, user_frame=frame, message=b.reason)
    generated = b.file is not None and (is_generated(b.file) or (generated_strings and b.file == "<string>"))
    if generated and not b.context.get("caller"):
        # a break in code torch generated (compiled autograd's graph), with no user or library line under it:
        # said as such, never as the user's frame
        evidence = dataclasses.replace(evidence, user_frame=None, generated_frame=frame)
        ctx["generated"] = f"{b.file}:{b.line}"
    return Finding(b.kind, fill_summary(b.kind, ctx, "compile"), ctx, evidence)


def classify_warning(message: str) -> Finding | None:
    """Warnings that are findings: the C++ autograd-not-implemented fallback (gradients may be wrong)."""
    m = _AUTOGRAD_FALLBACK.search(message)
    if not m:
        return None
    ctx = {"op": m.group("op"), "warning": True}
    return Finding(K.MISSING_AUTOGRAD,
                   f"Op {ctx['op']} has no autograd kernel; backward ran through the deprecated fallback and "
                   "gradients may be silently wrong.", ctx, MessageEvidence(message=trim(message)))


def refused_what(ctx: dict[str, Any]) -> str:
    """The functorch-incompatible summary's ``{what}``: the cause in words, with the Function(s) or op named."""
    functions = [x for x in str(ctx.get("function") or "").split(", ") if x and x != SOME_FUNCTION]
    many = len(functions) > 1
    named = f"autograd.Function{'s' if many else ''} {', '.join(functions)}" if functions else "an autograd.Function"
    return taxonomy.kinds()[K.FUNCTORCH_INCOMPATIBLE].refused_by_cause.get(str(ctx.get("cause")), "").format(function=named, op=ctx.get("op", "?"),
                                                          defines="define" if many else "defines",
                                                          hop=ctx.get("hop", "a higher-order op"),
                                                          transform=ctx.get("transform", "vmap"))


def _apply_rules(text: str, types: set[str], gb_type: str | None,
                 raw: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    for kind in taxonomy.rules():
        if kind.detect is None:  # rules() returns only kinds with one
            continue
        ctx = _matches(kind.detect, text, types, gb_type, raw)
        if ctx is None:
            continue
        if kind.id == K.PYBIND_BUILTIN and (_torch_builtin(ctx.get("builtin", ""), raw)
                                            or _stdlib_builtin(ctx.get("builtin", ""))):
            continue  # torch's or Python's own C function, not the user's extension: graph-break says what it is
        if kind.id in _ENRICH:
            _ENRICH[kind.id](ctx, text, raw, gb_type or "")
        if ctx.get("op"):
            ctx["op"] = op_name(ctx["op"])
        return kind.id, ctx
    return None


def _head_tail(text: str, limit: int = 40000) -> str:
    """What the rules read of one message: torch's wording sits at the start and end, never 40 kB deep."""
    return text if len(text) <= limit else text[: limit // 2] + "\n" + text[-limit // 2:]


def trim(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"
