"""Small random-weight configs of transformers 4.52.4 models that break torch.compile's graph (GraphMend's set: T5,
and Phi-3 with longrope scaling, Phi-4-mini's path; then others of the same version that break), in eval mode.
For benchmarks/bench_fix_library.py, in a venv with transformers==4.52.4 (its docstring says how). No downloads:
every model is built from a config (HF_HUB_OFFLINE=1)."""
import torch
import transformers as tf

IDS = (2, 8)


def _ids(seed=0):
    return torch.randint(1, 128, IDS, generator=torch.Generator().manual_seed(seed))


def _seq2seq(model):
    ids = _ids()
    return model.eval(), (), {"input_ids": ids, "decoder_input_ids": ids}


def probe_t5():
    torch.manual_seed(0)
    return _seq2seq(tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0)))


def probe_phi3_longrope():
    torch.manual_seed(0)
    cfg = tf.Phi3Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                        original_max_position_embeddings=16, pad_token_id=0,
                        rope_scaling={"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4})
    return tf.Phi3ForCausalLM(cfg).eval(), (_ids(),)


#: the small encoder-decoder size of the BART family (its config's own field names)
BART_SIZE = dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                 pad_token_id=0, decoder_start_token_id=0)


def probe_m2m100():
    torch.manual_seed(0)
    return _seq2seq(tf.M2M100ForConditionalGeneration(tf.M2M100Config(**BART_SIZE)))


def probe_bart():
    torch.manual_seed(0)
    return _seq2seq(tf.BartForConditionalGeneration(tf.BartConfig(**BART_SIZE)))


def probe_xlm():
    torch.manual_seed(0)
    cfg = tf.XLMConfig(vocab_size=128, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=64, pad_index=0)
    return tf.XLMWithLMHeadModel(cfg).eval(), (_ids(),)


def probe_longformer():
    torch.manual_seed(0)
    cfg = tf.LongformerConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=64, attention_window=4, pad_token_id=0)
    return tf.LongformerModel(cfg).eval(), (_ids(),)


def probe_mixtral():
    torch.manual_seed(0)
    cfg = tf.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=64, pad_token_id=0)
    return tf.MixtralForCausalLM(cfg).eval(), (_ids(),)
