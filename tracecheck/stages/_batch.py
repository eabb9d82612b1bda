"""The batch dimension of a probe's inputs, and the same inputs at another batch size (the ``dynamic`` stage).

Rule (docs/readiness.md, "dynamic"): the batch dimension is dim 0 of the first tensor input with at least one
dimension; every tensor input (args and kwargs, nested) whose dim 0 has that size is resized with it, the others
(weights, scalars, lookup tables) are kept. A tensor at batch size ``n`` takes rows ``i % B`` of the original,
so token ids stay valid ids and masks stay masks. Limits: a weight whose dim 0 happens to equal the batch size is
resized too (the eager run at the new size then fails and the stage skips with that reason), and a batch that sits
in another dimension is not found.

Sizes: the probe's batch ``B``, then ``B + 1``, ``B + 2`` and ``B + 3``; from ``B = 1``: 1, 2, 3, 4 (torch
specializes sizes 0 and 1, so the first compile at 1 is static by design and the one at 2 is the first dynamic one).
A specialized dimension recompiles at each of the last two sizes; a branch on the size (``if x.shape[0] > 3``)
recompiles once and then serves the larger sizes.
"""
from __future__ import annotations

from typing import Any

import torch
from .. import compat
from ..compat import pytree


def batch_size(args: tuple[Any, ...], kwargs: dict[str, object]) -> int | None:
    """Dim 0 of the first tensor input with a dimension; None when there is none (nothing can vary)."""
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.size(0) >= 1:
            return int(t.size(0))
    return None


def sizes(batch: int) -> list[int]:
    """The batch sizes a dynamic run calls the probe at: its own, then three more."""
    return [batch, batch + 1, batch + 2, batch + 3]


def resize(args: tuple[Any, ...], kwargs: dict[str, object], batch: int, n: int,
           mark_dynamic: bool = False) -> tuple[tuple[Any, ...], dict[str, object]]:
    """``(args, kwargs)`` with every tensor whose dim 0 is ``batch`` grown or cut to ``n`` rows (``i % batch``).
    ``mark_dynamic``: each of them with its dim 0 marked ``torch._dynamo.maybe_mark_dynamic`` (symbolic from the first
    compile, and specialized without an error where code forces a constant)."""
    index = torch.arange(n) % batch

    def one(t: Any) -> Any:
        if not (isinstance(t, torch.Tensor) and t.dim() >= 1 and t.size(0) == batch):
            return t
        out = t.detach().index_select(0, index.to(t.device)).clone()
        out = out.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else out
        if mark_dynamic:
            compat.maybe_mark_dynamic(out, 0)
        return out

    return pytree.tree_map(one, (args, kwargs))
