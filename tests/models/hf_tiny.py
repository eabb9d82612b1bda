"""Tiny random-weight ``transformers`` models as tracecheck probes (no downloads: configs only).

Each probe hands over the model in training mode (as constructed) with integer token ids, the way language
models are handed over in practice: nothing in the inputs requires grad, the parameters do. Dropout stays
on (transformers' default rates). Used by tests/test_real_models.py; also a worked example of probes on
real architectures.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

import tracecheck  # noqa: E402

transformers.logging.set_verbosity_error()
VOCAB = 128


def token_ids(batch: int = 2, seq: int = 16) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(0))


def gpt2() -> torch.nn.Module:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0))


def bert() -> torch.nn.Module:
    return transformers.BertForMaskedLM(transformers.BertConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=64))


def mixtral() -> torch.nn.Module:
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=32, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2))


def bigbird() -> torch.nn.Module:
    """Block-sparse attention: random blocks drawn from NumPy in training mode, and data-dependent breaks."""
    return transformers.BigBirdForMaskedLM(transformers.BigBirdConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=256, attention_type="block_sparse", block_size=4, num_random_blocks=2))


@tracecheck.probe
def probe_gpt2():
    return tracecheck.Case(gpt2(), (token_ids(),))


@tracecheck.probe
def probe_bert():
    return tracecheck.Case(bert(), (token_ids(),))


@tracecheck.probe
def probe_mixtral():
    return tracecheck.Case(mixtral(), (token_ids(),))


@tracecheck.probe
def probe_bigbird():
    return tracecheck.Case(bigbird(), (token_ids(seq=64),))


@tracecheck.probe
def probe_gpt2_frozen():
    """Inference: the parameters are frozen, so only the forward is checked (and the report says so)."""
    return tracecheck.Case(gpt2().requires_grad_(False), (token_ids(),))
