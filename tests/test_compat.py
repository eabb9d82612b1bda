"""The torch-version shims in tracecheck/compat.py, on the installed torch."""
import torch

from tracecheck import compat


def test_gb_registry_maps_known_gb_types():
    # GB0007 is the pybind/C-extension skip in every registry since it was introduced (2.8+)
    assert compat.gb_code("Attempted to call function marked as skipped") == "GB0007"
    assert compat.gb_code("Data-dependent branching") == "GB0170"
    assert compat.gb_code("no such gb_type") is None
    assert compat.gb_doc_link("GB0007").endswith("/gb/gb0007.html")


def test_explain_shim_counts_graphs():
    def f(x):
        x = x.sin()
        torch._dynamo.graph_break()
        return x.cos()

    out = compat.explain(f, torch.randn(3))
    assert out.graph_count == 2  # documented: one graph before and one after the break


def test_trace_filenames_inverts_torchs_intern_table():
    """The structured trace names files by index; the index torch's own interning gives maps back to the name."""
    index = torch._logging.structured.intern_string(__file__)
    assert compat.trace_filenames()[index] == __file__
