"""End to end, through the CLI: the custom-op and Dynamo failure classes beyond ../shared/cases, each written here
from the public report cited above it, each getting its documented kind (tracecheck explain <kind> says where a class
belongs when two kinds could claim it), and no ``unknown`` where another stage of the probe names the cause."""
import pytest

pytestmark = pytest.mark.slow


def _kinds(stage: dict) -> list[str]:
    return [f["kind"] for f in stage["findings"]]


# A fake impl that exists but raises NotImplementedError (a stub left in): Dynamo's gb_type
# "NotImplementedError/UnsupportedFakeTensorException when running FX node"; opcheck's test_faketensor fails with the
# bare message. pytorch/pytorch#186923 (custom-op fake failures become graph breaks). Documented: missing-fake.
FAKE_RAISES = '''
import torch

@torch.library.custom_op("tc13a::nf", mutates_args=())
def nf(x: torch.Tensor) -> torch.Tensor:
    return x.clone()

@nf.register_fake
def _(x):
    raise NotImplementedError("fake not written yet")

def probe_fake_raises():
    return (lambda x: nf(x).sin()), (torch.randn(4),)
'''


def test_a_fake_that_raises_not_implemented_is_missing_fake_at_every_stage(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(FAKE_RAISES)), "--stages", "eager,explain,fullgraph,opcheck")
    st = res.probe("probe_fake_raises")["stages"]
    assert st["eager"]["status"] == "pass"
    assert st["explain"]["breaks"][0]["gb_type"] == "NotImplementedError/UnsupportedFakeTensorException when running FX node"
    for stage in ("explain", "fullgraph"):
        assert _kinds(st[stage]) == ["missing-fake"], st[stage]
        assert st[stage]["findings"][0]["context"]["op"] == "tc13a::nf"
        # the user's line, not the custom op's __call__ inside torch where Dynamo places the break
        assert st[stage]["findings"][0]["evidence"]["user_frame"]["line"] == 13, st[stage]["findings"][0]["evidence"]
    assert "has a fake impl that raises NotImplementedError" in st["explain"]["findings"][0]["summary"]
    assert "is a stub that raises NotImplementedError: write it" in res.stdout
    assert "tracecheck fix" not in res.stdout  # nothing to generate: the stub is the user's to write
    # opcheck's message names no cause ("fake not written yet"), but its traceback does: the op's own fake raised it
    opcheck = st["opcheck"]["findings"]
    assert {f["evidence"]["phase"] for f in opcheck} >= {"test_faketensor"}
    assert all(f["kind"] == "missing-fake" and f["context"]["cause"] == "stub" and f["context"]["op"] == "tc13a::nf"
               for f in opcheck)
    assert {f["evidence"]["user_frame"]["line"] for f in opcheck} == {10}  # the raise in the fake impl


# A fake whose signature differs from the schema (forgets an argument): gb_type "TypeError when making fake tensor
# call", the TypeError naming the arguments. pytorch/pytorch#181851. Documented: fake-mismatch.
FAKE_SIGNATURE = '''
import torch

@torch.library.custom_op("tc13b::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s

@scale.register_fake
def _(x):
    return torch.empty_like(x)

def probe_fake_signature():
    return (lambda x: scale(x, 2.0).sin()), (torch.randn(4),)
'''


def test_a_fake_whose_signature_differs_from_the_schema_is_fake_mismatch(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(FAKE_SIGNATURE)), "--stages", "eager,explain,opcheck")
    p = res.probe("probe_fake_signature")
    assert p["verdict"]["kinds"] == ["fake-mismatch"]
    explain = p["stages"]["explain"]["findings"][0]
    assert explain["evidence"]["gb_type"] == "TypeError when making fake tensor call"
    assert explain["context"]["op"] == "tc13b::scale"
    assert "takes 1 positional argument but 2 were given" in explain["evidence"]["message"]
    assert _kinds(p["stages"]["opcheck"]) and set(_kinds(p["stages"]["opcheck"])) == {"fake-mismatch"}


# A custom op whose kernel returns a view of its input although the schema says nothing aliases: eager raises
# "The output of this custom operator (1) must not also be an input ... (2) may not alias any inputs", and each
# opcheck test repeats it. state-spaces/mamba#651 (selective_scan_fwd), pytorch/pytorch#134278.
# Documented: mutates-args-mismatch (the schema's alias annotation is what is wrong), not eager-error.
VIEW_ALIAS = '''
import torch

@torch.library.custom_op("tc13d::flat", mutates_args=())
def flat(x: torch.Tensor) -> torch.Tensor:
    return x.view(-1)

@flat.register_fake
def _(x):
    return x.new_empty(x.numel())

def probe_view_alias():
    return (lambda x: flat(x).sin()), (torch.randn(2, 3),)
'''


