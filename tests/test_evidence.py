"""model/evidence.py: a finding's evidence as a tagged union, typed where classify/ makes it, written with its tag and
read back by ``read`` (a report from before the tag by the keys its kind writes). Oracles: evidence dicts written by
hand in the report schema's shape (docs/report-schema.md), expected values by hand."""
import json

from tracecheck.model import evidence
from tracecheck.model.evidence import (BreakEvidence, ExceptionEvidence, FallbackEvidence, GradientEvidence,
                                       MessageEvidence, NumericEvidence, OpaqueEvidence, ProcessEvidence,
                                       RecompileEvidence, RegistrationEvidence, InnerException, Specialization,
                                       SpecializationEvidence, DraftExportEvidence, WorstTensor)
from tracecheck.model.records import Frame
from tracecheck.model.report import Finding


def test_an_exceptions_evidence():
    ev = evidence.read({
        "exception_type": "torch._dynamo.exc.BackendCompilerFailed",
        "exception_chain": ["torch._dynamo.exc.BackendCompilerFailed", "RuntimeError"],
        "message": "backend='aot_eager' raised:\nRuntimeError: Mismatch in shape: a\n\nmore",
        "root": {"type": "RuntimeError", "message": "Mismatch in shape: a\n\nmore"},
        "traceback": "Traceback (most recent call last): ...", "phase": "backward",
        "user_frame": {"file": "/m/model.py", "line": 7, "code": "y = f(x)"}, "gb_type": None})
    assert isinstance(ev, ExceptionEvidence) and ev.what == "exception" and ev.phase == "backward"
    assert ev.exception_chain == ("torch._dynamo.exc.BackendCompilerFailed", "RuntimeError")
    assert ev.user_frame == Frame("/m/model.py", 7, None, "y = f(x)")
    assert ev.headline() == "RuntimeError: Mismatch in shape: a"  # quoted by the outer line: the outer one
    assert ev.detail() == "Traceback (most recent call last): ..."


def test_the_root_cause_is_shown_when_the_outer_line_does_not_quote_it():
    ev = evidence.read({"exception_type": "WrapperError", "message": "Failed running call_function foo",
                        "root": {"type": "KeyError", "message": "'the real reason'"}})
    assert ev.headline() == "KeyError: 'the real reason'"
    assert ev.detail() == "Failed running call_function foo"  # no traceback: the message


def test_each_kind_of_an_untagged_report_is_read_by_its_own_keys():
    dead = evidence.read({"cause": "killed by SIGSEGV", "stderr_tail": "Fatal Python error: Segmentation fault"})
    assert isinstance(dead, ProcessEvidence) and dead.detail() == "Fatal Python error: Segmentation fault"
    num = evidence.read({"phase": "backward", "compared": 45, "disagreeing": 3, "fp64_reference": False,
                         "worst": {"what": "grad w", "dtype": "torch.bfloat16", "shape": [4, 8], "tol": 0.01,
                                   "failed": ["fp64"]}, "custom_ops": []})
    assert isinstance(num, NumericEvidence) and (num.compared, num.disagreeing) == (45, 3)
    assert num.worst.shape == (4, 8) and num.worst.failed == ("fp64",) and num.worst.tol == 0.01
    assert num.custom_ops == () and evidence.read({"compared": 1}).custom_ops is None  # none called vs not recorded
    brk = evidence.read({"gb_type": "Data dependent operator", "gb_code": "GB0033", "message": "reason",
                         "doc": "https://x/gb0033.html"})
    assert isinstance(brk, BreakEvidence) and brk.gb_code == "GB0033" and brk.headline() == "reason"
    assert isinstance(evidence.read({"output_code": ["extern_kernels.x"], "graphs": [["k"]]}), OpaqueEvidence)
    assert isinstance(evidence.read({"first_schema": "a", "second_schema": "b"}), RegistrationEvidence)
    assert isinstance(evidence.read({"method": "m", "analytical": 2.0, "numerical": 1.0}), GradientEvidence)
    assert isinstance(evidence.read({"dispatch_keys": "no FuncTorchBatched kernel"}), FallbackEvidence)
    assert isinstance(evidence.read({"reason": "r", "guard_user_frame": None}), SpecializationEvidence)
    assert isinstance(evidence.read({"reason": "r", "steps": [3, 4]}), RecompileEvidence)
    assert isinstance(evidence.read({"message": "a warning"}), MessageEvidence)


