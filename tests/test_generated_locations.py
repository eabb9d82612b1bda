"""A location is a real file:line or says what generated the code (issue 52, item 2c); records written by hand."""
from tracecheck.classify import detect, measured
from tracecheck.model.records import SpecializedDimension
from tracecheck.model.report import GraphBreak


def test_a_break_in_compiled_autograds_execd_graph_is_generated_code_not_the_users():
    b = GraphBreak(kind="graph-break", gb_type="Observed exception", gb_code="GB0088", file="<string>", line=1,
                   reason="Observed exception", context={})
    f = detect.break_finding(b, generated_strings=True)
    assert f.user_frame is None and f.evidence.generated_frame.file == "<string>"
    # elsewhere, <string> is the user's own exec'd code and stays where it is
    assert detect.break_finding(b).user_frame.file == "<string>"


def test_a_specialization_is_placed_at_a_file_not_at_execd_code():
    raw = {"reason": "L['x'].size()[0] == 4", "batch_sizes": [4, 5, 6, 7],
           "user_frame": {"file": "/venv/site-packages/bitsandbytes/functional.py", "line": 1063, "code": "n = A.numel()"},
           "specialization": {"frame": {"file": "<string>", "line": 1, "code": None}, "sources": ["L['x'].size()[0]"],
                              "value": "4"}}
    f = measured.specialization_finding(SpecializedDimension.of(raw))
    assert (f.user_frame.file, f.user_frame.line) == ("/venv/site-packages/bitsandbytes/functional.py", 1063)
    assert "None" not in f.summary and "<string>" not in f.summary


def test_a_subclass_metadata_guard_is_placed_at_the_guard_with_a_fix_for_the_subclass():
    """optimum-quanto 0.2.7's calibrated int8 activations (issue 52, item 8): Dynamo's ___check_metadata guard on the
    activation subclass fails at every batch size. The record is the dynamic stage's, written by hand from that run."""
    guard = ("___check_metadata_140250160914144_c7/5  # return torch.nn.functional.linear(input, self.qweight, "
             "bias=self.bias)  # optimum/quanto/nn/qlinear.py:50 in forward")
    raw = {"reason": guard, "batch_sizes": [4, 5, 6, 7],
           "user_frame": {"file": "/venv/site-packages/optimum/quanto/nn/qlinear.py", "line": 50,
                          "code": "return torch.nn.functional.linear(input, self.qweight, bias=self.bias)"},
           "specialization": {"frame": {"file": "/w/qa.py", "line": 12, "code": "return self.b(torch.relu(self.a(x)))"},
                              "sources": ["L['input'].size()[0]"], "value": "7"}}
    f = measured.specialization_finding(SpecializedDimension.of(raw))
    assert f.context.cause == "subclass_metadata"
    assert (f.user_frame.file, f.user_frame.line) == ("/venv/site-packages/optimum/quanto/nn/qlinear.py", 50)
    from tracecheck.model.taxonomy import fix_text
    assert "__tensor_flatten__" in fix_text(f) and "mark_static" not in fix_text(f)


def test_the_source_views_index_names_the_command_with_rootdir_relative_paths(tmp_path):
    """Every output prints paths relative to the rootdir (issue 52, item 6): the index's "written by" line too."""
    from report_factory import small_report
    from tracecheck.render import html

    report = small_report(root="/ci/runner-1/work/repo")
    report.rootdir = "/ci/runner-1/work/repo"
    html.write(str(tmp_path / "view"), report)
    index = (tmp_path / "view" / "index.html").read_text()
    assert "written by <code>tracecheck run model.py --json out/r.json</code>" in index
    assert "/ci/runner-1" not in index