def test_a_kernel_returning_a_view_of_its_input_is_mutates_args_mismatch(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(VIEW_ALIAS)), "--stages", "eager,explain,opcheck")
    p = res.probe("probe_view_alias")
    assert p["verdict"]["kinds"] == ["mutates-args-mismatch"]
    assert p["verdict"]["first_failing_stage"] == "eager"
    opcheck = p["stages"]["opcheck"]["findings"]
    assert len(opcheck) >= 2 and {f["kind"] for f in opcheck} == {"mutates-args-mismatch"}
    assert {f["context"]["op"] for f in opcheck} == {"tc13d::flat"}


# Library.define of one qualified name twice raises when the file loads ("Tried to register an operator (...) with
# the same name and overload name multiple times"). pytorch/pytorch#148148. The import failure is a finding of the
# file (FILE::(import), stage load), not a usage error, and the other files of the run still run.
DEFINE_TWICE = '''
import torch

lib = torch.library.Library("tc13c", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib2 = torch.library.Library("tc13c", "FRAGMENT")
lib2.define("twice(Tensor x) -> Tensor")

def probe_never_reached():
    return (lambda x: x.sin()), (torch.randn(4),)
'''

PLAIN = '''
import torch

def probe_plain():
    return (lambda x: x.sin() * 2), (torch.randn(4),)
'''


def test_an_operator_defined_twice_at_import_is_op_redefined_and_the_run_goes_on(tracecheck, write_probe):
    twice, plain = write_probe(DEFINE_TWICE, "define_twice.py"), write_probe(PLAIN, "plain.py")
    res = tracecheck("run", str(twice), str(plain), "--stages", "eager,explain")
    assert res.returncode == 1, res.stderr
    p = res.probe("(import)")
    assert p["verdict"] == {"status": "fail", "first_failing_stage": "load", "kinds": ["op-redefined"], "advice": [],
                            "targets": {"compile": "fail"}, "require": ["compile"], "not_required": []}
    f = p["stages"]["load"]["findings"][0]
    assert f["context"]["op"] == "tc13c::twice"
    assert f["evidence"]["user_frame"]["line"] == 7
    assert res.probe("probe_plain")["verdict"]["status"] == "pass"
    # no `fix` of (import): the kind's page, with what it is for on the line above
    assert "  (define_twice.py)\n    tracecheck explain op-redefined\n" in res.stdout
    # asking for one of its probes by name still shows why none can run (not "no such probe", exit 2)
    named = tracecheck("run", f"{twice}::probe_never_reached", "--stages", "eager")
    assert named.returncode == 1, named.stderr
    assert named.probe("(import)")["verdict"]["kinds"] == ["op-redefined"]


# Reading tensor values into Python other than .item(): .tolist() of a float tensor, gb_type "Tensor.tolist() with
# non-integer tensor" (GB0109). huggingface/diffusers#14821 (image_pad_mask.tolist()). Documented: data-dependent.
TOLIST = '''
import torch

def f(x):
    vals = x.tolist()
    return x * vals[0]

def probe_tolist():
    return f, (torch.randn(4),)
'''


def test_tolist_of_a_float_tensor_is_data_dependent_with_the_read_values_fix(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(TOLIST)), "--stages", "explain,fullgraph")
    p = res.probe("probe_tolist")
    assert p["verdict"]["kinds"] == ["data-dependent"]
    brk = p["stages"]["explain"]["breaks"][0]
    assert (brk["kind"], brk["gb_code"]) == ("data-dependent", "GB0109")
    assert "reads tensor values into Python" in res.stdout


# torch.cond whose branch calls a custom op: the op recorder (a TorchDispatchMode) must declare
# supports_higher_order_operators (pytorch/pytorch#158077), or eager under it raises and opcheck never runs.
COND = '''
import torch

@torch.library.custom_op("tc13e::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@twice.register_fake
def _(x):
    return torch.empty_like(x)

def f(x):
    return torch.cond(x.sum() > 0, lambda y: twice(y), lambda y: y - 1, (x,))

def probe_cond():
    return f, (torch.ones(4),)
'''


