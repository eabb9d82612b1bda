"""A cheap and an expensive graph break in one forward (benchmarks/bench_break_cost.py): a ``print`` once per call,
and an ``.item()`` inside a loop, which makes Dynamo give up on the loop's frame so the loop runs in eager."""
import torch

import tracecheck


class PrintAndItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x):
        h = self.lin(x)
        print("rows", h.shape[0])  # the cheap break
        h = torch.relu(h)
        for _ in range(8):
            if h.sum().item() > 0:  # the expensive break
                h = h * 0.9
            h = h + 1
        return h


@tracecheck.probe
def probe_print_and_item():
    return tracecheck.Case(PrintAndItem(), (torch.randn(32, 64),))
