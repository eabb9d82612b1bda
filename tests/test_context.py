"""A finding's context (model/context.py): typed where classify/ makes it, a JSON object only in the report."""
import dataclasses
import json

from tracecheck.model import taxonomy
from tracecheck.model.context import Context
from tracecheck.model.frame import Frame
from tracecheck.model.report import Finding, GraphBreak

_VALUES = {"str | None": lambda name: f"the {name}", "bool": lambda name: True, "int | None": lambda name: 3,
           "tuple[str, ...]": lambda name: ("a", "b"), "Frame | None": lambda name: Frame("m.py", 4, "f", "x()")}


def _every_field_set() -> Context:
    return Context(**{f.name: _VALUES[str(f.type)](f.name) for f in dataclasses.fields(Context) if f.name != "other"})


def test_every_field_round_trips_through_the_reports_json():
    cx = _every_field_set()
    doc = json.loads(json.dumps(cx.to_json()))
    assert set(doc) == {f.name for f in dataclasses.fields(Context)} - {"other"}
    assert Context.of(doc) == cx and Context.of(doc).to_json() == doc and Context.of(doc).other == {}


def test_an_unset_field_is_no_key_and_text_is_kept_as_made():
    assert Context().to_json() == {}
    assert Context(op="ns::op", by="", calls=0, warning=False).to_json() == {"op": "ns::op", "by": "", "calls": 0}


def test_unknown_keys_and_values_of_another_shape_are_kept_as_read():
    doc = {"op": "ns::op", "from_the_future": {"x": [1]}, "kernels": "?", "warning": "false", "cause": None}
    cx = Context.of(doc)
    assert (cx.op, cx.kernels, cx.warning, cx.cause) == ("ns::op", None, False, None)
    assert cx.other == {"from_the_future": {"x": [1]}, "kernels": "?", "warning": "false"}
    assert cx.to_json() == {"op": "ns::op", "from_the_future": {"x": [1]}, "kernels": "?", "warning": "false"}
    assert Context.of("not an object") == Context() and Context.of(None) == Context()


def test_merged_puts_the_set_fields_of_one_over_another():
    a, b = Context(op="a::x", cause="raises", what="w"), Context(op="b::y", warning=True, by="")
    assert a.merged(b) == Context(op="b::y", cause="raises", what="w", warning=True, by="")


def test_a_findings_and_a_breaks_context_given_as_a_dict_is_read_once():
    f = Finding("missing-fake", "s", {"op": "ns::op", "cause": "stub"})
    assert isinstance(f.context, Context) and f.context.cause == "stub"
    assert Finding.from_dict(f.to_dict()).context == f.context
    b = GraphBreak("graph-break", "t", None, "m.py", 3, context={"code": "x.item()",
                                                                 "caller": {"file": "u.py", "line": 9}})
    assert b.context.caller == Frame("u.py", 9) and GraphBreak.from_dict(b.to_dict()).context == b.context
    assert b.to_dict()["context"] == {"code": "x.item()",
                                      "caller": {"file": "u.py", "line": 9, "function": None, "code": None}}


def test_a_kind_this_version_does_not_know_keeps_its_id_in_the_context():
    f = Finding.from_dict({"kind": "from-the-future", "summary": "s", "context": {"op": "ns::op"}})
    assert (f.kind, f.context.reported_kind, f.context.op) == ("unknown", "from-the-future", "ns::op")


def test_every_named_group_of_kinds_json_is_a_field_or_the_classifiers_own():
    """A pattern's named groups become the context (classify/detect._matches): a group with no field would only be
    kept in ``other``, where no renderer reads it."""
    from tracecheck.classify.detect import _SCRATCH_GROUPS

    known = {f.name for f in dataclasses.fields(Context)} | set(_SCRATCH_GROUPS)
    groups = {g for k in taxonomy.kinds().values() if k.detect for p in k.detect.patterns for g in p.regex.groupindex}
    assert groups and groups - known == set()


def test_the_templates_fill_from_the_contexts_json():
    """kinds.json's summaries and fixes: a list joined by ", ", a field not set reads "?"."""
    cx = Context(custom_ops=("a::x", "b::y"), cause="custom-op", stage="inductor")
    fix = taxonomy.fix_text(Finding("numeric-mismatch", "s", cx))
    assert "a::x, b::y" in fix
    assert taxonomy.summary("missing-device-kernel", Context(op="a::x")).count("?") >= 1  # {key} not set


def test_its_repr_shows_the_fields_set():
    assert repr(Context()) == "Context()"
    assert repr(Context(op="a::x", calls=0, other={"new": 1})) == "Context(op='a::x', calls=0, other={'new': 1})"


def test_it_reads_its_values_with_reportios_readers_as_the_report_holds_them():
    """A string as written (a number is no text here), any whole number, a list only when all strings, a flag only a
    JSON true or false: anything else is kept in ``other``."""
    cx = Context.of({"op": "", "by": 3, "calls": -1, "transforms": ["vmap", 1], "custom_ops": [], "warning": 1})
    assert (cx.op, cx.by, cx.calls, cx.transforms, cx.custom_ops, cx.warning) == ("", None, -1, (), (), False)
    assert cx.other == {"by": 3, "transforms": ["vmap", 1], "warning": 1}
