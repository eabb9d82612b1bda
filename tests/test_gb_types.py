"""The gb_type table (tracecheck/gb_types.json): every gb_type of the installed torch's graph-break registry has a
kind, once; the classifier labels a bare graph break of that gb_type with it; docs/gb-types.md is the table."""
import json
import os
from collections import Counter

import torch

from tracecheck import classify, taxonomy

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _registry_gb_types() -> set[str]:
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    with open(path) as f:
        return {entry["Gb_type"] for entries in json.load(f).values() for entry in entries}


def test_every_gb_type_of_the_installed_registry_has_exactly_one_kind():
    listed = Counter(t for types in taxonomy.gb_table().values() for t in types)
    assert [t for t, n in listed.items() if n > 1] == []
    missing = sorted(_registry_gb_types() - set(listed))
    assert missing == [], f"gb_types of torch {torch.__version__} missing from tracecheck/gb_types.json: {missing}"
    assert set(taxonomy.gb_table()) <= taxonomy.ids()


def test_the_table_decides_a_bare_graph_break():
    # hand-written: the classes the table exists for, and a default
    for gb_type, kind in {"Tensor.tolist() with non-integer tensor": "data-dependent",
                          "Data-dependent branching": "data-dependent",
                          "NotImplementedError/UnsupportedFakeTensorException when running FX node": "missing-fake",
                          "TypeError when making fake tensor call": "fake-mismatch",
                          "Unsupported method call": "graph-break",
                          "Attempted to call function marked as skipped": "graph-break",
                          "a gb_type of a future torch": "graph-break"}.items():
        b = classify.classify_break({"reason": f"{gb_type}\n  Explanation: (none)\n"})
        assert (b.gb_type, b.kind) == (gb_type, kind)


def test_every_listed_gb_type_gets_its_kind():
    for kind, types in taxonomy.gb_table().items():
        for gb_type in types:
            assert classify.classify_break({"reason": f"{gb_type}\n  Explanation: (none)\n"}).kind == kind, gb_type


def test_the_docs_page_is_the_table():
    with open(os.path.join(REPO, "docs", "gb-types.md")) as f:
        assert f.read() == taxonomy.gb_types_markdown(), "regenerate: python -m tracecheck.taxonomy > docs/gb-types.md"