def test_a_custom_op_inside_torch_cond_is_opchecked(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(COND)), "--stages", "eager,opcheck")
    assert res.returncode == 0, res.stdout
    opcheck = res.probe("probe_cond")["stages"]["opcheck"]
    assert opcheck["status"] == "pass"
    assert opcheck["extra"]["opcheck"]["tc13e.twice.default"]["test_faketensor"] == "SUCCESS"


# torch's own C functions are not the user's extension: compiled autograd's call_cpp_tensor_pre_hooks behind
# retain_grad() is a graph break with Dynamo's hints, never pybind-builtin (whose fix, "wrap your extension in a
# custom op", cannot apply).
RETAIN_GRAD = '''
import torch

def f(x):
    y = x.sin()
    y.retain_grad()
    return (y * 2).sum()

def probe_retain_grad():
    return f, (torch.randn(4, requires_grad=True),)
'''


def test_torch_own_c_functions_are_graph_breaks_not_pybind_builtins(tracecheck, write_probe):
    res = tracecheck("run", str(write_probe(RETAIN_GRAD)), "--stages", "eager,compiled_autograd")
    ca = res.probe("probe_retain_grad")["stages"]["compiled_autograd"]
    skipped = [f for f in ca["findings"] if f["evidence"].get("gb_type") == "Attempted to call function marked as skipped"]
    assert skipped, ca["findings"]  # the C function is there, in Dynamo's message
    assert any("call_cpp_tensor_pre_hooks" in f["evidence"]["message"] for f in skipped)
    assert {f["kind"] for f in ca["findings"]} == {"graph-break"}
    assert "Dynamo's hints for this gb_type" in skipped[0]["summary"] + res.stdout


# C-implemented callables that are not plain pybind11 functions: an instance of a pybind11 class called (its
# __call__ is C: gb_type "Unsupported method call"), its bound method, and its constructor (pybind11_object.__new__).
# The pybind11 class docs' shape; built with torch.utils.cpp_extension (cached for the session).
C_CALLABLES = '''
import os
import torch
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
struct Scaler {
  double s;
  explicit Scaler(double s) : s(s) {}
  torch::Tensor call(torch::Tensor x) const { return x * s; }
};
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<Scaler>(m, "Scaler")
      .def(pybind11::init<double>())
      .def("__call__", &Scaler::call)
      .def("apply", &Scaler::call);
}
"""
_BUILD = os.environ["TC_TEST_BUILD_DIR"]
os.makedirs(_BUILD, exist_ok=True)
ext = load_inline("tc_scaler_ext", cpp_sources=_SRC, build_directory=_BUILD)
scaler = ext.Scaler(2.0)

def probe_c_call():
    return (lambda x: scaler(x.sin()).cos()), (torch.randn(4),)

def probe_c_bound_method():
    return (lambda x: scaler.apply(x.sin()).cos()), (torch.randn(4),)

def probe_c_constructor():
    return (lambda x: ext.Scaler(3.0).apply(x.sin()).cos()), (torch.randn(4),)
'''


def test_c_implemented_callables_of_an_extension_are_pybind_builtin(tracecheck, write_probe, tmp_path_factory,
                                                                    monkeypatch):
    monkeypatch.setenv("TC_TEST_BUILD_DIR", str(tmp_path_factory.getbasetemp() / "tc_scaler_ext_build"))
    res = tracecheck("run", str(write_probe(C_CALLABLES)), "--stages", "eager,explain,fullgraph")
    assert res.returncode == 1, res.stderr
    expected = {"probe_c_call": "Scaler.__call__", "probe_c_bound_method": "Scaler.apply",
                "probe_c_constructor": "pybind11_object.__new__"}
    for name, builtin in expected.items():
        p = res.probe(name)
        assert p["verdict"]["kinds"] == ["pybind-builtin"], (name, p["verdict"])
        full = p["stages"]["fullgraph"]["failure"]
        # torch 2.13 names the type (Scaler.__call__, pybind11_object.__new__); 2.14 the object's class for the call
        # (tc_scaler_ext.Scaler.__call__) and the metatype for the constructor (pybind11_type.__new__)
        assert full["context"]["builtin"].endswith(builtin.split(".", 1)[1]), full["context"]
        assert full["context"]["builtin"].split(".")[-2] in ("Scaler", "pybind11_object", "pybind11_type")
    assert "custom_op" in res.probe("probe_c_call")["stages"]["fullgraph"]["failure"]["summary"] + res.stdout
