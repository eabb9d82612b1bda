"""Is a compiled result wrong? Judged the way PyTorch's own benchmark runner judges accuracy.

``benchmarks/dynamo/common.py`` (``check_accuracy``) runs the model in float64 as a reference and calls
``torch._dynamo.utils.same(eager, compiled, fp64_ref, tol=...)``: a tensor passes when it is allclose at
``tol``, or when the compiled result is no further from the fp64 reference (RMSE) than eager fp32 is, times a
multiplier (2, or 3 for small or low-precision tensors), plus ``tol / 10``. tracecheck calls the same
function per tensor, and adds torch's cosine-similarity check (``same(..., cos_similarity=True)``, score
>= 0.99) relative to eager as the RMSE check is: the compiled result fails it only when it is not aligned
with the truth (the float64 result, else eager) while eager is. A tensor that is mathematically zero is noise
on both sides and fails neither check; reduction-order noise passes; a wrong compiled result does not.

Two more sources of fp32 noise, each calibrated on conv nets (benchmarks/calibrate_numerics.py): a tensor that fails
the RMSE check is checked again with eager runs on inputs and weights jittered by ``JITTER`` as ``same``'s reference
(a ReLU or max-pool decision that rounding flips moves a gradient far more than eager's error shows), and a probe
that trains through BatchNorm gets the runner's per-model tolerance for vision training as a floor relative to the
tensor's size (``BATCHNORM_FLOOR``). The failing tensor's evidence says which rule decided (``rule``).

The fp64 reference is made only when some tensor is not allclose at ``tol`` (a fast path for the common
case), from a fresh case whose reachable modules and floating inputs are cast to float64 and run with the
same seeds; random ops draw in float32 there (``Float32Draws``), so the reference sees eager's noise. When the
probe cannot run in float64 (an extension kernel that only takes float32, a dtype check), the verdict falls
back to ``same`` without a reference: allclose at ``tol`` and the cosine check; the evidence says so.

Half precision: a tensor is judged in half precision when it is a bfloat16/float16 tensor, or when the probe's
eager outputs are (``output_half``, ``Reference.half``: a float32 gradient computed through bfloat16 activations
carries bfloat16's rounding, as the benchmark runner's ``--amp``/``--bfloat16`` tolerance applies to every
output). Never because some buffer is (a float32 model with a bfloat16 rotary cache computes in float32). Such a
tensor gets its half dtype's ``tol`` at least, and eager-half and compiled-half are both judged against a
higher-precision run of the same inputs and weights, as the benchmark runner does: float64 where the probe runs
in it, else float32 (the half-precision parameters, buffers and inputs cast to float32: a custom kernel that takes
bf16/fp16/fp32 but not float64, say), widened to float64 so that ``same``'s RMSE check runs (``Reference.dtype``
says which). It fails only when the compiled result is further from that reference than ``same``'s multiplier (3 in
half precision) times eager's error, plus ``tol / 10``, or fails the cosine check. With no higher-precision
reference, half-precision rounding is not judged by allclose alone: a tensor that is not allclose is still checked
against eager for a gross error (cosine similarity, and an RMSE at most ``NO_REFERENCE_RMSE`` of eager's RMS), and
is a mismatch only when it fails one; otherwise it is *not judged* (``Reference.not_judged``, said in the stage's
notes), never a mismatch blamed on a backend for rounding.

Random ops: every run is seeded identically and the compiled stages set
``torch._inductor.config.fallback_random`` (``stages._execution.run_compiled``), so dropout draws the same
numbers in eager and compiled code. The ops that ran (custom ops, random ops) are recorded only when something
disagrees, by one more eager forward under ``inventory``, so the finding's fix names the cause the evidence
supports.

Output: ``judge`` returns at most one record per phase (``forward`` = outputs, ``backward`` = gradients)
with the worst tensor, its errors, and how many tensors disagreed.
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from .. import compat
from ..compat import pytree
from ..model.evidence import WorstTensor
from ..model.records import MismatchRecord

#: ``tol`` of ``same`` per dtype: the benchmark runner's default for float32 (torchbench, 1e-4), its
#: ``--float16``/``--amp`` value (1e-3) and its ``higher_bf16`` value (1e-2).
TOLERANCES = {
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 1e-3,
    torch.bfloat16: 1e-2,
}
#: ``same``'s cosine-similarity threshold (``score >= 0.99``); recorded in the evidence.
COS_THRESHOLD = 0.99
#: relative size of the jitter of inputs and weights in the eager runs that measure fp32's own noise (two runs)
JITTER = 1e-6
JITTER_RUNS = 2
#: the most of a tensor's RMS (vs float64) the jittered runs may excuse: a discrete decision the jitter flips (MoE
#: routing, a threshold) can move a tensor far, and a real bug must not hide behind it. The calibration saw ReLU and
#: max-pool flips move conv-net gradients by up to 1.5%.
JITTER_CAP = 3e-2
#: the per-model tolerance of a probe that trains through BatchNorm: RMSE vs float64 up to this fraction of the float64
#: result's RMS is fp32's, not a bug. PyTorch's benchmark runner checks vision models in training at tol 1e-2 (timm;
#: 2e-2 to 16e-2 for models it lists); its RMSE floor is tol/10, here relative, at tol 2e-2. Calibrated by
#: benchmarks/calibrate_numerics.py: Inductor's fused BatchNorm kernels put up to 0.12% on some batch-statistics
#: gradients where eager is exact to 3e-6, a gradient off by 1% stays above it.
BATCHNORM_FLOOR = 2e-3

FORWARD, BACKWARD = "forward", "backward"
#: half-precision floating dtypes: judged only against a higher-precision reference
HALF = (torch.float16, torch.bfloat16)
#: with no higher-precision reference, a half-precision tensor's RMSE against eager, as a fraction of eager's RMS,
#: above which it is a mismatch all the same (a gross error: a sign flip, a zeroed or 10%-scaled result), far above
#: the rounding of a bf16 ulp or two (relative ~4e-3 each)
NO_REFERENCE_RMSE = 0.1

_PLAIN = (int, float, bool, str, bytes, type(None), torch.dtype, torch.Size)


def tolerance(dtype: torch.dtype) -> float:
    return TOLERANCES.get(dtype, 1e-4)


def phase_of(what: str) -> str:
    """``output[i]`` is forward; ``grad ...`` and "did backward run" are backward."""
    return BACKWARD if what.startswith("grad") or what == "backward" else FORWARD


@dataclass
class Pair:
    """One compared value: ``what`` (``output[0]``, ``grad param:fc.weight``), eager, compiled."""

    what: str
    eager: Any
    compiled: Any


@dataclass
class Reference:
    """The fp64 reference, made lazily: ``values`` by ``what``, or ``unavailable`` saying why not. ``make_jittered``
    makes the eager fp32 runs on jittered inputs and weights (``JITTER``), lazily too, by ``what``: fp32's own noise
    where ReLU and max-pool decisions flip (see ``_judge_one``)."""

    #: the reference run's values by ``what`` (tensors, or what else the probe returned), or why there is none
    make: Callable[[], "Mapping[str, object] | str"] | None = None
    values: Mapping[str, object] | None = None
    unavailable: str | None = None
    _tried: bool = False
    make_jittered: Callable[[], "Sequence[Mapping[str, object]]"] | None = None
    _jittered: Sequence[Mapping[str, object]] | None = None
    #: the per-model tolerance: RMSE allowed beyond same()'s, as a fraction of the float64 result's RMS
    #: (``BATCHNORM_FLOOR`` for a probe that trains through BatchNorm), and why
    relative_floor: float = 0.0
    floor_reason: str = ""
    #: the reference's precision: "float64", or "float32" for a half-precision probe that cannot run in float64
    #: (its values are widened to float64 either way, as ``same`` needs)
    dtype: str = "float64"
    #: the half precision the probe's eager outputs are in (``output_half``; None: they are not): every tensor is
    #: judged in that precision at least (a float32 gradient computed through bfloat16 activations carries
    #: bfloat16's rounding, as the benchmark runner's --amp/--bfloat16 tolerance applies to every output); a
    #: half-precision tensor is judged in its own dtype whatever this is
    half: torch.dtype | None = None
    #: the tensors (``what``) not allclose, passing the gross-error checks, and not judged further for want of a
    #: higher-precision reference
    not_judged: list[str] = field(default_factory=list)

    def get(self, what: str) -> Any:
        if not self._tried:
            self._tried = True
            if self.make is None:
                self.unavailable = "no float64 run was possible for this comparison"
            else:
                got = self.make()
                if isinstance(got, str):
                    self.unavailable = got
                else:
                    self.values = got
        return None if self.values is None else self.values.get(what)

    def jittered(self, what: str) -> list[Any]:
        """``what`` in each jittered eager run (none when there is no such run)."""
        if self._jittered is None:
            self._jittered = self.make_jittered() if self.make_jittered is not None else []
        return [v[what] for v in self._jittered if isinstance(v.get(what), torch.Tensor)]


def batchnorm_training(modules: list[Any]) -> bool:
    """Does the probe train through BatchNorm (a ``_BatchNorm`` module in training mode, in ``modules`` or inside
    them): the runner's vision-training setting, where ``BATCHNORM_FLOOR`` applies."""
    from .. import compat

    return any(compat.is_training_batchnorm(sub) for m in modules for sub in m.modules())


