"""opcheck on custom ops only the backward calls (issue 52, item 8b): torch.library.opcheck, run by hand in the same
test on the input the backward passes, is the oracle."""
import pytest
import torch
from plain_load import load

BACKWARD_ONLY = '''
import torch


@torch.library.custom_op("tc_bwonly::scale_grad", mutates_args=())
def scale_grad(g: torch.Tensor, s: float) -> torch.Tensor:
    return g * s


@scale_grad.register_fake
def _(g, s):
    return torch.empty(g.shape[:-1], dtype=g.dtype)   # wrong: drops the last dim


class Triple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return scale_grad(g, 3.0)        # the custom op runs only in the backward


def probe_bw():
    return (lambda x: Triple.apply(x).sum()), (torch.randn(4, 8, requires_grad=True),)
'''


@pytest.mark.slow
def test_an_op_the_backward_alone_calls_is_opchecked(tracecheck, write_probe):
    path = write_probe(BACKWARD_ONLY)
    module = load(path, "bwonly_plain")
    plain = torch.library.opcheck(module.scale_grad, (torch.ones(4, 8), 3.0), raise_exception=False)
    assert plain["test_faketensor"] != "SUCCESS" and plain["test_schema"] == "SUCCESS"
    res = tracecheck("run", str(path), "--stages", "eager,opcheck")
    st = res.probe("probe_bw")["stages"]["opcheck"]
    assert st["status"] == "fail"
    (f,) = [f for f in st["findings"] if f["kind"] == "fake-mismatch"]
    assert f["context"]["op"] == "tc_bwonly::scale_grad"
    assert st["extra"]["opcheck"]["tc_bwonly.scale_grad.default"]["test_faketensor"] == "FAIL"
