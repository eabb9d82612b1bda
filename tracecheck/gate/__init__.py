"""Gate: what decides a CI job. Baselines and their comparison (``baseline``), shards of a report split across
jobs (``shards``), and the pytest plugin that runs tracecheck's checks inside a test suite (``pytest_plugin``)."""
