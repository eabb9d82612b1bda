"""Rotary embeddings with a long-sequence variant, decorated like transformers' ``dynamic_rope_update``: the
frequencies switch when the position ids pass the pretraining length, a branch on a tensor."""
from functools import wraps

import torch
from torch import nn


def dynamic_rope_update(rope_forward):
    """Recompute the frequencies before the forward (longrope: long factor beyond the original length)."""

    def longrope_frequency_update(self, position_ids, device):
        """Long frequencies when the sequence is longer than the pretraining length, short otherwise."""
        seq_len = torch.max(position_ids) + 1
        if seq_len > self.original_max_position_embeddings:
            if not hasattr(self, "long_inv_freq"):
                self.long_inv_freq = self.original_inv_freq / self.long_factor
            self.register_buffer("inv_freq", self.long_inv_freq, persistent=False)
        else:
            self.original_inv_freq = self.original_inv_freq.to(device)
            self.register_buffer("inv_freq", self.original_inv_freq, persistent=False)

    @wraps(rope_forward)
    def wrapper(self, x, position_ids):
        if self.rope_type == "longrope":
            longrope_frequency_update(self, position_ids, device=x.device)
        return rope_forward(self, x, position_ids)

    return wrapper


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, original_max_position_embeddings=16, rope_type="longrope", long_factor=4.0):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.original_inv_freq = inv_freq
        self.original_max_position_embeddings = original_max_position_embeddings
        self.rope_type = rope_type
        self.long_factor = long_factor

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x, cos, sin):
    return x * cos + rotate_half(x) * sin
