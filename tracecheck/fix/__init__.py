"""``tracecheck fix``: generate the fixed registration for a failing probe, then prove it passes.

Pipeline: diagnose (``api.run`` on a few fast stages) -> analyse in a stage process (fix.analysis: record,
perturb, plan, render) -> write the fixed-ops module and a patched copy of the probe -> verify (``api.run``
with every stage on the patched copy, and eager outputs and gradients compared with the original's).
See docs/fix.md. Entry point: ``fix.pipeline.fix``. This package imports nothing on import: its analysis runs
in stage processes, which import ``fix.analysis`` alone.
"""
