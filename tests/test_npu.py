"""The NPU path without an NPU (issue 24): the emulated PrivateUse1 device named ``npu``, vendor op registrations on
it, and an installed torch_npu that cannot import (no CANN).

Oracles: the same computation on the CPU in the same test (float64 where it is a gradient), torch's documented
behaviour (views alias their base; ``import torch`` loads an installed device backend through its entry point), and
kinds written by hand for ops whose defect is built in on purpose.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # the emulator's first build on a machine (~45 s, then cached)


# ---- the device itself ---------------------------------------------------------------------------------------


def test_tensors_round_trip_and_views_alias_their_base(emulated_npu):
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = cpu.to(emulated_npu)
    assert x.device.type == "npu" and x.is_npu
    assert torch.equal(x.cpu(), cpu)
    t = x.t()  # a view: the real strides, the same memory
    assert t.stride() == (1, 4) and t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x[1].add_(100)  # in place through a view reaches the base
    assert x.cpu()[1].tolist() == [104.0, 105.0, 106.0, 107.0]


def test_in_place_and_out_ops_on_strided_views_write_where_the_cpu_writes(emulated_npu):
    """ATen's cpu_fallback writes in-place and out= results back through _copy_from_and_resize: a resize must keep
    a view's strides (a same-size resize is a no-op) or the write lands on the wrong elements."""
    on_cpu, on_npu = torch.zeros(3, 3), torch.zeros(3, 3).to(emulated_npu)
    on_cpu[:, 1].add_(100)
    on_npu[:, 1].add_(100)
    assert torch.equal(on_npu.cpu(), on_cpu)
    out = torch.empty(3, 3, device=emulated_npu).t()
    torch.add(torch.ones(3, 3, device=emulated_npu), 1, out=out)
    assert out.stride() == (1, 3) and bool((out.cpu() == 2).all())


def test_conjugate_views_and_overlapping_copies_behave_as_on_the_cpu(emulated_npu):
    z = torch.randn(2, 2, dtype=torch.complex64)
    assert torch.equal(z.to(emulated_npu).conj().cpu(), z.conj())
    assert torch.equal((-z.to(emulated_npu).conj()).cpu(), -z.conj())
    y, y_cpu = torch.arange(5.0).to(emulated_npu), torch.arange(5.0)
    with pytest.raises(RuntimeError, match="unsupported operation: some elements"):
        y_cpu[1:].copy_(y_cpu[:-1])  # the oracle: the CPU refuses an overlapping copy
    with pytest.raises(RuntimeError, match="unsupported operation: some elements"):
        y[1:].copy_(y[:-1])


def test_what_the_emulator_cannot_run_is_said_to_be_the_emulators(emulated_npu):
    with torch.autocast(emulated_npu, dtype=torch.float16):  # runs; this device has no autocast kernels
        assert (torch.ones(2, device=emulated_npu) * 2).dtype == torch.float32
    lstm = torch.nn.LSTM(4, 3).to(emulated_npu)  # torch picks a fused cell CPU has no kernel for
    with pytest.raises(NotImplementedError, match="The emulated npu device cannot run aten::_thnn_fused_lstm_cell"):
        lstm(torch.randn(2, 1, 4, device=emulated_npu))


def test_autograd_on_the_device_matches_a_float64_cpu_golden(emulated_npu):
    g = torch.Generator().manual_seed(0)
    a64, b64 = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(3, 4, generator=g, dtype=torch.float64)
    a = a64.float().to(emulated_npu).requires_grad_()
    b = b64.float().to(emulated_npu).requires_grad_()
    (a.exp() @ b).tanh().sum().backward()
    a_ref, b_ref = a64.clone().requires_grad_(), b64.clone().requires_grad_()
    (a_ref.exp() @ b_ref).tanh().sum().backward()
    assert a.grad.device.type == "npu"
    torch.testing.assert_close(a.grad.cpu().double(), a_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.cpu().double(), b_ref.grad, rtol=1e-5, atol=1e-5)


def test_torch_compile_aot_eager_runs_on_the_device_and_inductor_has_no_codegen(emulated_npu):
    from tracecheck import compat

    def f(x):
        return torch.nn.functional.gelu(x @ x.T).sum(dim=0)

    x = torch.randn(6, 6).to(emulated_npu)
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), f(x.cpu()))
    assert compat.inductor_has_codegen("cpu") and not compat.inductor_has_codegen(emulated_npu)


def test_a_conv_net_trains_on_the_device_as_on_the_cpu(emulated_npu):
    """Convolutions reach a device outside CPU/CUDA as convolution_overrideable (whose default kernel raises): the
    emulator runs them on the host. Forward and parameter gradients equal the CPU's, BatchNorm in training mode."""
    import copy

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Conv2d(4, 2, 3, stride=2, bias=False), torch.nn.ConvTranspose2d(2, 1, 2)).train()
    x = torch.randn(2, 3, 8, 8)
    on_npu = copy.deepcopy(net).to(emulated_npu)
    ref = net(x)
    ref.square().sum().backward()
    got = on_npu(x.to(emulated_npu))
    got.square().sum().backward()
    torch.testing.assert_close(got.cpu(), ref)
    for (name, p), q in zip(net.named_parameters(), on_npu.parameters()):
        assert q.grad.device.type == "npu", name
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=name)


