"""mHC forward+backward throughput: the fixed custom op vs the same math as plain PyTorch, eager and inductor.

    python benchmarks/bench_mhc.py [--size small|spec] [--threads N] [--min-run-time S] [--rounds R]

What is timed is the op probe's call pair (``probes/mhc_probes.py``), at fp32: ``hc_pre`` then ``hc_post``::

    h_in, h_post, h_res = mhc_pre_sinkhorn(x, phi, alpha, bias, n, 20)   # x (B, S, n, C)
    y = mhc_post(x, h_res.reshape(B, S, n, n), h_in, h_post)            # y (B, S, n, C)

plus the backward of ``y`` against a fixed random ``grad_y``, through ``torch.autograd.grad`` to all four
inputs. Four variants run it on the same inputs:

* ``fixed op eager``: :mod:`mhc.fixed`'s wrappers. These are dispatcher ops whose CPU kernels are the
  pybind11 extension; the backward goes through the ``*_backward`` ops.
* ``fixed op inductor``: the same function under ``torch.compile(backend="inductor", fullgraph=True)``.
  Each op is one opaque graph node. Inductor only sees its fake kernel, so it calls the real kernel
  as an extern call and can fuse nothing across it or inside it.
* ``plain eager``: :func:`plain_pre_then_post`, the same math written as ordinary PyTorch ops in fp32.
  It is derived from the float64 golden (:mod:`mhc.golden`) and differentiated by autograd.
* ``plain inductor``: that function under ``torch.compile``. Inductor sees every op, the 20 Sinkhorn
  iterations included, and fuses them (forward and the AOTAutograd-derived backward).

First the script checks that all four agree with each other and with the float64 golden. Then it warms
each variant up, compiles included, and times it with ``torch.utils.benchmark.Timer.blocked_autorange``.
It runs ``--rounds`` rounds over the four variants and merges the rounds, so that load from other
processes spreads over all variants. The table gives the median ms per fwd+bwd, tokens (B*S) per second,
and the speed-up over ``fixed op eager``. The headline is the throughput ratio plain inductor / fixed op
inductor; above 1.0 means the fusible plain-PyTorch version is faster.

Threads: ``--threads`` (default: all cores) is passed to ``torch.set_num_threads`` before anything compiles,
because inductor's C++ kernels take the thread count at codegen; the Timer uses the same number. On a
machine shared with other work, ``--threads 1`` gives much steadier numbers: an OpenMP team that waits
for a core busy elsewhere makes every small ATen op slow.

Sizes: ``small`` (default) is B=1, S=64, n=4, C=256. ``spec`` is the spec scale, B=1, S=128, n=4,
C=4096, which matches the op probes at ``MHC_PROBE_SIZE=large``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch._inductor.metrics
import torch.utils.benchmark as tbench
from torch import Tensor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "probes"))

import mhc  # noqa: E402  (needs probes/ on sys.path)
from mhc import fixed, golden  # noqa: E402

#: (B, S, n, C). "spec" is the op probes' MHC_PROBE_SIZE=large (spec scale).
SIZES = {"small": (1, 64, 4, 256), "spec": (1, 128, 4, 4096)}
HC_EPS = 1e-6
NORM_EPS = 1e-6
#: fp32 agreement: |a - b| <= ATOL * max|b| + RTOL * |b|, per tensor. The atol is scaled by the tensor's
#: magnitude, so grad_phi and grad_alpha (sums over all tokens) are judged on the same relative scale.
RTOL = 1e-4
ATOL = 1e-5
NAMES = ("y", "grad_x", "grad_phi", "grad_alpha", "grad_bias")


# ---------------------------------------------------------------------------------------------
# The same math as plain PyTorch ops, fp32 (from mhc.golden, without the saved intermediates)
# ---------------------------------------------------------------------------------------------


def plain_pre_sinkhorn(
    x: Tensor, phi: Tensor, alpha: Tensor, bias: Tensor, hc_mult: int, num_iters: int,
    hc_eps: float = HC_EPS, norm_eps: float = NORM_EPS,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``(h_in, h_post, h_res)`` of spec §4.3 in float32 with plain ops; autograd gives the backward."""
    n = hc_mult
    lead = x.shape[:-2]
    xf = x.float()
    xk = xf.reshape(*lead, n * x.size(-1))
    inv_rms = 1.0 / torch.sqrt((xk * xk).mean(-1, keepdim=True) + norm_eps)  # (*lead, 1)
    mix = (xk @ phi.t()) * inv_rms  # (*lead, M)
    z_pre = mix[..., :n] * alpha[0] + bias[:n]
    z_post = mix[..., n : 2 * n] * alpha[1] + bias[n : 2 * n]
    z_res = (mix[..., 2 * n :] * alpha[2] + bias[2 * n :]).reshape(*lead, n, n)
    h_pre = torch.sigmoid(z_pre) + hc_eps
    h_post = 2.0 * torch.sigmoid(z_post)
    h_in = (h_pre.unsqueeze(-1) * xf).sum(-2).to(x.dtype)
    # Sinkhorn: row softmax + eps, column step, then num_iters-1 (row, column) pairs; divisors sum + eps.
    e = torch.exp(z_res - z_res.amax(-1, keepdim=True).detach())  # the max carries no gradient
    p = e / e.sum(-1, keepdim=True) + hc_eps
    p = p / (p.sum(-2, keepdim=True) + hc_eps)
    for _ in range(1, num_iters):
        p = p / (p.sum(-1, keepdim=True) + hc_eps)
        p = p / (p.sum(-2, keepdim=True) + hc_eps)
    return h_in, h_post, p.reshape(*lead, n * n)


