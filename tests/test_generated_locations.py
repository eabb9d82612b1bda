"""A location is a real file:line or says what generated the code (issue 52, item 2c); records written by hand."""
from tracecheck.classify import detect, measured
from tracecheck.model.report import GraphBreak


def test_a_break_in_compiled_autograds_execd_graph_is_generated_code_not_the_users():
    b = GraphBreak(kind="graph-break", gb_type="Observed exception", gb_code="GB0088", file="<string>", line=1,
                   reason="Observed exception", context={})
    f = detect.break_finding(b, generated_strings=True)
    assert f.user_frame is None and f.evidence["generated_frame"]["file"] == "<string>"
    # elsewhere, <string> is the user's own exec'd code and stays where it is
    assert detect.break_finding(b).user_frame.file == "<string>"


def test_a_specialization_is_placed_at_a_file_not_at_execd_code():
    raw = {"reason": "L['x'].size()[0] == 4", "batch_sizes": [4, 5, 6, 7],
           "user_frame": {"file": "/venv/site-packages/bitsandbytes/functional.py", "line": 1063, "code": "n = A.numel()"},
           "specialization": {"frame": {"file": "<string>", "line": 1, "code": None}, "sources": ["L['x'].size()[0]"],
                              "value": "4"}}
    f = measured.specialization_finding(raw)
    assert (f.user_frame.file, f.user_frame.line) == ("/venv/site-packages/bitsandbytes/functional.py", 1063)
    assert "None" not in f.summary and "<string>" not in f.summary
