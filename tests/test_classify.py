"""Classifier rules on recorded messages from several torch versions (../shared/torch_failure_wording.md §4).

Each case is a message as torch prints it, with the kind a compiler engineer would give it; none of the
expected labels was read back from tracecheck's output.
"""
import pytest

from tracecheck.model import taxonomy
from tracecheck.classify import detect, measured
from tracecheck.model.errors import ErrorRecord
from tracecheck.model.records import Frame

PYBIND_213 = (
    "Attempted to call function marked as skipped\n"
    "  Higher Order Operator: autograd.Function\n"
    "  Explanation: Dynamo does not know how to trace the builtin "
    "`tc_ext.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1.fwd.` This function is "
    "either a Python builtin (e.g. _warnings.warn) or a third-party C/C++ Python extension (perhaps created with pybind).\n"
    "  Hint: If it is a third-party C/C++ Python extension, please either wrap it into a PyTorch-understood custom "
    "operator\n\n  Developer debug context: module: tc_ext, qualname: fwd, skip reason: cannot determine source file\n\n"
    " For more details about this graph break, please visit: "
    "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html\n\nfrom user code:\n"
    '   File "/x/_functorch/autograd_function.py", line 10, in inner\n    outs = orig_fwd(*args, **kwargs)\n'
)
PYBIND_28_CAPSULE = (
    "Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the builtin "
    "`kernel_ext.PyCapsule.dq_uint8_mxfp4_to_half.` This function is either a Python builtin (e.g. _warnings.warn) "
    "or a third-party C/C++ Python extension (perhaps created with pybind).\n"
    "  Developer debug context: module: kernel_ext, qualname: PyCapsule.dq_uint8_mxfp4_to_half, skip reason: "
    "<missing reason>\n"
)
PYBIND_OLD = "Graph break due to unsupported builtin flash_attn_2_cuda.PyCapsule.fwd. This function is either..."

NO_FAKE_213 = (
    "RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake tensors: "
    "call_function tc.myop.default(*(FakeTensor(..., size=(4,)),), **{}): got RuntimeError('There was no fake impl "
    "registered for <CustomOpDef(tc::myop)>. This is necessary for torch.compile/export/fx tracing to work. Please "
    "use `myop.register_fake` to add an fake impl.')\n"
    " For more details about this graph break, please visit: "
    "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4315.html"
)
NO_FAKE_28 = (
    "Dynamo failed to run FX node with fake tensors: call_function tc.myop.default(*(FakeTensor(..., size=(4,)),), "
    "**{}): got RuntimeError('There was no fake impl registered for <CustomOpDef(tc::myop)>. This is necessary for "
    "torch.compile/export/fx tracing to work. Please use `myop.register_fake` to add an fake impl.')"
)
NO_META_BREAK = (
    "Operator does not support running with fake tensors\n  Explanation: \n  Hint: see https://docs.google.com/"
    "document/d/1GgvOe7C8_NVOMLOCwDaYV1mXXyHMXY7ExoewHqooxrs/edit#heading=h.64r4npvq0w0 for how to fix\n\n"
    "  Developer debug context: unsupported operator: tclib.cpu_only.default\n"
)
NO_AUTOGRAD = ("Trying to backward through tc.myop2.default but no autograd formula was registered. Please use "
               "register_autograd to add one.")
CPP_AUTOGRAD_WARN = (
    "tclib::cpu_only: an autograd kernel was not registered to the Autograd key(s) but we are trying to backprop "
    "through it. This may lead to silently incorrect behavior."
)
MUTATES = "Argument buf is not defined as mutable but was mutated"
FAKE_META = ("When comparing the output of tc.moe.default on FakeTensor and concrete Tensors, found mismatched tensor "
             "metadata: Shapes torch.Size([12, 8]) and torch.Size([3, 8]) are not equal!")
FAKE_INDUCTOR = ("expected size 12==3, stride 8==8 at dim=0\nError in op: torch.ops.tc_case27.moe_dispatch.default\n"
                 "This error most often comes from a incorrect fake (aka meta) kernel for a custom op.")
DATA_DEP_210 = (
    "Consider annotating your code using torch._check*(). Could not guard on data-dependent expression u0 > 2 "
    "(unhinted: u0 > 2).  (Size-like symbols: u0)\n\nconsider using data-dependent friendly APIs such as "
    "guard_or_false, guard_or_true and statically_known_true."
)
DATA_DEP_28 = "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)).  (Size-like symbols: u0)"


def err(message, type_="torch._dynamo.exc.Unsupported", gb_type=None, chain=None):
    return {"type": type_, "message": message, "gb_type": gb_type,
            "chain": chain or [{"type": type_, "message": message}]}


@pytest.mark.parametrize("message, gb_type, builtin", [
    (PYBIND_213, "Attempted to call function marked as skipped",
     "tc_ext.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1.fwd"),
    (PYBIND_213, None,  # no structured gb_type (pre-2.13): read from the text past the HOP line
     "tc_ext.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1.fwd"),
    (PYBIND_28_CAPSULE, None, "kernel_ext.PyCapsule.dq_uint8_mxfp4_to_half"),
    (PYBIND_OLD, None, "flash_attn_2_cuda.PyCapsule.fwd"),
])
def test_pybind_builtin_names_the_builtin(message, gb_type, builtin):
    f = detect.classify_error("fullgraph", err(message, gb_type=gb_type))
    assert f.kind == "pybind-builtin"
    assert f.context.builtin == builtin
    assert f.context.pybind11 is True