def judge(pairs: list[Pair], reference: Reference) -> list[MismatchRecord]:
    """One record per phase in which any pair disagrees (see the module docstring)."""
    by_phase: dict[str, list[WorstTensor]] = {}
    compared: dict[str, int] = {}
    for pair in pairs:
        phase = phase_of(pair.what)
        compared[phase] = compared.get(phase, 0) + 1
        bad = _judge_one(pair, reference)
        if bad:
            by_phase.setdefault(phase, []).append(bad)
    judged = reference.values is not None
    unavailable = None if judged else reference.unavailable or None
    return [MismatchRecord(phase=phase, disagreeing=len(disagreeing), compared=compared[phase],
                           worst=max(disagreeing, key=_badness),
                           disagreeing_tensors=tuple(str(b.what) for b in disagreeing)[:20],
                           fp64_reference=True if judged else False if unavailable else None,
                           reference_dtype=reference.dtype if judged else None, fp64_unavailable=unavailable)
            for phase, disagreeing in by_phase.items()]


def _badness(m: WorstTensor) -> tuple[float, float]:
    """Structural differences first (a ``detail`` and no tolerance: nothing numeric was compared), then how many times
    eager's own error the compiled error is."""
    if m.detail is not None and m.tol is None:
        return (math.inf, math.inf)
    ratio = m.error_ratio
    return (ratio if ratio is not None else 0.0, m.max_abs_diff or 0.0)


