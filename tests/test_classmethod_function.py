"""An autograd.Function written with @classmethod forward/backward (entmax 1.3's, issue 52 item 8): Dynamo's GB7312
break and its internal error name the Function and the fix that works, @staticmethod. Plain torch is the oracle:
the classmethod Function splits the graph, the @staticmethod one compiles whole."""
import pytest
import torch
from plain_load import load

CLASSMETHOD = '''
import torch


class Base(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @classmethod
    def backward(cls, ctx, g):
        return g * 2


class Double(Base):
    pass


class DoubleStatic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def probe_cm():
    return (lambda x: Double.apply(x).sin().sum()), (torch.randn(4, requires_grad=True),)
'''


@pytest.mark.slow
def test_a_classmethod_function_is_told_to_become_a_staticmethod(tracecheck, write_probe):
    path = write_probe(CLASSMETHOD)
    m = load(path, "cm_plain")
    x = torch.randn(4, requires_grad=True)
    torch._dynamo.reset()
    assert torch._dynamo.explain(lambda x: m.Double.apply(x).sin().sum())(x).graph_count == 2
    torch._dynamo.reset()
    torch.compile(lambda x: m.DoubleStatic.apply(x).sin().sum(), fullgraph=True, backend="aot_eager")(x)  # the fix
    torch._dynamo.reset()
    res = tracecheck("run", str(path), "--stages", "eager,explain")
    (brk,) = res.probe("probe_cm")["stages"]["explain"]["breaks"]
    assert brk["gb_code"] == "GB7312" and brk["context"]["cause"] == "classmethod"
    assert brk["context"]["function"] == "Double"
    assert "@staticmethod" in res.stdout and "Follow the hints" not in res.stdout