def plain_post(x: Tensor, h_res: Tensor, h_out: Tensor, h_post: Tensor) -> Tensor:
    """``y[..., k, :] = h_post[..., k] * h_out + sum_j h_res[..., j, k] * x[..., j, :]`` (spec §7), fp32."""
    y = h_post.unsqueeze(-1) * h_out.float().unsqueeze(-2) + torch.einsum("...jk,...jd->...kd", h_res, x.float())
    return y.to(x.dtype)


def _pre_then_post(pre, post, n: int, num_iters: int):
    def pre_then_post(x: Tensor, phi: Tensor, alpha: Tensor, bias: Tensor) -> Tensor:
        h_in, h_post, h_res = pre(x, phi, alpha, bias, n, num_iters, HC_EPS, NORM_EPS)
        return post(x, h_res.reshape(*x.shape[:-2], n, n), h_in, h_post)

    return pre_then_post


def plain_pre_then_post(n: int, num_iters: int):
    """The benchmarked function in plain PyTorch: ``(x, phi, alpha, bias) -> y``."""
    return _pre_then_post(plain_pre_sinkhorn, plain_post, n, num_iters)


def fixed_pre_then_post(n: int, num_iters: int):
    """The benchmarked function on the fixed dispatcher ops: ``(x, phi, alpha, bias) -> y``."""
    return _pre_then_post(fixed.mhc_pre_sinkhorn, fixed.mhc_post, n, num_iters)


def golden_pre_then_post(n: int, num_iters: int):
    """Float64 golden of the same function (differentiable with autograd)."""

    def pre(x, phi, alpha, bias, hc_mult, iters, hc_eps, norm_eps):
        return golden.mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, iters, hc_eps, norm_eps, False)[:3]

    return _pre_then_post(pre, golden.mhc_post, n, num_iters)


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------


def make_inputs(B: int, S: int, n: int, C: int) -> tuple[tuple[Tensor, ...], Tensor]:
    """Like the op probes' inputs, fp32: x (B,S,n,C), phi (M,n*C), alpha (3,), bias (M,); plus grad_y."""
    m, k = n * n + 2 * n, n * C
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, S, n, C, generator=g)
    phi = torch.randn(m, k, generator=g) / k**0.5
    alpha = torch.tensor([0.5, 0.6, 0.7])
    bias = 0.1 * torch.randn(m, generator=g)
    grad_y = torch.randn(B, S, n, C, generator=g)
    return tuple(t.requires_grad_() for t in (x, phi, alpha, bias)), grad_y


def make_step(fn, inputs: tuple[Tensor, ...], grad_y: Tensor):
    """One forward+backward: ``(y, grad_x, grad_phi, grad_alpha, grad_bias)``; nothing accumulates in .grad."""

    def step() -> tuple[Tensor, ...]:
        y = fn(*inputs)
        return (y, *torch.autograd.grad(y, inputs, grad_y))

    return step