def test_a_cpu_tensor_where_a_device_tensor_is_expected_is_refused_as_on_a_real_device(emulated_npu):
    x, w = torch.randn(4, 4).to(emulated_npu), torch.randn(4, 3)
    for call in (lambda: x @ w, lambda: torch.nn.functional.linear(x, w.T), lambda: torch.cat([x, torch.ones(1, 4)])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call()
    assert (x * torch.tensor(2.0)).device.type == "npu"  # a CPU 0-dim tensor is a scalar: allowed, as on CUDA


def test_random_numbers_are_drawn_from_the_cpu_generator(emulated_npu):
    torch.manual_seed(3)
    on_device = torch.randn(4, device=emulated_npu)
    torch.manual_seed(3)
    assert torch.equal(on_device.cpu(), torch.randn(4))


def test_a_vendor_op_without_a_kernel_for_the_device_is_refused_not_run_on_the_host(emulated_npu):
    lib = torch.library.Library("tc_npu_test", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        x = torch.ones(3, device=emulated_npu)
        with pytest.raises(NotImplementedError, match=r"Could not run 'tc_npu_test::twice' with arguments from the "
                                                      r"'PrivateUse1' backend"):
            torch.ops.tc_npu_test.twice(x)
        torch.library.impl("tc_npu_test::twice", "PrivateUse1", lambda x: x * 2, lib=lib)  # the kind's fix
        torch.library.register_fake("tc_npu_test::twice", lambda x: torch.empty_like(x), lib=lib)
        assert torch.ops.tc_npu_test.twice(x).cpu().tolist() == [2.0, 2.0, 2.0]
        torch.library.opcheck(torch.ops.tc_npu_test.twice.default, (x,))
    finally:
        lib._destroy()


# ---- vendor op registrations through tracecheck run --emulate-npu ------------------------------------------------

VENDOR_OPS = '''
    import torch

    lib = torch.library.Library("vendor", "DEF")
    lib.define("cpu_only(Tensor x) -> Tensor")           # a CPU kernel only: called on npu
    lib.impl("cpu_only", lambda x: x * 2, "CPU")
    torch.library.register_fake("vendor::cpu_only", lambda x: torch.empty_like(x), lib=lib)

    lib.define("npu_nofake(Tensor x) -> Tensor")         # an npu kernel, no fake impl
    lib.impl("npu_nofake", lambda x: x * 3, "PrivateUse1")

    lib.define("npu_badstride(Tensor x) -> Tensor")      # the kernel returns row-major, the fake column-major
    lib.impl("npu_badstride", lambda x: (x * 4).contiguous(), "PrivateUse1")
    torch.library.register_fake("vendor::npu_badstride", lambda x: x.new_empty((x.shape[1], x.shape[0])).t(), lib=lib)

    lib.define("npu_ok(Tensor x) -> Tensor")
    lib.impl("npu_ok", lambda x: x * 5, "PrivateUse1")
    torch.library.register_fake("vendor::npu_ok", lambda x: torch.empty_like(x), lib=lib)

    def _x():
        return (torch.randn(4, 3),)   # tracecheck moves it to the run's device

    def probe_cpu_only():
        return torch.ops.vendor.cpu_only, _x()

    def probe_npu_nofake():
        return torch.ops.vendor.npu_nofake, _x()

    def probe_npu_badstride():
        return torch.ops.vendor.npu_badstride, _x()

    def probe_npu_ok():
        return torch.ops.vendor.npu_ok, _x()
'''


def test_vendor_registrations_get_their_kinds_on_the_emulated_device(tracecheck, write_probe):
    path = write_probe(VENDOR_OPS, "vendor_ops.py")
    r = tracecheck("run", str(path), "--emulate-npu", "--stages", "eager,explain,aot_eager,inductor,opcheck")
    assert r.returncode == 1, r.stderr[-3000:]
    env = r.report["environment"]
    assert env["device"] == "npu" and env["emulated"] is True
    assert env["device_label"] == "emulated NPU (PrivateUse1 on CPU memory)"
    assert "device npu: emulated NPU (PrivateUse1 on CPU memory)" in r.stdout  # the terminal's environment line

    def kinds(probe: str, stage: str) -> list[str]:
        return [f["kind"] for f in r.probe(probe)["stages"][stage]["findings"]]

    assert kinds("probe_cpu_only", "eager") == ["missing-device-kernel"]
    finding = r.probe("probe_cpu_only")["stages"]["eager"]["findings"][0]
    assert finding["context"]["op"] == "vendor::cpu_only" and finding["context"]["key"] == "PrivateUse1"
    assert kinds("probe_npu_nofake", "explain") == ["missing-fake"]
    assert kinds("probe_npu_badstride", "opcheck") == ["fake-mismatch"]
    assert r.probe("probe_npu_ok")["verdict"]["status"] == "pass"
    # Inductor cannot compile for the device: said, and no probe is failed for it
    inductor = r.probe("probe_npu_ok")["stages"]["inductor"]
    assert inductor["status"] == "skip" and "no code generator for device npu" in inductor["skip_reason"]


def test_emulate_npu_with_another_device_is_a_usage_error(tracecheck, write_probe):
    path = write_probe(VENDOR_OPS, "vendor_ops.py")
    r = tracecheck("run", str(path), "--emulate-npu", "--device", "cpu", json_report=False)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("tracecheck: error: --emulate-npu")


# ---- an installed torch_npu that cannot import ------------------------------------------------------------------

FAKE_TORCH_NPU = {
    # a torch_npu whose native library needs CANN, as PyPI's does, with torch's device-backend entry point
    "torch_npu/__init__.py": "__version__ = '2.99.0'\nfrom . import _C  # noqa\n",
    "torch_npu/_C.py": "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n",
    "torch_npu-2.99.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.99.0\n",
    "torch_npu-2.99.0.dist-info/entry_points.txt": "[torch.backends]\ntorch_npu = torch_npu:_autoload\n",
}


def _torch_npu_dir(tmp_path: Path) -> Path:
    """PyPI's torch_npu installed with ``pip install --target`` (CI's 2.14.1 leg sets TRACECHECK_TORCH_NPU_DIR),
    else a stand-in with the same import failure and entry point."""
    real = os.environ.get("TRACECHECK_TORCH_NPU_DIR")
    if real:
        assert (Path(real) / "torch_npu" / "__init__.py").exists(), f"TRACECHECK_TORCH_NPU_DIR={real} has no torch_npu"
        return Path(real)
    root = tmp_path / "site"
    for rel, text in FAKE_TORCH_NPU.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _env_with(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), env.get("PYTHONPATH", "")]), "COLUMNS": "200"}