def test_pybind_inside_autograd_function_is_said():
    f = detect.classify_error("fullgraph", err(PYBIND_213, gb_type="Attempted to call function marked as skipped"))
    assert f.context.in_autograd_function is True
    assert "autograd.Function" in f.summary
    plain = detect.classify_error("fullgraph", err(PYBIND_28_CAPSULE))
    assert plain.context.in_autograd_function is False


def test_gb_type_skips_hop_line_and_code_from_link():
    f = detect.classify_error("fullgraph", err(PYBIND_213))
    assert f.evidence.gb_type == "Attempted to call function marked as skipped"
    assert f.evidence.gb_code == "GB0007"


@pytest.mark.parametrize("message, type_", [
    (NO_FAKE_213, "torch._dynamo.exc.TorchRuntimeError"),
    (NO_FAKE_28, "torch._dynamo.exc.TorchRuntimeError"),
])
def test_missing_fake_custom_op(message, type_):
    f = detect.classify_error("aot_eager", err(message, type_))
    assert f.kind == "missing-fake"
    assert f.context.op == "tc::myop"


def test_missing_meta_kernel_graph_break():
    b = detect.classify_break({"reason": NO_META_BREAK, "file": "m.py", "line": 3})
    assert b.kind == "missing-fake"
    assert b.context.op == "tclib::cpu_only"  # one spelling: ns::name
    assert b.gb_type == "Operator does not support running with fake tensors"


def test_missing_autograd_unwraps_backend_compiler_failed():
    wrapped = "backend='aot_eager' raised:\nRuntimeError: " + NO_AUTOGRAD
    raw = err(wrapped, "torch._dynamo.exc.BackendCompilerFailed",
              chain=[{"type": "torch._dynamo.exc.BackendCompilerFailed", "message": wrapped},
                     {"type": "RuntimeError", "message": NO_AUTOGRAD}])
    f = detect.classify_error("aot_eager", raw)
    assert f.kind == "missing-autograd"
    assert f.context.op == "tc::myop2"


def test_missing_autograd_at_eager_backward():
    assert detect.classify_error("eager", err(NO_AUTOGRAD, "RuntimeError")).kind == "missing-autograd"


def test_cpp_autograd_fallback_warning_is_a_finding():
    f = detect.classify_warning(CPP_AUTOGRAD_WARN)
    assert f is not None and f.kind == "missing-autograd" and f.context.op == "tclib::cpu_only"
    assert detect.classify_warning("some unrelated UserWarning") is None


def test_mutates_args_lie():
    f = detect.classify_error("opcheck", err(MUTATES, "RuntimeError"))
    assert f.kind == "mutates-args-mismatch" and f.context.argument == "buf"


@pytest.mark.parametrize("message, type_", [(FAKE_META, "MetadataMismatchError"), (FAKE_INDUCTOR, "AssertionError")])
def test_fake_mismatch(message, type_):
    assert detect.classify_error("inductor", err(message, type_)).kind == "fake-mismatch"


@pytest.mark.parametrize("message, type_", [
    (DATA_DEP_210, "torch._dynamo.exc.UserError"),
    (DATA_DEP_28, "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode"),
])
def test_data_dependent_errors(message, type_):
    assert detect.classify_error("fullgraph", err(message, type_)).kind == "data-dependent"


def test_data_dependent_break_by_gb_type():
    reason = ("Data-dependent branching\n  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > "
              "0:`).\n  Developer debug context: attempted to jump with TensorVariable()\n")
    assert detect.classify_break({"reason": reason}).kind == "data-dependent"


def test_other_graph_break_keeps_gb_type():
    reason = ("Encountered graph break when attempting to trace CALL:\n\nFailed to trace builtin operator\n"
              "  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str']"
              "\n For more details about this graph break, please visit: "
              "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html")
    b = detect.classify_break({"reason": reason, "file": "m.py", "line": 7})
    assert (b.kind, b.gb_type, b.gb_code) == ("graph-break", "Failed to trace builtin operator", "GB0059")


def test_python_builtin_is_not_pybind():
    reason = ("Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the "
              "Python builtin `_warnings.warn`.\n")
    assert detect.classify_break({"reason": reason}).kind == "graph-break"


def test_fallbacks_depend_on_stage_and_keep_evidence():
    eager = detect.classify_error("eager", err("boom", "ValueError"))
    assert eager.kind == "eager-error"
    backend = detect.classify_error("inductor", err("backend='inductor' raised:\nCppCompileError: x",
                                                       "torch._dynamo.exc.BackendCompilerFailed"))
    assert backend.kind == "backend-error"
    unknown = detect.classify_error("aot_eager", err("something odd", "KeyError"))
    assert unknown.kind == "unknown"
    assert unknown.evidence.message == "something odd"
    assert unknown.evidence.exception_type == "KeyError"


def test_every_kind_has_a_doc_page_and_a_fix():
    import pathlib

    pages = pathlib.Path(taxonomy.__file__).parent / "failures"
    for kind in taxonomy.kinds().values():
        assert kind.fix, kind.id
        assert (pages / f"{kind.id}.md").is_file(), f"missing the page of {kind.id}"


