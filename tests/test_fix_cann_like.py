"""``tracecheck fix`` on the mHC wrapper laid out as CANN's ``cann_ops_transformer`` ships it
(tests/models/cann_like): a package that re-exports each wrapper function under its module's name, S == n in the
probe, and a no-grad path that calls the pybind11 module straight from the library's own file.

Oracle: plain torch in a fresh interpreter (the patched copy imports; torch.compile(fullgraph=True, dynamic=True)
at S != n, forward and backward, equals the original autograd.Function run eagerly) and the mHC spec's shapes
(shared/mhc_spec.md §4.2: h_post is (B, S, n))."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_fix_e2e import _python  # a fresh interpreter: custom-op registrations are process-global

from tracecheck.fix.pipeline import VERIFIED, FixOptions, fix

PROBE = Path(__file__).resolve().parent / "models" / "cann_like" / "cann_probe.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def train_fix(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cann_train")
    return fix(FixOptions(f"{PROBE}::probe_train", output=str(tmp / "fixed_ops.py"), timeout_s=600)), tmp


def test_the_function_path_is_fixed_and_its_patched_copy_imports(train_fix):
    outcome, tmp = train_fix
    assert outcome.kinds[0] == "pybind-builtin"
    assert outcome.status == VERIFIED, outcome.reasons
    # the patched copy rebinds the Function in its module, reached through importlib: `import a.b.mhc_pre_sinkhorn
    # as m` would bind the re-exported function (AttributeError: 'function' object has no attribute ...)
    assert "import_module('cann_ops_like.ops.mhc.mhc_pre_sinkhorn')" in (tmp / "cann_probe_fixed.py").read_text()


def test_the_fake_keeps_s_and_n_apart_and_compiles_where_they_differ(train_fix):
    _, tmp = train_fix
    got = _python("""
        import importlib.util, sys, torch
        spec = importlib.util.spec_from_file_location("patched", "cann_probe_fixed.py")
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        import fixed_ops
        original = fixed_ops._ORIGINALS["MhcPreSinkhornFunction"]
        wrapper = sys.modules["cann_ops_like.ops.mhc.mhc_pre_sinkhorn"]
        n, C = 4, 16
        compiled = torch.compile(m._pre, backend="aot_eager", fullgraph=True, dynamic=True)
        for lead in [(2, 8), (3, 5), (6,)]:
            g = torch.Generator().manual_seed(1)
            base = [torch.randn(*lead, n, C, generator=g), torch.randn(24, 64, generator=g) / 8,
                    torch.tensor([0.5, 0.6, 0.7]), 0.1 * torch.randn(24, generator=g)]
            a = [t.clone().requires_grad_() for t in base]
            r = [t.clone().requires_grad_() for t in base]
            out = compiled(*a)
            h_in, h_post, h_res = original.apply(*r, n, 20, 1e-6, 1e-6)
            assert tuple(h_post.shape) == (*lead, n)  # spec §4.2
            ref = h_in.sum(-1) + (h_post * h_res[..., :n]).sum(-1)
            out.sum().backward(); ref.sum().backward()
            torch.testing.assert_close(out, ref)
            for x, y in zip(a, r):
                torch.testing.assert_close(x.grad, y.grad, rtol=1e-4, atol=1e-5)
        print("OK")
    """, tmp)
    assert got.strip().endswith("OK")


def test_the_librarys_own_direct_call_gets_a_custom_op_the_probes_file_installs(tmp_path):
    """The no-grad path calls the pybind11 module from the library's file (mhc_pre_sinkhorn.py), not the probe's:
    the fix must still reach it. The probe's patched copy installs a custom op in the library's module; the library
    is not edited; plain torch then compiles the probe fullgraph at S != n, equal to eager."""
    library = PROBE.parent / "cann_ops_like" / "ops" / "mhc" / "mhc_pre_sinkhorn.py"
    before = library.read_text()
    outcome = fix(FixOptions(f"{PROBE}::probe_infer", output=str(tmp_path / "fixed_ops.py"), timeout_s=600))
    assert outcome.kinds == ["pybind-builtin"]
    assert outcome.status == VERIFIED, outcome.reasons
    assert library.read_text() == before
    (site,) = outcome.sites
    assert site.rewrite == "custom-op" and site.file.endswith("mhc_pre_sinkhorn.py")
    assert "import_module('cann_ops_like.ops.mhc.mhc_pre_sinkhorn')" in outcome.diff
    assert outcome.shapes and outcome.shapes[0].failed == ()
    line = before[:before.index("outs = ext.mhc_pre_sinkhorn")].count("\n") + 1
    # the reference: the C function itself, kept by the patched copy under _tc_c_<line>
    got = _python("""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("patched", "cann_probe_fixed.py")
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        compiled = torch.compile(m._pre, backend="aot_eager", fullgraph=True)
        g = torch.Generator().manual_seed(2)
        x, phi = torch.randn(2, 8, 4, 16, generator=g), torch.randn(24, 64, generator=g) / 8
        alpha, bias = torch.tensor([0.5, 0.6, 0.7]), 0.1 * torch.randn(24, generator=g)
        out = compiled(x, phi, alpha, bias)
        h_in, h_post, h_res = m._tc_c_LINE(x, phi, alpha, bias, 4, 20, 1e-6, 1e-6, False)[:3]
        torch.testing.assert_close(out, h_in.sum(-1) + (h_post * h_res[..., :4]).sum(-1))
        print("OK")
    """.replace("LINE", str(line)), tmp_path)
    assert got.strip().endswith("OK")


# ---- the loader layout (issue 51): the pybind11 module is a local of forward, returned by an OpBuilder's load() ----

LOADER = Path(__file__).resolve().parent / "models" / "cann_like" / "cann_loader_probe.py"

#: the oracle, in a fresh interpreter: the original probe's eager results at sizes it never used (S != n, another
#: batch), then the patched copy compiled with fullgraph=True, forward and backward, against them
LOADER_ORACLE = """
    import importlib.util, sys, torch
    sys.path.insert(0, sys.argv[1])
    import cann_loader_probe as original

    def case(seed, lead):
        g = torch.Generator().manual_seed(seed)
        n, C = 4, 16
        if PROBE == "probe_pre":
            m, k = n * n + 2 * n, n * C
            args = [torch.randn(*lead, n, C, generator=g), torch.randn(m, k, generator=g) / 8,
                    torch.tensor([0.5, 0.6, 0.7]), 0.1 * torch.randn(m, generator=g)]
        elif PROBE == "probe_post":
            args = [torch.randn(*lead, n, C, generator=g), torch.randn(*lead, n, n, generator=g),
                    torch.randn(*lead, C, generator=g), torch.randn(*lead, n, generator=g)]
        else:
            args = [torch.randn(*lead, n, C, generator=g)]
        return [a.requires_grad_() for a in args]

    def run(module, compiled, lead):
        torch.manual_seed(0)
        fn, _ = getattr(module, PROBE)()
        call = torch.compile(fn, backend="aot_eager", fullgraph=True) if compiled else fn
        args = case(3, lead)
        out = call(*args)
        params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
        grads = torch.autograd.grad(out.sum(), args + params)
        return out.detach(), grads

    sizes = [(2, 7), (3, 5)]  # S != n (4): a fake tying them fails here
    want = [run(original, False, lead) for lead in sizes]
    spec = importlib.util.spec_from_file_location("patched", "cann_loader_probe_fixed.py")
    patched = sys.modules["patched"] = importlib.util.module_from_spec(spec)  # (Dynamo looks classes' modules up)
    spec.loader.exec_module(patched)
    for lead, (out, grads) in zip(sizes, want):
        got, got_grads = run(patched, True, lead)
        torch.testing.assert_close(got, out)
        for a, b in zip(got_grads, grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    print("OK")
"""


@pytest.mark.parametrize("probe", ["probe_pre", "probe_post", "probe_stack"])
def test_the_loader_layout_gets_its_functions_converted_and_verified(tmp_path, probe):
    """The Function's C call goes through a local (`op_module = builder.load()`), and the loader's first call under
    Dynamo breaks at os.path.isdir: the pybind-builtin is still the Function's (found by the source when Dynamo
    traced forward as a frame of its own), so fix converts the Function to custom ops (it said "cannot record calls
    of `op_module.mhc_post`" and wrote nothing); the patched copy compiles at sizes the probe never used."""
    outcome = fix(FixOptions(f"{LOADER}::{probe}", output=str(tmp_path / "fixed_ops.py"), timeout_s=600))
    assert "pybind-builtin" in outcome.kinds
    assert outcome.status == VERIFIED, outcome.reasons
    assert {f.function for f in outcome.functions if "custom ops generated" in f.action} == (
        {"MhcPreSinkhornFunction", "MhcPostFunction"} if probe == "probe_stack" else
        {"MhcPreSinkhornFunction" if probe == "probe_pre" else "MhcPostFunction"})
    got = _python(LOADER_ORACLE.replace("PROBE", repr(probe)).replace("sys.argv[1]", repr(str(LOADER.parent))),
                  tmp_path)
    assert got.strip().endswith("OK")
