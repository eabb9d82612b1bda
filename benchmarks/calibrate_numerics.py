"""Calibrate the compiled-vs-eager judgement (tracecheck/stages/_numerics.py) on vision models in training mode.

Each point is one run of the code the ``aot_eager``/``inductor`` stages run (``stages._execution.run_compiled``) on
one model, batch size and seed: eager, ``torch.compile`` (``fallback_random=True``), and, when some tensor is not
allclose, the float64 reference and the jittered eager runs. A point is *flagged* when that run makes a
``numeric-mismatch`` record. Reported per model:

* the **false-alarm rate**: flagged points of the model as it is (nothing is wrong with it);
* the **catch rate**: flagged points of a copy with an error only the compiled run makes
  (``torch.compiler.is_compiling()``): one parameter's gradient times 1.01 (a parametrization whose backward scales
  the gradient: the first conv's weight, the smallest norm layer's weight, the classifier's weight), half of the first
  conv's output gradient dropped (``0.5·y + 0.5·y.detach()``: the forward is unchanged), and a custom op whose fake
  impl gives the wrong strides.

    python benchmarks/calibrate_numerics.py --seeds 20 --error-seeds 5 --batches 2,4,8 [--models resnet18,hf_resnet]

Dynamo is reset before each point, as each stage process starts fresh; Inductor's FX-graph cache makes every point
after a (model, batch size)'s first a cache hit.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))

import torch  # noqa: E402
from torch.nn.utils import parametrize  # noqa: E402

import convnets  # noqa: E402
from tracecheck.model.probe import Case  # noqa: E402
from tracecheck.stages._execution import run_compiled  # noqa: E402

MODELS = {"resnet18": convnets.resnet18, "hf_resnet": convnets.hf_resnet, "hf_convnext": convnets.hf_convnext,
          "hf_vit": convnets.hf_vit}
ERRORS = ("grad x1.01 conv", "grad x1.01 norm", "grad x1.01 fc", "dropped term", "fake stride")


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient times ``factor``."""

    @staticmethod
    def forward(x, factor):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


class _CompiledGradTimes(torch.nn.Module):
    """A parametrization: the parameter as it is; its gradient times 1.01 in the compiled run only."""

    def forward(self, w):
        return _ScaleGrad.apply(w, 1.01) if torch.compiler.is_compiling() else w


@torch.library.custom_op("calib::double_it", mutates_args=())
def _double_it(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).contiguous()


@_double_it.register_fake
def _(x):  # the injected error: the fake says channels-last strides, the kernel returns contiguous
    return torch.empty_like(x, memory_format=torch.channels_last)


_double_it.register_autograd(lambda ctx, g: g * 2)


def _first_conv_hook(error: str):
    def hook(module, inputs, out):
        if not torch.compiler.is_compiling():
            return out
        if error == "dropped term":  # half of the activation's gradient is lost, the forward is unchanged
            return 0.5 * out + 0.5 * out.detach()
        return _double_it(out) * 0.5  # "fake stride"
    return hook


def injected(model: torch.nn.Module, error: str | None) -> torch.nn.Module:
    """``model`` with ``error`` in its compiled run only."""
    if error is None:
        return model
    mods = list(model.modules())
    if error.startswith("grad x1.01"):
        where = error.split()[-1]
        if where == "conv":
            target = next(m for m in mods if isinstance(m, torch.nn.Conv2d))
        elif where == "norm":
            norms = [m for m in mods if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm))
                     and m.weight is not None]
            target = min(norms, key=lambda m: m.weight.numel())
        else:
            target = [m for m in mods if isinstance(m, torch.nn.Linear)][-1]
        parametrize.register_parametrization(target, "weight", _CompiledGradTimes())
    else:
        next(m for m in mods if isinstance(m, torch.nn.Conv2d)).register_forward_hook(_first_conv_hook(error))
    return model


def point(name: str, batch: int, seed: int, size: int, backend: str, error: str | None) -> dict:
    """One run of the compiled stage's body: ``flagged`` (a numeric-mismatch record), ``raised``, the worst record."""
    def make_case() -> Case:
        old, convnets.SEED = convnets.SEED, seed
        try:
            model = injected(MODELS[name](), error)
        finally:
            convnets.SEED = old
        return Case(model, (convnets.images(batch, size=size, seed=seed),))

    torch._dynamo.reset()  # a stage process compiles once; here every point must start as fresh
    record = run_compiled(make_case, backend)
    mismatches = record.get("mismatches") or []
    return {"flagged": bool(mismatches or record.get("error")), "raised": bool(record.get("error")),
            "worst": mismatches[0]["worst"] if mismatches else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds per batch size for the false-alarm rate")
    ap.add_argument("--error-seeds", type=int, default=5, help="seeds per batch size for each injected error")
    ap.add_argument("--batches", default="2,4,8")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--size", type=int, default=convnets.SIZE, help="image side (default %(default)s)")
    ap.add_argument("--errors", default="none," + ",".join(ERRORS))
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(f"torch {torch.__version__}, backend {args.backend}, {args.seeds} seeds x batch sizes {batches}, "
          f"images {args.size}x{args.size}", flush=True)
    for name in args.models.split(","):
        for error in args.errors.split(","):
            t0 = time.monotonic()
            seeds = args.seeds if error == "none" else args.error_seeds
            points = [point(name, b, s, args.size, args.backend, None if error == "none" else error)
                      for b in batches for s in range(seeds)]
            flagged = sum(p["flagged"] for p in points)
            raised = sum(p["raised"] for p in points)
            what = "false alarms" if error == "none" else f"caught: {error}"
            worst = [p["worst"] for p in points if p["worst"]]
            ratio = max((w.get("error_ratio") or 0 for w in worst), default=0)
            print(f"{name:12s} {what:26s} {flagged}/{len(points)} (raised: {raised}); worst compiled/eager RMSE "
                  f"ratio {ratio:.3g} [{time.monotonic() - t0:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