def test_inductor_fake_assert_on_an_input_is_not_fake_mismatch():
    # `.data` swapped inside the compiled region: inductor's assertion blames "a custom op" but names an input
    msg = ("expected size 4==2, stride 1==1 at dim=0\nError in op: input\n"
           "This error most often comes from a incorrect fake (aka meta) kernel for a custom op.")
    f = detect.classify_error("inductor", err(msg, "AssertionError"))
    # no op to blame and no rule for an input whose size changed under the compiled code: unknown, evidence kept
    assert (f.kind, f.evidence.exception_type) == ("unknown", "AssertionError")
    assert "expected size 4==2" in f.evidence.message


def test_op_names_have_one_spelling_and_builtins_read_short():
    from tracecheck.model.report import op_name

    assert op_name("tc.myop.default") == "tc::myop"
    assert op_name("tc.myop.out") == "tc::myop.out"
    assert op_name("tc::myop") == "tc::myop"
    f = detect.classify_error("fullgraph", err(PYBIND_213, gb_type="Attempted to call function marked as skipped"))
    assert "`tc_ext.fwd`" in f.summary  # the pybind11 record name stays in context, not in the sentence


def test_break_inside_autograd_function_seen_from_user_stack():
    reason = PYBIND_28_CAPSULE
    stack = ('  File "/x/torch/_functorch/autograd_function.py", line 890, in inner\n    outs = orig_fwd(*args)\n'
             '  File "/m/broken.py", line 53, in forward\n    y = ext.fwd(x)\n')
    assert detect.classify_break({"reason": reason, "user_stack": stack}).context.in_autograd_function is True
    assert detect.classify_break({"reason": reason, "user_stack": ""}).context.in_autograd_function is False


# --- issue 13's classes, on torch 2.13.0's wording (recorded from the reproducers of tests/test_classifier_classes.py)

TORCH_OWN_BUILTIN = (
    "Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the builtin "
    "`torch._C._dynamo.autograd_compiler.call_cpp_tensor_pre_hooks.` This function is either a Python builtin (e.g. "
    "_warnings.warn) or a third-party C/C++ Python extension (perhaps created with pybind).\n"
    "  Hint: If it is a Python builtin, please file an issue on GitHub so the PyTorch team can add support for it.\n")


def test_torch_own_c_function_is_a_graph_break_with_dynamos_hints():
    b = detect.classify_break({"reason": TORCH_OWN_BUILTIN})
    assert b.kind == "graph-break"
    f = detect.break_finding(b)
    assert taxonomy.fix_text(f).startswith("Dynamo's hints for this gb_type: If it is a Python builtin, please file")


def _method_call(variable: str) -> str:
    return ("Unsupported method call\n  Explanation: Dynamo does not know how to trace method `__call__` of class "
            "`Scaler`\n  Hint: Avoid calling `Scaler.__call__` in your code.\n  Hint: Please report an issue to "
            f"PyTorch.\n\n  Developer debug context: call_method {variable} __call__ [TensorVariable()] {{}}\n")


def test_c_method_of_a_user_object_is_pybind_builtin_and_other_method_calls_are_not():
    b = detect.classify_break({"reason": _method_call("UserDefinedObjectVariable(Scaler)")})
    assert (b.kind, b.context.builtin) == ("pybind-builtin", "Scaler.__call__")
    assert detect.classify_break({"reason": _method_call("ListVariable(length=2)")}).kind == "graph-break"


def test_fake_that_cannot_run():
    not_impl = ("NotImplementedError/UnsupportedFakeTensorException when running FX node\n  Explanation: Dynamo failed "
                "to run FX node with fake tensors: call_function tc13a.nf.default(*(FakeTensor(..., size=(4,)),), "
                "**{}): got NotImplementedError('fake not written yet')\n")
    b = detect.classify_break({"reason": not_impl})
    assert (b.kind, b.context.op) == ("missing-fake", "tc13a::nf")
    signature = ("TypeError when making fake tensor call\n  Explanation: \n\n  Developer debug context: TypeError "
                 "tc13b.scale.default: _() takes 1 positional argument but 2 were given\n")
    b = detect.classify_break({"reason": signature})
    assert (b.kind, b.context.op) == ("fake-mismatch", "tc13b::scale")


def test_undeclared_alias_and_double_definition():
    alias = err("flat (with implementation in <module 'torch._library.custom_ops'>): The output of this custom operator "
                "(1) must not also be an input to this custom operator and (2) may not alias any inputs to this custom "
                "operator or other returns.", "RuntimeError")
    assert detect.classify_error("eager", alias).kind == "mutates-args-mismatch"
    twice = err("Tried to register an operator (tc13c::twice(Tensor x) -> Tensor) with the same name and overload "
                "name multiple times. Each overload's schema should only be registered with a single call to def().",
                "RuntimeError")
    f = detect.classify_error("load", twice)
    assert (f.kind, f.context.op) == ("op-redefined", "tc13c::twice")


def test_reading_values_into_python_gets_the_read_fix():
    reason = ("Tensor.tolist() with non-integer tensor\n  Explanation: Dynamo currently does not support tracing "
              "`tolist()` on non-integer tensors.\n")
    f = detect.break_finding(detect.classify_break({"reason": reason}))
    assert f.kind == "data-dependent"
    assert taxonomy.fix_text(f).startswith("The code reads tensor values into Python (Tensor.tolist()")


