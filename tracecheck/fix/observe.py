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
5. per floating input: another dtype (float64, then bfloat16), alone, then with every input of its dtype;
6. per tensor input (another *rank*): one and two new leading dims, and its first dim dropped. These runs are
   kept apart from the others (their symbols differ): they decide whether an output's shape holds at every
   rank, written over the input's shape (``x.shape``, ``(*x.shape[:-1], w.size(0))``), or only at the probe's
   rank, where the fake checks ``x.dim() == r``.

Runs the op rejects are dropped (their error is kept for the report). Everything runs under ``no_grad`` on
the inputs' device. Source for the approach: the fake-impl contract in the PyTorch custom-ops manual
(``register_fake`` must give output metadata from input metadata only).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .. import compat
from . import shapes

#: an op's arguments by name (or an autograd.Function's forward's, or its backward's inputs), as the probe passed
#: them: tensors, numbers, lists, None, whatever the op takes. Not JSON, and no type fits them all: a tensor's
#: metadata is read after an isinstance check (``tensor``)
Args = dict[str, object]
#: (inputs by name, output tensors) for one op in one run
Group = tuple[Args, list[torch.Tensor]]
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
    #: the shape as one expression that holds at other ranks too (``x.shape``, ``(*x.shape[:-1], w.size(0))``),
    #: checked against every run, the other-rank runs included; None: only ``shape`` at the probe's ranks
    generic: str | None = None
    #: per input the fake reads: ``("==", r)`` (only rank r was seen to fit) or ``(">=", r)`` (``generic`` holds
    #: from rank r up, as far as the runs went); None when not worked out (the fake then checks what it reads)
    rank_checks: dict[str, tuple[str, int]] | None = None

    @property
    def todo(self) -> list[str]:
        """Why this output cannot get a trustworthy fake (empty when it can)."""
        out = [self.rank_note] if self.shape is None else [f"dim {i}: {d.reason}" for i, d in enumerate(self.shape)
                                                           if d.code is None]
        if self.dtype is None:
            out.append("dtype changed between runs in a way no input's dtype explains")
        return out

    @property
    def codes(self) -> list[str]:
        """Each dim's code, for the fake: all of them where ``todo`` is empty."""
        return [d.code for d in self.shape or [] if d.code is not None]

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


def named_args(op: Any, args: tuple, kwargs: dict) -> Args:
    """A recorded op call's arguments by schema name (defaults filled in): what observe and the fakes read."""
    schema = compat.op_schema(op)
    out: Args = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def tensors(args: Args) -> dict[str, torch.Tensor]:
    """The tensor arguments, by name, in argument order."""
    return {n: v for n, v in args.items() if isinstance(v, torch.Tensor)}


def tensor(args: Args, name: str) -> torch.Tensor:
    """``args[name]``, which the caller knows is a tensor (it picked the name by isinstance, ``tensors``)."""
    v = args[name]
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"argument {name!r} is {type(v).__name__}, not a Tensor")
    return v


def symbols_of(inputs: Args) -> dict[str, int]:
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


def snapshot(values: Args) -> dict[str, tuple[int, torch.Tensor]]:
    """Version counter and a copy of the data of every tensor in ``values``, for ``mutated``."""
    return {n: (compat.tensor_version(v), v.detach().clone()) for n, v in values.items() if isinstance(v, torch.Tensor)}


def mutated(before: dict[str, tuple[int, torch.Tensor]], values: Args) -> list[str]:
    """Names whose version counter moved or whose data changed since ``snapshot`` (NaN-safe)."""
    now = {n: tensor(values, n) for n in before}
    return [n for n, (version, data) in before.items()
            if compat.tensor_version(now[n]) != version
            or not torch.equal(torch.nan_to_num(now[n].detach()), torch.nan_to_num(data))]