def test_the_tag_is_written_and_decides_the_kind_read_back():
    made = [
        ExceptionEvidence(exception_type="RuntimeError", exception_chain=("RuntimeError",), message="boom",
                          root=InnerException("KeyError", "k"), opcheck_test="test_faketensor", batch_size=5,
                          backends={"aot_eager": "fails", "inductor": "passes"},
                          user_frame=Frame("/m.py", 3, "f", "y = g(x)")),
        BreakEvidence(gb_type="Unsupported", gb_code="GB0001", doc="https://x", message="r",
                      generated_frame=Frame("<string>", 9, None, "a = b")),
        NumericEvidence(phase="forward", compared=2, disagreeing=1, fp64_reference=True, custom_ops=(),
                        worst=WorstTensor(what="out", shape=(2, 3), max_abs_diff=0.5, failed=("rmse",))),
        GradientEvidence(method="central difference", input="x", numerical=1.0, analytical=2.0, ratio=2.0),
        ProcessEvidence(cause="killed", stderr_tail="tail", phase="setup"),
        RecompileEvidence(reason="r", steps=(3, 4), reasons=("a", "b"), user_frame_from="guard"),
        RegistrationEvidence(first_schema="ns::f(Tensor x) -> Tensor", second_schema="ns::f(Tensor(a!) x) -> ()",
                             first_frame=Frame("/a.py", 1, None, None), user_frame=Frame("/b.py", 2, None, None)),
        SpecializationEvidence(reason="L['x'].size()[0] == 4", guard_user_frame=Frame("/m.py", 5, "f", "y"), step=3,
                               specialization=Specialization("s0", ("L['x'].size()[0]",), "4", "r", 3,
                                                             Frame("/m.py", 6, None, "int(x.shape[0])"), None)),
        FallbackEvidence(dispatch_keys="no FuncTorchBatched kernel", confirmed=True, confirmation="c"),
        OpaqueEvidence(output_code=("extern_kernels.x(buf0)",), graphs=(0, 1), generated_kernels=3),
        DraftExportEvidence(draft_export_type="data_dependent_error", reason="u0 > 0", exception_type="E",
                            message="m", user_frame=Frame("/m.py", 9, None, "if x.sum() > 0:")),
        MessageEvidence(message="Warning: an autograd kernel was not registered"),
        NumericEvidence(phase="backward", compared=3, disagreeing=1, batch_size=7, custom_ops=None,
                        random_ops=("aten::bernoulli_",), transform="vmap",
                        worst=WorstTensor(what="g", fp64_used=True, rule="rmse", rmse_jittered_vs_fp64=0.1)),
    ]
    assert {ev.what for ev in made} == set(evidence.KINDS)  # every kind, each with fields beyond the defaults
    for ev in made:
        doc = json.loads(json.dumps(ev.to_json()))  # the report's JSON
        assert doc["what"] == ev.what
        assert evidence.read(doc) == ev, ev.what
    # the tag wins over the keys: a message-only evidence stays one whatever else a later version adds
    assert isinstance(evidence.read({"what": "message", "message": "m", "gb_type": "x"}), MessageEvidence)


def test_an_exception_writes_the_keys_every_report_had():
    doc = ExceptionEvidence(message="m").to_json()
    assert set(doc) == {"what", "exception_type", "exception_chain", "gb_type", "gb_code", "user_frame", "phase",
                        "message", "traceback"}


def test_a_report_from_before_a_key_existed_reads_with_defaults():
    ev = Finding("unknown", "x", {}, {"message": "boom", "exception_type": "E"}).evidence
    assert isinstance(ev, ExceptionEvidence)
    assert (ev.root, ev.backends, ev.traceback, ev.torch_frame) == (None, {}, "", None)
    assert ev.headline() == "boom"


def test_odd_report_data_reads_as_missing_never_as_characters():
    assert isinstance(evidence.read("not a dict"), MessageEvidence)
    ev = evidence.read({"exception_type": "E", "exception_chain": "RuntimeError", "message": "x: 0",
                        "root": {"type": "E", "message": "0"}, "backends": "aot_eager"})
    assert isinstance(ev, ExceptionEvidence) and (ev.exception_chain, ev.backends) == ((), {})
    assert ev.headline() == "E: 0"  # "0" is in "x: 0" only by chance: the root is shown, not taken as quoted
    num = evidence.read({"worst": {"failed": "fp64"}, "random_ops": "aten::rand", "custom_ops": "ns::op"})
    assert isinstance(num, NumericEvidence) and (num.random_ops, num.worst.failed, num.custom_ops) == ((), (), None)


def test_a_numeric_finding_carries_the_stages_comparison_as_it_is():
    """NumericEvidence and MismatchRecord are one NumericComparison: the evidence is built from the record's fields
    (``carrying``), ``worst`` the same object, never a dict's copy; the report's JSON reads back to it."""
    from tracecheck.model.evidence import NumericComparison, numeric_comparison
    from tracecheck.model.records import MismatchRecord

    worst = WorstTensor(what="out 0", max_abs_diff=0.5)
    raw = MismatchRecord(phase="backward", disagreeing=2, compared=3, worst=worst, random_ops=("aten::rand",),
                         custom_ops=None, batch_size=7)
    ev = NumericEvidence.carrying(raw, phase="backward")
    assert ev.worst is worst and (ev.disagreeing, ev.compared, ev.random_ops, ev.batch_size, ev.phase) == \
        (2, 3, ("aten::rand",), 7, "backward")
    assert evidence.read(json.loads(json.dumps(ev.to_json()))) == ev
    read = numeric_comparison({"compared": 4, "worst": {"what": "out 1"}, "custom_ops": "x", "batch_size": "8"})
    assert type(read) is NumericComparison and (read.compared, read.disagreeing, read.worst.what, read.custom_ops) == \
        (4, None, "out 1", None)
