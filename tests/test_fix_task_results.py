"""``tracecheck fix``'s task results cross from the task process as JSON (fix/task_results.py): what a task's function
makes, ``to_json`` writes and ``of`` reads back equal, with the keys the wire has always had. Oracles: records written
by hand, and the wire keys the parent and the tests read."""
import json

from tracecheck.fix.task_results import (Analysis, CallAnswer, CallsObserved, CustomOpDef, EagerComparison, EagerRun,
                                         FunctionFix, GradientCheck, MutatesArgs, OpShapes, ShapeCheck, TaskError)
from tracecheck.model.errors import ErrorRecord
from tracecheck.model.evidence import NumericMismatch, WorstTensor


def _wire(record):
    """A record as the parent gets it: its ``to_json`` through JSON (the task process writes it so)."""
    return json.loads(json.dumps(record.to_json()))


ERROR = TaskError("torch._dynamo.exc.Unsupported", "no", "backward")
FUNCTION = FunctionFix("Swish", "m", "forward and backward custom ops generated", ("out: a TODO",), ("out 2*x",),
                       MutatesArgs(("x",), ()), 3, ("x at rank 3",))
CUSTOM_OP = FunctionFix("ns::op", "custom op", "register_fake generated", (), ("out0 size(0) = x.size(0)",), runs=4)
OPS = OpShapes("ns::op", ("x.size(0) 4->7",), (("x at rank 3", "test_faketensor", "RuntimeError: no"),),
               ("x.size(1) 16->19",), ("x at rank 4",), (("x at rank 5", "RuntimeError: g.t()"),))


def test_every_task_result_reads_back_what_its_task_wrote():
    for record in (EagerRun(lines=(3, 7)), EagerRun(error=ERROR),
                   EagerComparison(mismatches=(NumericMismatch("forward", 2, 1, WorstTensor(what="out 0",
                                                                                           max_abs_diff=0.5, tol=1e-5),
                                                               ("out 0",)),)),
                   EagerComparison(error=ERROR), EagerComparison(),
                   Analysis((FUNCTION, CUSTOM_OP), "# fixed ops\n", "# patched\n", ("ns::swish_forward",)),
                   Analysis((FUNCTION,)),
                   ShapeCheck(ops=(OPS,), missing=("ns::gone",)), ShapeCheck(error=ERROR),
                   GradientCheck(2.0, 2.0000001, True), GradientCheck(skip="no gradient reached a leaf"),
                   GradientCheck(error=ERROR),
                   CallsObserved((CallAnswer(6, CustomOpDef("def op(x): ...\n", "split_op", "a note")),
                                  CallAnswer(9, CustomOpDef("def op2(x): ...\n", "op2", "", "breakylib.rope")),
                                  CallAnswer(12, error="an argument is None")))):
        assert type(record).of(_wire(record)) == record, record
    assert FunctionFix.of(_wire(FUNCTION)) == FUNCTION and OpShapes.of(_wire(OPS)) == OPS


def test_the_wire_keeps_its_keys():
    """What tests and older readers name: a gradient check's three numbers, a C call's definition and name."""
    assert _wire(GradientCheck(1.5, 1.5, True)) == {"analytic": 1.5, "numeric": 1.5, "ok": True}
    assert _wire(GradientCheck(skip="no float input")) == {"skip": "no float input"}
    assert _wire(CallsObserved((CallAnswer(6, CustomOpDef("code", "split_op", "note")),
                                CallAnswer(7, error="why")))) == {
        "sites": [{"line": 6, "definition": "code", "name": "split_op", "note": "note"}, {"line": 7, "error": "why"}]}
    assert set(_wire(OPS)) == {"op", "checked", "failed", "refused", "restricted", "own_refused"}
    assert _wire(Analysis((CUSTOM_OP,))) == {"functions": [_wire(CUSTOM_OP)]}  # nothing generated: no sources


def test_a_call_answer_without_a_line_is_dropped():
    got = CallsObserved.of({"sites": [{"error": "no line"}, {"line": True, "error": "a bool"}, {"line": 4}]})
    assert got == CallsObserved((CallAnswer(4),))
    assert CallsObserved.of(None) == CallsObserved() and CallsObserved.of({"sites": "x"}) == CallsObserved()
    # a definition without a name is no op
    assert CallAnswer.of({"line": 3, "definition": "code"}) == CallAnswer(3)


def test_a_task_error_is_read_off_the_stage_record():
    assert TaskError.of_record(ErrorRecord("RuntimeError", "boom", phase="forward")) == \
        TaskError("RuntimeError", "boom", "forward")
    assert TaskError.of_record(ErrorRecord("")) == TaskError("?", "", "")
    assert TaskError.of(ErrorRecord("RuntimeError", "boom", phase="backward").to_wire()) == \
        TaskError.of_record(ErrorRecord("RuntimeError", "boom", phase="backward"))