def _judge_one(pair: Pair, reference: Reference) -> WorstTensor | None:
    what, a, b = pair.what, pair.eager, pair.compiled
    if what == "backward":  # the "did backward run" pair: plain values
        return None if a == b else \
            WorstTensor(what=what, detail=f"backward ran in eager: {a}, in the compiled run: {b}")
    if a is None and b is None:
        return None
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        # plain values only: other objects compare by identity and would always "differ"
        if not isinstance(a, _PLAIN) or not isinstance(b, _PLAIN) or a == b:
            return None
        return WorstTensor(what=what, detail=f"eager {a!r:.80} vs compiled {b!r:.80}")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return WorstTensor(what=what, detail=f"eager {type(a).__name__} vs compiled {type(b).__name__}")
    base = WorstTensor(what=what, dtype=str(a.dtype), shape=tuple(int(n) for n in a.shape))
    if a.shape != b.shape or a.dtype != b.dtype:
        return replace(base, detail=f"eager {tuple(a.shape)} {a.dtype} vs compiled {tuple(b.shape)} {b.dtype}")
    a, b = a.detach().cpu(), b.detach().cpu()
    if not a.is_floating_point() and not a.is_complex():
        return None if torch.equal(a, b) else replace(base, detail="integer/bool values differ")
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    half = a.dtype if a.dtype in HALF else reference.half  # per tensor: its own dtype, else the outputs' precision
    tol = max(tolerance(a.dtype), tolerance(half)) if half is not None else tolerance(a.dtype)
    if torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True):
        return None  # same()'s own first test: no reference needed
    # NaN and Inf in the same places with the same values are agreement: compare the finite rest
    a_bad, b_bad = ~torch.isfinite(a), ~torch.isfinite(b)
    if not torch.equal(a_bad, b_bad) or not torch.equal(a[a_bad].nan_to_num(), b[b_bad].nan_to_num()):
        where = int((a_bad != b_bad).sum()) or int(a_bad.sum())
        return replace(base, tol=tol, max_abs_diff=None,
                       detail=f"NaN or Inf where the other side differs ({where} element(s))")
    fp64 = reference.get(what)
    if isinstance(fp64, torch.Tensor):
        fp64 = fp64.detach().cpu()
        fp64 = torch.view_as_real(fp64) if fp64.is_complex() else fp64
        fp64 = fp64.double() if fp64.shape == a.shape else None
    else:
        fp64 = None
    if bool(a_bad.any()):
        keep = ~a_bad
        a, b = a[keep], b[keep]
        fp64 = fp64[keep] if fp64 is not None else None
    if fp64 is None and half is not None:
        # half precision with no higher-precision reference: allclose alone would blame rounding on the backend, so
        # only a gross error against eager is judged
        return _judge_half_without_reference(what, a, b, replace(base, tol=tol), reference)
    ok_rmse = _same(a, b, fp64, tol)
    jitter_errors: list[float] = []
    scale = float(fp64.double().pow(2).mean().sqrt()) if fp64 is not None and fp64.numel() else 0.0
    res_rmse = _rmse(fp64, b) if fp64 is not None else None
    if not ok_rmse and fp64 is not None and res_rmse is not None and res_rmse <= JITTER_CAP * scale:
        # fp32's own noise where the eager run happened to be exact: the same check against eager runs on inputs
        # and weights jittered by JITTER (a ReLU or max-pool decision that rounding flips moves a gradient by far
        # more than eager's error vs float64 shows; Inductor recomputing a ReLU mask in the backward flips such)
        for j in reference.jittered(what):
            j = j.detach().cpu()
            j = torch.view_as_real(j) if j.is_complex() else j
            if j.shape != pair.eager.shape:
                continue
            j = j.to(a.dtype)[~a_bad] if bool(a_bad.any()) else j.to(a.dtype)
            jitter_errors.append(_rmse(fp64, j) or 0.0)
            ok_rmse = ok_rmse or _same(j, b, fp64, tol)
    floor_used = False
    if not ok_rmse and fp64 is not None and reference.relative_floor:
        # the per-model tolerance: same()'s RMSE rule (its multiplier: 3 under 1000 elements or in half precision, else
        # 2; plus tol/10) with a floor relative to the tensor's size. Not same() itself: its tol is also allclose's, and
        # a tol that large would pass a gradient off by 1% before the RMSE check runs
        noise = max([_rmse(fp64, a) or 0.0, *jitter_errors])
        multiplier = 3.0 if a.numel() < 1000 or a.dtype in HALF else 2.0
        floor_used = True
        ok_rmse = res_rmse is not None and res_rmse <= multiplier * noise + tol / 10 + reference.relative_floor * scale
    # the cosine check, relative to eager as the RMSE check is: compiled must be as aligned with the truth
    # (float64, else eager) as eager is; a result that is mathematically zero is noise on both sides
    truth = fp64.to(a.dtype) if fp64 is not None else a
    ok_cos = _same(truth, b, None, tol, cos_similarity=True) or \
        (fp64 is not None and not _same(truth, a, None, tol, cos_similarity=True))
    if ok_rmse and ok_cos:
        return None
    diff = (a.double() - b.double()).abs()
    worst = float(diff.max()) if diff.numel() else 0.0
    out = replace(base, tol=tol, max_abs_diff=worst if math.isfinite(worst) else None,
                  cos_similarity=_cos(a, b), fp64_used=fp64 is not None,
                  failed=tuple(n for n, ok in (("rmse", ok_rmse), ("cosine", ok_cos)) if not ok))
    if fp64 is not None:
        ref_err, res_err = _rmse(fp64, a), _rmse(fp64, b)
        out = replace(out, rmse_eager_vs_fp64=ref_err, rmse_compiled_vs_fp64=res_err,
                      error_ratio=(res_err / ref_err) if ref_err and res_err is not None else None,
                      rmse_jittered_vs_fp64=max(jitter_errors) if jitter_errors else None,
                      reference_dtype=reference.dtype)
    return replace(out, rule=_rule(out, fp64 is not None, bool(jitter_errors),
                                   f"{reference.relative_floor:g} of the {reference.dtype} result's RMS "
                                   f"({reference.floor_reason})" if floor_used else "", reference.dtype))


