"""The gradcheck stage checks the probe's own gradient beside each call's (issue 52, item 8b): a gradient written
besides autograd (2x in .grad, which no call's check sees) is a finding; a Function whose gradient is rerouted by
design (wrong alone, right end to end) is not. Oracles: the derivative written by hand, and torch.autograd.gradcheck
in float64 on the call and on the whole probe."""
import pytest
import torch
from plain_load import load

TWICE = '''
import torch


class Square(torch.autograd.Function):
    """Writes its gradient into the input's .grad itself and returns it too (as a kernel library's tape that
    aliases x.grad does): autograd adds it a second time."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * x

    @staticmethod
    def backward(ctx, g):
        grad = 2 * ctx.x.detach() * g
        if ctx.x.grad is None:
            ctx.x.grad = torch.zeros_like(ctx.x)
        ctx.x.grad += grad
        return grad


def probe_twice():
    return (lambda x: Square.apply(x).sum()), (torch.linspace(0.5, 2.0, 8, requires_grad=True),)
'''

DETOUR = '''
import torch


class Detour(torch.autograd.Function):
    """Its output is x; its backward sends the gradient to y instead (the probe passes the same tensor twice)."""

    @staticmethod
    def forward(ctx, x, y):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g), g


def model(x):
    return (Detour.apply(x, x) * 3.0).sum()


def probe_detour():
    return model, (torch.linspace(0.5, 2.0, 8, requires_grad=True),)
'''


_module = load


@pytest.mark.slow
def test_a_gradient_written_twice_is_found_end_to_end(tracecheck, write_probe):
    path = write_probe(TWICE)
    m = _module(path, "twice_plain")
    fn, (x,) = m.probe_twice()
    fn(x).backward()
    torch.testing.assert_close(x.grad, 2 * (2 * x.detach()))  # the oracle: d/dx sum(x^2) = 2x, and .grad holds 2x it
    x64 = torch.linspace(0.5, 2.0, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(m.Square.apply, (x64,))  # the call alone passes: the returned gradient is right
    res = tracecheck("run", str(path), "--stages", "eager,gradcheck")
    st = res.probe("probe_twice")["stages"]["gradcheck"]
    (f,) = [f for f in st["findings"] if f["kind"] == "wrong-gradient"]
    assert f["context"]["cause"] == "end_to_end" and float(f["context"]["ratio"]) == pytest.approx(2.0, rel=1e-2)
    assert "2x the numerical derivative" in res.stdout


@pytest.mark.slow
def test_a_gradient_rerouted_by_design_is_no_finding(tracecheck, write_probe):
    path = write_probe(DETOUR)
    m = _module(path, "detour_plain")
    x64 = torch.linspace(0.5, 2.0, 8, dtype=torch.float64, requires_grad=True)
    with pytest.raises(Exception, match="Jacobian mismatch"):  # alone, the Function's gradient is wrong
        torch.autograd.gradcheck(m.Detour.apply, (x64, x64.detach().clone().requires_grad_()))
    assert torch.autograd.gradcheck(m.model, (x64,))  # end to end, the probe's gradient is right
    res = tracecheck("run", str(path), "--stages", "eager,gradcheck")
    assert res.returncode == 0, res.stdout
    st = res.probe("probe_detour")["stages"]["gradcheck"]
    assert [f["kind"] for f in st["findings"]] == []
    assert any("rerouted by design" in n for n in st["extra"]["not_checked"])


def test_two_functions_of_one_module_are_two_root_causes():
    """pytorch-wavelets' AFB2D and SFB2D (one module) both wrong: two findings, two causes in every report (their
    qualified names are no ns.op.overload spelling to fold into one)."""
    from tracecheck.classify import measured
    from tracecheck.model.records import GradcheckOutcome
    from tracecheck.model.report import finding_key

    def outcome(name):
        return GradcheckOutcome.of({"name": name, "function": True, "mismatch": {
            "input": "x", "numerical": 2.0, "analytical": -1.8, "relative_error": 1.9, "tolerance": 0.01}})
    a, b = (measured.gradient_finding(outcome(f"pytorch_wavelets.dwt.lowlevel.{n}")) for n in ("AFB2D", "SFB2D"))
    assert finding_key(a) != finding_key(b)
    assert a.context.op == "pytorch_wavelets.dwt.lowlevel.AFB2D"


FLOAT64_UNSUPPORTED = '''
import torch

_calls = [0]


class FourBit(torch.autograd.Function):
    """Right in float32 (y = 3x); handed float64 it returns other values on every call, as a 4-bit kernel does."""

    @staticmethod
    def forward(ctx, x):
        if x.dtype == torch.float64:
            _calls[0] += 1
            return x * (3.0 + 0.37 * _calls[0])
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return g * 3.0


def probe_four_bit():
    return (lambda x: FourBit.apply(x).sum()), (torch.linspace(0.5, 2.0, 8, requires_grad=True),)
'''


@pytest.mark.slow
def test_an_op_without_float64_is_checked_in_its_own_dtype(tracecheck, write_probe):
    """bitsandbytes' 4-bit ops (issue 52, 2b): float64 gradcheck alone calls a right backward wrong."""
    path = write_probe(FLOAT64_UNSUPPORTED)
    m = _module(path, "four_bit_plain")
    x32 = torch.linspace(0.5, 2.0, 8, requires_grad=True)
    assert torch.autograd.gradcheck(m.FourBit.apply, (x32,), eps=1e-3, atol=1e-2, rtol=1e-2)  # right in float32
    x64 = x32.detach().double().requires_grad_()
    with pytest.raises(Exception):
        torch.autograd.gradcheck(m.FourBit.apply, (x64,))  # float64 says otherwise
    res = tracecheck("run", str(path), "--stages", "eager,gradcheck")
    assert res.returncode == 0, res.stdout
    verdict = res.probe("probe_four_bit")["stages"]["gradcheck"]["extra"]["gradcheck"]
    call = next(v for k, v in verdict.items() if k.endswith("FourBit"))
    assert call["status"] == "SUCCESS" and "float32" in call["method"] and "own dtype" in call["note"]
