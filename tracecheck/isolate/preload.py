"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Imports, and answers to questions Inductor asks once per process (compat.warm_inductor_cpu). No tensor op runs
here, so no OpenMP pool or compile worker exists before the fork.
"""
from .. import compat

compat.preload_compiler_stack()

from .. import stages  # noqa: E402,F401
from . import worker  # noqa: E402,F401
from ..collect import casemaker, loadfile, survey  # noqa: E402,F401
from ..evidence import exceptions, frames, oprecorder, opwatch, tracelog  # noqa: E402,F401
from ..stages import _compiled_autograd, _execution  # noqa: E402,F401

compat.warm_inductor_cpu()