def test_inductor_output_code_is_read_for_custom_op_calls_only():
    """Literal wrapper code in Inductor's shape (torch 2.13/2.14): an extern custom-op call counts once per call;
    aten externs, the assert lines that quote the op and the header aliases do not."""
    from tracecheck.evidence.tracelog import OutputCodeCollector
    from tracecheck.evidence.wording import TORCH_NAMESPACES

    code = """aten = torch.ops.aten
inductor_ops = torch.ops.inductor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
def call(args):
    cpp_fused_sin_0(arg0_1, buf0)
    buf1 = torch.ops.mylib.rms_norm.default(buf0, arg1_1)
    assert_size_stride(buf1, (64, ), (1, ), 'torch.ops.mylib.rms_norm.default')
    extern_kernels.mm(buf1, arg2_1, out=buf2)
    buf3 = torch.ops.aten.index.Tensor(buf2, [arg3_1])
    buf4 = torch.ops.mylib.rms_norm.default(buf3, arg1_1)
    torch.ops.mylib.write_cache.default(buf4, arg4_1)
"""
    c = OutputCodeCollector()
    c.codes = [code, "buf0 = torch.ops.mylib.rms_norm.default(arg0_1, arg1_1)"]
    got = {r.op: (r.calls, list(r.graphs)) for r in c.extern_ops(TORCH_NAMESPACES)}
    assert got == {"mylib::rms_norm": (3, [0, 1]), "mylib::write_cache": (1, [0])}


@pytest.mark.parametrize("message, cause, fix_says", [
    ("In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, jacrev, ...), it must "
     "override the setup_context staticmethod. For more details, please see "
     "https://pytorch.org/docs/main/notes/extending.func.html", "setup_context", "setup_context(ctx, inputs, output)"),
    ("You tried to vmap over New, but it does not have vmap support. Please override and implement the vmap "
     "staticmethod or set generate_vmap_rule=True.", "vmap_rule", "New has no vmap support: set generate_vmap_rule"),
    ("Cannot access data pointer of Tensor that doesn't have storage", "storage", "x.data_ptr()"),
    ("vmap: It looks like you're attempting to use a Tensor in some data-dependent control flow. We don't support "
     "that yet, please file an issue at https://github.com/pytorch/pytorch/issues .", "control_flow", "torch.where"),
    ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over calling .item() on a "
     "Tensor, please try to rewrite what you're doing with other operations.", "item", "keep the value a tensor"),
    ("Batch norm got a batched tensor as input while the running_mean or running_var, which will be updated in "
     "place, were not batched.", "batch_norm", "replace_all_batch_norm_modules_"),
    ("Batching rule not implemented for tc::fused_add; the fallback path doesn't work on out= or view ops.",
     "mutating_op", 'torch.library.register_vmap("tc::fused_add", rule)'),
    ("output with shape [3] doesn't match the broadcast shape [2, 3]", "inplace", "write out of place"),
])
def test_torch_func_refusals_are_functorch_incompatible_with_their_cause(message, cause, fix_says):
    """torch 2.13.0's and 2.14.1's wording (the same on both, observed by running each refusal)."""
    raw = {"type": "RuntimeError", "message": message, "phase": "forward", "transform": "vmap", "functions": []}
    f = measured.transform_error_finding("vmap", ErrorRecord.of(raw))
    assert f.kind == "functorch-incompatible" and f.context.cause == cause
    assert f.summary.startswith("torch.func.vmap refuses the probe")
    assert fix_says in taxonomy.fix_text(f)


def test_torch_func_patterns_apply_only_under_a_transform():
    """The broadcast message means an in-place write into an unbatched tensor under vmap only."""
    f = detect.classify_error("inductor", {"type": "RuntimeError", "phase": "forward",
                                             "message": "output with shape [3] doesn't match the broadcast shape [2, 3]"})
    assert f.kind == "unknown"


# --- issue 22: torch said why, tracecheck said unknown (messages as torch 2.13.0 and 2.14.1 print them) -----------

@pytest.mark.parametrize("message, type_, cause, op, fix_says", [
    ("Batching rule not implemented for gapnr::log_stats. The fallback path does not support operations with no "
     "returns.", "RuntimeError", "no_returns", "gapnr::log_stats", "returns (None, None)"),
    ("Batching rule not implemented for gap2::scalar_out. We could not generate a fallback.", "RuntimeError",
     "no_fallback", "gap2::scalar_out", "return the value as a tensor"),
    ("vmap: We do not support batching operators that can support dynamic shape. Attempting to batch over indexing "
     "with a boolean mask.", "RuntimeError", "dynamic_shape", None, "torch.where with a mask"),
    ("You are attempting to call Tensor.retain_grad() inside of a function being transformed by a functorch "
     "transform. This is unsupported, please attempt to use the functorch transforms (e.g. grad, vjp, jacrev, jacfwd, "
     "hessian) or call requires_grad_() outside of a function being transformed instead.", "RuntimeError",
     "retain_grad", None, "drop it from the function you transform"),
])
def test_more_torch_func_refusals(message, type_, cause, op, fix_says):
    f = measured.transform_error_finding("vmap", ErrorRecord.of({"type": type_, "message": message, "phase": "forward",
                                                  "transform": "vmap", "functions": []}))
    assert f.kind == "functorch-incompatible" and f.context.cause == cause
    assert f.context.op == op
    assert fix_says in taxonomy.fix_text(f)


