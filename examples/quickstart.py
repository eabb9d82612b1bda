"""A minimal model file: one clean probe and one with a graph break.

    tracecheck run examples/quickstart.py
"""
import torch
from torch import nn

import tracecheck


class Block(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, d) float32
        return x + self.proj(torch.nn.functional.gelu(self.norm(x)))


@tracecheck.probe
def block():
    return tracecheck.Case(Block(), (torch.randn(2, 8, 16, requires_grad=True),))


def _noisy(x: torch.Tensor) -> torch.Tensor:
    print("mean:", x.mean().item())  # .item() and print() each break the graph
    return x.sin()


def probe_print_in_forward():
    # the plain form: no tracecheck import needed
    return _noisy, (torch.randn(4, requires_grad=True),)
