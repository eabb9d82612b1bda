"""What a stage keeps in ``StageResult.extra``, typed: one dataclass per stage payload, written by its stage
(``to_extra``) and read by everyone else (``of``), so no reader names a payload's keys. In a report and on the
wire a payload is the plain dict it always was (docs/report-schema.md, tested against these fields). Counts a
baseline compares are named by the stage's ``StageSpec.counts``. Pure: no torch import."""
from __future__ import annotations

import os
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, TypedDict, TypeVar

from .errors import ErrorRecord, frame_wire
from .evidence import Specialization
from .records import DYNAMO, RecompileRecord, read_list
from .reportio import Json, count, integer, measure, obj, text, texts


#: a payload type (``Payload.of`` returns the subclass it is called on)
_P = TypeVar("_P", bound="Payload")


class Payload:
    """The base of every payload type: a dataclass whose fields are what its stage writes."""

    #: the key of ``extra`` that holds the payload; "" for one whose fields are ``extra``'s own keys
    KEY: ClassVar[str] = ""
    #: fields written only when they hold something (a report of a run that had none lacks the key)
    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    #: set by ``@dataclass`` on every subclass; declared so that ``fields()`` accepts a payload
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    #: the fields a report held (``of``); absent on a payload its stage built, which wrote every field
    _written: frozenset[str]

    def to_extra(self) -> Json:
        body = {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.name in self.OPTIONAL and getattr(self, f.name) is None)}
        return {self.KEY: body} if self.KEY else body

    @classmethod
    def of(cls: type[_P], extra: Json) -> _P | None:
        """The payload in a stage's ``extra`` (a report's, or a stage record's), None when the stage wrote none.
        A field a report from an older tracecheck lacks reads as its default."""
        body = extra.get(cls.KEY) if cls.KEY else extra
        if not isinstance(body, dict):
            return None
        names = [f.name for f in fields(cls) if f.name in body]
        if not names:
            return None
        payload = cls(**{n: body[n] for n in names})
        payload._written = frozenset(names)
        return payload

    def written(self, name: str) -> bool:
        """Did the stage write this field (a report from an older tracecheck may lack a count)? A payload built
        by its stage wrote every field."""
        return name in getattr(self, "_written", {f.name for f in fields(self)})


@dataclass(frozen=True)
class HookCounts:
    """Hooks compiled autograd should capture, and those it did (``CompiledAutogradCounts.hooks``)."""

    #: hooks registered on the inputs and parameters before the step, by how (``register_hook``,
    #: ``register_post_accumulate_grad_hook``)
    registered: dict[str, int] = field(default_factory=dict)
    #: call_hook nodes by hook_type in the last captured graph (``tensor_pre_hook``, ``post_acc_grad_hook``)
    in_graph: dict[str, int] = field(default_factory=dict)
    #: where ``in_graph`` was read, in words
    evidence: str = ""

    def to_json(self) -> Json:
        return {"registered": dict(self.registered), "in_graph": dict(self.in_graph), "evidence": self.evidence}

    @classmethod
    def of(cls, d: object) -> "HookCounts":
        if isinstance(d, HookCounts):
            return d
        d = obj(d)

        def counts(v: object) -> dict[str, int]:
            return {str(k): c for k, x in v.items() if (c := count(x)) is not None} if isinstance(v, dict) else {}
        return cls(counts(d.get("registered")), counts(d.get("in_graph")), str(d.get("evidence") or ""))


