"""``tracecheck fix``: generate the fixed registration for a failing probe, then prove it passes.

Pipeline: diagnose (``api.run`` on a few fast stages) -> analyse in a stage process (fix.analysis: record,
perturb, plan, render) -> write the fixed-ops module and a patched copy of the probe -> verify (``api.run``
with every stage on the patched copy, and eager outputs and gradients compared with the original's).
See docs/fix.md. ``from tracecheck.fix import fix, FixOptions, FixOutcome`` works; the pipeline is imported
when first asked for, so a stage process that imports ``fix.analysis`` does not load the CLI side.
"""
from typing import Any

__all__ = ["FixOptions", "FixOutcome", "fix"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
