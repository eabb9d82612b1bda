"""pandas exports behind `tracecheck show --format table|csv`."""
import io

import pandas as pd

from report_factory import mixed_status_report, small_report
from tracecheck.render import tables


def test_csv_has_one_row_per_probe_and_stage():
    df = pd.read_csv(io.StringIO(tables.to_csv(mixed_status_report())))
    assert list(df.columns) == tables.STAGE_COLUMNS
    assert len(df) == 6
    row = df[(df.name == "probe") & (df.stage == "explain")].iloc[0]
    assert (row.status, row.kinds, row.graph_count, row.graph_break_count) == ("fail", "graph-break", 2, 1)
    assert df[df.stage == "inductor"].iloc[0].status == "timeout"


def test_verdict_table_is_probes_by_stages():
    t = tables.verdict_frame(small_report(with_ca=False))
    assert list(t.columns) == ["eager", "explain", "aot_eager", "fullgraph"]
    assert list(t.index) == ["model.py::probe_ok", "model.py::probe_bad"]
    assert t.loc["model.py::probe_bad", "fullgraph"] == "missing-fake"
    assert t.loc["model.py::probe_ok", "explain"] == "pass"
    assert "missing-fake" in tables.to_table(small_report(with_ca=False))


def test_findings_frame():
    df = tables.findings_frame(small_report(with_ca=False))
    assert sorted(df.kind) == ["graph-break", "graph-break", "missing-fake"]
    assert set(df[df.kind == "missing-fake"].op) == {"mylib::bucketize"}


def test_the_text_table_wraps_its_columns_into_blocks_of_the_width_asked():
    """pandas's own wrapping (to_string line_width): every line fits, every stage heading is still there."""
    report = small_report(with_ca=False)
    text = tables.to_table(report, 40)
    assert all(len(line) <= 40 + 2 for line in text.splitlines())  # pandas adds its " \\" continuation mark
    for stage in ("eager", "explain", "aot_eager", "fullgraph"):
        assert stage in text
    assert len(tables.to_table(report, 250).splitlines()) < len(text.splitlines())
