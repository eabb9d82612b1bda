"""Collect: which files hold probes (``locate``), loading a file and selecting its probes (``loadfile``), the
discover task that calls each probe once (``survey``), and the ``Case`` a stage process builds again
(``casemaker``). The first step of the pipeline: collect → isolate and run stages → classify → report."""
