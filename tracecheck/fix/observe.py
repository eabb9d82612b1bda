"""Run a real op at the probe's inputs and at perturbed inputs; infer each output's shape, dtype and device.

A *run* calls ``call(args)``, which returns one or more groups: ``(inputs, outputs)``, where ``inputs`` are the
named values an op sees (tensors, ints, ...) and ``outputs`` its tensors (an autograd.Function gives two
groups: the forward op and the backward op). Perturbations change the primary ``args`` only:

1. the probe's inputs, unchanged (cloned);
2. the same shapes with fresh data, in the original's range and then of either sign: a dim that changes
   here depends on the data (the TODO path);
3. per class of equal sizes (all dims and int arguments of value ``v >= 2``, changed together so that a
   shared dim stays consistent): ``v -> 2v``, then each member alone (to tell ``Lq`` from ``Lk``); when the
   op rejects the class change, also double every size that is a multiple of ``v`` (``K = n*C`` follows ``C``). Sizes the op never accepted changing stay fixed, and an
   expression over them is reported unconfirmed (see ``fix.shapes``);
4. per int argument of value 0 or 1: the two next values;
5. per floating input: another dtype (float64, then bfloat16), alone, then with every input of its dtype.

Runs the op rejects are dropped (their error is kept for the report). Everything runs under ``no_grad`` on
the inputs' device. Source for the approach: the fake-impl contract in the PyTorch custom-ops manual
(``register_fake`` must give output metadata from input metadata only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import compat
from . import shapes

#: (inputs by name, output tensors) for one op in one run
Group = tuple[dict[str, Any], list[torch.Tensor]]
#: at most this many size classes are perturbed (each costs one or two real runs)
MAX_CLASSES = 12


@dataclass
class OutputMeta:
    """Inferred metadata of one output: ``shape`` (one DimExpr per dim, or None when the rank changed between
    runs), ``dtype``/``device`` as code over the op's input names (``x.dtype``, ``torch.float32``)."""

    shape: list[shapes.DimExpr] | None
    dtype: str | None
    device: str
    rank_note: str = ""
    #: an input with this output's exact shape in every run (the fake may then write ``torch.empty(like.shape)``)
    like: str | None = None

    @property
    def todo(self) -> list[str]:
        """Why this output cannot get a trustworthy fake (empty when it can)."""
        out = [self.rank_note] if self.shape is None else [f"dim {i}: {d.reason}" for i, d in enumerate(self.shape)
                                                           if d.code is None]
        if self.dtype is None:
            out.append("dtype changed between runs in a way no input's dtype explains")
        return out

    @property
    def unconfirmed(self) -> list[str]:
        return [f"dim {i} = {d.code}: {d.reason}" for i, d in enumerate(self.shape or [])
                if d.code is not None and not d.confirmed]


@dataclass
class Observed:
    """Per group: one OutputMeta per output; plus the runs made and the perturbations the op refused."""

    groups: list[list[OutputMeta]]
    runs: int
    refused: list[str] = field(default_factory=list)


def symbols_of(inputs: dict[str, Any]) -> dict[str, int]:
    """``{"x.size(0)": 2, ..., "num_iters": 20}``: the sizes a fake impl may read, in argument order."""
    out: dict[str, int] = {}
    for name, v in inputs.items():
        if isinstance(v, torch.Tensor):
            for i, size in enumerate(v.shape):
                out[f"{name}.size({i})"] = int(size)
        elif isinstance(v, int) and not isinstance(v, bool):
            out[name] = v
    return out


def _resample(t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype | None = None,
              signed: bool = False) -> torch.Tensor:
    """Fresh data of ``shape`` in the original's range (ints: [min, max]; floats: its mean/std, and non-negative
    when the original is, unless ``signed``)."""
    dtype = dtype or t.dtype
    with torch.no_grad():
        if t.dtype == torch.bool:
            new = torch.rand(shape, device=t.device) < 0.5
        elif not t.is_floating_point() and not t.is_complex():
            lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 1)
            new = torch.randint(lo, hi + 1, shape, dtype=t.dtype, device=t.device)
        else:
            ref = t.detach().double()
            mean = float(ref.mean()) if t.numel() else 0.0
            std = float(ref.std()) if t.numel() > 1 else 1.0
            std = std if math.isfinite(std) and std > 0 else 1.0
            if signed:  # centred at zero: about half of the values change sign
                new = torch.randn(shape, dtype=torch.float64, device=t.device) * max(std, abs(mean))
            else:
                new = torch.randn(shape, dtype=torch.float64, device=t.device) * std + mean
                if t.numel() and float(ref.min()) >= 0:
                    new = new.abs()
        new = new.to(dtype)
    return new.requires_grad_(t.requires_grad) if new.is_floating_point() else new