def with_sizes(args: Args, new: dict[str, int], fresh: bool = False,
                signed: bool = False) -> Args:
    """``args`` with the symbols in ``new`` set to new values (tensors resampled at their new shape)."""
    out: Args = {}
    for name, v in args.items():
        if isinstance(v, torch.Tensor):
            shape = tuple(new.get(f"{name}.size({i})", s) for i, s in enumerate(v.shape))
            out[name] = _resample(v, shape, signed=signed) if fresh or shape != tuple(v.shape) else clone(v)
        elif isinstance(v, int) and not isinstance(v, bool) and name in new:
            out[name] = new[name]
        else:
            out[name] = v
    return out


def _size_classes(args: Args) -> dict[int, list[str]]:
    classes: dict[int, list[str]] = {}
    for sym, v in symbols_of(args).items():
        if v >= 2:
            classes.setdefault(v, []).append(sym)
    return dict(sorted(classes.items())[:MAX_CLASSES])


def _dtype_variants(args: Args) -> list[tuple[str, Args]]:
    out = []
    floats = {n: v for n, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    for name, t in floats.items():
        same = [n for n, u in floats.items() if u.dtype == t.dtype]
        for dtype in (torch.float64, torch.bfloat16):
            if dtype == t.dtype:
                continue
            for group in ([name], same) if len(same) > 1 else ([name],):
                new = {n: (_resample(floats[n], tuple(floats[n].shape), dtype) if n in group else clone(v))
                       for n, v in args.items()}
                out.append((f"{'+'.join(group)} as {dtype}", new))
    return out


class _Recorder:
    def __init__(self, call: Callable[[Args], list[Group]]) -> None:
        self.call = call
        self.runs: list[list[Group]] = []
        self.refused: list[str] = []

    def __call__(self, label: str, args: Args, into: list[list[Group]] | None = None) -> bool:
        into = self.runs if into is None else into
        try:
            with torch.no_grad():
                groups = self.call(args)
        except Exception as e:  # the op rejected these inputs: not an observation
            self.refused.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            return False
        if self.runs and [len(o) for _, o in groups] != [len(o) for _, o in self.runs[0]]:
            self.refused.append(f"{label}: a different number of outputs")
            return False
        into.append(groups)
        return True


def observe(call: Callable[[Args], list[Group]], args: Args) -> Observed:
    """Run ``call`` at ``args`` and at perturbations of it; infer every output's metadata.

    Raises whatever ``call`` raises at the unperturbed ``args`` (the op must work at the probe's inputs).
    """
    rec = _Recorder(call)
    with torch.no_grad():
        rec.runs.append(call({n: clone(v) for n, v in args.items()}))
    rec("fresh data", with_sizes(args, {}, fresh=True))
    # non-negative probe data (probabilities, post-ReLU) would hide `x[x > 0]`: also try data of either sign
    rec("fresh data of either sign", with_sizes(args, {}, fresh=True, signed=True))
    classes = _size_classes(args)
    for value, members in classes.items():
        label = f"{'='.join(members)}: {value} -> {2 * value}"
        together = rec(label, with_sizes(args, {m: 2 * value for m in members}))
        if not together:
            multiples = {m: 2 * v for v, ms in classes.items() if v % value == 0 for m in ms}
            if len(multiples) > len(members):
                rec(label + " with its multiples", with_sizes(args, multiples))
        # tell the members apart where the op allows (cross-attention: Lq and Lk equal in the probe), also when
        # the op refuses changing them together (mHC: S == n in the probe, and n is fixed by the weights)
        for m in members if len(members) > 1 else ():
            rec(f"{m}: {value} -> {2 * value}", with_sizes(args, {m: 2 * value}))
    # int arguments of 0 or 1 are in no size class (a size-1 dim is a broadcast axis), but `repeat(n)` at n=1
    # must still be told from a constant: two more values each (three points pin a line)
    for name, v in args.items():
        if type(v) is int and v in (0, 1):
            for size in (v + 1, v + 2):
                rec(f"{name}: {v} -> {size}", with_sizes(args, {name: size}))
    for label, new in _dtype_variants(args):
        rec(label, new)
    other_ranks: list[RankRun] = []
    for name, new_shape, new in rank_variants(args):
        into: list[list[Group]] = []
        if rec(f"{name} at rank {len(new_shape)}", new, into):
            first = name.split("+")[0]
            other_ranks.append(RankRun(name, into[0], len(new_shape) > tensor(args, first).dim()))
    groups = [[_infer_output(rec.runs, other_ranks, g, k) for k in range(len(rec.runs[0][g][1]))]
              for g in range(len(rec.runs[0]))]
    return Observed(groups, len(rec.runs) + len(other_ranks), rec.refused)


@dataclass(frozen=True)
class RankRun:
    """One run with ``input`` (a primary argument) at another rank: the probe's sizes with new leading dims, or
    with its first dim dropped."""

    #: the input, or inputs joined by "+" (those that share the first tensor's leading size, changed together)
    input: str
    groups: list[Group]
    #: leading dims added (True) or dropped
    grew: bool


#: at most this many tensor inputs are tried at other ranks (each costs three real runs)
MAX_RANK_INPUTS = 6


def rank_variants(args: Args) -> list[tuple[str, tuple[int, ...], Args]]:
    """``(input, its new shape, args)``: per tensor input alone, one and two new leading dims (of sizes no other
    dim has, so they can be found in the outputs) and, from rank 2, the first dim dropped; then the same for the
    tensors that carry the first tensor's leading size (a batch dim every input carries), together, each at the
    position of that size (mHC's ``sum_out`` is ``(2I, B, S, n)``). ``input`` joins those names with "+"."""
    taken = set(symbols_of(args).values())
    new = [v for v in range(3, 200) if v not in taken][:2]
    ts = tensors(args)
    out: list[tuple[str, tuple[int, ...], Args]] = []

    def variants(at: dict[str, int]) -> None:
        names = list(at)
        for change in ((new[0],), (new[1], new[0]), None):
            if change is None and any(ts[n].dim() < 2 for n in names):
                continue
            shapes_ = {}
            for n in names:
                shape, i = tuple(ts[n].shape), at[n]
                shapes_[n] = (*shape[:i], *change, *shape[i:]) if change else (*shape[:i], *shape[i + 1:])
            out.append(("+".join(names), shapes_[names[0]],
                        {n: (_resample(ts[n], shapes_[n]) if n in shapes_ else clone(v)) for n, v in args.items()}))

    firsts = list(ts.items())
    for name, _ in firsts[:MAX_RANK_INPUTS]:
        variants({name: 0})
    if firsts and firsts[0][1].dim():
        lead = firsts[0][1].shape[0]
        batch = {n: tuple(v.shape).index(lead) for n, v in firsts if lead in tuple(v.shape)}
        if len(batch) > 1:
            variants(batch)
    return out


class _Shape:
    """Stands in for a tensor in a shape expression: ``size(i)``, ``shape``, ``dim()`` (see ``_evaluates``)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = tuple(shape)

    def size(self, i: int) -> int:
        return self.shape[i]

    def dim(self) -> int:
        return len(self.shape)


def _evaluates(expr: str, inputs: Args, expected: tuple[int, ...]) -> bool:
    """Whether the shape expression ``expr`` (code tracecheck wrote: names, ``.size(i)``, ``.shape[...]``,
    arithmetic) gives ``expected`` at ``inputs``."""
    env = {n: _Shape(tuple(v.shape)) if isinstance(v, torch.Tensor) else v for n, v in inputs.items()}
    try:
        got = eval(expr, {"__builtins__": {}}, env)  # noqa: S307 - our own generated expression over sizes
        return tuple(int(d) for d in got) == tuple(expected)
    except Exception:  # an index out of range at this rank: it does not hold here
        return False


_SIZE = r"\b{name}\.size\((\d+)\)"


def reads_by_position(name: str, code: str) -> bool:
    """Does shape code ``code`` read a dim of input ``name`` by its position (``x.size(1)``, not ``idx.size(1)``)?"""
    return re.search(_SIZE.format(name=re.escape(name)), code) is not None


def _changed_rank(base_in: Args, run_in: Args) -> dict[str, int]:
    """Inputs whose shape in the run is their base shape with leading dims added (> 0) or dropped (< 0)."""
    out: dict[str, int] = {}
    for n, v in run_in.items():
        b = base_in.get(n)
        if not (isinstance(v, torch.Tensor) and isinstance(b, torch.Tensor)) or v.dim() == b.dim():
            continue
        short, long = (tuple(b.shape), tuple(v.shape)) if v.dim() > b.dim() else (tuple(v.shape), tuple(b.shape))
        if long[len(long) - len(short):] == short:
            out[n] = v.dim() - b.dim()
    return out


def _generic_candidate(codes: list[str], base_in: Args, base_out: tuple[int, ...], run_in: Args,
                       run_out: tuple[int, ...]) -> tuple[str, list[str]] | None:
    """``(expression, inputs read from the end)`` for an output whose shape at the probe's ranks is ``codes``,
    from one run where some inputs gained or lost leading dims: those inputs' dims are read from the end, and
    the dims the output gained or lost with them are those inputs' leading dims. None when the run shows no
    such relation."""
    changed = _changed_rank(base_in, run_in)
    if not changed:
        return None
    conv = list(codes)
    for n in changed:
        r = tensor(base_in, n).dim()

        def from_end(m: re.Match[str], n: str = n, r: int = r) -> str:
            return f"{n}.size({int(m.group(1)) - r})"

        conv = [re.sub(_SIZE.format(name=re.escape(n)), from_end, c) for c in conv]
    extra = len(run_out) - len(base_out)
    if extra == 0:
        return (tuple_expr(conv), list(changed)) if tuple(run_out) == tuple(base_out) else None
    d = abs(extra)
    short, long = (base_out, run_out) if extra > 0 else (run_out, base_out)
    where = [p for p in range(len(short) + 1) if long[:p] == short[:p] and long[p + d:] == short[p:]]
    best = None  # (input, position, how many of the output's dims from there are its leading dims)
    for n, delta in changed.items():
        if delta != extra:
            continue
        for p in where:
            k = 0
            while p + k < len(codes) and codes[p + k] == f"{n}.size({k})":
                k += 1
            if extra < 0 and k < d:
                continue  # the dims the output lost must be the ones the input lost
            if best is None or k > best[2]:
                best = (n, p, k)
    if best is None:
        return None
    n, p, k = best
    r = tensor(base_in, n).dim()
    lead = f"*{n}.shape" if r - k == 0 else f"*{n}.shape[:-{r - k}]"
    parts = [*conv[:p], lead, *conv[p + k:]]
    return (f"{n}.shape" if parts == [f"*{n}.shape"] else tuple_expr(parts)), list(changed)


def tuple_expr(parts: list[str]) -> str:
    """Code of a tuple of ``parts`` (a one-element tuple keeps its comma)."""
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def _holds(expr: str, run: RankRun, g: int, k: int) -> bool:
    inputs, outs = run.groups[g]
    return _evaluates(expr, inputs, tuple(outs[k].shape))


def _generic(codes: list[str], samples: list[tuple[Args, torch.Tensor]], rank_runs: list[RankRun],
             g: int, k: int) -> tuple[str | None, dict[str, tuple[str, int]]]:
    """The expression of an output's shape that holds at every rank the runs tried, and the rank check of each
    input the fake reads; ``(None, checks)`` where only the probe's ranks fit."""
    base_in, base = samples[0]
    ranks = {n: v.dim() for n, v in base_in.items() if isinstance(v, torch.Tensor)}
    text = " ".join(codes)
    positional = {n: ("==", r) for n, r in ranks.items() if reads_by_position(n, text)}
    for primary in dict.fromkeys(r.input for r in rank_runs):
        mine = [r for r in rank_runs if r.input == primary]
        cand = None
        for run in sorted(mine, key=lambda r: not r.grew):  # added dims first
            run_in, run_outs = run.groups[g]
            cand = _generic_candidate(codes, base_in, tuple(base.shape), run_in, tuple(run_outs[k].shape))
            if cand is not None:
                break
        if cand is None:
            continue
        expr, readers = cand
        readers = [n for n in readers if re.search(rf"\b{re.escape(n)}\.(size|shape)\b", expr)]
        if not all(_evaluates(expr, i, tuple(o.shape)) for i, o in samples) \
                or not all(_holds(expr, r, g, k) for r in mine):
            continue
        # each reader holds from the lowest rank it had in a run where the expression held (its own, or one that
        # changed it together with others)
        held = [r for r in rank_runs if _holds(expr, r, g, k)]
        low = {n: min([ranks[n]] + [t.dim() for r in held
                                    if isinstance(t := r.groups[g][0].get(n), torch.Tensor)]) for n in readers}
        checks = {n: (">=", low[n]) for n in readers}
        for n, check in positional.items():
            checks.setdefault(n, check)  # read by position: the probe's rank only
        # an input the op took at another rank where this expression does not hold (a bias with more dims,
        # broadcast) is held to the probe's rank; the expression's own inputs failing it rule it out
        ok = True
        for r in rank_runs:
            if r.input == primary or _holds(expr, r, g, k):
                continue
            changed = [n for n, v in r.groups[g][0].items() if isinstance(v, torch.Tensor)
                       and isinstance(b := base_in.get(n), torch.Tensor) and v.dim() != b.dim()]
            if any(n in readers for n in changed):
                ok = False
                break
            checks.update({n: ("==", ranks[n]) for n in changed})
        if ok:
            return expr, checks
    # only the probe's ranks: the inputs read by position, and any input the op took at another rank where
    # these dims do not hold, are held to the probe's rank
    checks = dict(positional)
    fixed = tuple_expr(codes)
    for r in rank_runs:
        if not _holds(fixed, r, g, k):
            checks.update({n: ("==", ranks[n]) for n, v in r.groups[g][0].items() if isinstance(v, torch.Tensor)
                           and isinstance(b := base_in.get(n), torch.Tensor) and v.dim() != b.dim()})
    return None, checks


def _infer_output(runs: list[list[Group]], rank_runs: list[RankRun], g: int, k: int) -> OutputMeta:
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
                 and all(isinstance(t := i.get(n), torch.Tensor) and t.shape == o.shape for i, o in samples)), None)
    if like:  # same shape as that input in every run: its shape, dim for dim (grad_x is x.shape)
        dims = [shapes.DimExpr(f"{like}.size({i})", confirmed=True) for i in range(base.dim())]
    else:
        dims = []
        for i in range(base.dim()):
            r = shapes.Runs()
            for inputs, out in samples:
                r.add(symbols_of(inputs), out.shape[i])
            dims.append(shapes.infer_dim(names, r))
    meta = OutputMeta(dims, dtype, device, like=like)
    if not meta.todo:
        meta.generic, meta.rank_checks = _generic(meta.codes, samples, rank_runs, g, k)
    return meta