@dataclass(frozen=True)
class InputShapes:
    """--dynamic: the shapes of the tensor inputs at each input shape the steps ran (A, the probe's; B, dim 0 tiled)."""

    a: tuple[tuple[int, ...], ...] = ()
    #: None: the second shape did not run
    b: tuple[tuple[int, ...], ...] | None = None

    def to_json(self) -> Json:
        def lists(shapes: tuple[tuple[int, ...], ...]) -> list[list[int]]:
            return [list(s) for s in shapes]
        return {"A": lists(self.a), **({"B": lists(self.b)} if self.b is not None else {})}

    @classmethod
    def of(cls, d: object) -> "InputShapes | None":
        if isinstance(d, InputShapes):
            return d
        if not isinstance(d, dict):
            return None

        def shape(s: list[object]) -> tuple[int, ...] | None:  # a shape with a bad dimension is no shape
            dims = tuple(c for n in s if (c := count(n)) is not None)
            return dims if len(dims) == len(s) else None

        def shapes(v: object) -> tuple[tuple[int, ...], ...]:
            return tuple(got for s in v if isinstance(s, list) and (got := shape(s)) is not None) \
                if isinstance(v, list) else ()
        return cls(shapes(d.get("A")), shapes(d.get("B")) if "B" in d else None)


@dataclass(frozen=True)
class OtherBackend:
    """The failing compiled-autograd steps rerun with the other backend (``_compiled_autograd._other_backend``): its
    error, None when they pass, or why they were not run."""

    backend: str
    #: what the rerun raised: its type, message and step (the JSON keeps these three)
    error: ErrorRecord | None = None
    not_run: str | None = None

    def to_json(self) -> Json:
        error = None if self.error is None else \
            {"type": self.error.type, "message": self.error.message, "step": self.error.step}
        return {"backend": self.backend, "error": error, **({"not_run": self.not_run} if self.not_run else {})}

    @classmethod
    def of(cls, d: object) -> "OtherBackend | None":
        if isinstance(d, OtherBackend):
            return d
        if not isinstance(d, dict):
            return None
        return cls(str(d.get("backend") or "?"), ErrorRecord.of(d.get("error")), text(d.get("not_run")))


@dataclass
class CompiledAutogradCounts(Payload):
    """The compiled_autograd stage: the same steps with and without compiled autograd (docs/compiled-autograd.md).
    A count is None where the run that measures it stopped early (its records would be partial)."""

    #: the backend the steps were compiled with
    backend: str = "aot_eager"
    #: steps the compiled-autograd run made; of them at the probe's own input shape; of them warm-up
    steps: int | None = None
    steady_shape_steps: int | None = None
    warmup_steps: int | None = None
    #: Dynamo graphs without compiled autograd; compiled autograd's backward graphs; per capture; forward graphs
    unique_graphs_without_ca: int | None = None
    unique_graphs_with_ca: int | None = None
    backward_graphs_per_capture: Any = None
    unique_graphs_forward_with_ca: int | None = None
    #: graph breaks without compiled autograd; in compiled autograd's backward graphs
    graph_breaks_without_ca: int | None = None
    backward_graph_breaks: int | None = None
    #: backward captures in all, per step, and the compiles they cost
    captures: int | None = None
    captures_per_step: list[int] = field(default_factory=list)
    compiles: int | None = None
    #: every recompile (reason, step, user frame); their number (None: not measured)
    recompiles: list[RecompileRecord] = field(default_factory=list)
    recompile_count: int | None = None
    #: hooks inside the last captured backward graph, and the registrations they came from
    hooks_captured: int | None = None
    hooks: HookCounts = field(default_factory=HookCounts)
    #: --dynamic: the input shape per step (A, B), the shapes, and why the second shape was not run
    schedule: list[str] | None = None
    shapes: InputShapes | None = None
    dynamic_note: str | None = None
    #: the plain torch.compile run's own error (backend "eager": Dynamo's), when it has one
    error_without_ca: str | None = None
    #: the failing steps rerun with the other backend (``_compiled_autograd._other_backend``)
    other_backend: OtherBackend | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("schedule", "shapes", "dynamic_note", "error_without_ca",
                                           "other_backend")

    @classmethod
    def of(cls, extra: Json) -> "CompiledAutogradCounts | None":
        counts = super().of(extra)
        if counts is None:
            return None
        r: object = counts.recompiles
        if "recompile_count" not in extra:
            # a report from before the count was written: the records' number, or the int an older one held
            # (then in any stage's ``extra``)
            counts.recompile_count = len(r) if isinstance(r, list) else integer(r)
        counts.recompiles = read_list(r, RecompileRecord.of)
        counts.hooks = HookCounts.of(counts.hooks)
        counts.shapes = InputShapes.of(counts.shapes)
        counts.other_backend = OtherBackend.of(counts.other_backend)
        return counts

    def to_extra(self) -> Json:
        out = super().to_extra()
        out.update(recompiles=[r.to_wire() for r in self.recompiles], hooks=self.hooks.to_json())
        if self.shapes is not None:
            out["shapes"] = self.shapes.to_json()
        if self.other_backend is not None:
            out["other_backend"] = self.other_backend.to_json()
        return out


