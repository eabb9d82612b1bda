"""fullgraph and dynamic answer what plain torch.compile(fullgraph=True) and dynamic=True answer (issue 52, item 2),
on a real library's op: bitsandbytes' 8-bit Adam step (plain torch raises in AOTAutograd: the optimizer op writes
into tensors its fake run froze). Plain torch runs in the same test."""
import pytest
import torch
from plain_load import load

ADAM8BIT = '''
import torch
import bitsandbytes as bnb


def probe_adam8bit_step():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(64, 64))
    p.grad = torch.randn(64, 64)
    opt = bnb.optim.Adam8bit([p], lr=1e-3, min_8bit_size=16)
    opt.step()  # the optimizer state exists: the step below is the steady one

    def step(g):
        p.grad = g
        opt.step()
        return p * 1.0

    return step, (torch.randn(64, 64),)
'''


def _plain(path, **compile_kwargs):
    fn, args = load(path, "adam8bit_plain").probe_adam8bit_step()
    torch._dynamo.reset()
    try:
        torch.compile(fn, **compile_kwargs)(*args)
        return None
    except Exception as e:
        return type(e).__name__
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
def test_fullgraph_and_dynamic_fail_where_plain_torch_fails(tracecheck, write_probe):
    path = write_probe(ADAM8BIT)
    assert _plain(path, fullgraph=True) == "BackendCompilerFailed"
    assert _plain(path, dynamic=True) == "BackendCompilerFailed"
    res = tracecheck("run", str(path), "--stages", "eager,fullgraph,dynamic")
    st = res.probe("probe_adam8bit_step")["stages"]
    assert st["eager"]["status"] == "pass"
    assert st["fullgraph"]["status"] == "fail" and st["dynamic"]["status"] == "fail"
    assert "own inputs only" in st["dynamic"]["extra"]["dynamic"]["every_dimension"]  # the batch cannot vary here