def _promoted(inputs: Args, names: list[str]) -> torch.dtype:
    dtype = tensor(inputs, names[0]).dtype
    for n in names[1:]:
        dtype = torch.promote_types(dtype, tensor(inputs, n).dtype)
    return dtype


def _infer_dtype(samples: list[tuple[Args, torch.Tensor]]) -> str | None:
    tensors = [n for n, v in samples[0][0].items() if isinstance(v, torch.Tensor)]
    fits = [n for n in tensors if all(n in i and tensor(i, n).dtype == o.dtype for i, o in samples)]
    # an input whose dtype changed between runs and that the output followed beats one that never changed
    varied = [n for n in fits if len({tensor(i, n).dtype for i, _ in samples}) > 1]
    if varied or fits:
        return f"{(varied or fits)[0]}.dtype"
    # type promotion (a + b): the inputs that matched at the probe's dtypes, promoted, in every run
    base_in, base_out = samples[0]
    same = [n for n in tensors if tensor(base_in, n).dtype == base_out.dtype]
    if len(same) > 1 and all(_promoted(i, same) == o.dtype for i, o in samples):
        code = f"{same[0]}.dtype"
        for n in same[1:]:
            code = f"torch.promote_types({code}, {n}.dtype)"
        return code
    dtypes = {o.dtype for _, o in samples}
    return str(next(iter(dtypes))) if len(dtypes) == 1 else None
