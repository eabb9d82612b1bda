"""A real custom-op library from PyPI: bitsandbytes' quantized layers on the CPU (its ops are ``torch.library`` custom
ops, ``torch.ops.bitsandbytes.*``, with fake impls). Its 8-bit layer in training with an outlier threshold breaks the
graph inside the library's own autograd.Function; its 4-bit layer compiles whole."""
import torch

import tracecheck


@tracecheck.probe
def probe_bnb_int8_outliers():
    import bitsandbytes as bnb

    torch.manual_seed(0)
    layer = bnb.nn.Linear8bitLt(64, 64, has_fp16_weights=True, threshold=6.0)
    return tracecheck.Case(layer, (torch.randn(4, 64) * 4,))


@tracecheck.probe
def probe_bnb_nf4():
    import bitsandbytes as bnb

    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(64, 64, compute_dtype=torch.float32, quant_type="nf4").to("cpu")  # quantizes it
    return tracecheck.Case(layer, (torch.randn(4, 64),))
