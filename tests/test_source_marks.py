"""The source view marks lines from the same evidence as the verdict (issue 52, item 6): an autograd.Function
whose body Dynamo captured is inside the graph, and so is a call (``x = self.block(x)``) all of whose torch calls
ran in the graph. Plain torch decides what was captured: one graph, no break, fullgraph=True passes."""
import re

import pytest
import torch
from plain_load import load

CAPTURED = '''import numpy as np
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = np.float32(2.0)
        return x * float(s)

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        x = self.block(x)
        y = Scale.apply(x)
        return y.sum()


def probe_fn():
    return M(), (torch.randn(4, 8, requires_grad=True),)
'''


def _marks(page: str) -> dict[int, str]:
    return {int(n): mark for n, mark in re.findall(r'<tr id="L(\d+)" class="(\w*)"', page)}


@pytest.mark.slow
def test_a_captured_function_body_and_a_captured_call_are_inside_the_graph(tracecheck, tmp_path):
    path = tmp_path / "fn_model.py"
    path.write_text(CAPTURED)
    model, (x,) = load(path, "fn_model_plain").probe_fn()
    torch._dynamo.reset()
    out = torch._dynamo.explain(model)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0)
    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend="aot_eager")(x)  # raises if anything broke the graph
    torch._dynamo.reset()

    res = tracecheck("run", str(path), "--stages", "explain", "--html", str(tmp_path / "html"))
    assert res.returncode == 0
    marks = _marks((tmp_path / "html" / "fn_model.py.html").read_text())
    assert marks[9] == "graph"    # return x * float(s): the Function's forward, captured as a subgraph
    assert marks[31] == "graph"   # x = self.block(x): every torch call it led to is in the graph
    assert marks[22] == marks[32] == marks[33] == "graph"
    assert "eager" not in marks.values()
    cov = res.probe("probe_fn")["stages"]["explain"]["extra"]["coverage"]
    assert cov["unique_graphs"] == out.graph_count
