"""The gb_type table (tracecheck/model/gb_types.json): every gb_type of the installed torch's graph-break registry has a
kind, once; the classifier labels a bare graph break of that gb_type with it; docs/gb-types.md is the table.

The classifier reads gb_types.json, so the kinds it is checked against here never come from that file: they are
written by hand below (WELL_KNOWN: the gb_types that are not plain graph breaks, and a few that are, each with its
reason), the universe of gb_types is torch's own graph-break registry shipped in the installed torch, and real
graph breaks come from plain torch.compile in the test."""
import json
import os
from collections import Counter

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from tracecheck.model import taxonomy
from tracecheck.classify import detect

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _registry() -> dict[str, list[dict]]:
    """torch's own graph-break registry, as shipped in the installed torch: GB code -> its gb_type wordings."""
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    with open(path) as f:
        return json.load(f)


def _registry_gb_types() -> set[str]:
    return {entry["Gb_type"] for entries in _registry().values() for entry in entries}


# Hand-written, from torch's registry entries (their GB code, Explanation and Hints), never from gb_types.json:
# gb_type -> (its GB code in torch's registry, the kind a bare graph break of it gets, why). Every gb_type that is
# not a plain graph-break is here; every other gb_type of the registry is a graph-break.
WELL_KNOWN = {
    # data-dependent: the code needs a tensor's value (a branch, a Python number) or a shape that depends on values
    "Data-dependent branching": ("GB0170", "data-dependent", "an `if` on a tensor's value (`if x.sum() > 0:`)"),
    "Data-dependent branching with non-constant __bool__": (
        "GB0035", "data-dependent", "a branch on an object whose truthiness is not constant"),
    "Data dependent operator": ("GB0033", "data-dependent", "an op's non-tensor output depends on tensor data"),
    "Data-dependent assertion failed (cannot compile partial graph)": (
        "GB0034", "data-dependent", "an assert on tensor data"),
    "Dynamic shape operator": ("GB0036", "data-dependent", "the output shape depends on the values (nonzero)"),
    "Dynamic shape operator (no meta kernel)": (
        "GB0037", "data-dependent", "the same, for an op without a dynamic-shape meta kernel"),
    "Unsupported Tensor.item() call with capture_scalar_outputs=False": (
        "GB0124", "data-dependent", ".item() reads a tensor's value into Python"),
    "Tensor.tolist() with non-integer tensor": ("GB0109", "data-dependent", ".tolist() reads values into Python"),
    "Attempted to use `torch.nn.functional.one_hot` with data-dependent output shape": (
        "GB0246", "data-dependent", "one_hot without num_classes: the shape is the input's max value"),
    # missing-fake: Dynamo cannot run the op on FakeTensors because it has no fake (meta) implementation
    "Operator does not support running with fake tensors": ("GB0090", "missing-fake", "no fake/meta impl for the op"),
    "NotImplementedError/UnsupportedFakeTensorException when running FX node": (
        "GB0087", "missing-fake", "the op raised 'no fake impl' when run on FakeTensors"),
    "Custom op missing fake impl during tracing": (
        "GB3069", "missing-fake", "a custom op called before its register_fake (in torch 2.14's registry)"),
    "leaf_function without fake_fn": ("GB3840", "missing-fake", "a leaf_function declared without a fake_fn"),
    # fake-mismatch: a fake exists and disagrees with the real op
    "TypeError when making fake tensor call": (
        "GB0112", "fake-mismatch", "the fake rejects arguments the real op accepts"),
    # graph-break: Dynamo's own limits or the user's request, no registration of the user's at fault
    "RuntimeError when making fake tensor call": (
        "GB4315", "graph-break", "bare, it names no custom op whose fake raised (test_classify reads the op)"),
    "Call to `torch._dynamo.graph_break()`": ("GB0025", "graph-break", "the user asked for the break"),
    "Failed to trace builtin operator": ("GB0059", "graph-break", "a builtin Dynamo cannot trace (print)"),
    "Attempted to call function marked as skipped": ("GB0007", "graph-break", "a function Dynamo skips"),
    "Unsupported method call": ("GB0156", "graph-break", "a method Dynamo has no rule for"),
}
#: gb_types of WELL_KNOWN that a registry older than torch 2.14 does not have yet
NEWER_THAN_2_13 = {"Custom op missing fake impl during tracing"}


def _bare_break(gb_type: str):
    return detect.classify_break({"reason": f"{gb_type}\n  Explanation: (none)\n"})


def test_every_gb_type_of_the_installed_registry_has_exactly_one_kind():
    listed = Counter(t for types in taxonomy.gb_table().values() for t in types)
    assert [t for t, n in listed.items() if n > 1] == []
    missing = sorted(_registry_gb_types() - set(listed))
    assert missing == [], f"gb_types of torch {torch.__version__} missing from tracecheck/model/gb_types.json: {missing}"
    assert set(taxonomy.gb_table()) <= taxonomy.ids()


