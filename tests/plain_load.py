"""A model file imported as plain Python, for the oracles that run plain torch on the same probe in the test."""
import importlib.util
from types import ModuleType


def load(path, name: str) -> ModuleType:
    """Import ``path`` as module ``name`` (not added to sys.modules: each test gets its own copy)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
