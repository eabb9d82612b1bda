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


# ---- the device itself: tests/npu_device_checks.py, in a fresh process ------------------------------------------


def test_the_emulated_device_behaves_as_the_cpu_does():
    """The device checks run first thing in their own process: the autograd engine sizes its per-device queues
    when it first runs, so a backward earlier in a shared test process would leave PrivateUse1 without one."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/npu_device_checks.py"],
                          capture_output=True, text=True, cwd=REPO, timeout=900,
                          env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


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
