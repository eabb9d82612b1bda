"""The ``custom-op`` rewrite: a C function called straight from model code becomes a custom op (fix/c_call.py).

The C function is stood in for by a ``functools.partial`` (no ``__code__``, as for a pybind11 function; the real
extension runs end to end in tests/test_pybind_extension.py). The generated definition is executed in the
probe's module and checked with PyTorch's own oracles: ``torch.library.opcheck`` (schema, fake impl, autograd
registration) and gradients against formulas written by hand.
"""
import textwrap

import pytest
import torch

from tracecheck.fix import c_call
from tracecheck.fix.rewrites import Source, c_call_at

MODEL = '''
import functools
import types

import torch


def _split(x, a, k):  # a "C function" that eager differentiates through (its C++ calls ATen ops)
    y = x.sin() * a
    return [y[..., :k].contiguous(), (x * x).sum(-1)]


def _scale_(x, a):  # writes to its input and returns it
    x.mul_(a)
    return x


def _argmax(x):  # its result carries no gradient
    return x.detach().argmax(-1)


ext = types.SimpleNamespace(split=functools.partial(_split), scale_=functools.partial(_scale_),
                            argmax=functools.partial(_argmax), python=lambda x: x)


def probe_split():
    x = torch.randn(3, 8, requires_grad=True)
    return (lambda x: sum(t.sum() for t in ext.split(x, 0.5, k=3))), (x,)


def probe_scale():
    return (lambda x: ext.scale_(x.clone(), 3.0)), (torch.randn(4, 5),)


def probe_argmax():
    return (lambda x: (x * ext.argmax(x).unsqueeze(-1)).sum()), (torch.randn(4, 5, requires_grad=True),)


def probe_python():
    return (lambda x: ext.python(x)), (torch.randn(2),)
'''


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "cmodel.py"
    path.write_text(MODEL)
    return path


def _define(path, probe: str, callee: str, params: list[str], positional: int) -> tuple[dict, object]:
    """The worker's answer for one site, and the op it defines (executed in the probe's module)."""
    got = c_call.observe_calls({"file": str(path), "probe": probe, "namespace": "tc_test_" + probe, "sites": [
        {"line": 1, "callee": callee, "params": params, "positional": positional}]})["sites"][0]
    if "definition" not in got:
        return got, None
    from tracecheck.collect import casemaker
    module = casemaker.load_module(str(path))
    exec(compile(got["definition"], str(path), "exec"), vars(module))
    return got, vars(module)[got["name"]]


def test_a_differentiable_c_call_gets_a_fake_and_eagers_gradients(model):
    got, op = _define(model, "probe_split", "ext.split", ["x", "a", "k"], 2)
    assert "@torch.library.custom_op('tc_test_probe_split::split_op', mutates_args=())" in got["definition"]
    assert "def split_op(x: torch.Tensor, a: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:" in got["definition"]
    assert "backward" in got["note"] and "returns a tuple where the C function returned a list" in got["note"]
    x = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(op, (x, 0.5), {"k": 4})  # schema, fake impl and autograd registration
    y, s = op(x, 0.5, k=4)
    assert y.shape == (2, 4) and s.shape == (2,)
    (g,) = torch.autograd.grad(y.sum() + s.sum(), x)
    want = 2 * x.detach()  # d/dx sum(x^2), plus 0.5 cos(x) on the first 4 columns (written by hand)
    want[:, :4] += 0.5 * torch.cos(x.detach()[:, :4])
    torch.testing.assert_close(g, want)
    # Dynamo keeps the op in one graph (no graph break), and the values match eager
    compiled = torch.compile(lambda t: op(t, 0.5, k=4)[0], backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.sin(x)[:, :4] * 0.5)


def test_a_c_call_that_writes_its_input_declares_it_and_returns_a_copy(model):
    got, op = _define(model, "probe_scale", "ext.scale_", ["x", "arg1"], 2)
    assert "mutates_args=('x',)" in got["definition"] and ".clone()" in got["definition"]
    assert "register_autograd" not in got["definition"]
    x = torch.ones(4, 5)
    torch.library.opcheck(op, (x.clone(), 3.0))
    out = op(x, 3.0)
    assert torch.equal(x, torch.full((4, 5), 3.0)) and torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_a_result_without_gradient_stays_without_one(model):
    got, op = _define(model, "probe_argmax", "ext.argmax", ["x"], 1)
    assert "mark_non_differentiable" in got["definition"]
    x = torch.randn(4, 5, requires_grad=True)
    torch.library.opcheck(op, (x,))
    out = op(x)
    assert out.dtype == torch.int64 and not out.requires_grad
    assert torch.equal(out, x.detach().argmax(-1))


def test_python_code_is_not_wrapped(model):
    got, op = _define(model, "probe_python", "ext.python", ["x"], 1)
    assert op is None and "is Python code, not a C function" in got["error"]


def test_the_call_is_found_on_its_line_with_its_argument_names():
    text = textwrap.dedent('''
        import ext

        class M:
            def forward(self, x, y):
                z = ext.fused(x, y.t(), 2, scale=0.5) + x
                w = ext.fused(*y)
                v = self.ext.fused(x)
                return z
    ''')
    src = Source(text)
    got = c_call_at(src, 6, "ext.pybind11_detail_function_record_v1.fused")
    assert got["callee"] == "ext.fused" and got["params"] == ["x", "arg1", "arg2", "scale"]
    assert got["positional"] == 3 and got["span"] == ((6, 12), (6, 21))
    assert "unpacks *args" in c_call_at(src, 7, "ext.fused")
    assert "not a module-level name" in c_call_at(src, 8, "ext.fused")
