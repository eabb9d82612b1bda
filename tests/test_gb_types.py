"""The gb_type table (tracecheck/model/gb_types.json): every gb_type of the installed torch's graph-break registry has a
kind, once; the classifier labels a bare graph break of that gb_type with it; docs/gb-types.md is the table."""
import json
import os
from collections import Counter

import torch

from tracecheck.model import taxonomy
from tracecheck.classify import detect

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _registry_gb_types() -> set[str]:
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    with open(path) as f:
        return {entry["Gb_type"] for entries in json.load(f).values() for entry in entries}


def test_every_gb_type_of_the_installed_registry_has_exactly_one_kind():
    listed = Counter(t for types in taxonomy.gb_table().values() for t in types)
    assert [t for t, n in listed.items() if n > 1] == []
    missing = sorted(_registry_gb_types() - set(listed))
    assert missing == [], f"gb_types of torch {torch.__version__} missing from tracecheck/model/gb_types.json: {missing}"
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
        b = detect.classify_break({"reason": f"{gb_type}\n  Explanation: (none)\n"})
        assert (b.gb_type, b.kind) == (gb_type, kind)


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
    # hand-written: where a reader must find these
    for gb_type, kind in {"Data-dependent branching": "data-dependent",
                          "Tensor.tolist() with non-integer tensor": "data-dependent",
                          "TypeError when making fake tensor call": "fake-mismatch",
                          "NotImplementedError/UnsupportedFakeTensorException when running FX node": "missing-fake",
                          "Attempted to call function marked as skipped": "graph-break"}.items():
        assert gb_type in sections[kind], (gb_type, kind)
    # every gb_type of the installed torch is on the page once, and the classifier agrees with the page
    listed = Counter(t for types in sections.values() for t in types)
    assert [t for t, n in listed.items() if n > 1] == []
    assert _registry_gb_types() - set(listed) == set(), "regenerate: python -m tracecheck.model.taxonomy > docs/gb-types.md"
    # the page is the table (regenerated with it), and the classifier gives every gb_type on it the page's kind
    assert sections == taxonomy.gb_table(), "regenerate: python -m tracecheck.model.taxonomy > docs/gb-types.md"
    for kind, types in sections.items():
        for gb_type in types:
            assert detect.classify_break({"reason": f"{gb_type}\n  Explanation: (none)\n"}).kind == kind, gb_type
