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


def test_function_apply_is_intercepted_and_put_back():
    """2.13's apply is a Python classmethod, 2.14's a C classmethod_descriptor: both go through the hook, and the
    original object is restored."""
    import inspect

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    before = inspect.getattr_static(torch.autograd.Function, "apply")
    seen = []

    def hook(cls, apply, *args):
        seen.append(cls)
        return apply(*args)

    with compat.intercept_function_apply(hook):
        out = Double.apply(torch.ones(2, requires_grad=True))
    out.sum().backward()
    assert seen == [Double] and out.tolist() == [2.0, 2.0]
    assert inspect.getattr_static(torch.autograd.Function, "apply") is before
    assert Double.apply(torch.ones(1)).item() == 2.0 and seen == [Double]  # no hook after the block