def clone(v: Any) -> Any:
    """A detached copy of a tensor that keeps ``requires_grad`` (floating only); anything else as is."""
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        return c.requires_grad_(v.requires_grad) if c.is_floating_point() else c
    return v


def snapshot(values: dict[str, Any]) -> dict[str, tuple[int, torch.Tensor]]:
    """Version counter and a copy of the data of every tensor in ``values``, for ``mutated``."""
    return {n: (compat.tensor_version(v), v.detach().clone()) for n, v in values.items() if isinstance(v, torch.Tensor)}


def mutated(before: dict[str, tuple[int, torch.Tensor]], values: dict[str, Any]) -> list[str]:
    """Names whose version counter moved or whose data changed since ``snapshot`` (NaN-safe)."""
    return [n for n, (version, data) in before.items()
            if compat.tensor_version(values[n]) != version
            or not torch.equal(torch.nan_to_num(values[n].detach()), torch.nan_to_num(data))]


def _with_sizes(args: dict[str, Any], new: dict[str, int], fresh: bool = False,
                signed: bool = False) -> dict[str, Any]:
    """``args`` with the symbols in ``new`` set to new values (tensors resampled at their new shape)."""
    out: dict[str, Any] = {}
    for name, v in args.items():
        if isinstance(v, torch.Tensor):
            shape = tuple(new.get(f"{name}.size({i})", s) for i, s in enumerate(v.shape))
            out[name] = _resample(v, shape, signed=signed) if fresh or shape != tuple(v.shape) else clone(v)
        elif isinstance(v, int) and not isinstance(v, bool) and name in new:
            out[name] = new[name]
        else:
            out[name] = v
    return out


def _size_classes(args: dict[str, Any]) -> dict[int, list[str]]:
    classes: dict[int, list[str]] = {}
    for sym, v in symbols_of(args).items():
        if v >= 2:
            classes.setdefault(v, []).append(sym)
    return dict(sorted(classes.items())[:MAX_CLASSES])


