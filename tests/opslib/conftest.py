"""tcopslib's own suite runs with this folder as pytest's rootdir (its pyproject.toml). tracecheck's suite, whose
rootdir is the repository, must not collect it: it imports tcopslib, which tracecheck's tests install for
themselves (tests/test_ops_audit.py)."""
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if config.rootpath != HERE and collection_path == HERE / "tests":
        return True
    return None
