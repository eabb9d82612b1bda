"""The export stage when the exported program's outputs refuse the comparison with eager (optimum-quanto's packed
weights run ``torch.allclose`` on the fake tensors they hold): the export itself is answered, the numbers are said not
compared with why, and no internal error (exit 3) is made of the outputs' own refusal."""
import torch

from tracecheck.model.probe import Case
from tracecheck.stages import _spec, export


def test_outputs_that_refuse_comparing_are_not_compared_and_say_why(monkeypatch):
    lin = torch.nn.Linear(4, 3)

    def refuse(*args, **kwargs):
        raise RuntimeError("aten.allclose.default has a data-dependent output")

    import tracecheck.stages._execution as execution

    monkeypatch.setattr(execution, "compare", refuse)
    record = export.run(_spec.StageContext(lambda: Case(lin, (torch.randn(2, 4),), grad=False)))
    # plain torch.export takes this module: the stage's answer is the export's, unchanged by the comparison
    torch.export.export(lin, (torch.randn(2, 4),))
    assert record.error is None and record.mismatches == []
    assert record.extra["numerics"] == ("not compared: comparing the exported program's outputs with eager's raised "
                                        "RuntimeError: aten.allclose.default has a data-dependent output")
