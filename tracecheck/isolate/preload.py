"""Imported once by the fork server, so each stage process starts with torch and the compiler stack loaded.

Imports, answers to questions Inductor asks once per process (warmup.warm_inductor_cpu), and one small Inductor
compile, forward only, on a single thread (warmup.warm_compile): no OpenMP pool, compile worker or autograd device
thread exists before the fork. Then what it all made is frozen for the collector (``gc.freeze``, as Python's
documentation advises before a fork without exec): a stage process's collections never scan torch's objects, whose
full pass the compiles' garbage triggers again and again. Only here, where no user code has run: a file's or a
probe's template does not freeze what the user's code built (a cycle frozen there would never be collected in a
stage process, so its finalizers and weakref callbacks would never run, as they do in a fresh process). The
warm-up itself is in isolate/warmup.py.
"""
import atexit
import gc
import os
import signal

from . import worker


def _preload() -> None:
    from . import warmup

    threads_at_start = warmup.native_threads()
    warmup.preload_compiler_stack()
    from .. import stages  # noqa: F401
    from ..collect import casemaker, loadfile, survey  # noqa: F401
    from ..evidence import exceptions, frames, oprecorder, opwatch, tracelog  # noqa: F401
    from ..stages import _compiled_autograd, _execution  # noqa: F401

    warmup.warm_inductor_cpu()
    gc.freeze()  # the warm-up's garbage is then collected without scanning the imports again
    # "0": each stage process warms itself (the run has no compile stage; A/B timing). Whatever goes wrong leaves
    # stage processes to warm themselves, as without it.
    if os.environ.get(worker.WARM_COMPILE_VAR, "1") != "0":
        try:
            warmup.warm_compile()
        except Exception:
            pass
    warmup.settle_threads(threads_at_start)  # the imports' threads too, not only the warm-up's
    gc.collect()  # the warm-up's garbage only (the imports are frozen): cheap
    gc.freeze()


# Ctrl-C reaches the whole process group, the server too: while it imports torch it would print a traceback of
# its own. The parent kills the stage processes and reports the interrupt; the server's own handler (multiprocessing
# ignores SIGINT once preloading is done) is put back at the end, so stage processes get Python's as before.
_sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
# The imports leave little garbage (about 10,000 objects: functions, cells, tuples; no finalizer, no open resource)
# for the collector's many passes over them while they run (about 0.3 s): they are frozen unscanned. The collector
# is back on before anything else runs here, whatever the preload raised.
gc.disable()
try:
    _preload()
finally:
    gc.enable()
    signal.signal(signal.SIGINT, _sigint)


def _exit_now() -> None:
    """The fork server's exit (multiprocessing's forkserver ends with SystemExit at EOF from tracecheck, its only
    way out; nothing reads its status) without Python's own shutdown, which with torch and the compiler stack loaded
    takes about 0.9 s that a reader of tracecheck's output through a pipe waits for (the server holds its stderr).
    What a process forked by multiprocessing runs at its end, then ``os._exit``; registered last, so it runs first."""
    import sys
    from multiprocessing import util

    getattr(util, "_exit_function")()  # multiprocessing's own atexit function (private, unannotated)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get(worker.FORK_SERVER_VAR):  # the server only: another process importing this module exits as usual
    atexit.register(_exit_now)