def test_the_table_decides_a_bare_graph_break():
    # hand-written (WELL_KNOWN): the classes the table exists for, and a default
    cases = {**WELL_KNOWN, "a gb_type of a future torch": (None, "graph-break", "the default")}
    for gb_type, (_, kind, why) in cases.items():
        b = _bare_break(gb_type)
        assert (b.gb_type, b.kind) == (gb_type, kind), why


def test_every_gb_type_of_torchs_registry_gets_the_kind_written_here():
    """Oracle: torch's own registry (the gb_types and their GB codes) and WELL_KNOWN, written by hand; every gb_type of
    the registry that WELL_KNOWN does not name is a plain graph-break."""
    registry = _registry()
    codes = {entry["Gb_type"]: code for code, entries in registry.items() for entry in entries}
    # WELL_KNOWN's gb_types are torch's, under the GB codes written by hand (so the hand-written list tracks torch)
    present = {t: code for t, (code, _, _) in WELL_KNOWN.items() if t in codes}
    assert set(WELL_KNOWN) - set(present) <= NEWER_THAN_2_13
    assert {t: codes[t] for t in present} == present
    wrong = {}
    for gb_type in sorted(codes):
        expected = WELL_KNOWN[gb_type][1] if gb_type in WELL_KNOWN else "graph-break"
        got = _bare_break(gb_type).kind
        if got != expected:
            wrong[f"{codes[gb_type]} {gb_type}"] = (got, expected)
    assert wrong == {}, f"(classifier's kind, expected kind) of torch {torch.__version__}'s gb_types: {wrong}"


def _graph_break_reasons(fn, *args) -> list[str]:
    """The graph-break reasons plain torch.compile records for one call (Dynamo's own counters, no tracecheck)."""
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False):
        torch.compile(fn, backend="eager")(*args)
    reasons = list(counters["graph_break"]) + list(counters["unimplemented"])
    torch._dynamo.reset()
    return list(dict.fromkeys(reasons))


def _branch(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def _tolist(x):
    return torch.tensor(x.tolist()) + x


def _item(x):
    return x * x.item()


def _nonzero(x):
    return torch.nonzero(x) + 1


def _user_break(x):
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2


def _print(x):
    print("tracing")
    return x + 1


def test_real_graph_breaks_of_plain_torch_compile_get_their_kind():
    """Oracle: the breaks torch.compile itself records for small functions, and the kind each one is, by hand."""
    cases = [  # (function, input, the gb_type torch words it as, kind, why)
        (_branch, torch.ones(3), "Data-dependent branching", "data-dependent", "an `if` on a tensor's value"),
        (_tolist, torch.ones(3), "Tensor.tolist() with non-integer tensor", "data-dependent", "values into Python"),
        (_item, torch.ones(()), "Unsupported Tensor.item() call with capture_scalar_outputs=False", "data-dependent",
         "a value into Python"),
        (_nonzero, torch.ones(3), "Dynamic shape operator", "data-dependent", "shape from the values"),
        (_user_break, torch.ones(3), "Call to `torch._dynamo.graph_break()`", "graph-break", "asked for by the user"),
        (_print, torch.ones(3), "Failed to trace builtin operator", "graph-break", "print, a builtin Dynamo skips"),
    ]
    for fn, x, gb_type, kind, why in cases:
        reasons = _graph_break_reasons(fn, x)
        assert len(reasons) == 1, (fn.__name__, reasons)
        b = detect.classify_break({"reason": reasons[0]})
        assert (b.gb_type, b.kind) == (gb_type, kind), (fn.__name__, why, reasons[0][:300])


def _docs_sections() -> dict[str, list[str]]:
    """docs/gb-types.md read as a reader reads it: the gb_types listed under each kind's heading."""
    sections: dict[str, list[str]] = {}
    kind = None
    with open(os.path.join(REPO, "docs", "gb-types.md")) as f:
        for line in f:
            if line.startswith("## `"):
                kind = line.split("`")[1]
                sections[kind] = []
            elif kind and line.startswith("- `"):
                code = line.strip()[2:]
                ticks = len(code) - len(code.lstrip("`"))  # ``a `b` `` for a gb_type with backticks
                sections[kind].append(code[ticks + 1:-ticks - 1] if ticks > 1 else code[1:-1])
    return sections


def test_the_docs_page_lists_gb_types_under_the_kind_they_get():
    sections = _docs_sections()
    # hand-written (WELL_KNOWN): where a reader must find these
    for gb_type, (_, kind, why) in WELL_KNOWN.items():
        assert gb_type in sections[kind], (gb_type, kind, why)
    # every gb_type of the installed torch is on the page once, and the classifier agrees with the page
    listed = Counter(t for types in sections.values() for t in types)
    assert [t for t, n in listed.items() if n > 1] == []
    assert _registry_gb_types() - set(listed) == set(), "regenerate: python -m tracecheck.model.taxonomy > docs/gb-types.md"
    # the page is the table (regenerated with it); what the classifier gives each gb_type is checked against an
    # oracle of its own (test_every_gb_type_of_torchs_registry_gets_the_kind_written_here), not against this table
    assert sections == taxonomy.gb_table(), "regenerate: python -m tracecheck.model.taxonomy > docs/gb-types.md"
