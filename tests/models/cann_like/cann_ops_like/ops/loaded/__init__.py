"""The mHC wrappers as CANN ships them with its ``OpBuilder``: each Function's ``forward`` and ``backward`` call
``<op>_op_builder.load()`` and the pybind11 function on the module it returns (a local, not a module attribute);
this ``__init__`` re-exports each wrapper function under its module's name."""
from .mhc_post import mhc_post  # noqa: F401
from .mhc_pre_sinkhorn import mhc_pre_sinkhorn  # noqa: F401
