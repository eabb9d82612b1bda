"""A tiny attention model on the rotary embedding, with a logger call and a validation guard in its forward."""
import torch
from torch import nn

from .logs import get_logger
from .rope import RotaryEmbedding, apply_rotary

logger = get_logger(__name__)


def check_mask(mask):
    """The attention mask holds 0s and 1s only."""
    if not torch.equal(mask, (mask > 0).to(mask.dtype)):
        raise ValueError("attention mask must hold 0 and 1 only")


def activation_scale(x):
    """The largest activation, as a Python number (the host reads it)."""
    return x.abs().amax().item()


class Block(nn.Module):
    def __init__(self, dim=16, legacy_cache=False):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.rope = RotaryEmbedding(dim)
        self.legacy_cache = legacy_cache

    def forward(self, x, mask, position_ids):
        if self.legacy_cache:
            logger.warning_once("Passing a tuple of past key values is deprecated; pass a Cache instead.")
        check_mask(mask)
        cos, sin = self.rope(x, position_ids)
        q, k = apply_rotary(self.q(x), cos, sin), apply_rotary(self.k(x), cos, sin)
        att = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        att = att.masked_fill(mask[:, None, :] == 0, float("-inf")).softmax(-1)
        return x + self.o(att @ self.v(x))


class TinyModel(nn.Module):
    def __init__(self, vocab=64, dim=16, layers=2, legacy_cache=False, scaled=False):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, legacy_cache) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        self.scaled = scaled

    def forward(self, ids, mask):
        position_ids = torch.arange(ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x, mask, position_ids)
        if self.scaled:
            x = x * (1.0 / activation_scale(x))
        return self.head(x)
