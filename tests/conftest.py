import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

#: the files that take minutes (each is one or more tracecheck runs of many probes), longest first: under
#: ``-n 2 --dist loadfile`` they start first, so that no long file starts near the end while the other worker idles.
#: pytest-xdist's own order (files with more tests first) put test_real_models.py, the longest, late. From CI's
#: --durations, torch 2.13.0; a file not listed runs after these, in collection order
LONGEST_FIRST = ("test_real_models.py", "test_mhc_probes_e2e.py", "test_convnets.py", "test_fix_model_code.py",
                 "test_shared_cases.py", "test_fix_e2e.py", "test_ops_audit.py", "test_fix_library.py", "test_trust.py",
                 "test_compiled_autograd.py",
                 "test_ci_roundtrip.py", "test_cache.py", "test_torchfunc_stage.py", "test_repro.py", "test_readiness_stages.py",
                 "test_repro_minimal.py", "test_fix_generic_ops.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below
        config.option.loadscopereorder = False
    # every test's `tracecheck run` runs its probes: a result reused from another test's run of the same file and
    # options would check nothing (collect/cache.py); tests/test_cache.py turns it on where it is the subject
    os.environ["TRACECHECK_NO_CACHE"] = "1"


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def shared_cases() -> Path:
    """``../shared/cases``: the reproducers beside the clone. CI always has them, so there a missing folder fails;
    a bare clone elsewhere skips the tests that need them, saying why."""
    cases = SHARED / "cases"
    if not any(cases.glob("*.py")):
        assert not os.environ.get("CI"), f"the shared reproducers are missing: {cases}"
        pytest.skip(f"the shared reproducers are not beside this clone ({cases}); see README 'Two commands'")
    return cases


class CliResult:
    def __init__(self, proc: subprocess.CompletedProcess, json_path: Path | None):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.report = json.loads(json_path.read_text()) if json_path and json_path.exists() else None

    def probe(self, name: str) -> dict:
        matches = [p for p in self.report["probes"] if p["id"].endswith("::" + name)]
        assert len(matches) == 1, [p["id"] for p in self.report["probes"]]
        return matches[0]


@pytest.fixture
def tracecheck(tmp_path):
    """Run the real CLI in a subprocess: tracecheck(*args, json=True) -> CliResult."""

    def run(*args: str, json_report: bool = True, timeout: float = 900, cwd: Path | None = None) -> CliResult:
        out = tmp_path / "report.json" if json_report else None
        cmd = [sys.executable, "-m", "tracecheck", *args]
        if out:
            cmd += ["--json", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or tmp_path,
                              env={**os.environ, "COLUMNS": "200"})
        return CliResult(proc, out)

    return run


@pytest.fixture
def write_probe(tmp_path):
    """write_probe(source, name="model.py") -> path of a dedented model file in tmp_path."""

    def write(source: str, name: str = "model.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture(scope="session")
def emulated_npu() -> str:
    """tracecheck's emulated NPU installed in this test process (tracecheck/devices/emulated_npu.py); returns the
    device name. Once per session and never undone: PrivateUse1 can be renamed once per process, and must be before
    the autograd engine first runs (tests/npu_device_checks.py runs in a process of its own). The first use
    on a machine builds the extension (~45 s, cached)."""
    from tracecheck.devices import emulated_npu as emulator

    emulator.install()
    return emulator.DEVICE