def test_an_installed_torch_npu_that_cannot_import_breaks_import_torch_itself(tmp_path):
    """The oracle for what follows: torch loads device backends at ``import torch`` (entry point torch.backends)."""
    proc = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True,
                          env=_env_with(_torch_npu_dir(tmp_path)), timeout=300)
    assert proc.returncode != 0
    assert "Failed to load the backend extension: torch_npu" in proc.stderr


PASSING = '''
    import torch

    def probe_double():
        return (lambda x: x * 2), (torch.randn(3),)
'''


def test_device_npu_says_why_torch_npu_cannot_import_and_auto_runs_on_the_cpu(tmp_path, write_probe):
    site = _torch_npu_dir(tmp_path)
    path = write_probe(PASSING)
    run = [sys.executable, "-m", "tracecheck", "run", str(path), "--stages", "eager,explain"]
    npu = subprocess.run([*run, "--device", "npu"], capture_output=True, text=True, env=_env_with(site),
                         timeout=600, cwd=tmp_path)
    assert npu.returncode == 2, npu.stderr[-2000:]
    line = npu.stderr.strip().splitlines()[-1]
    assert line.startswith("tracecheck: error: --device npu: torch_npu ")
    assert "ImportError: libhccl.so: cannot open shared object file" in line  # the import error's first line
    assert "CANN" in line and "--emulate-npu" in line  # what to install, and the way to check without it

    out = tmp_path / "auto.json"
    auto = subprocess.run([*run, "--device", "auto", "--json", str(out)], capture_output=True, text=True,
                          env=_env_with(site), timeout=600, cwd=tmp_path)
    assert auto.returncode == 0, auto.stderr[-3000:]
    env = json.loads(out.read_text())["environment"]
    assert env["device"] == "cpu" and env["npu_available"] is False and env["emulated"] is False
    assert "libhccl.so" in env["npu_note"]


def test_the_real_torch_npu_wheel_is_checked_where_ci_installs_it():
    """CI's torch 2.14.1 leg installs PyPI's torch_npu 2.14.0 beside the venv (`pip install --target`); the two
    tests above then run against it. Elsewhere they run against the stand-in, and this says which."""
    real = os.environ.get("TRACECHECK_TORCH_NPU_DIR")
    if not real:
        assert not (os.environ.get("CI") and torch.__version__.startswith("2.14")), \
            "CI's 2.14.1 leg must set TRACECHECK_TORCH_NPU_DIR (.ci/run)"
        pytest.skip("PyPI's torch_npu is not installed here (CI's 2.14.1 leg installs it): the stand-in was used")
    dist = list(Path(real).glob("torch_npu-*.dist-info"))
    assert dist, f"no torch_npu dist-info in {real}"
    assert (Path(real) / "torch_npu" / "_C").exists() or list((Path(real) / "torch_npu").glob("_C*.so"))
