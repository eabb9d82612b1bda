"""The stage record (tracecheck/model/records.py): the one contract between the stages and the classifier."""
from pathlib import Path

import pytest

from tracecheck.classify import results
from tracecheck.model.records import FIELDS, StageRecord

REPO = Path(__file__).resolve().parents[1]


def test_a_key_no_field_names_is_refused():
    with pytest.raises(ValueError, match="ran_backward"):
        StageRecord.from_raw({"error": None, "ran_backward": True})


def test_a_record_reads_its_fields_and_defaults():
    rec = StageRecord.from_raw({"warnings": ["w"], "graph_count": 2, "opcheck": None})
    assert (rec.warnings, rec.graph_count, rec.opcheck, rec.breaks, rec.skip_reason) == (["w"], 2, {}, None, None)


def test_breaks_not_written_are_not_a_count_of_zero():
    # hand-written: a stage that does not count breaks (eager) reports no count; one that counted none, 0
    assert results.build_stage_result("eager", {"warnings": []}, 0.1).graph_break_count is None
    assert results.build_stage_result("explain", {"breaks": [], "graph_count": 1, "graph_break_count": 0}, 0.1).graph_break_count == 0


def test_every_field_says_what_it_holds():
    lines = (REPO / "tracecheck" / "model" / "records.py").read_text().splitlines()
    for name in FIELDS:  # the line above each field is its own "#:" comment
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"    {name}: "))
        assert lines[i - 1].strip().startswith("#:"), name


def test_a_frame_reads_what_any_report_holds():
    from tracecheck.model.records import Frame
    from tracecheck.model.report import Finding

    assert Frame.from_dict(None) is None and Frame.from_dict({}) is None and Frame.from_dict({"file": ""}) is None
    got = Frame.from_dict({"file": "m.py", "line": 7, "code": "y = ext.f(x)"})
    assert (got.file, got.line, got.function, got.code, got.location) == ("m.py", 7, None, "y = ext.f(x)", "m.py:7")
    assert Frame("m.py", 7, "forward", "y = ext.f(x)").to_dict() == \
        {"file": "m.py", "line": 7, "function": "forward", "code": "y = ext.f(x)"}
    f = Finding("unknown", "s", {}, {"user_frame": {"file": "m.py", "line": 7}})
    assert f.user_frame == Frame("m.py", 7) and Finding("unknown", "s").user_frame is None


def test_every_payload_field_is_in_the_report_schema():
    """docs/report-schema.md documents what a report holds: each stage payload's keys (model/payloads.py)."""
    import dataclasses

    from tracecheck.model import payloads

    types = payloads.Payload.__subclasses__()
    beside = {t for ts in payloads.BESIDE.values() for t in ts}
    assert set(types) == {*payloads.PAYLOADS.values(), *beside, payloads.StageNotes}  # each registered with its stage
    schema = (REPO / "docs" / "report-schema.md").read_text()
    missing = [f"{cls.__name__}.{f.name}" for cls in types for f in dataclasses.fields(cls) if f'"{f.name}"' not in schema]
    assert missing == []


def test_a_baseline_compares_payload_fields():
    """A stage's counts (StageSpec.counts, compared by a baseline) are fields of that stage's payload."""
    import dataclasses

    from tracecheck.model.payloads import PAYLOADS
    from tracecheck.stages import REGISTRY

    assert {s for s, spec in REGISTRY.items() if spec.counts} <= set(PAYLOADS)
    assert set(PAYLOADS) <= set(REGISTRY)
    for stage, spec in REGISTRY.items():
        names = {f.name for f in dataclasses.fields(PAYLOADS[stage])} if stage in PAYLOADS else set()
        assert set(spec.counts) <= names, stage


def test_a_payload_keeps_the_report_shape():
    """Written by the stage, read back by everyone else: the dict a report holds, keys as written by hand here."""
    from tracecheck.model.payloads import CompiledAutogradCounts, StageNotes, VmapRun

    assert VmapRun(batch=2, vmap="matches", grad="refused").to_extra() == \
        {"vmap": {"batch": 2, "vmap": "matches", "grad": "refused"}}
    assert StageNotes(numerics="n").to_extra() == {"numerics": "n"} and StageNotes.of({}) is None
    old = {"steps": 3, "recompiles": [{"reason": "a"}, {"reason": "b"}]}  # a report from before recompile_count
    assert CompiledAutogradCounts.of(old).recompile_count == 2
    assert CompiledAutogradCounts.of({"recompiles": 4}).recompile_count == 4  # an older report's int
    assert CompiledAutogradCounts.of({"numerics": "n"}) is None  # a note alone is no compiled-autograd payload
    assert "other_backend" not in CompiledAutogradCounts(steps=3).to_extra()
    old_counts = CompiledAutogradCounts.of({"steps": 3, "captures": 2})  # a report without hooks_captured
    assert old_counts.written("captures") and not old_counts.written("hooks_captured")
    assert CompiledAutogradCounts(steps=3).written("hooks_captured")


