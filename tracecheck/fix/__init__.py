"""``tracecheck fix``: generate the fixed registration for a failing probe, then prove it passes.

Pipeline: diagnose (``api.run`` on a few fast stages) -> analyse in a stage process (fix.analysis: record,
perturb, plan, render) -> write the fixed-ops module and a patched copy of the probe -> verify (``api.run``
with every stage on the patched copy, and eager outputs and gradients compared with the original's).
See docs/fix.md. The entry point is ``tracecheck.fix.pipeline`` (``fix``, ``FixOptions``, ``FixOutcome``); this
package imports nothing, so a stage process that imports ``fix.analysis`` (through a ``fix.jobs`` record) does
not load the CLI side.
"""