def _judge_half_without_reference(what: str, a: torch.Tensor, b: torch.Tensor, base: WorstTensor,
                                   reference: Reference) -> WorstTensor | None:
    """A half-precision tensor (``a`` eager, ``b`` compiled, finite, not allclose) with no higher-precision reference:
    a mismatch only for a gross error against eager, the cosine check (same()'s, eager as the truth) or an RMSE
    above ``NO_REFERENCE_RMSE`` of eager's RMS; else not judged (``Reference.not_judged``). ``base`` holds ``tol``."""
    tol = base.tol if base.tol is not None else tolerance(a.dtype)
    scale = float(a.double().pow(2).mean().sqrt()) if a.numel() else 0.0
    rmse = _rmse(a, b) if a.numel() else 0.0
    relative = (rmse / scale if scale else (0.0 if not rmse else math.inf)) if rmse is not None else math.inf
    ok_rmse = relative <= NO_REFERENCE_RMSE
    ok_cos = _same(a, b, None, tol, cos_similarity=True)
    if ok_rmse and ok_cos:
        reference.not_judged.append(what)
        return None
    diff = (a.double() - b.double()).abs()
    worst = float(diff.max()) if diff.numel() else 0.0
    return replace(base, max_abs_diff=worst if math.isfinite(worst) else None, cos_similarity=_cos(a, b),
                   fp64_used=False, relative_rmse_vs_eager=relative if math.isfinite(relative) else None,
                   relative_rmse_bound=NO_REFERENCE_RMSE, cos_threshold=COS_THRESHOLD,
                   failed=tuple(n for n, ok in (("rmse", ok_rmse), ("cosine", ok_cos)) if not ok),
                   rule=(f"no higher-precision reference: half precision judged against eager for a gross error only, "
                         f"cosine similarity below {COS_THRESHOLD} or an RMSE above {NO_REFERENCE_RMSE:g} of eager's "
                         f"RMS (tol {tol:g})"))


