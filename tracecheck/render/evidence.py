"""Evidence lines shared by the terminal and Markdown renderers, so both say the same thing."""
from __future__ import annotations

from typing import Any

from ..report import Finding


def _num(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "–"


def numeric_lines(f: Finding) -> list[str]:
    """What a ``numeric-mismatch`` finding measured: the worst tensor against the float64 reference, how
    many tensors disagreed, and the ops that ran (plain text, one fact per line)."""
    if f.kind != "numeric-mismatch":
        return []
    ev = f.evidence
    worst = ev.get("worst") or {}
    lines = [f"{ev.get('disagreeing', '?')} of {ev.get('compared', '?')} {f.context.get('what', 'tensors')} "
             f"disagree; worst: {worst.get('what', '?')}"
             + (f" {worst.get('dtype')} {tuple(worst['shape'])}" if worst.get("shape") is not None else "")]
    if worst.get("rmse_compiled_vs_fp64") is not None:
        ratio = worst.get("error_ratio")
        lines.append(f"RMSE against the float64 reference: compiled {_num(worst['rmse_compiled_vs_fp64'])}, "
                     f"eager {_num(worst.get('rmse_eager_vs_fp64'))}"
                     + (f" ({ratio:.1f}x eager's)" if isinstance(ratio, (int, float)) else ""))
    elif ev.get("fp64_reference") is False:
        lines.append(f"no float64 reference: {ev.get('fp64_unavailable')}; judged by allclose at "
                     f"tol {_num(worst.get('tol'))}")
    facts = []
    if worst.get("max_abs_diff") is not None:
        facts.append(f"max abs diff {_num(worst['max_abs_diff'])}")
    if worst.get("cos_similarity") is not None:
        facts.append(f"cosine similarity {worst['cos_similarity']:.4f}")
    if worst.get("failed"):
        facts.append(f"failed torch._dynamo.utils.same check(s): {', '.join(worst['failed'])}")
    if worst.get("detail"):
        facts.append(str(worst["detail"]))
    if facts:
        lines.append("; ".join(facts))
    if ev.get("random_ops"):
        lines.append(f"random ops ran: {', '.join(ev['random_ops'])} (seeded alike; inductor fallback_random=True)")
    if ev.get("custom_ops"):
        lines.append(f"custom ops called: {', '.join(ev['custom_ops'])}")
    elif "custom_ops" in ev:
        lines.append("custom ops called: none")
    return lines
