"""Excerpts of a finding's evidence shared by the renderers (numeric lines, trimmed messages, condensed
tracebacks, what a Dynamo message names), so all of them say the same thing."""
from __future__ import annotations

import os
import re
from typing import Any

from ..model.evidence import NumericEvidence, OpaqueEvidence
from ..model.report import Finding
from ..model.taxonomy import K


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "–"


def numeric_lines(f: Finding, where: str = "") -> list[str]:
    """What a ``numeric-mismatch`` finding measured: the worst tensor against the float64 reference, how
    many tensors disagreed, and the ops that ran; what an ``opaque-op`` finding counted (plain text, one fact per
    line). ``where``: the probe the numbers are from, when the finding stands for several."""
    ev = f.evidence
    if f.kind == K.OPAQUE_OP:
        cx = f.context
        graphs = (len(ev.graphs) if isinstance(ev, OpaqueEvidence) else 0) or "?"
        calls, kernels = _or_q(cx.calls), _or_q(cx.kernels)
        return [f"{where}{calls} extern call(s) of {cx.op or 'the op'} in {graphs} compiled "
                f"graph(s); Inductor generated {kernels} kernel(s) for the rest"]
    if f.kind != K.NUMERIC_MISMATCH or not isinstance(ev, NumericEvidence):
        return []
    worst = ev.worst
    # the vmap stage compares torch.func's result, not a compiled one, with eager
    transform = f.context.transform
    lines = [f"{_or_q(ev.disagreeing)} of {_or_q(ev.compared)} {f.context.what or 'tensors'} "
             f"disagree; worst: {worst.what or '?'}"
             + (f" {worst.dtype} {worst.shape}" if worst.shape is not None else "")]
    if worst.rmse_compiled_vs_fp64 is not None:
        ratio = worst.error_ratio
        got = f"torch.func.{transform}" if transform else "compiled"
        lines.append(f"RMSE against the {worst.reference_dtype or 'float64'} reference: {got} "
                     f"{_num(worst.rmse_compiled_vs_fp64)}, "
                     f"eager {_num(worst.rmse_eager_vs_fp64)}"
                     + (f" ({ratio:.1f}x eager's)" if isinstance(ratio, (int, float)) else ""))
    elif worst.gross_error_only:  # half precision with no higher-precision reference: gross errors only
        lines.append(f"no higher-precision reference: {ev.fp64_unavailable}; judged against eager for a gross "
                     f"error only: RMSE {_num(worst.relative_rmse_vs_eager)} of eager's RMS (at most "
                     f"{_num(worst.relative_rmse_bound)}), cosine similarity at least "
                     f"{_num(worst.cos_threshold)}")
    elif ev.fp64_reference is False:
        lines.append(f"no float64 reference: {ev.fp64_unavailable}; judged by allclose at "
                     f"tol {_num(worst.tol)}")
    facts = []
    if worst.max_abs_diff is not None:
        facts.append(f"max abs diff {_num(worst.max_abs_diff)}")
    if worst.cos_similarity is not None:
        facts.append(f"cosine similarity {worst.cos_similarity:.4f}")
    if worst.failed:
        facts.append(f"failed torch._dynamo.utils.same check(s): {', '.join(worst.failed)}")
    if worst.detail:
        facts.append(worst.detail.replace("compiled", f"torch.func.{transform}") if transform else worst.detail)
    if facts:
        lines.append("; ".join(facts))
    if ev.random_ops:
        lines.append(f"random ops ran: {', '.join(ev.random_ops)} (seeded alike; inductor fallback_random=True)")
    if ev.custom_ops:
        lines.append(f"custom ops called: {', '.join(ev.custom_ops)}")
    elif ev.custom_ops is not None:
        lines.append("custom ops called: none")
    return lines


def _or_q(x: Any) -> str:
    return "?" if x is None else str(x)


#: frames of installed torch and tracecheck and of the standard library are collapsed in an attachment's
#: traceback unless they are the last ones; a user's own folder named ``torch`` or ``tracecheck`` is not
_INTERNAL = re.compile(r"(?:site|dist)-packages[/\\](torch|tracecheck)[/\\]"
                       r"|[/\\]lib[/\\]python3\.\d+[/\\](multiprocessing|importlib|contextlib\.py|functools\.py)")
#: tracecheck's own folder (an editable install is not under site-packages)
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: frames kept at the end of each traceback block: where the error was raised
KEEP_LAST_FRAMES = 2


