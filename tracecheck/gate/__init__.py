"""Gate: what decides a CI job. The baseline document (``document``, over the typed snapshots of ``snapshot``), its
comparison with a new run (``comparison``, one ``changes.Change`` per probe, stage and aspect) and their root causes
(``causes``); shards of a report split across jobs (``shards``), and the pytest plugin that runs tracecheck's
checks inside a test suite (tracecheck/pytest_plugin.py, which measures as a run does)."""