def compare(got: tuple[Tensor, ...], ref: tuple[Tensor, ...]) -> tuple[bool, float, str]:
    """(all close, worst relative error max|a-b|/max|b|, name of the worst tensor)."""
    ok, worst, worst_name = True, 0.0, ""
    for name, a, b in zip(NAMES, got, ref):
        a, b = a.detach().double(), b.detach().double()
        scale = b.abs().max().item() or 1.0
        ok &= torch.allclose(a, b, rtol=RTOL, atol=ATOL * scale)
        rel = (a - b).abs().max().item() / scale
        if rel >= worst:
            worst, worst_name = rel, name
    return ok, worst, worst_name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small",
                    help="small: B=1 S=64 n=4 C=256 (default); spec: B=1 S=128 n=4 C=4096")  # fmt: skip
    ap.add_argument("--iters", type=int, default=20, help="Sinkhorn iterations (default 20, as on NPU)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: all cores)")
    ap.add_argument("--min-run-time", type=float, default=1.0,
                    help="seconds of blocked_autorange per variant and round (default 1.0)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the four variants, merged (default 3)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)  # before compiling: inductor's C++ kernels take it at codegen
    B, S, n, C = SIZES[args.size]
    tokens = B * S
    mhc.load()  # build or load the extension now, outside anything timed
    print(f"torch {torch.__version__} | backend {mhc.BACKEND} | cores {os.cpu_count()} | "
          f"torch.set_num_threads({args.threads}) -> get_num_threads() = {torch.get_num_threads()}")  # fmt: skip
    print(f"size {args.size}: B={B} S={S} n={n} C={C} (tokens={tokens}), num_iters={args.iters}, fp32, "
          f"fwd+bwd of mhc_pre_sinkhorn -> mhc_post")  # fmt: skip

    inputs, grad_y = make_inputs(B, S, n, C)
    compile_ = dict(backend="inductor", fullgraph=True, dynamic=False)
    fixed_fn, plain_fn = fixed_pre_then_post(n, args.iters), plain_pre_then_post(n, args.iters)
    variants = {
        "fixed op eager": fixed_fn,
        "fixed op inductor": torch.compile(fixed_fn, **compile_),
        "plain eager": plain_fn,
        "plain inductor": torch.compile(plain_fn, **compile_),
    }
    steps = {name: make_step(fn, inputs, grad_y) for name, fn in variants.items()}

    # Warm-up (compiles fwd and bwd for the inductor variants) and the outputs for the check.
    print("\nwarm-up and numerical check (y and the grads of x, phi, alpha, bias; "
          f"allclose rtol={RTOL}, atol={ATOL}*max|ref| per tensor)")  # fmt: skip
    g_inputs = tuple(t.detach().double().requires_grad_() for t in inputs)
    ref64 = make_step(golden_pre_then_post(n, args.iters), g_inputs, grad_y.double())()
    outs, kernels, all_ok = {}, {}, True
    for name, step in steps.items():
        torch._inductor.metrics.reset()
        t0 = time.perf_counter()
        outs[name] = step()
        first = time.perf_counter() - t0
        for _ in range(2):
            step()
        kernels[name] = torch._inductor.metrics.generated_kernel_count
        ok_fixed, rel_fixed, worst_fixed = compare(outs[name], outs["fixed op eager"])
        ok_gold, rel_gold, worst_gold = compare(outs[name], ref64)
        all_ok &= ok_fixed and ok_gold
        extra = f", inductor kernels generated (fwd+bwd) {kernels[name]}" if "inductor" in name else ""
        print(f"  {name:<18} first call {first:6.2f} s{extra}\n"
              f"  {'':<18} vs fixed op eager: {'OK ' if ok_fixed else 'FAIL'} worst rel err {rel_fixed:.1e} "
              f"({worst_fixed}) | vs float64 golden: {'OK ' if ok_gold else 'FAIL'} worst rel err {rel_gold:.1e} "
              f"({worst_gold})")  # fmt: skip
    print(f"  all variants agree: {all_ok}")
    if not all_ok:
        print("numerical check failed: not timing", file=sys.stderr)
        return 1

    # Timing: rounds over all variants, merged, so background load hits every variant alike.
    per_variant: dict[str, list[tbench.Measurement]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            timer = tbench.Timer(stmt="step()", globals={"step": step}, num_threads=args.threads,
                                 label="mhc fwd+bwd", description=name)  # fmt: skip
            per_variant[name].append(timer.blocked_autorange(min_run_time=args.min_run_time))
    results = {name: tbench.Measurement.merge(ms)[0] for name, ms in per_variant.items()}
    runs = {name: sum(len(m.times) * m.number_per_run for m in ms) for name, ms in per_variant.items()}

    base = results["fixed op eager"].median
    print(f"\ntorch.utils.benchmark.Timer.blocked_autorange(min_run_time={args.min_run_time}) x {args.rounds} "
          f"rounds, merged; num_threads={args.threads}")  # fmt: skip
    print("median and IQR over the timed blocks; runs = fwd+bwd calls timed")
    print(f"{'variant':<18} {'median ms':>10} {'IQR ms':>8} {'runs':>6} {'tokens/s':>10} {'vs fixed eager':>15}")
    for name, m in results.items():
        print(f"{name:<18} {m.median * 1e3:10.3f} {m.iqr * 1e3:8.3f} {runs[name]:6d} {tokens / m.median:10.0f} "
              f"{base / m.median:14.2f}x")  # fmt: skip
    noisy = [name for name, m in results.items() if m.iqr > 0.5 * m.median]
    if noisy:
        hint = "--threads 1 or more --rounds" if args.threads > 1 else "more --rounds"
        print(f"noisy: IQR > 50% of the median for {', '.join(noisy)} (other load on the machine? try {hint})")
    ratio = results["fixed op inductor"].median / results["plain inductor"].median
    print(f"\nheadline: throughput plain inductor / fixed op inductor = {ratio:.2f}x "
          f"({'plain PyTorch under inductor is faster' if ratio > 1 else 'the fixed op under inductor is faster'})")
    eager_ratio = results["fixed op eager"].median / results["plain eager"].median
    print(f"          throughput plain eager / fixed op eager       = {eager_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
