"""An ``OpBuilder`` shaped like CANN's ``cann_ops_transformer.op_builder`` (and DeepSpeed's): ``load()`` returns the
pybind11 module, built or found on its first call, which looks at the disk (``os.path.isdir``: Dynamo breaks there,
as ``posix.stat``, when the first call happens under ``torch.compile``), and cached after that."""
import os

from mhc.builder import MhcOpBuilder

_LOADED = {}


class OpBuilder:
    def __init__(self, name):
        self.name = name

    def load(self):
        if self.name in _LOADED:
            return _LOADED[self.name]
        if not os.path.isdir(os.path.dirname(os.path.abspath(__file__))):
            raise RuntimeError(f"{self.name}: the package folder is missing")
        _LOADED[self.name] = MhcOpBuilder().load()
        return _LOADED[self.name]