@dataclass
class InductorKernels(Payload):
    """The inductor stage: what its generated code holds."""

    KEY: ClassVar[str] = "inductor"
    #: output code modules, kernels Inductor generated, custom ops it calls as opaque extern kernels
    graphs: int = 0
    generated_kernels: int = 0
    extern_custom_ops: int = 0
    #: Inductor's FX graph cache and AOTAutograd's cache over the stage's compile, torch's own counters
    #: (``counters["inductor"]["fxgraph_cache_hit"]``, ``counters["aot_autograd"]["autograd_cache_hit"]``, ...): a warm
    #: re-run of an unchanged model compiles from them (None: a report from before they were kept)
    fxgraph_cache_hit: int | None = None
    fxgraph_cache_miss: int | None = None
    fxgraph_cache_bypass: int | None = None
    autograd_cache_hit: int | None = None
    autograd_cache_miss: int | None = None

    @classmethod
    def of(cls, extra: Json) -> "InductorKernels | None":
        """The payload; a cache count that is no count (a hand-edited report) reads as not counted."""
        kernels = super().of(extra)
        if kernels is not None:
            for name in ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass", "autograd_cache_hit",
                         "autograd_cache_miss"):
                if count(getattr(kernels, name)) is None:
                    setattr(kernels, name, None)
        return kernels

    def cache_text(self) -> str | None:
        """``FX graph cache 4 hits, 0 misses; AOTAutograd cache 2 hits, 0 misses``; None when not counted."""
        if self.fxgraph_cache_hit is None and self.autograd_cache_hit is None:
            return None
        def n(v: int | None, what: str, plural: str) -> str:
            return f"{v or 0} {what if (v or 0) == 1 else plural}"
        fx = (f"FX graph cache {n(self.fxgraph_cache_hit, 'hit', 'hits')}, {n(self.fxgraph_cache_miss, 'miss', 'misses')}"
              + (f", {n(self.fxgraph_cache_bypass, 'bypass', 'bypasses')}" if self.fxgraph_cache_bypass else ""))
        aot = (f"AOTAutograd cache {n(self.autograd_cache_hit, 'hit', 'hits')}, "
               f"{n(self.autograd_cache_miss, 'miss', 'misses')}")
        return f"{fx}; {aot}"


@dataclass(frozen=True)
class SpecializationSite:
    """A specialization the shape environment made, as the report keeps it (``DynamicRun.specializations``): the
    symbol, the sources it stood for, the constant, the step, and ``file:line`` of the code that forced it."""

    symbol: str | None = None
    sources: tuple[str, ...] = ()
    value: str | None = None
    step: int | None = None
    at: str | None = None

    @classmethod
    def of_specialization(cls, s: Specialization) -> "SpecializationSite":
        return cls(s.symbol, s.sources, s.value, s.step, s.frame.location if s.frame else None)

    def to_json(self) -> Json:
        return {"symbol": self.symbol, "sources": list(self.sources), "value": self.value, "step": self.step,
                "at": self.at}

    @classmethod
    def of(cls, d: object) -> "SpecializationSite | None":
        if not isinstance(d, dict):
            return None
        return cls(text(d.get("symbol")), texts(d.get("sources")), text(d.get("value")), integer(d.get("step")),
                   text(d.get("at")))


