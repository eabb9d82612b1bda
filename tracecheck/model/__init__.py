"""The data every step shares: the probe API (``probe``, ``Case``), the stage record and ``Frame`` (``records``),
the typed payloads a stage keeps in ``StageResult.extra`` (``payloads``), the report
(``report``: findings, stage results, verdicts) and its files (``reportio``), targets and the gate
(``targets``), the kind registry (``taxonomy`` with ``kinds.json`` and ``gb_types.json``) and exit codes. Pure
data and rules about it: no torch import, nothing from the pipeline's other steps."""
