"""What a stage declares (``StageSpec``) and what it is given in the stage process (``StageContext``).

Pure: no torch import, so the CLI, the renderers and baselines can read the registry without loading torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..model.records import StageRecord
from ..model.targets import COMPILE, TARGETS
from ..model.tasks import DEFAULT_TIMEOUT_S, floor_s

#: ``StageSpec.counts`` values: how a baseline compares a count the stage adds to ``StageResult.extra``.
LOWER_IS_BETTER, NEUTRAL = "lower-is-better", "neutral"


@dataclass(frozen=True)
class StageOptions:
    """The options a stage may read (``StageSpec.options`` names which), with their defaults: the one place they are
    written (``api.RunOptions`` and the CLI take theirs from here)."""

    #: compiled_autograd: training steps per run (>= 3 to tell warm-up from steady-state recompiles)
    steps: int = 3
    #: compiled_autograd: also run with a second input shape (batch dim x10) to show shape recompiles
    dynamic: bool = False
    #: explain: the seconds its process is sure to get (``model.tasks.floor_s`` of ``--timeout``: its deadline may come
    #: down to that, isolate/deadline.py), which its measurement of break costs stays within
    assured_s: float = floor_s(DEFAULT_TIMEOUT_S)


@dataclass
class StageContext:
    """Given to ``StageSpec.run`` inside the stage process.

    ``make_case()`` builds a fresh, seeded ``Case`` on ``device`` (the probe function is called again, so a
    stateful probe starts from the same state in every run; the first may come from the call the probe's template
    made before forking the stage process: ``collect.casemaker``); ``options``: the run's values of the options the
    stage declared (``StageSpec.options``), the defaults for the others.
    """

    make_case: Callable[[], Any]
    device: str = "cpu"
    options: StageOptions = field(default_factory=StageOptions)


@dataclass(frozen=True)
class StageSpec:
    """One stage. ``name`` equals the CLI value of ``--stages``; ``order`` sorts the run order.

    ``run(ctx)`` runs in the stage process and returns its ``model.records.StageRecord``; it
    imports torch itself, so declaring a stage costs the CLI nothing. ``forward_only``: the stage checks the
    forward by design (no ``✓ fwd`` mark). ``needs``: what the stage needs to have work, documented and shown
    in skip reasons (``"backward"``, ``"custom ops"``). ``options``: the ``RunOptions`` fields it reads.
    ``counts``: fields of its payload (``model.payloads``) that a baseline compares, with how. ``cost``: its
    relative run time, measured on probes/ and tiny transformers models; the runner starts costlier stages first.
    ``heading``: a short column heading for narrow terminals (default: ``name``). ``target``: what the stage
    checks readiness for (``targets.TARGETS``); its failures gate a run only when that target is required.
    ``repro``: how a standalone reproducer runs the stage with plain torch. ``compiles``: the stage calls Dynamo,
    AOTAutograd or Inductor, so the fork server's warm-up compile (``isolate.warmup.warm_compile``) saves it time.
    """

    name: str
    order: int
    summary: str
    run: Callable[[StageContext], StageRecord]
    forward_only: bool = False
    needs: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    counts: dict[str, str] = field(default_factory=dict)
    cost: int = 1
    #: the verdict table's column heading where the full names do not fit (a legend says what it stands for)
    heading: str = ""
    target: str = COMPILE
    #: the plain-torch statements a ``tracecheck repro`` script runs for this stage (fix/repro_script.py: they call
    #: its helpers ``_repro_step``/``_repro_compare`` on ``_repro_fn``, ``_repro_args``, ``_repro_kwargs``; ``{op!r}``
    #: becomes the finding's op); "" for a stage no script is written for
    repro: str = ""
    compiles: bool = True

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"stage {self.name!r}: target {self.target!r} is not one of {TARGETS}")