def test_a_control_flow_op_without_a_grad_rule_is_named():
    """torch.func.grad over torch.cond/scan: functorch's interpreter finds no Grad kernel, a bare KeyError."""
    tb = ('Traceback (most recent call last):\n  File "/x/site-packages/torch/_higher_order_ops/cond.py", line 242, in '
          '_cond_op_wrapper\n    return cond_op(*args, **kwargs)\n  File "/x/site-packages/torch/_functorch/'
          'pyfunctorch.py", line 200, in process\n    kernel = op.functorch_table[TransformType.Grad]\n'
          'KeyError: <TransformType.Grad: 2>\n')
    f = measured.transform_error_finding("vmap", ErrorRecord.of({"type": "KeyError", "message": "<TransformType.Grad: 2>",
                                                  "phase": "backward", "transform": "grad", "traceback": tb}))
    assert (f.kind, f.context.cause, f.context.hop, f.context.transform) == (
        "functorch-incompatible", "hop", "torch.cond", "grad")
    assert f.summary == "torch.func.grad refuses the probe: torch.cond has no torch.func.grad rule."
    # a KeyError of the user's own is not that
    assert detect.classify_error("eager", {"type": "KeyError", "message": "'weight'", "phase": "forward"}).kind == \
        "eager-error"
    # cond's own compile on the transform's wrapped tensors (its first call under grad, torch 2.13)
    message = ('Expected FakeTensor, got <class \'torch.Tensor\'>\n\nfrom user code:\n   File "/x/site-packages/torch/'
               '_higher_order_ops/cond.py", line 242, in _cond_op_wrapper\n    return cond_op(*args, **kwargs)\n')
    f = measured.transform_error_finding("vmap", ErrorRecord.of({"type": "AssertionError", "message": message, "phase": "backward",
                                                  "transform": "grad"}))
    assert (f.kind, f.context.cause, f.context.hop) == ("functorch-incompatible", "hop", "torch.cond")


def test_a_probe_that_calls_torch_func_itself_is_refused_at_eager():
    """The refusal raised in the probe's own vmap call: the traceback runs through torch/_functorch."""
    tb = ('Traceback (most recent call last):\n  File "/p/model.py", line 52, in f\n    return torch.func.vmap(g)(x)\n'
          '  File "/x/site-packages/torch/_functorch/apis.py", line 208, in wrapped\n'
          '  File "/x/site-packages/torch/_functorch/vmap.py", line 482, in _flat_vmap\n'
          'RuntimeError: In order to use an autograd.Function with functorch transforms ...\n')
    message = ("In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, jacrev, ...), it must "
               "override the setup_context staticmethod. For more details, please see "
               "https://pytorch.org/docs/main/notes/extending.func.html")
    f = detect.classify_error("eager", {"type": "RuntimeError", "message": message, "phase": "forward",
                                          "traceback": tb})
    assert (f.kind, f.context.cause, f.context.transform) == ("functorch-incompatible", "setup_context", "vmap")
    assert "?" not in taxonomy.fix_text(f)
    no_tb = detect.classify_error("eager", {"type": "RuntimeError", "message": message, "phase": "forward"})
    assert no_tb.kind == "eager-error"  # the same words with no transform in sight: not claimed


CONSTRAINT = (
    "Constraints violated (L['x'].size()[0])! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
    "  - You marked L['x'].size()[0] as dynamic but your code specialized it to be a constant (4). If you're using "
    "mark_dynamic, either remove it or use maybe_mark_dynamic. If you're using Dim.DYNAMIC, replace it with either "
    "Dim.STATIC or Dim.AUTO.\n\nUser stack:\n  File \"/p/model.py\", line 21, in f\n    if x.shape[0] == 4:\n")


@pytest.mark.parametrize("stage", ["explain", "aot_eager", "inductor", "fullgraph", "export"])
def test_a_dimension_marked_dynamic_and_specialized_is_dynamic_shape(stage):
    frame = {"file": "/p/model.py", "line": 21, "code": "if x.shape[0] == 4:"}
    f = detect.classify_error(stage, {"type": "torch.fx.experimental.symbolic_shapes.ConstraintViolationError",
                                        "message": CONSTRAINT, "phase": "forward", "user_frame": frame})
    assert (f.kind, f.context.cause, f.context.source, f.context.value) == (
        "dynamic-shape", "marked", "L['x'].size()[0]", "4")
    assert "at `if x.shape[0] == 4:` (/p/model.py:21)" in f.summary and "maybe_mark_dynamic" in taxonomy.fix_text(f)


