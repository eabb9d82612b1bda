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
from tracecheck.fix.call_facts import CallAsk, CallSite
from tracecheck.fix.jobs import ObserveCallsTask
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


def _mix(key, grad0, x_):  # argument names the generated code must not confuse with its own
    return [key * grad0 + x_]


ext = types.SimpleNamespace(split=functools.partial(_split), scale_=functools.partial(_scale_),
                            argmax=functools.partial(_argmax), mix=functools.partial(_mix), python=lambda x: x)


def probe_split():
    x = torch.randn(3, 8, requires_grad=True)
    return (lambda x: sum(t.sum() for t in ext.split(x, 0.5, k=3))), (x,)


def probe_scale():
    return (lambda x: ext.scale_(x.clone(), 3.0)), (torch.randn(4, 5),)


def probe_argmax():
    return (lambda x: (x * ext.argmax(x).unsqueeze(-1)).sum()), (torch.randn(4, 5, requires_grad=True),)


def probe_python():
    return (lambda x: ext.python(x)), (torch.randn(2),)


def probe_mix():
    key, grad0 = torch.randn(3, requires_grad=True), torch.randn(3)
    return (lambda x_: ext.mix(key, grad0, x_)[0]), (torch.randn(3, requires_grad=True),)


def two_sites(x, w):
    a = ext.split(x.detach(), 2.0, 1)  # nothing needs grad here
    b = ext.split(w, 3.0, 2)  # w does
    return a[0].sum() + b[0].sum()


def probe_two_sites():
    return two_sites, (torch.randn(2, 4), torch.randn(2, 4, requires_grad=True))


def probe_none():
    return (lambda x: ext.split(x, None, 1)[0]), (torch.randn(2, 3),)
'''


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "cmodel.py"
    path.write_text(MODEL)
    return path


def _define(path, probe: str, callee: str) -> tuple[dict, object]:
    """The worker's answer for the site where ``probe`` calls ``callee`` (found as fix finds it), and the op it
    defines (executed in the probe's module)."""
    text = path.read_text()
    start = text.index(f"def {probe}():")
    line = text[:text.index(callee + "(", start)].count("\n") + 1
    site = c_call_at(Source(text), line, callee)
    assert isinstance(site, CallSite), site
    got = ObserveCallsTask(file=str(path), probe=probe, namespace="tc_test_" + probe,
                           sites=(CallAsk(line, site),)).run()["sites"][0]
    if "definition" not in got:
        return got, None
    from tracecheck.collect import casemaker
    module = casemaker.load_module(str(path))
    exec(compile(got["definition"], str(path), "exec"), vars(module))
    return got, vars(module)[got["name"]]


def test_a_differentiable_c_call_gets_a_fake_and_eagers_gradients(model):
    got, op = _define(model, "probe_split", "ext.split")
    assert "@torch.library.custom_op('tc_test_probe_split::split_op', mutates_args=())" in got["definition"]
    assert "def split_op(x: torch.Tensor, arg1: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:" in got["definition"]
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
    got, op = _define(model, "probe_scale", "ext.scale_")
    assert "mutates_args=('arg0',)" in got["definition"]  # (`x.clone()` is no plain name) and ".clone()" in got["definition"]
    assert "register_autograd" not in got["definition"]
    x = torch.ones(4, 5)
    torch.library.opcheck(op, (x.clone(), 3.0))
    out = op(x, 3.0)
    assert torch.equal(x, torch.full((4, 5), 3.0)) and torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_a_result_without_gradient_stays_without_one(model):
    got, op = _define(model, "probe_argmax", "ext.argmax")
    assert "mark_non_differentiable" in got["definition"]
    x = torch.randn(4, 5, requires_grad=True)
    torch.library.opcheck(op, (x,))
    out = op(x)
    assert out.dtype == torch.int64 and not out.requires_grad
    assert torch.equal(out, x.detach().argmax(-1))


def test_generated_names_cannot_meet_the_users_and_a_one_element_list_stays_a_tuple(model):
    got, op = _define(model, "probe_mix", "ext.mix")
    assert "def mix_op(key: torch.Tensor, grad0: torch.Tensor, x_: torch.Tensor) -> tuple[torch.Tensor]:" \
        in got["definition"]
    key, grad0, x_ = (torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    torch.library.opcheck(op, (key, grad0, x_))
    (out,) = op(key, grad0, x_)
    got_grads = torch.autograd.grad(out.sum(), (key, grad0, x_))
    for g, want in zip(got_grads, (grad0, key, torch.ones(3, dtype=torch.float64))):  # d(k*g + x)/d each
        torch.testing.assert_close(g, want.detach())


def test_each_site_records_its_own_call(model):
    """Two lines call the same C function; the one whose input needs grad gets a backward, the other does not."""
    text = model.read_text()
    lines = {c: text[:text.index(c)].count("\n") + 1 for c in ("ext.split(x.detach", "ext.split(w")}
    sites = []
    for line in lines.values():
        site = c_call_at(Source(text), line, "ext.split")
        assert isinstance(site, CallSite), site
        sites.append(CallAsk(line, site))
    got = ObserveCallsTask(file=str(model), probe="probe_two_sites", namespace="tc_test_two",
                           sites=tuple(sites)).run()["sites"]
    assert [g["line"] for g in got] == list(lines.values())
    assert "register_autograd" not in got[0]["definition"] and "def split_op(arg0: torch.Tensor, arg1: float, " \
        "arg2: int)" in got[0]["definition"]
    assert "def split_op2(w: torch.Tensor, arg1: float, arg2: int)" in got[1]["definition"]
    assert "split_op2_backward" in got[1]["definition"]


def test_a_none_argument_is_refused(model):
    got, op = _define(model, "probe_none", "ext.split")
    assert op is None and "None" in got["error"]


def test_python_code_is_not_wrapped(model):
    got, op = _define(model, "probe_python", "ext.python")
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
    assert isinstance(got, CallSite), got
    assert got.callee == "ext.fused" and list(got.params) == ["x", "arg1", "arg2", "scale"]
    assert got.positional == 3 and got.span == ((6, 12), (6, 21)) and got.first == got.last == 6
    assert "unpacks *args" in c_call_at(src, 7, "ext.fused")
    assert "not a module-level name" in c_call_at(src, 8, "ext.fused")


def test_a_callee_bound_to_a_local_is_refused_with_why():
    """The CANN/DeepSpeed OpBuilder form, `op_module = builder.load(); op_module.mhc_post(...)` in the wrapper's
    no-grad path: no module-level name holds the callee (it said `KeyError: 'op_module'` when recording); the
    reason names the local and where the same call does get a fix (the Function on the training path)."""
    text = textwrap.dedent('''
        import torch

        def mhc_post(x, h):
            op_module = mhc_post_op_builder.load()
            return op_module.mhc_post(x, h)
    ''')
    got = c_call_at(Source(text), 6, "tracecheck_mhc.pybind11_detail_function_record_v1.mhc_post")
    assert got == ("`op_module.mhc_post` is called through `op_module`, a local of its function (`op_module = "
                   "mhc_post_op_builder.load()`), which no module-level name holds for a custom op to replace; where "
                   "the same call sits in an autograd.Function (the wrapper's training path), fix converts that "
                   "Function")
