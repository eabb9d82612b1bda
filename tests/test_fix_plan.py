"""The two-op plan of an autograd.Function (fix.autograd_fn), the source edits (fix.codegen) and the gradient
check (fix.analysis), on small Functions whose right answer follows from their code."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest
import torch

from tracecheck.fix import analysis, autograd_fn, codegen
from tracecheck.fix.jobs import DirectionalCheckTask


class SaveMix(torch.autograd.Function):
    """Saves two inputs and an intermediate, and a float attribute read in backward."""

    @staticmethod
    def forward(ctx, x, w, alpha):
        h = x @ w
        ctx.save_for_backward(x, w, h)
        ctx.alpha = alpha
        ctx.unused = "never read"
        return torch.tanh(h) * alpha

    @staticmethod
    def backward(ctx, grad_out):
        x, w, h = ctx.saved_tensors
        g = grad_out * ctx.alpha * (1 - torch.tanh(h) ** 2)
        return g @ w.t(), x.t() @ g, None


def test_plan_of_saved_inputs_intermediate_and_attribute():
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    plan = autograd_fn.analyse(SaveMix, (x, w, 0.5))
    assert plan.saved == [("input", "x"), ("input", "w"), ("residual", 0)]
    assert plan.residuals == ["h"]  # named from `x, w, h = ctx.saved_tensors`
    # backward reads alpha (it equals the input alpha), never `unused`
    assert plan.scalar_attrs == {"alpha": ("alpha", "float", ("input", "alpha"))}
    assert plan.grads_for == ["x", "w"] and plan.fwd_mutates == [] and plan.uses_autograd == (False, False)
    out_shape = [d.code for d in plan.fwd_meta[0].shape]
    h_shape = [d.code for d in plan.fwd_meta[1].shape]
    assert out_shape == h_shape == ["x.size(0)", "w.size(1)"]  # matmul: (M, K) @ (K, N) -> (M, N)
    assert [m.like for m in plan.bwd_meta] == ["x", "w"]  # grad_x like x, grad_w like w
    src = codegen.fixed_module([plan], [], "tc_test_plan", "fixed_ops", "t::p", {"tracecheck": "0", "torch": "0"})
    ast.parse(src)
    assert "ctx.mark_non_differentiable(h)" in src and "ctx.alpha = alpha" in src


class ReturnsView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, g):
        return g.view(2, 3)


def test_an_output_aliasing_an_input_is_cloned():
    plan = autograd_fn.analyse(ReturnsView, (torch.randn(2, 3),))
    assert plan.outputs_alias_inputs == [0]
    src = codegen.function_section(plan, "tc_test_alias")
    assert ".clone()  # forward returned (a view of) an input" in src
    assert [d.code for d in plan.fwd_meta[0].shape] == ["x.size(0) * x.size(1)"]  # view(-1): numel


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        y.add_(1)  # writes an input without mark_dirty
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_mutation_is_observed_not_assumed():
    plan = autograd_fn.analyse(InPlace, (torch.randn(3), torch.randn(3)))
    assert plan.fwd_mutates == ["y"]
    assert "mutates_args=('y',)" in codegen.function_section(plan, "tc_test_mut")


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


class ReturnsInt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 3

    @staticmethod
    def backward(ctx, g):
        return None


@pytest.mark.parametrize("cls, words", [(Dirty, "mark_dirty"), (ReturnsInt, "non-tensor")])
def test_what_the_fix_cannot_express_is_refused(cls, words):
    with pytest.raises(autograd_fn.Unfixable, match=words):
        autograd_fn.analyse(cls, (torch.randn(3),))


class NewStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, repeats):
        return x.repeat(repeats)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.repeats = inputs[1]
        ctx.n = inputs[0].numel()

    @staticmethod
    def backward(ctx, g):
        return g.view(ctx.repeats, ctx.n).sum(0), None


def test_setup_context_style_and_an_int_argument_in_the_shape():
    plan = autograd_fn.analyse(NewStyle, (torch.randn(5), 3))
    assert plan.setup_context_style
    assert [d.code for d in plan.fwd_meta[0].shape] == ["x.size(0) * repeats"]  # repeat: n * repeats
    # ctx.n = x.numel() equals no input, but follows x's length in every run: an expression, not the constant 5
    assert plan.scalar_attrs["n"][2] == ("expr", "x.size(0)") and "n" not in plan.attr_notes
    assert plan.scalar_attrs["repeats"][2] == ("input", "repeats")
    src = codegen.function_section(plan, "tc_test_new")
    assert "setup_context(ctx, (x, repeats), result)" in src and "ctx.n = x.size(0)" in src


class CoincidentScalars(torch.autograd.Function):
    """Two float inputs equal at the probe: the attribute must come from the right one (`ctx.a = a`)."""

    @staticmethod
    def forward(ctx, x, b, a):
        ctx.a = a
        ctx.inv = 1.0 / x.shape[-1]  # depends on a size, not expressible as an int
        return x * a + b

    @staticmethod
    def backward(ctx, g):
        return g * ctx.a * ctx.inv * x_last_dim_guard(g), None, None


def x_last_dim_guard(g):
    return g.shape[-1]  # keeps the gradient right: a * (1/n) * n = a


def test_scalar_attributes_follow_the_source_and_the_runs():
    plan = autograd_fn.analyse(CoincidentScalars, (torch.randn(4, 8), 2.0, 2.0))
    assert plan.scalar_attrs["a"][2] == ("input", "a")  # from `ctx.a = a`, not the first equal value (b)
    # 1/8 at the probe, 1/16 when the last dim doubled: a TODO, never the constant 0.125 silently
    assert plan.attr_notes["inv"][0] == "todo"


def test_mutates_edit_rewrites_only_that_op():
    source = textwrap.dedent('''\
        import torch
        # é: a non-ASCII comment before the call shifts byte offsets
        @torch.library.custom_op("ns::a", mutates_args=())  # é
        def a(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor: ...
        @torch.library.custom_op("ns::b", mutates_args=())
        def b(x: torch.Tensor) -> torch.Tensor: ...
    ''')
    out = codegen.mutates_edit(source, "ns::a", ["r"])
    assert '@torch.library.custom_op("ns::a", mutates_args=(\'r\',))  # é' in out
    assert '@torch.library.custom_op("ns::b", mutates_args=())' in out
    assert codegen.mutates_edit(source, "ns::missing", ["r"]) is None


def test_patched_probe_puts_its_path_setup_after_future_imports(tmp_path):
    source = '"""doc"""\nfrom __future__ import annotations\nimport helper\n\nclass Fn: ...\n'
    out = codegen.patched_probe(source, str(tmp_path / "src" / "m.py"), str(tmp_path / "out" / "m_fixed.py"),
                                str(tmp_path / "out" / "fixed_ops.py"), [(None, "Fn"), ("pkg.mod", "G"),
                                                                         ("pkg.mod", "H")])
    tree = ast.parse(out)  # still valid: __future__ stays first
    assert isinstance(tree.body[1], ast.ImportFrom) and tree.body[1].module == "__future__"
    assert out.index("_tc_sys.path.insert") < out.index("import helper")
    assert "'../src'" in out  # the original's folder, relative to the copy
    # the fixed module is loaded from its own path: no namesake on sys.path can stand in for it
    assert "spec_from_file_location('fixed_ops', _tc_os.path.join(_tc_here, 'fixed_ops.py'))" in out
    assert out.count("_tc_pkg_mod = _tc_importlib.import_module('pkg.mod')") == 1
    assert out.rstrip().endswith("_tc_pkg_mod.H = _tracecheck_fixed.install(_tc_pkg_mod.H)")


def test_patched_probe_rebinds_in_a_module_whose_package_reexports_a_function_under_its_name(tmp_path):
    """CANN's cann_ops_transformer: ops/mhc/__init__.py does ``from .mhc_pre import mhc_pre``, so the attribute
    ``mhc_pre`` of the package is the function, and ``import ops.mhc.mhc_pre as m`` binds the function."""
    pkg = tmp_path / "ops" / "mhc"
    pkg.mkdir(parents=True)
    (tmp_path / "ops" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .mhc_pre import mhc_pre\n")
    (pkg / "mhc_pre.py").write_text("class Fn:\n    pass\n\ndef mhc_pre():\n    return Fn\n")
    (tmp_path / "fixed_ops.py").write_text("def install(cls):\n    return 'drop-in for ' + cls.__name__\n")
    probe = tmp_path / "m.py"
    probe.write_text("import ops.mhc.mhc_pre\n")
    out = codegen.patched_probe(probe.read_text(), str(probe), str(tmp_path / "m_fixed.py"),
                                str(tmp_path / "fixed_ops.py"), [("ops.mhc.mhc_pre", "Fn")])
    (tmp_path / "m_fixed.py").write_text(out)
    proc = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.path.insert(0, '.'); runpy.run_path('m_fixed.py'); "
                           "print(sys.modules['ops.mhc.mhc_pre'].Fn)"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "drop-in for Fn"


WRONG_BACKWARD = '''
import torch

@torch.library.custom_op("tc_test_fd::double_sin", mutates_args=())
def double_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x)

def _backward(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.cos(x) * {factor}   # the right factor is 1

double_sin.register_autograd(_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))

def probe():
    return double_sin, (torch.randn(16, requires_grad=True),)
'''


def test_finite_difference_check_tells_a_wrong_backward(tmp_path):
    path = tmp_path / "wrong.py"
    path.write_text(WRONG_BACKWARD.format(factor=2))
    res = DirectionalCheckTask(file=str(path), probe="probe").run()
    assert res["ok"] is False and abs(res["analytic"] - 2 * res["numeric"]) < 1e-2 * abs(res["numeric"]) + 1e-6
    path2 = tmp_path / "right.py"
    path2.write_text(WRONG_BACKWARD.format(factor=1).replace("tc_test_fd", "tc_test_fd2"))
    assert DirectionalCheckTask(file=str(path2), probe="probe").run()["ok"] is True