def test_a_record_crosses_to_the_parent_as_its_non_default_fields_and_reads_back_equal():
    import json

    rec = StageRecord.from_raw({"warnings": ["w"], "graph_count": 2, "opcheck": None, "same_as_eager": True})
    wire = json.loads(json.dumps(rec.to_wire()))  # what the protocol sends: JSON
    assert wire == {"warnings": ["w"], "graph_count": 2, "same_as_eager": True}
    assert StageRecord.from_wire(wire) == rec


def test_every_inner_record_crosses_to_the_parent_and_reads_back_equal():
    """Each record a stage makes (model/records.py, model/errors.py) is written to JSON by ``to_wire`` and read back
    by ``of``: the record the classifier reads is the one the stage made."""
    import json

    from tracecheck.model.errors import ChainLink, ErrorRecord, FakeImplRaise
    from tracecheck.model.evidence import Specialization, WorstTensor
    from tracecheck.model.records import (BreakRecord, DraftExportReport, DraftFailure, FallbackOp, Frame,
                                          GradcheckOutcome, GradientMismatch, MismatchRecord, OpaqueOp,
                                          RecompileRecord, SpecializedDimension)

    at = Frame("/m.py", 7, "forward", "y = f(x)")
    chain = (ChainLink("Unsupported", "boom", at, "raised"),
             ChainLink("ValueError", "inner", None, "cause", (Frame("/t.py", 3, "g"),)))
    error = ErrorRecord(
        "torch._dynamo.exc.Unsupported", "boom", chain,
        "Attempted to call function marked as skipped", "GB0007", "forward", at, "Traceback ...",
        FakeImplRaise("mylib.op.default", "ValueError", "bad", at), True, step=2, batch_size=5, fake_def=at,
        transform="vmap", functions=("Old",))
    guard = RecompileRecord("x.size()[0] == 4", 3, "dynamo", "forward", at, "the forward recompile of the same step")
    rec = StageRecord(
        error=error, breaks=[BreakRecord("reason", "gb", "GB1", "doc", "/m.py", 7, at, "", "ctx", "stack")],
        mismatches=[MismatchRecord(phase="backward", disagreeing=2, compared=4,
                                   worst=WorstTensor(what="grad x", dtype="torch.float32", shape=(2, 3), tol=1e-4,
                                                     failed=("rmse",)),
                                   disagreeing_tensors=("grad x", "grad w"), fp64_reference=True,
                                   reference_dtype="float64", custom_ops=("mylib::op",), transform="grad",
                                   batch_size=5)],
        opcheck={"mylib::op": {"test_schema": "SUCCESS", "test_faketensor": error}},
        gradcheck=[GradcheckOutcome("mylib.op.default", False, "central difference", ("x",),
                                    GradientMismatch(2.0, 1.0, 0.5, 0.01, 1e-6, 1e-3, input="x", output="output 0", ratio=2.0), None,
                                    "", "note", {"w": "a second random direction agrees"}, {"x": 0.5})],
        dynamic_specializations=[SpecializedDimension(guard, Specialization("s0", ("L['x'].size()[0]",), "4", "r", 3,
                                                                            at, at), (4, 5, 6, 7))],
        draft_export=DraftExportReport((DraftFailure("DATA_DEPENDENT_ERROR", "data-dependent", "mylib::op", "u0",
                                                     "r", "y = f(x)", at),)),
        transform_errors=[error], fallback_ops=[FallbackOp("mylib::op", True)],
        opaque_ops=[OpaqueOp("mylib::op", 2, (0, 1), ("buf1 = torch.ops.mylib.op.default(buf0)",), 3)],
        steady_state_recompiles=[guard])
    wire = json.loads(json.dumps(rec.to_wire()))
    assert StageRecord.from_wire(wire) == rec
    assert StageRecord.from_raw(wire) == rec  # a record written by hand reads as the wire does


