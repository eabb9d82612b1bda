"""A derivative along one random direction, numerically (a central difference) and by autograd, and whether their
disagreement holds up (``confirmed``): the check the gradcheck stage makes of each call it cannot, or need not, hand to
``torch.autograd.gradcheck`` (stages/_gradients.py says when), and of the probe's own gradient end to end."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..model.records import Derivative, GradientMismatch

#: relative tolerance of the float32 directional check: the central difference at step eps^(1/3) is accurate
#: to about eps^(2/3) ~ 2.4e-5 relative for a smooth function of unit scale; 1e-2 leaves 400x for curvature and
#: rounding accumulated over large sums, and still refuses a backward off by any constant factor (>= 1.01)
DIRECTIONAL_RTOL = {torch.float32: 1e-2, torch.float64: 1e-3}


@dataclass(frozen=True)
class Directional(Derivative):
    """A derivative along one direction, numerically (central difference) and by autograd (``directional``): ``ok``
    when they agree within ``tolerance``; ``inconclusive`` says why a disagreement proves nothing (``confirmed``)."""

    inconclusive: str = ""

    @classmethod
    def measured(cls, numerical: float, analytical: float, atol: float, rtol: float, step: float) -> "Directional":
        """Both values, held to ``atol + rtol * max(|numerical|, |analytical|)``."""
        largest = max(abs(numerical), abs(analytical))
        return cls(numerical, analytical, abs(numerical - analytical) / max(largest, 1e-30), atol + rtol * largest,
                   atol, step)

    @property
    def ok(self) -> bool:
        """They agree within the tolerance."""
        err = abs(self.numerical - self.analytical)
        return math.isfinite(err) and err <= self.tolerance

    def mismatch(self, input: str, output: str | None = None, ratio: float | None = None) -> GradientMismatch:
        return GradientMismatch.along(self, input, output, ratio)


def confirmed(f: Callable[[torch.Tensor], list[torch.Tensor]], x: torch.Tensor, dtype: torch.dtype,
              seed: int) -> Directional:
    """``directional``, with a mismatch kept only when it holds: the numerical derivative is finite and does not
    change at half the step, the forward is not flat along the direction (a straight-through estimator's backward
    is a surrogate by design), and a second random direction disagrees too. Else ``inconclusive`` says why."""
    m = directional(f, x, dtype, seed)
    if m.ok:
        return m
    if not math.isfinite(m.numerical):
        return replace(m, inconclusive="the numerical derivative is not finite (the step leaves the forward's domain)")
    half = directional(f, x, dtype, seed, scale=0.5)
    if abs(half.numerical - m.numerical) > m.tolerance:
        return replace(m, inconclusive="the numerical derivative changes with the step: the forward is not smooth "
                                       "along the direction (a kink or a jump)")
    if abs(m.numerical) <= m.atol and abs(m.analytical) > m.tolerance:
        return replace(m, inconclusive="the forward is flat along the direction while the backward is not: a "
                                       "surrogate gradient by design (straight-through)")
    if directional(f, x, dtype, seed + 1).ok:
        return replace(m, inconclusive="a second random direction agrees")
    return m


def directional(f: Callable[[torch.Tensor], list[torch.Tensor]], x: torch.Tensor, dtype: torch.dtype,
                seed: int = 0, scale: float = 1.0) -> Directional:
    """Compare d/dt L(x + t v) at t=0, numerically (central difference) and by autograd, where
    L = sum_k <u_k, out_k> with random cotangents u_k and a random direction v (standard normal, drawn from
    ``seed``: the same seed gives the same direction).

    Step h = scale * eps^(1/3) * rms(x) (eps of ``dtype``; rms 1 for a zero tensor): the step that balances the
    truncation error h^2/6 |L'''| against the rounding error eps |L| / h; both are then about eps^(2/3) relative.
    Tolerance: |num - ana| <= atol + rtol * max(|num|, |ana|), with rtol = DIRECTIONAL_RTOL[dtype] and
    atol = 8 * eps * ||u * out||_2 / h, the rounding error of the difference quotient (the rounding errors of the
    terms L sums add like a random walk: their 2-norm). Returns both derivatives, their relative error, the
    tolerance and ``ok``.
    """
    gen = torch.Generator().manual_seed(seed)
    eps = torch.finfo(dtype).eps
    x = x.detach()
    rms = float(x.double().pow(2).mean().sqrt()) if x.numel() else 0.0
    h = scale * eps ** (1 / 3) * (rms if rms > 0 and math.isfinite(rms) else 1.0)
    v = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(device=x.device, dtype=x.dtype)  # drawn on the CPU: any device
    x0 = x.clone().requires_grad_()
    outs = f(x0)
    us = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device) for o in outs]

    def loss(os: list[torch.Tensor]) -> torch.Tensor:
        return sum(((u * o.double()).sum() for u, o in zip(us, os)), torch.zeros((), dtype=torch.float64))

    (g,) = torch.autograd.grad(loss(outs), x0, allow_unused=True)
    analytical = float((g.double() * v.double()).sum()) if g is not None else 0.0
    with torch.no_grad():
        plus, minus = f((x + h * v).to(x.dtype)), f((x - h * v).to(x.dtype))
        numerical = float(loss(plus) - loss(minus)) / (2 * h)
        size = float(sum(((u * o.double()).pow(2).sum() for u, o in zip(us, outs)),
                         torch.zeros((), dtype=torch.float64)).sqrt())
    return Directional.measured(numerical, analytical, 8 * eps * size / h, DIRECTIONAL_RTOL.get(dtype, 1e-2), h)
