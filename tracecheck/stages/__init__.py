"""The stage registry: the only list of stages.

Every public module of this package (a name without a leading underscore) is a stage and defines ``SPEC``, a
``StageSpec``; modules whose name starts with ``_`` hold machinery the stages share (``_execution``: run,
compare; ``_compiled_autograd``: that stage's measurement). The worker, the CLI's ``--stages``, the JSON,
baselines and renderers read this registry. Adding a stage is one new module here, plus its doc and test.

Importing the registry does not import torch: stage modules import their machinery inside ``run``.
"""
from __future__ import annotations

import importlib
import pkgutil

from ..model.report import LOAD_STAGE
from ..model.targets import COMPILE
from ._spec import LOWER_IS_BETTER, NEUTRAL, StageContext, StageOptions, StageSpec

__all__ = ["LOWER_IS_BETTER", "NEUTRAL", "REGISTRY", "STAGES", "StageContext", "StageOptions", "StageSpec",
           "forward_only", "get", "order", "target_of"]


def _discover() -> dict[str, StageSpec]:
    specs = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, StageSpec):
            raise TypeError(f"{module.__name__} is a stage module but defines no SPEC = StageSpec(...)")
        if spec.name != info.name:
            raise TypeError(f"{module.__name__}: SPEC.name {spec.name!r} must equal the module name")
        specs.append(spec)
    return {s.name: s for s in sorted(specs, key=lambda s: s.order)}


#: name -> spec, in run order
REGISTRY: dict[str, StageSpec] = _discover()
#: stage names in run order (the CLI values of ``--stages``)
STAGES: tuple[str, ...] = tuple(REGISTRY)


def order(name: str) -> int:
    """Sort key of a stage name: the ``load`` pseudo-stage first, then run order, unknown names last."""
    if name == LOAD_STAGE:
        return -1
    return list(REGISTRY).index(name) if name in REGISTRY else len(REGISTRY)


def target_of(name: str) -> str:
    """The target a stage checks (``StageSpec.target``); the ``load`` pseudo-stage and unknown names: compile."""
    spec = REGISTRY.get(name)
    return spec.target if spec is not None else COMPILE


def get(name: str) -> StageSpec:
    """The spec of a stage. Raises KeyError for an unknown name (the CLI validates names first)."""
    return REGISTRY[name]


def forward_only(result: object) -> bool:
    """A ``StageResult`` that could have checked training but ran the forward only (``✓ fwd``)."""
    stage = getattr(result, "stage", None)
    spec = REGISTRY.get(stage) if isinstance(stage, str) else None
    return getattr(result, "phases", None) == ["forward"] and spec is not None and not spec.forward_only