@dataclass
class DynamicRun(Payload):
    """The dynamic stage: the batch sizes run with the batch dimension marked dynamic."""

    KEY: ClassVar[str] = "dynamic"
    #: the batch sizes run (up to the failing one)
    batch_sizes: list[int] = field(default_factory=list)
    #: one graph served every size
    symbolic: bool = False
    #: Dynamo's recompiles (the report keeps their reason, step and user frame), and the specializations the shape
    #: environment made
    recompiles: list[RecompileRecord] = field(default_factory=list)
    specializations: list[SpecializationSite] = field(default_factory=list)
    #: what dynamic=True (every dimension symbolic) found besides, once the batch alone passed (stages/dynamic.py)
    every_dimension: str | None = None

    @classmethod
    def of(cls, extra: Json) -> "DynamicRun | None":
        run = super().of(extra)
        if run is not None:  # the report keeps no source: every recompile here is Dynamo's
            run.recompiles = [replace(r, source=DYNAMO) for r in read_list(run.recompiles, RecompileRecord.of)]
            run.specializations = read_list(run.specializations, SpecializationSite.of)
        return run

    def to_extra(self) -> Json:
        out = super().to_extra()
        out[self.KEY].update(
            recompiles=[{"reason": r.reason, "step": r.step, "user_frame": frame_wire(r.user_frame)}
                        for r in self.recompiles],
            specializations=[s.to_json() for s in self.specializations])
        return out


@dataclass
class VmapRun(Payload):
    """The vmap stage: torch.func.vmap and torch.func.grad against the eager loop (docs/report-schema.md)."""

    KEY: ClassVar[str] = "vmap"
    #: the batch vmap maps over
    batch: int = 0
    #: one word per transform: what came of it
    vmap: str = ""
    grad: str = ""
    #: vmap's randomness setting, tensors compared, inputs batched, inputs perturbed
    randomness: str | None = None
    compared: Any = None
    batched_inputs: Any = None
    perturbed: Any = None
    #: what torch.func.grad was taken with respect to, and the gradients compared
    grad_wrt: Any = None
    grads_compared: Any = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("randomness", "compared", "batched_inputs", "perturbed", "grad_wrt",
                                           "grads_compared")


@dataclass
class ExportGraph(Payload):
    """The export stage: the exported program's graph."""

    KEY: ClassVar[str] = "export"
    graph_nodes: int = 0


