"""Exit codes of the tracecheck CLI (documented in --help and docs/usage.md)."""
import enum


class ExitCode(enum.IntEnum):
    #: Every probe passed every stage that ran.
    OK = 0
    #: A failure or graph break was found (or, with a baseline, a regression).
    FINDINGS = 1
    #: Bad input: missing path, unloadable model file, no probes, bad probe, unknown stage, unwritable output.
    USAGE_ERROR = 2
    #: tracecheck itself failed.
    INTERNAL_ERROR = 3
    #: Interrupted (Ctrl-C, SIGTERM, SIGHUP): stage processes were killed and no report was written.
    INTERRUPTED = 130


class InternalError(BaseException):
    """tracecheck's own failure where the probe's exceptions are caught as evidence (a stage's ``except Exception``
    around the probe's run): a ``BaseException``, so that neither the probe's handlers nor the stage's take it
    for the probe's. The stage process reports it as the stage's ``internal-error`` (isolate/worker.py; exit 3)."""


class UsageError(Exception):
    """Bad input. The message is one line naming the path and the problem; the CLI exits USAGE_ERROR.

    ``detail`` optionally holds the full traceback (shown with --verbose), e.g. from a stage process.
    """

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail
