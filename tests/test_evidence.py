"""model/evidence.Evidence: a finding's evidence dict read as typed fields, the one reader every renderer uses.
Oracles: evidence dicts written by hand in the report schema's shape (docs/report-schema.md), expected values by hand."""
from tracecheck.model.evidence import EXCEPTION, GRAPH_BREAK, MEASUREMENT, NUMERIC, PROCESS, Evidence
from tracecheck.model.records import Frame
from tracecheck.model.report import Finding


def test_an_exceptions_evidence():
    ev = Evidence.of({
        "exception_type": "torch._dynamo.exc.BackendCompilerFailed",
        "exception_chain": ["torch._dynamo.exc.BackendCompilerFailed", "RuntimeError"],
        "message": "backend='aot_eager' raised:\nRuntimeError: Mismatch in shape: a\n\nmore",
        "root": {"type": "RuntimeError", "message": "Mismatch in shape: a\n\nmore"},
        "traceback": "Traceback (most recent call last): ...", "phase": "backward",
        "user_frame": {"file": "/m/model.py", "line": 7, "code": "y = f(x)"}, "gb_type": None})
    assert ev.what == EXCEPTION and ev.phase == "backward"
    assert ev.exception_chain == ("torch._dynamo.exc.BackendCompilerFailed", "RuntimeError")
    assert ev.user_frame == Frame("/m/model.py", 7, None, "y = f(x)")
    assert ev.headline() == "RuntimeError: Mismatch in shape: a"  # quoted by the outer line: the outer one
    assert ev.detail() == "Traceback (most recent call last): ..."


def test_the_root_cause_is_shown_when_the_outer_line_does_not_quote_it():
    ev = Evidence.of({"exception_type": "WrapperError", "message": "Failed running call_function foo",
                      "root": {"type": "KeyError", "message": "'the real reason'"}})
    assert ev.headline() == "KeyError: 'the real reason'"
    assert ev.detail() == "Failed running call_function foo"  # no traceback: the message


def test_a_dead_process_and_a_numeric_comparison_and_a_break():
    dead = Evidence.of({"cause": "killed by SIGSEGV", "stderr_tail": "Fatal Python error: Segmentation fault"})
    assert dead.what == PROCESS and dead.detail() == "Fatal Python error: Segmentation fault"
    num = Evidence.of({"phase": "backward", "compared": 45, "disagreeing": 3, "fp64_reference": False,
                       "worst": {"what": "grad w", "dtype": "torch.bfloat16", "shape": [4, 8], "tol": 0.01,
                                 "failed": ["fp64"]}, "custom_ops": []})
    assert num.what == NUMERIC and (num.compared, num.disagreeing) == (45, 3)
    assert num.worst.shape == (4, 8) and num.worst.failed == ("fp64",) and num.worst.tol == 0.01
    assert num.custom_ops == () and Evidence.of({}).custom_ops is None  # "none recorded" vs "not recorded"
    brk = Evidence.of({"gb_type": "Data dependent operator", "gb_code": "GB0033", "message": "reason",
                       "doc": "https://x/gb0033.html"})
    assert brk.what == GRAPH_BREAK and brk.gb_code == "GB0033" and brk.headline() == "reason"
    assert Evidence.of({"graphs": [["k"]]}).what == MEASUREMENT


def test_a_report_from_before_a_key_existed_reads_with_defaults():
    ev = Finding("unknown", "x", {}, {"message": "boom"}).ev
    assert (ev.exception_type, ev.root, ev.backends, ev.traceback, ev.generated_frame) == (None, None, {}, "", None)
    assert ev.headline() == "boom"


def test_odd_report_data_reads_as_missing_never_as_characters():
    assert Evidence.of("not a dict").what == MEASUREMENT
    ev = Evidence.of({"exception_chain": "RuntimeError", "random_ops": "aten::rand", "worst": {"failed": "fp64"},
                      "custom_ops": "ns::op", "message": "x: 0", "root": {"type": "E", "message": "0"}})
    assert (ev.exception_chain, ev.random_ops, ev.worst.failed, ev.custom_ops) == ((), (), (), None)
    assert ev.headline() == "E: 0"  # "0" is in "x: 0" only by chance: the root is shown, not taken as quoted