def _dtype_variants(args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    floats = {n: v for n, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    for name, t in floats.items():
        same = [n for n, u in floats.items() if u.dtype == t.dtype]
        for dtype in (torch.float64, torch.bfloat16):
            if dtype == t.dtype:
                continue
            for group in ([name], same) if len(same) > 1 else ([name],):
                new = {n: (_resample(v, tuple(v.shape), dtype) if n in group else clone(v)) for n, v in args.items()}
                out.append((f"{'+'.join(group)} as {dtype}", new))
    return out


class _Recorder:
    def __init__(self, call: Callable[[dict[str, Any]], list[Group]]) -> None:
        self.call = call
        self.runs: list[list[Group]] = []
        self.refused: list[str] = []

    def __call__(self, label: str, args: dict[str, Any]) -> bool:
        try:
            with torch.no_grad():
                groups = self.call(args)
        except Exception as e:  # the op rejected these inputs: not an observation
            self.refused.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            return False
        if self.runs and [len(o) for _, o in groups] != [len(o) for _, o in self.runs[0]]:
            self.refused.append(f"{label}: a different number of outputs")
            return False
        self.runs.append(groups)
        return True


def observe(call: Callable[[dict[str, Any]], list[Group]], args: dict[str, Any]) -> Observed:
    """Run ``call`` at ``args`` and at perturbations of it; infer every output's metadata.

    Raises whatever ``call`` raises at the unperturbed ``args`` (the op must work at the probe's inputs).
    """
    rec = _Recorder(call)
    with torch.no_grad():
        rec.runs.append(call({n: clone(v) for n, v in args.items()}))
    rec("fresh data", _with_sizes(args, {}, fresh=True))
    # non-negative probe data (probabilities, post-ReLU) would hide `x[x > 0]`: also try data of either sign
    rec("fresh data of either sign", _with_sizes(args, {}, fresh=True, signed=True))
    classes = _size_classes(args)
    for value, members in classes.items():
        label = f"{'='.join(members)}: {value} -> {2 * value}"
        if rec(label, _with_sizes(args, {m: 2 * value for m in members})):
            # tell the members apart where the op allows (cross-attention: Lq and Lk equal in the probe)
            for m in members if len(members) > 1 else ():
                rec(f"{m}: {value} -> {2 * value}", _with_sizes(args, {m: 2 * value}))
            continue
        multiples = {m: 2 * v for v, ms in classes.items() if v % value == 0 for m in ms}
        if len(multiples) > len(members):
            rec(label + " with its multiples", _with_sizes(args, multiples))
    # int arguments of 0 or 1 are in no size class (a size-1 dim is a broadcast axis), but `repeat(n)` at n=1
    # must still be told from a constant: two more values each (three points pin a line)
    for name, v in args.items():
        if type(v) is int and v in (0, 1):
            for new in (v + 1, v + 2):
                rec(f"{name}: {v} -> {new}", _with_sizes(args, {name: new}))
    for label, new in _dtype_variants(args):
        rec(label, new)
    groups = [[_infer_output(rec.runs, g, k) for k in range(len(rec.runs[0][g][1]))]
              for g in range(len(rec.runs[0]))]
    return Observed(groups, len(rec.runs), rec.refused)


def _infer_output(runs: list[list[Group]], g: int, k: int) -> OutputMeta:
    samples = [(run[g][0], run[g][1][k]) for run in runs]
    base_inputs, base = samples[0]
    device = next((f"{n}.device" for n, v in base_inputs.items() if isinstance(v, torch.Tensor)
                   and v.device == base.device), f"torch.device({str(base.device)!r})")
    dtype = _infer_dtype(samples)
    ranks = {out.dim() for _, out in samples}
    if len(ranks) > 1:
        return OutputMeta(None, dtype, device, rank_note=f"its rank changed between runs ({sorted(ranks)})")
    names = list(symbols_of(base_inputs))
    # an input with the output's shape in every run (grad_k and k) explains it best: its dims go first
    like = next((n for n, v in base_inputs.items() if isinstance(v, torch.Tensor)
                 and all(isinstance(i.get(n), torch.Tensor) and i[n].shape == o.shape for i, o in samples)), None)
    if like:  # same shape as that input in every run: its shape, dim for dim (grad_x is x.shape)
        return OutputMeta([shapes.DimExpr(f"{like}.size({i})", confirmed=True) for i in range(base.dim())], dtype,
                          device, like=like)
    dims = []
    for i in range(base.dim()):
        r = shapes.Runs()
        for inputs, out in samples:
            r.add(symbols_of(inputs), out.shape[i])
        dims.append(shapes.infer_dim(names, r))
    return OutputMeta(dims, dtype, device, like=like)


def _promoted(inputs: dict[str, Any], names: list[str]) -> torch.dtype:
    dtype = inputs[names[0]].dtype
    for n in names[1:]:
        dtype = torch.promote_types(dtype, inputs[n].dtype)
    return dtype


def _infer_dtype(samples: list[tuple[dict[str, Any], torch.Tensor]]) -> str | None:
    tensors = [n for n, v in samples[0][0].items() if isinstance(v, torch.Tensor)]
    fits = [n for n in tensors if all(n in i and i[n].dtype == o.dtype for i, o in samples)]
    # an input whose dtype changed between runs and that the output followed beats one that never changed
    varied = [n for n in fits if len({i[n].dtype for i, _ in samples}) > 1]
    if varied or fits:
        return f"{(varied or fits)[0]}.dtype"
    # type promotion (a + b): the inputs that matched at the probe's dtypes, promoted, in every run
    base_in, base_out = samples[0]
    same = [n for n in tensors if base_in[n].dtype == base_out.dtype]
    if len(same) > 1 and all(_promoted(i, same) == o.dtype for i, o in samples):
        code = f"{same[0]}.dtype"
        for n in same[1:]:
            code = f"torch.promote_types({code}, {n}.dtype)"
        return code
    dtypes = {o.dtype for _, o in samples}
    return str(next(iter(dtypes))) if len(dtypes) == 1 else None
