"""A real pybind11 extension (torch.utils.cpp_extension, cached) called inside an autograd.Function, and straight
from a module's forward.

This is the mHC failure in miniature: Dynamo refuses the pybind11 function and tracecheck must say
pybind-builtin, name the builtin (pybind11 3 qualname from torch 2.13's headers), and say it happened
inside a torch.autograd.Function. Called straight from model code, ``tracecheck fix`` wraps the call in a
custom op, checked with plain torch.compile in its own process (tests/fix_oracle.py).
"""
import pytest

from test_fix_model_code import check_verified

EXTENSION = '''
import os
import torch
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
torch::Tensor scale_fwd(torch::Tensor x) { return x * 2; }
"""
_BUILD = os.environ["TC_TEST_BUILD_DIR"]
os.makedirs(_BUILD, exist_ok=True)
tc_ext = load_inline("tc_scale_ext", cpp_sources=_SRC, functions=["scale_fwd"], build_directory=_BUILD)
'''

MODEL = EXTENSION + '''

class ScaleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return tc_ext.scale_fwd(x)

    @staticmethod
    def backward(ctx, g):
        return g * 2


def probe_pybind_in_autograd_function():
    return (lambda x: ScaleFn.apply(x).sin()), (torch.randn(8, requires_grad=True),)
'''

# the same extension (one cached build), called from forward: its C++ `x * 2` is differentiated by ATen in eager
DIRECT = EXTENSION + '''

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x).relu()
        return tc_ext.scale_fwd(h).sin() + x


def probe_direct_call():
    return Net(), (torch.randn(3, 6, requires_grad=True),)
'''


@pytest.fixture
def build_dir(tmp_path_factory, monkeypatch):
    # one build directory per test session; cpp_extension reuses it when the source is unchanged
    build = tmp_path_factory.getbasetemp() / "tc_scale_ext_build"
    monkeypatch.setenv("TC_TEST_BUILD_DIR", str(build))
    return build


@pytest.mark.slow
def test_pybind_builtin_inside_autograd_function(tracecheck, write_probe, build_dir):
    p = write_probe(MODEL)
    res = tracecheck("run", str(p), "--stages", "eager,explain,fullgraph")
    assert res.returncode == 1, res.stderr
    probe = res.probe("probe_pybind_in_autograd_function")
    assert probe["verdict"]["kinds"] == ["pybind-builtin"]
    assert probe["verdict"]["first_failing_stage"] == "explain"
    assert probe["stages"]["eager"]["status"] == "pass"
    full = probe["stages"]["fullgraph"]["failure"]
    assert full["evidence"]["exception_type"] == "torch._dynamo.exc.Unsupported"
    assert full["evidence"]["gb_code"] == "GB0007"
    assert full["context"]["builtin"].startswith("tc_scale_ext.")
    assert full["context"]["builtin"].endswith("scale_fwd")
    assert full["context"]["in_autograd_function"] is True
    # graphs - 1 is 0 here, as explain() says (nothing before the Function's call to make a graph of); the site
    # from the structured trace is beside it, so the break is not lost
    explain = probe["stages"]["explain"]
    assert explain["graph_break_sites"] >= 1
    assert explain["breaks"][0]["gb_type"] == "Attempted to call function marked as skipped"
    assert explain["breaks"][0]["file"] == str(p)


@pytest.mark.slow
def test_a_c_call_from_forward_becomes_a_verified_custom_op(tmp_path, write_probe, build_dir):
    """`tracecheck fix` wraps the call in a custom op whose backward gives eager's gradients; plain torch then
    compiles the patched copy with fullgraph=True and gets the original's outputs and gradients."""
    check_verified(tmp_path, write_probe(DIRECT, name="direct_model.py"), "probe_direct_call", "custom-op")