@dataclass(frozen=True)
class SourceLines:
    """One file's lines in a probe's forward: on the stack of a node Dynamo captured (``graph``), or on the stack of
    a torch call the eager forward made and no captured node has (``eager``: the code that ran outside graphs)."""

    graph: tuple[int, ...] = ()
    eager: tuple[int, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "SourceLines":
        """Read one file's lines; anything but a list of positive line numbers reads as none (a hand-edited report)."""
        if isinstance(d, SourceLines):
            return d
        d = obj(d)

        def numbers(v: Any) -> tuple[int, ...]:
            return tuple(x for x in v if isinstance(x, int) and not isinstance(x, bool) and x > 0) \
                if isinstance(v, (list, tuple)) else ()
        return cls(numbers(d.get("graph")), numbers(d.get("eager")))


@dataclass
class Coverage(Payload):
    """The explain stage: how much of the probe's forward Dynamo captured, in torch's own counters over the
    explain run (``torch._dynamo.utils.counters``, the ones PyTorch's CI gates on in
    benchmarks/dynamo/check_graph_breaks.py) beside the torch-level calls the same forward makes in eager. A count
    is None where it was not measured (the explain run or the eager count raised)."""

    KEY: ClassVar[str] = "coverage"
    #: ``counters["stats"]["calls_captured"]``: call nodes (call_function, call_method, call_module) in the FX
    #: graphs Dynamo captured, ``getitem`` on a tuple output (``torch.split``'s pieces) included
    calls_captured: int | None = None
    #: ``counters["stats"]["unique_graphs"]``: graphs Dynamo compiled
    unique_graphs: int | None = None
    #: frames Dynamo began to convert and gave up on, run whole in eager (``counters["frames"]``: total - ok)
    frames_eager: int | None = None
    #: torch-level calls the eager forward makes (a TorchFunctionMode, outermost calls only), less the metadata
    #: queries Dynamo answers at trace time without a graph node (``.shape``, ``.size()``, ``.dtype``, ...)
    torch_calls_eager: int | None = None
    #: calls_captured / torch_calls_eager, capped at 1: an estimate at torch-function level (None: a count missing)
    captured_share: float | None = None
    #: per source file (absolute path; not torch's, the standard library's or tracecheck's), the lines on the stack
    #: of a torch call: inside a graph Dynamo captured, or run in eager only (the source view, render/html.py)
    lines: "dict[str, SourceLines] | None" = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("lines",)

    @classmethod
    def of(cls, extra: Json) -> "Coverage | None":
        """The payload; a count that is no count (a hand-edited report: a string, a negative number) reads as not
        measured, and a file key that is no path is dropped, so that no reader meets odd data."""
        cov = super().of(extra)
        if cov is None:
            return None
        for name in ("calls_captured", "unique_graphs", "frames_eager", "torch_calls_eager"):
            if count(getattr(cov, name)) is None:
                setattr(cov, name, None)
        share = measure(cov.captured_share)
        if share is None or share > 1:
            cov.captured_share = None
        if isinstance(cov.lines, dict):  # from a report (plain dicts) or the stage (typed)
            cov.lines = {f: SourceLines.of(v) for f, v in cov.lines.items() if isinstance(f, str) and f}
        else:
            cov.lines = None
        return cov

    def to_extra(self) -> Json:
        out = super().to_extra()
        if self.lines:
            out[self.KEY]["lines"] = {f: {"graph": list(v.graph), "eager": list(v.eager)} for f, v in self.lines.items()}
        return out

    @staticmethod
    def share(captured: int | None, eager: int | None) -> float | None:
        """The captured share of the eager calls, capped at 1; None when either count is missing or eager made none."""
        if captured is None or not eager:
            return None
        return round(min(1.0, captured / eager), 3)


@dataclass(frozen=True)
class BreakCost:
    """One graph break's share of the compiled forward: the time outside graphs that followed it (the unsupported
    code in eager, Dynamo's re-entry, a frame it gave up on because of it), per call, under ``torch.profiler``."""

    file: str
    line: int
    gb_type: str | None = None
    #: milliseconds per call under the profiler (median over the calls)
    ms: float = 0.0
    #: of the compiled call's time under the profiler: the median, and the lowest and highest over the calls
    share: float = 0.0
    low: float = 0.0
    high: float = 0.0

    @property
    def noisy(self) -> bool:
        """Too spread over the calls to be a measurement (``NOISY_RULE``): ``3% (1%-72%)`` is noise, ``60% (48%-62%)``
        a measurement. A noisy cost is said as "not measurable here" and ranks nothing."""
        return self.high - self.low > max(NOISY_POINTS, self.share)

    @classmethod
    def of(cls, body: Any) -> "BreakCost | None":
        """One entry of a report; None for one a hand edit made odd (a share outside 0-1, low above high, NaN)."""
        if not isinstance(body, dict) or not isinstance(body.get("file"), str) or count(body.get("line")) is None:
            return None
        raw = [body.get(k) for k in ("ms", "share", "low", "high")]
        nums = [n for n in map(measure, raw) if n is not None]
        if len(nums) != len(raw):
            return None
        ms, share, low, high = nums
        if ms > 1e9 or not 0 <= low <= share <= high <= 1:
            return None
        gb = body.get("gb_type")
        return cls(file=body["file"], line=body["line"], gb_type=gb if isinstance(gb, str) else None,
                   ms=ms, share=share, low=low, high=high)


#: a break's cost is noise when its calls' shares range (highest - lowest) wider than this and than the median share
NOISY_POINTS = 0.10
NOISY_RULE = ("its calls' shares range wider than the median share and than 10 points: another process, a page "
              "fault or the profiler's own cost, not the break")


@dataclass
class BreakCosts(Payload):
    """The explain stage, when it found breaks: what each break costs the compiled forward, measured
    (stages/_break_cost.py says how). ``breaks`` costliest first."""

    KEY: ClassVar[str] = "break_costs"
    #: calls measured (each under the profiler, and as many compiled/eager pairs without it)
    calls: int = 0
    #: the compiled (backend="eager") and the eager forward, median milliseconds without the profiler, side by side
    compiled_ms: float | None = None
    eager_ms: float | None = None
    #: interquartile range / median of the compiled calls: the noise of the timings
    compiled_spread: float | None = None
    #: the share of the compiled call outside graphs that followed no break (before the first graph, after a return)
    unattributed: float | None = None
    breaks: "list[BreakCost]" = field(default_factory=list)

    @classmethod
    def of(cls, extra: Json) -> "BreakCosts | None":
        costs = super().of(extra)
        if costs is None:
            return None
        items = costs.breaks if isinstance(costs.breaks, list) else []
        costs.breaks = [c for c in (x if isinstance(x, BreakCost) else BreakCost.of(x) for x in items) if c]
        for name in ("compiled_ms", "eager_ms", "compiled_spread", "unattributed"):
            v = getattr(costs, name)
            n = measure(v)
            if n is None or n > 1e9 or (name == "unattributed" and n > 1):
                setattr(costs, name, None)
        if not count(costs.calls):
            return None  # no call measured: nothing to rank by
        return costs

    def to_extra(self) -> Json:
        out = super().to_extra()
        out[self.KEY]["breaks"] = [asdict(c) for c in self.breaks]
        return out

    def of_site(self, file: str | None, line: int | None) -> "BreakCost | None":
        """The cost of the break at a file and line (the path as the run saw it, or its real path)."""
        if not file or line is None:
            return None
        real = os.path.realpath(file)
        return next((c for c in self.breaks if c.line == line and c.file in (file, real)), None)


class GradcheckVerdict(TypedDict, total=False):
    """One call's gradient check as the report keeps it (classify/results._gradcheck_verdict)."""

    status: str
    method: str
    skip: str
    note: str
    #: per input: |numerical - analytical| / max(|numerical|, |analytical|)
    relative_errors: dict[str, float]
    #: per input whose check could not decide: why
    inconclusive: dict[str, str]


@dataclass
class StageNotes(Payload):
    """What any stage may note beside its payload, and what the classifier adds to a stage's result. Every field
    is written only when it holds something."""

    #: parts of the stage that did not run or were not checked, each with why
    not_checked: list[str] | None = None
    #: why compiled and eager values were not compared, when they were not
    numerics: str | None = None
    #: the explain stage: explain()'s break reasons, verbatim
    explain_reasons: list[str] | None = None
    #: the eager stage: custom ops the probe's file registered (the opcheck stage is scheduled from them)
    registered_custom_ops: list[str] | None = None
    #: the opcheck stage: per op, per test: SUCCESS, FAIL, or why it was not run
    opcheck: dict[str, dict[str, str]] | None = None
    #: the gradcheck stage: per custom op or autograd.Function, its verdict
    gradcheck: dict[str, GradcheckVerdict] | None = None
    #: the gradcheck stage: the probe's own gradient end to end (stages/_gradients.end_to_end)
    probe_gradient: GradcheckVerdict | None = None
    #: the live progress line only (api._as_settled, never in a report): a stage still running may re-attribute the
    #: failure's kind (classify/attribute.unknowns)
    kind_pending: bool | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("not_checked", "numerics", "explain_reasons", "registered_custom_ops",
                                           "opcheck", "gradcheck", "probe_gradient", "kind_pending")


#: the payload type of each stage that writes one: the one its counts are read from (``StageSpec.counts``)
PAYLOADS: dict[str, type[Payload]] = {"compiled_autograd": CompiledAutogradCounts, "inductor": InductorKernels,
                                       "dynamic": DynamicRun, "vmap": VmapRun, "export": ExportGraph,
                                       "explain": Coverage}
#: the payloads a stage writes beside that one, under their own ``KEY`` (compared by no baseline)
BESIDE: dict[str, tuple[type[Payload], ...]] = {"explain": (BreakCosts,)}