def test_opchecks_aot_dispatch_output_mismatch_is_the_fakes():
    message = ("Outputs of the operator are different in eager-mode PyTorch vs AOTDispatcher tracing. This means the "
               "operator will have incorrect output underneath torch.compile. This could be because the operator's "
               "implementation not traceable.")
    f = detect.classify_error("opcheck", {"type": "AssertionError", "message": message,
                                            "phase": "test_aot_dispatch_dynamic"}, op="gap2::scalar_out")
    assert (f.kind, f.context.cause, f.context.op) == ("fake-mismatch", "aot_outputs", "gap2::scalar_out")
    assert "0-dim tensor instead of a float" in taxonomy.fix_text(f)
    user = detect.classify_error("eager", {"type": "AssertionError", "message": message, "phase": "forward"})
    assert user.kind == "eager-error"  # the words in a user's own assert: not trusted


@pytest.mark.parametrize("type_, kind, cause", [("NotImplementedError", "missing-fake", "stub"),
                                                 ("AssertionError", "fake-mismatch", "raises")])
def test_an_exception_raised_by_the_ops_own_fake_names_the_op(type_, kind, cause):
    """exceptions.fake_impl_raised found it (export raises the fake's exception bare, opcheck an empty assert)."""
    fake = {"op": "lib.quant.default", "exception_type": type_, "message": "",
            "frame": {"file": "/site-packages/lib/ops.py", "line": 30, "code": "assert x.dim() == 2"}}
    f = detect.classify_error("export", {"type": type_, "message": "", "phase": "forward", "fake_impl": fake})
    assert (f.kind, f.context.cause, f.context.op) == (kind, cause, "lib::quant")
    assert f.evidence.user_frame.line == 30  # the fake's own line, where the fix goes


@pytest.mark.parametrize("builtin, raw, kind", [
    # a tensor subclass's constructor: the user's line calls it through torch
    ("<unknown module>.TensorBase._make_wrapper_subclass",
     {"code": "r = torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype)"}, "graph-break"),
    # flex_attention's fallback: Dynamo stopped inside torch, the user's line is the caller
    ("<unknown module>.pybind11_object.__new__",
     {"file": "/x/site-packages/torch/nn/attention/flex_attention.py", "code": "out = _math_attention(q, k, v)",
      "caller": {"file": "/p/model.py", "line": 9}}, "graph-break"),
    # the user's own extension: same wording, the call is the user's
    ("<unknown module>.pybind11_object.__new__", {"code": "state = ext.State(n)"}, "pybind-builtin"),
    # ... also where Dynamo places the break in its polyfill of object construction (torch 2.13)
    ("<unknown module>.pybind11_object.__new__",
     {"file": "/x/site-packages/torch/_dynamo/polyfills/__init__.py", "code": "obj = cls.__new__(cls, *args)",
      "caller": {"file": "/p/model.py", "line": 32}}, "pybind-builtin"),
    ("mhc_ext.pybind11_detail_function_record_v1_x.fwd", {"code": "out = torch_ext_call(x)"}, "pybind-builtin"),
])
def test_only_the_call_site_tells_torchs_own_c_builtins_from_an_extension(builtin, raw, kind):
    reason = ("Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the "
              f"builtin `{builtin}.` This function is either a Python builtin (e.g. _warnings.warn) or a third-party "
              "C/C++ Python extension (perhaps created with pybind).\n")
    b = detect.classify_break({"reason": reason, "gb_type": "Attempted to call function marked as skipped",
                                 "file": "/p/model.py", "line": 7, **raw})
    assert b.kind == kind


def test_a_range_constraint_violation_is_not_called_a_specialization():
    """The same header before a range violation (torch/fx/experimental/symbolic_shapes.py): a neutral summary."""
    message = ("Constraints violated (batch)! For more information, run with TORCH_LOGS=\"+dynamic\".\n  - Not all "
               "values of batch = L['x'].size()[0] in the specified range batch <= 16 satisfy the generated guard "
               "L['x'].size()[0] <= 8.\n")
    f = detect.classify_error("export", {"type": "torch.fx.experimental.symbolic_shapes.ConstraintViolationError",
                                           "message": message, "phase": "forward"})
    assert (f.kind, f.context.cause, f.context.source) == ("dynamic-shape", "constraint", "batch")
    assert "?" not in f.summary and "Dim(min=" in taxonomy.fix_text(f)


def test_a_module_backward_hook_is_named_as_such_under_a_transform():
    message = ("In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, jacrev, ...), it must "
               "override the setup_context staticmethod.")
    tb = ('  File "/x/site-packages/torch/utils/hooks.py", line 120, in setup_input_hook\n'
          '    res, input_idx = self._apply_on_tensors(fn, args)\n')
    f = measured.transform_error_finding("vmap", ErrorRecord.of({"type": "RuntimeError", "message": message, "phase": "backward",
                                                  "transform": "grad", "traceback": tb}))
    assert (f.kind, f.context.cause) == ("functorch-incompatible", "module_hook")
    assert "register_full_backward_hook" in taxonomy.fix_text(f)


def test_torch_func_frames_in_a_compiled_runs_traceback_are_not_a_transform():
    """Dynamo inlines torch.vmap: its frames show in a compile stage's traceback, which is no torch.func refusal."""
    tb = ('Traceback (most recent call last):\n  File "/x/site-packages/torch/_functorch/vmap.py", line 482, in '
          '_flat_vmap\n  File "/p/model.py", line 9, in f\n')
    raw = {"type": "RuntimeError", "message": "Cannot access data pointer of Tensor that doesn't have storage",
           "phase": "forward", "traceback": tb}
    # outside a transform no rule explains a data-pointer read, and RuntimeError is no compiler backend's exception
    # type: unclassified, raw evidence kept (kinds.json "unknown"), never a torch.func refusal
    assert detect.classify_error("inductor", raw).kind == "unknown"
    assert detect.classify_error("eager", raw).kind == "functorch-incompatible"
    assert detect.transform_in_traceback(tb.replace("_flat_vmap", "grad_impl")) == "grad"


