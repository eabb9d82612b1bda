"""Probes of breakylib (tests/models/breakylib), a small model library installed as a real distribution: the graph
breaks sit in its files under site-packages, not in this one (a logger call, a longrope-style branch in a nested
function of a decorator, a validation guard that raises, an `.item()`)."""
import torch
from breakylib import TinyModel


def inputs(seq=8, batch=2):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 64, (batch, seq), generator=g), torch.ones(batch, seq)


def probe_all():
    """Every break of the library at once, in a model that trains."""
    torch.manual_seed(0)
    return TinyModel(legacy_cache=True, scaled=True), inputs()