def test_a_mismatch_record_is_made_with_its_phase_and_counts_and_only_an_old_one_reads_them_as_one():
    """A stage that forgets a count fails (model/records.MismatchRecord: keyword-only, required); a record read from
    the wire without its counts (an old report's) is one tensor, compared."""
    from tracecheck.model.records import MismatchRecord

    with pytest.raises(TypeError):
        MismatchRecord(phase="forward", compared=3)  # a count forgotten (mypy says so too)
    with pytest.raises(TypeError):
        MismatchRecord(disagreeing=1, compared=1)  # the phase forgotten
    old = MismatchRecord.of({"phase": "backward", "worst": {"what": "grad x"}})
    assert old is not None and (old.phase, old.disagreeing, old.compared, old.worst.what) == \
        ("backward", 1, 1, "grad x")
    assert MismatchRecord.of({"disagreeing": 2, "compared": 5}) == \
        MismatchRecord(disagreeing=2, compared=5, phase="forward")


def test_a_redefinition_crosses_to_the_parent_and_a_malformed_one_is_dropped():
    """An op defined twice (evidence/opwatch's event, model/records.Redefinition) read back typed by the load stage
    (classify/results.load_result): an entry without its op or a schema makes no finding, never a KeyError."""
    import json

    from tracecheck.collect.survey import ProbeEntry
    from tracecheck.model.records import Frame, Redefinition

    at, again = Frame("/m.py", 3, code="@custom_op('mylib::f', mutates_args=())"), Frame("/m.py", 9)
    r = Redefinition("mylib::f", "mylib::f(Tensor x) -> Tensor", "mylib::f(Tensor x, int n) -> Tensor", at, again)
    wire = json.loads(json.dumps(r.to_wire()))
    assert Redefinition.of(wire) == r
    assert Redefinition.of({"first_schema": "a", "second_schema": "b"}) is None
    assert Redefinition.of({"op": "mylib::f", "first_schema": "a"}) is None
    entry = ProbeEntry(name="p", registrations=[{"op": "mylib::g"}, wire])
    result = results.load_result(entry)
    assert result is not None and [f.context.op for f in result.findings] == ["mylib::f"]
    ev = result.findings[0].evidence
    assert (ev.first_frame, ev.user_frame) == (at, again)


def test_input_shapes_drop_a_shape_with_a_bad_dimension_whole():
    """``[2, "x", 3]`` is no shape: read as ``(2, 3)`` it would be a wrong one (model/payloads.InputShapes.of)."""
    from tracecheck.model.payloads import InputShapes

    got = InputShapes.of({"A": [[2, "x", 3], [4, 5], [], [1, -1]], "B": [[8, 5], "x"]})
    assert got == InputShapes(a=((4, 5), ()), b=((8, 5),))
    assert InputShapes.of({"A": [[4, 5]]}) == InputShapes(a=((4, 5),), b=None)
    assert InputShapes.of(InputShapes(a=((2, 3),)).to_json()) == InputShapes(a=((2, 3),))


def test_the_dynamic_payload_reads_back_as_its_stage_wrote_it():
    """The dynamic stage's payload (model/payloads.DynamicRun), written by hand in the report's shape and read back:
    recompiles and specializations typed (``PAYLOADS`` registers it for ``Payload.of``'s readers)."""
    import json

    from tracecheck.model.payloads import DynamicRun, SpecializationSite
    from tracecheck.model.records import DYNAMO, Frame, RecompileRecord

    extra = {"dynamic": {"batch_sizes": [4, 5, 6], "symbolic": False,
                         "recompiles": [{"reason": "x.size()[0] == 4", "step": 2,
                                         "user_frame": {"file": "/m.py", "line": 7, "function": "forward",
                                                        "code": "y = f(x)"}}],
                         "specializations": [{"symbol": "s0", "sources": ["L['x'].size()[0]"], "value": "4",
                                              "step": 2, "at": "m.py:7"}],
                         "every_dimension": None}}
    run = DynamicRun.of(extra)
    assert run == DynamicRun(batch_sizes=[4, 5, 6], symbolic=False,
                             recompiles=[RecompileRecord("x.size()[0] == 4", 2, DYNAMO,
                                                         user_frame=Frame("/m.py", 7, "forward", "y = f(x)"))],
                             specializations=[SpecializationSite("s0", ("L['x'].size()[0]",), "4", 2, "m.py:7")])
    assert json.loads(json.dumps(run.to_extra())) == extra
    assert DynamicRun.of(run.to_extra()) == run
