"""A small DeepSeek-V4-style mHC stack, parametrised by which mHC registration it calls.

Each :class:`MhcLayer` does what DeepSeek-V4's ``Block.hc_pre`` / ``Block.hc_post`` do around one
sublayer, with n residual streams::

    h_in, h_post, h_res = mhc_pre_sinkhorn(x, phi, alpha, bias, n, I)   # x (B, S, n, C)
    out = MLP(RMSNorm(h_in))                                            # (B, S, C)
    x   = mhc_post(x, h_res.view(B, S, n, n), out, h_post)              # (B, S, n, C)

:class:`MhcStack` repeats the input over the n streams (``x.unsqueeze(-2).repeat``, as DSV4 does),
runs the layers and averages the streams back to ``(B, S, C)`` before a final RMSNorm.

``registration`` is one of :data:`REGISTRATIONS`: ``"fixed"`` (:mod:`mhc.fixed`) or one of the
three broken variants of :mod:`mhc.broken`. :func:`train` runs a few optimizer steps, eager or
compiled; ``python -m mhc.model --help`` runs it from the command line (with ``probes/`` as cwd).
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import Tensor, nn

from . import broken, fixed

#: registration name -> (pre wrapper, post wrapper), all with mhc.fixed's public signatures.
REGISTRATIONS = {"fixed": (fixed.mhc_pre_sinkhorn, fixed.mhc_post), **broken.VARIANTS}


class RMSNorm(nn.Module):
    """RMSNorm over the last dim with a learnable weight; computes in float32, returns input dtype."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


class MLP(nn.Module):
    """SiLU-gated MLP ``w2(silu(w1 x) * w3 x)``, DSV4's expert shape without routing."""

    def __init__(self, dim: int, hidden: int, dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        kw = dict(bias=False, dtype=dtype, device=device)
        self.w1 = nn.Linear(dim, hidden, **kw)
        self.w3 = nn.Linear(dim, hidden, **kw)
        self.w2 = nn.Linear(hidden, dim, **kw)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class MhcLayer(nn.Module):
    """hc_pre -> RMSNorm + MLP -> hc_post on ``x (B, S, n, C)``; mixing parameters are float32."""

    def __init__(self, dim: int, hidden: int, n: int, num_iters: int, registration: str,
                 dtype: torch.dtype = torch.float32, device=None):  # fmt: skip
        super().__init__()
        if registration not in REGISTRATIONS:
            raise ValueError(f"registration must be one of {sorted(REGISTRATIONS)}, got {registration!r}")
        self.n, self.num_iters, self.registration = n, num_iters, registration
        m, k = n * n + 2 * n, n * dim
        f32 = dict(dtype=torch.float32, device=device)
        self.phi = nn.Parameter(torch.randn(m, k, **f32) / math.sqrt(k))
        self.alpha = nn.Parameter(torch.full((3,), 0.5, **f32))
        self.bias = nn.Parameter(0.1 * torch.randn(m, **f32))
        self.norm = RMSNorm(dim, dtype=dtype, device=device)
        self.mlp = MLP(dim, hidden, dtype=dtype, device=device)

    def forward(self, x: Tensor) -> Tensor:
        pre, post = REGISTRATIONS[self.registration]
        h_in, h_post, h_res = pre(x, self.phi, self.alpha, self.bias, self.n, self.num_iters)
        out = self.mlp(self.norm(h_in))
        return post(x, h_res.reshape(*x.shape[:-2], self.n, self.n), out, h_post)


class MhcStack(nn.Module):
    """``layers`` mHC layers on ``h (B, S, C)`` -> ``(B, S, C)``; x dtype ``dtype``, mixing params fp32."""

    def __init__(self, dim: int = 16, hidden: int = 32, n: int = 4, layers: int = 2, num_iters: int = 20,
                 registration: str = "fixed", dtype: torch.dtype = torch.float32, device=None):  # fmt: skip
        super().__init__()
        if not 1 <= layers:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.n = n
        self.layers = nn.ModuleList(
            MhcLayer(dim, hidden, n, num_iters, registration, dtype=dtype, device=device) for _ in range(layers)
        )
        self.final_norm = RMSNorm(dim, dtype=dtype, device=device)

    def forward(self, h: Tensor) -> Tensor:
        x = h.unsqueeze(-2).repeat(1, 1, self.n, 1)
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x.mean(-2))


def train(model: nn.Module, h: Tensor, target: Tensor, steps: int = 3, lr: float = 1e-2,
          backend: str | None = None) -> list[float]:  # fmt: skip
    """Run ``steps`` AdamW steps of MSE(model(h), target); returns the loss before each step.

    ``backend`` None runs eagerly, otherwise ``torch.compile(model, backend=backend)``.
    """
    fn = model if backend is None else torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(fn(h).float(), target.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> int:
    """CLI: train a small stack a few steps with one registration and print the losses."""
    parser = argparse.ArgumentParser(prog="python -m mhc.model", description=__doc__.splitlines()[0])
    parser.add_argument("--registration", default="fixed", choices=sorted(REGISTRATIONS))
    parser.add_argument("--backend", default=None, help="torch.compile backend (default: eager)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    import mhc

    torch.manual_seed(0)
    model = MhcStack(registration=args.registration, device=mhc.DEVICE)
    h = torch.randn(2, 8, 16, device=mhc.DEVICE)
    target = torch.randn(2, 8, 16, device=mhc.DEVICE)
    print(train(model, h, target, steps=args.steps, backend=args.backend))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