def _rule(m: WorstTensor, fp64: bool, jittered: bool, floor: str = "", ref_dtype: str = "float64") -> str:
    """Which of torch._dynamo.utils.same's checks decided, in words (the evidence's ``rule``)."""
    tol = m.tol if m.tol is not None else 0.0
    eager = f"eager {str(m.dtype or '').removeprefix('torch.')}'s".replace("eager 's", "eager's")
    if "rmse" in m.failed:
        if not fp64:
            return f"not allclose at tol {tol:g} (no float64 reference: the RMSE check could not run)"
        return (f"RMSE vs {ref_dtype} above same()'s multiplier (2, or 3 under 1000 elements or in half precision) "
                f"times {eager} RMSE plus tol/10 (tol {tol:g})"
                + (f", and above it times the RMSE of eager runs on inputs and weights "
                   f"jittered by {JITTER:g} (rounding noise at ReLU/max-pool decisions)" if jittered else "")
                + (f", plus the per-model tolerance, {floor}" if floor else ""))
    return (f"cosine similarity to the {ref_dtype if fp64 else 'eager'} result below {COS_THRESHOLD} while eager's "
            "is above")


def _same(a: torch.Tensor, b: torch.Tensor, fp64: torch.Tensor | None, tol: float, cos_similarity: bool = False) -> bool:
    """``torch._dynamo.utils.same`` on one tensor, its logging silenced (the record carries the numbers)."""
    logger = logging.getLogger("torch._dynamo.utils")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return compat.same(a, b, fp64, cos_similarity=cos_similarity, tol=tol, equal_nan=True,
                           log_error=lambda *args, **kwargs: None)
    finally:
        logger.setLevel(level)


def _rmse(ref: torch.Tensor, res: torch.Tensor) -> float | None:
    value = float(compat.rmse(ref.double(), res.double()))
    return value if math.isfinite(value) else None


