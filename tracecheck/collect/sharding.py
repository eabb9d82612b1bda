"""Which probes one shard of a CI matrix runs (``--shard K/N``): the selection ``api.run`` makes once every file's
probes are listed. Reading ``K/N`` and joining the shards' reports are the gate's (gate/shards.py). Pure: no torch
import."""
from __future__ import annotations

from typing import Iterable


def shard_ids(ids: Iterable[str], k: int, n: int) -> list[str]:
    """Every N-th id, starting at the K-th (1-based), after sorting: deterministic on every runner."""
    return [pid for i, pid in enumerate(sorted(ids)) if i % n == k - 1]
