"""Shared set-up for the mHC tests: ``probes/`` on sys.path, the ``slow`` marker, input factories.

Tests marked ``slow`` build (first time only, ~30 s) or load the pybind11 extension.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

PROBES = Path(__file__).resolve().parents[2] / "probes"
if str(PROBES) not in sys.path:
    sys.path.insert(0, str(PROBES))



def make_pre_inputs(B=2, S=3, n=4, C=8, dtype=torch.float32, seed=0, lead3=False):
    """Random ``(x (B,S,n,C) dtype, phi (M,K) f32, alpha (3,) f32, bias (M,) f32)`` (spec §4.1).

    ``lead3`` gives x as ``(T=B*S, n, C)`` instead. Values are O(1) logits, as in a trained model.
    """
    g = torch.Generator().manual_seed(seed)
    m, k = n * n + 2 * n, n * C
    x = torch.randn(B, S, n, C, generator=g)
    if lead3:
        x = x.reshape(B * S, n, C)
    phi = torch.randn(m, k, generator=g) / k**0.5
    alpha = torch.rand(3, generator=g) + 0.25
    bias = 0.3 * torch.randn(m, generator=g)
    return x.to(dtype), phi, alpha, bias


@pytest.fixture
def pre_inputs():
    return make_pre_inputs
