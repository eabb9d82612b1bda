"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Imports, answers to questions Inductor asks once per process (warmup.warm_inductor_cpu), and one small Inductor
compile, forward only, on a single thread (warmup.warm_compile): no OpenMP pool, compile worker or autograd device
thread exists before the fork. The warm-up itself is in isolate/warmup.py.
"""
import atexit
import os
import signal

# Ctrl-C reaches the whole process group, the server too: while it imports torch it would print a traceback of
# its own. The parent kills the stage processes and reports the interrupt; the server's own handler (multiprocessing
# ignores SIGINT once preloading is done) is put back at the end, so stage processes get Python's as before.
_sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)

from . import warmup  # noqa: E402

_threads_at_start = warmup.native_threads()

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

# the imports' threads too, not only the warm-up's (warmup.settle_threads)
warmup.settle_threads(_threads_at_start)
signal.signal(signal.SIGINT, _sigint)


def _exit_now() -> None:
    """The fork server's exit (multiprocessing's forkserver ends with SystemExit at EOF from tracecheck, its only
    way out; nothing reads its status) without Python's own shutdown, which with torch and the compiler stack loaded
    takes about 0.9 s that a reader of tracecheck's output through a pipe waits for (the server holds its stderr).
    What a process forked by multiprocessing runs at its end, then ``os._exit``; registered last, so it runs first."""
    import sys
    from multiprocessing import util

    util._exit_function()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get(worker.FORK_SERVER_VAR):  # the server only: another process importing this module exits as usual
    atexit.register(_exit_now)
