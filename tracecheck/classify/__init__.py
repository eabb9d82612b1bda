"""Classify: evidence in, findings out. ``detect`` labels an exception, a graph break or a warning by the rules of
the kind registry (model/kinds.json); ``measured`` builds findings from what a stage measured (mismatches,
gradcheck, specializations, torch.func, fallbacks, opaque kernels, draft_export); ``results`` turns one stage's
record into its ``StageResult`` and attributes failures to their root cause. Pure: no torch import."""