# a break Dynamo placed in compiled autograd's generated graph (bitsandbytes' Linear4bit on torch 2.13.0)
_OBSERVED = ("Observed exception\n  Explanation: Dynamo found no exception handler at the top-level compiled function "
             "when encountering an exception.\n\n  Developer debug context: raised exception "
             "IndexError('list index out of range')\n")


def test_a_break_in_generated_code_is_not_called_the_users_line():
    import torch
    from tracecheck.evidence import frames

    torch_file = torch.__file__.replace("__init__.py", "_dynamo/compiled_autograd.py")
    stack = (f'  File "{torch_file}", line 1242, in runtime_wrapper\n    out = compiled_fn(\n'
             '  File "<eval_with_key>.9", line 24, in forward\n    aot0_primals_5 = call_aot_bwd_prologue[2]\n')
    assert frames.caller_outside_torch("<eval_with_key>.9", stack) is None
    b = detect.classify_break({"reason": _OBSERVED, "gb_type": "Observed exception", "file": "<eval_with_key>.9",
                                 "line": 24, "code": "aot0_primals_5 = call_aot_bwd_prologue[2]"})
    f = detect.break_finding(b)
    assert f.evidence.user_frame is None
    assert f.evidence.generated_frame == Frame("<eval_with_key>.9", 24, None, "aot0_primals_5 = call_aot_bwd_prologue[2]")


def test_a_break_in_generated_code_names_the_library_line_under_it():
    from tracecheck.evidence import frames

    lib = "/opt/venv/lib/python3.11/site-packages/qlib/functional.py"
    stack = ('  File "<eval_with_key>.9", line 24, in forward\n    x = call_backward(...)\n'
             f'  File "{lib}", line 88, in backward\n    return dequant(ctx.q) @ g\n')
    caller = frames.caller_outside_torch("<eval_with_key>.9", stack)
    assert (caller.file, caller.line, caller.code) == (lib, 88, "return dequant(ctx.q) @ g")
    f = detect.break_finding(detect.classify_break({"reason": _OBSERVED, "gb_type": "Observed exception",
                                                        "file": "<eval_with_key>.9", "line": 24, "caller": caller}))
    assert f.evidence.user_frame.line == 88 and f.evidence.generated_frame is None