def condense_traceback(text: str, keep_last: int = KEEP_LAST_FRAMES, message_shown: bool = False) -> str:
    """A traceback for a human: every frame in user code, the last ``keep_last`` frames of each chained
    block, and the exception lines; runs of torch/tracecheck-internal frames become one ``[... N frames in
    torch._dynamo ...]`` line and caret lines (``^^^``) go. ``message_shown``: the final exception's message
    is printed elsewhere, so only its first line stays. The JSON report keeps the full text."""
    lines = text.splitlines()
    blocks: list[list[list[str]]] = []  # per traceback block, its frames (File line + source lines)
    out_plan: list[Any] = []  # lines (str) and frame blocks, in order
    frames: list[list[str]] | None = None
    for ln in lines:
        if ln.strip() and set(ln.strip()) <= set("^~"):
            continue  # the caret lines under a frame's source
        if ln.startswith("  File "):
            if frames is None:
                frames = []
                blocks.append(frames)
                out_plan.append(frames)
            frames.append([ln])
        elif frames is not None and frames and ln.startswith("    "):
            frames[-1].append(ln)
        else:
            frames = None
            out_plan.append(ln)
    if message_shown:
        out_plan = _drop_final_message(out_plan)
    out: list[str] = []
    for item in out_plan:
        if isinstance(item, str):
            out.append(item)
            continue
        skipped: list[str] = []
        for i, frame in enumerate(item):
            path = frame[0].split('"')[1] if '"' in frame[0] else ""
            if i >= len(item) - keep_last or not _internal(path):
                if skipped:
                    out.append(_skipped_line(skipped))
                    skipped = []
                out.extend(frame)
            else:
                skipped.append(path)
        if skipped:
            out.append(_skipped_line(skipped))
    return "\n".join(out)


def _drop_final_message(plan: list[Any]) -> list[Any]:
    """Keep the first line of the final exception (after the last frames); skip the rest of its message up to
    Dynamo's ``from user code:`` stack (kept: it is the user's stack), or to the end."""
    user = max((i for i, item in enumerate(plan) if isinstance(item, str) and item.strip() == "from user code:"),
               default=len(plan))
    last = max((i for i, item in enumerate(plan[:user]) if not isinstance(item, str)), default=None)
    if last is None or last + 2 >= user:
        return plan
    return plan[:last + 2] + ["[... the rest of the message is shown above ...]", ""] + plan[user:]


def _internal(path: str) -> bool:
    return bool(_INTERNAL.search(path)) or path.startswith(_OWN)


def _skipped_line(paths: list[str]) -> str:
    where = sorted({(m.group(1) or m.group(2)).removesuffix(".py") if m else "tracecheck"
                    for m in map(_INTERNAL.search, paths)})
    return f"  [... {len(paths)} frame(s) in {', '.join(where)} ...]"


#: a trimmed exception message (a Markdown finding's): at most this many lines / characters
_MESSAGE_LINES, _MESSAGE_CHARS = 10, 720
#: a longer message line (an FX node's arguments, say) is cut in the middle to this many characters
_LINE_CHARS = 360
#: Dynamo's lines that say nothing of the failure
_MESSAGE_NOISE = re.compile(r"^\s*(Developer debug context:|For more details about this graph break|Set TORCHDYNAMO_VERBOSE)")


def drop_noise(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not _MESSAGE_NOISE.match(ln))


TRIMMED = "\n[... trimmed; the full text is in the details below and in the JSON report]"


def trim_message(text: str) -> str:
    """A message as a report quotes it: no user stack (the traceback has it), no noise, long lines cut in the
    middle, at most ``_MESSAGE_LINES`` lines; ``TRIMMED`` says where the rest is."""
    kept: list[str] = []
    for ln in text.strip().splitlines():
        if ln.strip() == "from user code:":
            break  # the user stack: in the traceback details
        if not _MESSAGE_NOISE.match(ln):  # a long line keeps both ends: what ran, and what it got
            kept.append(ln if len(ln) <= _LINE_CHARS else f"{ln[:_LINE_CHARS // 2]} [...] {ln[-_LINE_CHARS // 2:]}")
    text = "\n".join(kept)
    lines = text.strip().splitlines()
    out = "\n".join(lines[:_MESSAGE_LINES])
    if len(out) > _MESSAGE_CHARS:
        out = out[:_MESSAGE_CHARS]
    if len(out) < len(text.strip()):
        out += TRIMMED
    return out


#: Where Dynamo's messages name the builtin or function it refused (for the "Builtin" line when the
#: classifier's context has none), newest wording first.
_NAMED_IN_MESSAGE = [
    ("Builtin", re.compile(r"trace builtin operator `(?P<name>[^`]+)`")),
    ("Builtin", re.compile(r"trace the builtin `(?P<name>[^`]+?)\.?`")),
    ("Function", re.compile(r"Developer debug context: (?:module: (?P<mod>[\w.]+), qualname: (?P<qual>[\w.]+))")),
    ("Function", re.compile(r"Developer debug context: <function (?P<name>[\w.]+) at 0x")),  # a disable()d function
]


def named_in_message(message: str) -> tuple[str, str] | None:
    """What a Dynamo message names, and what it is: ``("Builtin", "print")`` for "trace builtin operator `print`",
    ``("Function", "helper")`` for a ``torch.compiler.disable``d or skipped Python function (no builtin)."""
    for label, pattern in _NAMED_IN_MESSAGE:
        m = pattern.search(message or "")
        if m:
            groups = m.groupdict()
            return label, groups["name"] if groups.get("name") else f"{groups['mod']}.{groups['qual']}"
    return None
