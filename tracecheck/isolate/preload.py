"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Imports, answers to questions Inductor asks once per process (warmup.warm_inductor_cpu), and one small Inductor
compile, forward only, on a single thread (warmup.warm_compile): no OpenMP pool, compile worker or autograd device
thread exists before the fork. The warm-up itself is in isolate/warmup.py.
"""
import os
import time

from . import warmup

_TASKS = "/proc/self/task"  # Linux: one entry per native thread, Python's and the libraries' alike
_threads_at_start = len(os.listdir(_TASKS)) if os.path.isdir(_TASKS) else None

warmup.preload_compiler_stack()

from .. import stages  # noqa: E402,F401
from . import worker  # noqa: E402,F401
from ..collect import casemaker, loadfile, survey  # noqa: E402,F401
from ..evidence import exceptions, frames, oprecorder, opwatch, tracelog  # noqa: E402,F401
from ..stages import _compiled_autograd, _execution  # noqa: E402,F401

warmup.warm_inductor_cpu()

# "0": each stage process warms itself (the run has no compile stage; A/B timing). Whatever goes wrong leaves
# stage processes to warm themselves, as without it.
if os.environ.get(worker.WARM_COMPILE_VAR, "1") != "0":
    try:
        warmup.warm_compile()
    except Exception:
        pass


def _settle_threads(limit_s: float = 5.0) -> None:
    """Wait, up to ``limit_s``, for threads started during the warm-up to end: a fork copies the calling thread
    only, and a lock another thread holds at that moment stays held in every child. (CI once saw one extra thread
    here that a quiet machine never shows.)"""
    deadline = time.monotonic() + limit_s
    while _threads_at_start is not None and len(os.listdir(_TASKS)) > _threads_at_start \
            and time.monotonic() < deadline:
        time.sleep(0.02)


_settle_threads()