def _gb4315(got: str) -> str:
    # torch 2.13.0's wording of a fake impl that raised while Dynamo ran the op on FakeTensors
    return ("RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake tensors: "
            "call_function lib27.quant.default(*(FakeTensor(..., size=(4, 8)),), **{}): got " + got + "\n\n"
            " For more details about this graph break, please visit: "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4315.html")


def test_a_graph_break_on_a_fake_that_raised_is_the_fakes_fault():
    b = detect.classify_break({"reason": _gb4315("AssertionError('quant expects (B, S, C)')"),
                                 "gb_type": "RuntimeError when making fake tensor call", "file": "m.py", "line": 17})
    assert (b.kind, b.context.cause, b.context.op) == ("fake-mismatch", "raises", "lib27::quant")
    assert "quant expects (B, S, C)" in detect.break_finding(b).summary


def test_a_graph_break_on_a_data_dependent_fake_is_not_called_a_raising_fake():
    b = detect.classify_break({"reason": _gb4315("DataDependentOutputException(aten._local_scalar_dense.default)"),
                                 "gb_type": "RuntimeError when making fake tensor call", "file": "m.py", "line": 17})
    # the fake refused to read a value (torch's DataDependentOutputException), it did not raise on its own: the break
    # keeps its gb_type's kind, a plain graph-break (docs/gb-types.md lists GB4315 there)
    assert b.kind == "graph-break"


def test_a_graph_break_on_torchs_own_op_is_not_a_custom_fake():
    reason = _gb4315("RuntimeError('bad group')").replace("lib27.quant.default", "_c10d_functional.all_reduce.default")
    b = detect.classify_break({"reason": reason, "gb_type": "RuntimeError when making fake tensor call",
                                 "file": "m.py", "line": 17})
    # torch's own collective raised on FakeTensors: no fake of the user's to fix; the GB4315 break stays a graph-break
    assert b.kind == "graph-break"


@pytest.mark.parametrize("message", [
    # the dispatcher's own words for a key with no kernel and no fallback (torch 2.13)
    "Could not run 'mylib::scale' with arguments from the 'PrivateUse1' backend. This could be because the operator "
    "doesn't exist for this backend, or was omitted during the selective/custom build process (if using custom "
    "build). 'mylib::scale' is only available for these backends: [CPU, Meta, BackendSelect, Python].",
    # tracecheck's emulated npu device (tracecheck/devices/csrc/emulated_npu.cpp)
    "Could not run 'mylib::scale' with arguments from the 'PrivateUse1' backend. 'mylib::scale' has no kernel for "
    "PrivateUse1 (on the emulated npu device only aten and prims operators run on the host).",
])
def test_a_custom_op_without_a_kernel_for_the_device_is_missing_device_kernel(message):
    f = detect.classify_error("eager", {"type": "NotImplementedError", "message": message})
    assert f.kind == "missing-device-kernel"
    assert (f.context.op, f.context.key) == ("mylib::scale", "PrivateUse1")
    assert 'torch.library.impl("mylib::scale", "PrivateUse1", kernel)' in taxonomy.fix_text(f)


def test_a_missing_meta_kernel_or_an_aten_op_is_not_missing_device_kernel():
    meta = detect.classify_error("explain", {"type": "NotImplementedError", "message":
                                      "Could not run 'mylib::scale' with arguments from the 'Meta' backend."})
    aten = detect.classify_error("eager", {"type": "NotImplementedError", "message":
                                    "Could not run 'aten::_foo' with arguments from the 'PrivateUse1' backend."})
    assert "missing-device-kernel" not in (meta.kind, aten.kind)
    assert aten.kind == "eager-error"


def test_an_aten_op_the_emulated_npu_cannot_run_is_unknown_not_the_probes_bug():
    msg = ("The emulated npu device cannot run aten::_thnn_fused_lstm_cell on the host (tracecheck's emulator, not the "
           "model): Could not run 'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU' backend.")
    assert detect.classify_error("eager", {"type": "NotImplementedError", "message": msg}).kind == "unknown"


def test_missing_device_kernel_leaves_every_torch_namespace_to_torch():
    from tracecheck.evidence.wording import TORCH_NAMESPACES

    for ns in sorted(TORCH_NAMESPACES):
        f = detect.classify_error("eager", {"type": "NotImplementedError", "message":
                                            f"Could not run '{ns}::some_op' with arguments from the 'PrivateUse1' backend."})
        # an op torch defines has no registration of the user's to add: in eager it is the probe's eager failure, as
        # aten's is (test_a_missing_meta_kernel_or_an_aten_op_is_not_missing_device_kernel)
        assert f.kind == "eager-error", ns


def test_a_c_function_of_pythons_standard_library_is_not_pybind():
    """``_pickle.dumps`` (gpytorch's and linear_operator's memoize keys) is Python's own C code, which no custom op can
    wrap: a graph-break with Dynamo's hints, not pybind-builtin. Oracle: torch's own reason for refusing the call,
    from plain ``torch.compile(fullgraph=True)`` in this test, names the builtin as Dynamo words it."""
    import pickle

    import torch

    def fn(x):
        key = pickle.dumps({"n": 3})
        return x.sin() * len(key)

    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:  # fullgraph: Dynamo refuses the call with its reason
        torch.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    torch._dynamo.reset()
    reason = str(raised.value)
    assert "_pickle.dumps" in reason, reason
    f = detect.classify_break({"reason": reason, "gb_type": "Attempted to call function marked as skipped"})
    assert f.kind == "graph-break", f
    # an extension's builtin with the same wording stays pybind-builtin
    assert detect.classify_break({"reason": reason.replace("_pickle.dumps", "my_ext.dumps"),
                                  "gb_type": "Attempted to call function marked as skipped"}).kind == "pybind-builtin"
    # sys.call_tracing runs a Python kernel from C (the shared reproducers' stand-in for an extension): still pybind
    assert detect.classify_break({"reason": reason.replace("_pickle.dumps", "sys.call_tracing"),
                                  "gb_type": "Attempted to call function marked as skipped"}).kind == "pybind-builtin"


def test_a_c_method_called_with_constants_only_is_told_to_stay_a_constant():
    """A C-extension method called with constants only (pywt's ``Modes.from_object('zero')``, here the C type
    ``struct.Struct``'s ``pack(3)``) makes a constant: the advice is to compute it outside the compiled code or through
    ``torch.compiler.assume_constant_result``, not a custom op. Oracles: plain ``torch.compile(fullgraph=True)``'s
    refusal (its words, in this test), and the advised decorator making the same function compile whole and agree
    with eager; the same call with a tensor argument keeps the custom-op advice."""
    import struct

    import torch

    packer = struct.Struct("<i")

    def fn(x):
        return x * len(packer.pack(3))

    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    reason = str(raised.value)
    f = detect.classify_error("fullgraph", err(reason, "torch._dynamo.exc.Unsupported", gb_type="Unsupported method call"))
    assert f.kind == "pybind-builtin" and f.context.cause == "constant_args", f
    assert f.context.args == "3" and "constant" in f.summary
    fix = taxonomy.fix_text(f)
    assert "assume_constant_result" in fix and "custom_op" not in fix

    @torch.compiler.assume_constant_result
    def packed_len() -> int:
        return len(packer.pack(3))

    def fixed(x):
        return x * packed_len()

    torch._dynamo.reset()
    x = torch.randn(3)
    assert torch.equal(torch.compile(fixed, backend="eager", fullgraph=True)(x), fn(x))
    torch._dynamo.reset()
    tensor_arg = reason.replace("[ConstantVariable(int: 3)]", "[TensorVariable()]")
    assert "TensorVariable()" in tensor_arg
    g = detect.classify_error("fullgraph", err(tensor_arg, "torch._dynamo.exc.Unsupported", gb_type="Unsupported method call"))
    assert g.kind == "pybind-builtin" and g.context.cause is None, g
