"""Gate: what decides a CI job. The baseline document (``document``, over the typed snapshots of ``snapshot``), its
comparison with a new run (``comparison``, one ``changes.Change`` per probe, stage and aspect) and their root causes
(``causes``); shards of a report split across jobs (``shards``). The pytest plugin that uses them inside a test
suite measures as a run does, so it is not here: tracecheck/pytest_plugin.py, beside the CLI."""
