"""Targets: what a user asks tracecheck to make the code ready for, and the gate that follows from it.

Every stage belongs to one target (``StageSpec.target``): ``compile`` (``torch.compile``, forward and backward:
eager through dynamic), ``export`` (``torch.export``) or ``func`` (``torch.func``: vmap and grad). The exit code, a
baseline comparison and every verdict gate on the *required* targets: ``compile`` always, the others when asked
(``--require export,func``, or a baseline's ``"require"``). A stage of a target not required still runs, and its
findings are shown with the same evidence, saying how to require it; they fail nothing. PyTorch's own contract
makes the other targets optional: ``torch.library.opcheck`` does not test torch.func support, and few model authors
vmap a whole model.

``Gate`` is the one policy a report is read with: the required targets and ``--strict`` (advice kinds fail too).
Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import taxonomy
from .exitcodes import UsageError

COMPILE, EXPORT, FUNC = "compile", "export", "func"
#: every target, in the order reports show them
TARGETS = (COMPILE, EXPORT, FUNC)
#: what each target asks, for help texts and reports
DESCRIPTIONS = {
    COMPILE: "torch.compile, forward and backward (eager, explain, aot_eager, inductor, fullgraph, opcheck, "
             "compiled_autograd, gradcheck, dynamic)",
    EXPORT: "torch.export (the export stage)",
    FUNC: "torch.func: vmap and grad (the vmap stage)",
}
#: required when nothing else is asked; always required
DEFAULT_REQUIRE = (COMPILE,)


def parse_require(text: str | None, option: str = "--require") -> tuple[str, ...]:
    """``"export,func"`` -> the required targets, ``compile`` first and always. Raises UsageError for a name that
    is not a target."""
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    unknown = [t for t in names if t not in TARGETS]
    if unknown:
        raise UsageError(f"{option} {text}: unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    return normalized(names)


def normalized(names: "list[str] | tuple[str, ...]") -> tuple[str, ...]:
    """``names`` with ``compile`` added, in ``TARGETS`` order, no repeats (unknown names dropped)."""
    return tuple(t for t in TARGETS if t in set(names) | set(DEFAULT_REQUIRE))


@dataclass(frozen=True)
class Gate:
    """How a report is gated: ``require``, the targets whose stages fail a probe (``compile`` always), and
    ``strict``, whether advice kinds fail their stages as errors do."""

    require: tuple[str, ...] = DEFAULT_REQUIRE
    strict: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "require", normalized(self.require))

    def fails_on(self, kind: str) -> bool:
        """Does a finding of ``kind`` fail its stage: an error always, advice only under ``strict``. The one place
        this is decided: the stage status (classify/results.py), the report's verdicts, every renderer and the baseline's
        snapshot (with the plain ``Gate()``) ask it. A baseline may also name advice kinds that regress like errors
        (its ``severity`` setting, ``gate/document.gated_advice``): a comparison's rule, on top of this one."""
        return self.strict or not taxonomy.is_advice(kind)

    def requires(self, target: str | None) -> bool:
        """Does a stage of ``target`` gate? A stage that names none (a report from before targets) does."""
        return target is None or target in self.require

    def how_to_require(self, *targets: str) -> str:
        """The option that makes ``targets`` gate besides the required ones, for the reports' "not required" notes."""
        return f"--require {','.join(t for t in normalized([*self.require, *targets]) if t != COMPILE)}"
