"""The DeepSeek-V4-style model (probes/mhc/model.py) on each registration, and a few training steps."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from mhc.model import REGISTRATIONS, MhcStack, train

pytestmark = pytest.mark.slow


def _model(registration: str) -> MhcStack:
    torch.manual_seed(0)
    return MhcStack(dim=16, hidden=32, n=4, layers=2, num_iters=20, registration=registration)


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, 8, 16, generator=g), torch.randn(2, 8, 16, generator=g)


def test_unknown_registration_is_rejected():
    with pytest.raises(ValueError, match="registration must be one of"):
        MhcStack(registration="nope")


@pytest.mark.parametrize("registration", sorted(REGISTRATIONS))
def test_every_registration_computes_the_same_forward(registration):
    h, _ = _data()
    with torch.no_grad():
        expect = _model("fixed")(h)
    out = _model(registration)(h.clone().requires_grad_())
    assert out.shape == (2, 8, 16)
    torch.testing.assert_close(out.detach(), expect, rtol=0, atol=0)


def test_fixed_model_trains_eagerly():
    h, target = _data()
    losses = train(_model("fixed"), h, target, steps=5, lr=1e-2)
    assert losses[-1] < losses[0]


def test_fixed_model_trains_the_same_under_inductor():
    torch._dynamo.reset()
    h, target = _data()
    eager = train(_model("fixed"), h, target, steps=3)
    compiled = train(_model("fixed"), h, target, steps=3, backend="inductor")
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-4, atol=1e-6)


def test_missing_autograd_model_cannot_train():
    h, target = _data()
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        train(_model("missing_autograd"), h, target, steps=1)