def _cos(a: torch.Tensor, b: torch.Tensor) -> float | None:
    if a.numel() == 0:
        return None
    value = float(torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0,
                                                         eps=1e-6))
    return round(value, 6) if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------------------
# The float64 run


@contextlib.contextmanager
def float64(modules: list[torch.nn.Module]) -> Iterator[None]:
    """Parameters and buffers of ``modules`` in float64 for the duration, then exactly as they were.

    In place and restored (data and ``.grad``), because a probe may hand out the same module on every call:
    a cast copy would need a deep copy of whatever the callable holds.
    """
    with cast(modules, torch.float64):
        yield


@contextlib.contextmanager
def cast(modules: list[torch.nn.Module], dtype: torch.dtype) -> Iterator[None]:
    """``float64`` for any ``dtype``: floating parameters and buffers of ``modules`` in ``dtype`` for the duration,
    then exactly as they were. To float32, only the half-precision ones are cast (float64 ones stay)."""
    saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
    seen: set[int] = set()
    for m in modules:
        for t in [*m.parameters(), *m.buffers()]:
            if t.is_floating_point() and id(t) not in seen and (dtype == torch.float64 or t.dtype in HALF):
                seen.add(id(t))
                saved.append((t, t.data, t.grad if isinstance(t, torch.nn.Parameter) else None))
    try:
        with torch.no_grad():
            for t, data, _ in saved:
                t.data = data.to(dtype)
                if isinstance(t, torch.nn.Parameter):
                    t.grad = None
        yield
    finally:
        for t, data, grad in saved:
            t.data = data
            if isinstance(t, torch.nn.Parameter):
                t.grad = grad


@contextlib.contextmanager
def jittered(modules: list[torch.nn.Module], level: float, gen: torch.Generator) -> Iterator[None]:
    """Floating parameters of ``modules`` times ``1 + level·N(0,1)`` for the duration, then exactly as they were
    (in place, as ``float64`` does, and for the same reason). Buffers stay: running statistics feed no training step."""
    saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
    seen: set[int] = set()
    for m in modules:
        for p in m.parameters():
            if p.is_floating_point() and id(p) not in seen:
                seen.add(id(p))
                saved.append((p, p.data, p.grad))
    try:
        with torch.no_grad():
            for t, data, _ in saved:
                t.data = _jitter_one(data, level, gen)
                t.grad = None
        yield
    finally:
        for t, data, grad in saved:
            t.data = data
            t.grad = grad


def _jitter_one(t: torch.Tensor, level: float, gen: torch.Generator) -> torch.Tensor:
    """``t·(1 + level·N(0,1))``, computed in float32 at least (in half precision the jitter is below eps and rounds
    away: such a tensor comes back unchanged)."""
    work = torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype
    noise = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device, work)
    return (t.to(work) * (1 + level * noise)).to(t.dtype)


