"""draft_export bounded by what is left of the export stage's time (issue 52, item 8b: export of ODE probes timed
out in draft_export after torch.export had failed in 19-40 s). Plain torch.export.export is the oracle that the
probe fails to export; the stage keeps the export error and says why the report is missing."""
import pytest
import torch

from tracecheck.model.probe import to_case
from tracecheck.stages import export
from tracecheck.stages._spec import StageContext, StageOptions


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: export refuses it
            return x * 2
        return x - 1


def _case():
    return to_case((Branchy(), (torch.ones(3),)))


def test_no_time_left_keeps_the_export_error_and_says_why_there_is_no_report():
    with pytest.raises(Exception):
        torch.export.export(Branchy(), (torch.ones(3),), strict=False)
    record = export.run(StageContext(make_case=_case, options=StageOptions(assured_s=0.0)))
    assert record.error.type
    assert record.draft_export is None
    (note,) = record.extra["not_checked"]
    assert "draft_export" in note and "--timeout" in note


def test_with_time_left_the_report_comes():
    record = export.run(StageContext(make_case=_case, options=StageOptions(assured_s=300.0)))
    assert record.error.type and "failures" in record.draft_export.to_wire()
