"""A tiny random-weight ``transformers`` Llama in training mode, as a probe (configs only, no download).

The real-model half of benchmarks/bench_run.py: importing ``transformers`` and building the model cost
seconds, which is what a run pays per stage process unless the file is imported once (tracecheck/isolate/template.py).
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()


def probe_llama():
    config = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                      hidden_size=32, intermediate_size=64, vocab_size=128,
                                      max_position_embeddings=64)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    return transformers.LlamaForCausalLM(config), (ids,)