def jitter(tree: Any, level: float, gen: torch.Generator) -> Any:
    """Floating tensors of ``tree`` times ``1 + level·N(0,1)`` (new leaves, ``requires_grad`` kept)."""
    def one(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return _jitter_one(t.detach(), level, gen).requires_grad_(t.requires_grad)
        return t

    return pytree.tree_map(one, tree)


def to_float64(tree: Any) -> Any:
    """Floating tensors of ``tree`` as float64 leaves (complex ones as complex128; ``requires_grad`` kept);
    everything else as is."""
    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.detach().double().requires_grad_(t.requires_grad)
        if isinstance(t, torch.Tensor) and t.is_complex():
            return t.detach().to(torch.complex128).requires_grad_(t.requires_grad)
        return t

    return pytree.tree_map(cast, tree)


def to_float32(tree: Any) -> Any:
    """Half-precision floating tensors of ``tree`` as float32 leaves (``requires_grad`` kept); everything else as
    is: the inputs of a half-precision probe's float32 reference."""
    def one(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dtype in HALF:
            return t.detach().float().requires_grad_(t.requires_grad)
        return t

    return pytree.tree_map(one, tree)


def half_precision(tree: Any, modules: list[torch.nn.Module]) -> torch.dtype | None:
    """Does the probe hold half-precision tensors: bfloat16 (or else float16) when a tensor of that dtype is among its
    inputs (``tree``) or the parameters and buffers of ``modules``; None when none is. What makes a float32 run a
    reference (it differs from eager); not what a tensor is judged in (``output_half``)."""
    found = {t.dtype for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor) and t.dtype in HALF}
    found |= {t.dtype for m in modules for t in [*m.parameters(), *m.buffers()] if t.dtype in HALF}
    return _widest(found)


def output_half(outputs: list[torch.Tensor]) -> torch.dtype | None:
    """The half precision a probe computes in, from its eager outputs: bfloat16 (or else float16) when a floating
    output is of that dtype; None when none is (a float32 model with a bfloat16 buffer computes in float32)."""
    return _widest({t.dtype for t in outputs if isinstance(t, torch.Tensor) and t.dtype in HALF})


def _widest(found: set[torch.dtype]) -> torch.dtype | None:
    """bfloat16 when among ``found`` (the looser tolerance), else float16 when it is, else None."""
    return torch.bfloat16 if torch.bfloat16 in found else torch.float16 if found else None


#: seeded ops whose output is an input transformed with random numbers, not the random numbers themselves:
#: run in float64 (a float32 run would cost the activation its precision); their draws match float32's anyway
_RANDOM_TRANSFORMS = {"aten::native_dropout", "aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
                      "aten::feature_alpha_dropout"}


class Float32Draws(compat.TorchDispatchMode):
    """Inside the float64 reference run: random ops draw in float32, as the eager run did, and the samples are
    widened to float64. torch draws other numbers in float64 than in float32 from the same seed (``randn``,
    ``rand``, ``normal_``, ``uniform_``, ``bernoulli``), so without this a model that adds noise would be
    compared with a reference that saw other noise, and a wrong compiled result could pass."""

    # func is an OpOverload, a type private by name (tests/test_house.py: such names live in compat.py only)
    def __torch_dispatch__(self, func: Any, types: Sequence[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, object] | None = None) -> Any:
        from ..model.report import op_name

        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded not in func.tags or op_name(str(func)) in _RANDOM_TRANSFORMS:
            return func(*args, **kwargs)
        narrowed = False

        def narrow(t: Any) -> Any:
            nonlocal narrowed
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                narrowed = True
                return t.float()
            if t is torch.float64:
                narrowed = True
                return torch.float32
            return t

        args32, kwargs32 = pytree.tree_map(narrow, tuple(args)), pytree.tree_map(narrow, dict(kwargs))
        if not narrowed:
            return func(*args, **kwargs)
        out = func(*args32, **kwargs32)
        # an in-place or out= op wrote into the float32 copies: write the samples back into the float64 tensors
        for i, arg in enumerate(compat.op_schema(func).arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                original = args[i] if i < len(args) else kwargs.get(arg.name)
                written = args32[i] if i < len(args32) else kwargs32.get(arg.name)
                if isinstance(original, torch.Tensor) and original is not written:
                    original.copy_(written)
                    if out is written:
                        out = original
        return pytree.tree_map(
            lambda t: t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t, out)


def as_float64_values(tree: Any) -> Any:
    """Floating outputs of the float64 run widened to float64 (a model may compute parts in float32 on
    purpose), as the benchmark runner does with its fp64 outputs."""
    return pytree.tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, tree)


# ---------------------------------------------------------------------------------------------------------
# What ran: custom ops and random ops


@dataclass
class OpInventory:
    """Ops one eager forward called, below autograd: ``custom_ops`` (outside torch's namespaces) and
    ``random_ops`` (ATen ops tagged ``nondeterministic_seeded``: dropout, bernoulli, rand*)."""

    custom_ops: list[str] = field(default_factory=list)
    random_ops: list[str] = field(default_factory=list)


def inventory(run: Callable[[], Any]) -> OpInventory:
    """Run ``run()`` under ``OpRecorder`` (names only); an exception ends the run, not the record."""
    from ..evidence.oprecorder import OpRecorder

    rec = OpRecorder(record_args=False)
    try:
        with rec:
            run()
    except Exception:
        pass
    return OpInventory(rec.custom_ops, rec.random_ops)
