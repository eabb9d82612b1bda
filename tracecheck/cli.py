"""Command line (click). Parses, calls ``api.run``, renders, returns an ExitCode; decides nothing else."""
from __future__ import annotations

import os
import sys
import traceback

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__, api
from .exitcodes import ExitCode, UsageError
from .report import PASS, STAGES, StageResult, write_json_atomic

EXIT_CODES_HELP = """\b
Exit codes:
  0  every probe passed every stage
  1  a failure or graph break was found
  2  usage or input error (bad path, unloadable model file, no probes, bad probe, unknown stage,
     unwritable output)
  3  internal error in tracecheck"""


class _LiveProgress(api.Progress):
    """A rich progress bar on stderr; transient, so only the results stay on screen."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True,
                            disable=not console.is_terminal)
        self.task = self.bar.add_task("discovering probes", total=None)
        self.running: list[str] = []

    def planned(self, n_tasks: int) -> None:
        self.bar.update(self.task, total=n_tasks, description="running stages")

    def started(self, probe_id: str, stage: str) -> None:
        self.running.append(f"{probe_id.split('::')[-1]}:{stage}")
        self.bar.update(self.task, description=", ".join(self.running[-2:]))

    def finished(self, probe_id: str, result: StageResult) -> None:
        key = f"{probe_id.split('::')[-1]}:{result.stage}"
        if key in self.running:
            self.running.remove(key)
        self.bar.update(self.task, advance=1, description=", ".join(self.running[-2:]) or "running stages")
        if not self.bar.console.is_terminal:  # CI logs: one line per finished stage instead of a live bar
            status = result.status if result.status == PASS or not result.failure else result.failure.kind
            self.bar.console.print(f"{probe_id} [{result.stage}] {status} ({result.seconds:.1f} s)",
                                   highlight=False, markup=False, soft_wrap=True)


def _check_writable(path: str | None, option: str) -> None:
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path) or not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: cannot write there")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracecheck")
def cli() -> None:
    """tracecheck: why does torch.compile refuse this model or custom operator?"""


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True)
@click.option("-k", "select", metavar="EXPR", help="Only probes whose id matches EXPR (pytest -k syntax).")
@click.option("--stages", default=",".join(STAGES), show_default=True,
              help="Comma-separated stages to run, from: " + ", ".join(STAGES) + ".")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="cores",
              help="Stage processes run in parallel.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=300.0, show_default=True,
              help="Seconds allowed per (probe, stage) process.")
@click.option("--device", default="auto", show_default=True,
              help="auto (npu if torch_npu works, else cpu), cpu, cuda or npu.")
@click.option("--json", "json_path", metavar="PATH", help="Write the full report as JSON (atomically).")
@click.option("-v", "--verbose", is_flag=True, help="Full evidence: tracebacks, messages, stderr tails.")
def run(paths, select, stages, jobs, timeout_s, device, json_path, verbose):
    """Diagnose the probes in PATHS (model files or directories) under every stage."""
    console = Console(stderr=True)
    out = Console() if Console().is_terminal else Console(width=160)  # logs and pipes: don't fold at 80
    try:
        _check_writable(json_path, "--json")
        opts = api.RunOptions(paths=list(paths), stages=[s.strip() for s in stages.split(",") if s.strip()],
                              select=select, jobs=jobs, timeout_s=timeout_s, device=device,
                              command=["tracecheck", *sys.argv[1:]])
        live = _LiveProgress(console)
        with live.bar:
            report = api.run(opts, live)
        if json_path:
            write_json_atomic(json_path, report.to_dict())
    except UsageError as e:
        console.print(f"tracecheck: error: {e}", highlight=False, markup=False)
        detail = e.detail or ("".join(traceback.format_exception(e.__cause__)) if e.__cause__ else None)
        if verbose and detail:
            console.print(detail, markup=False, highlight=False)
        sys.exit(ExitCode.USAGE_ERROR)
    except Exception as e:  # our bug: one line, traceback behind --verbose
        console.print(f"tracecheck: internal error: {type(e).__name__}: {e}".splitlines()[0], markup=False)
        if verbose:
            console.print(traceback.format_exc(), markup=False, highlight=False)
        sys.exit(ExitCode.INTERNAL_ERROR)
    from .render import terminal

    terminal.render(report, out, verbose=verbose)
    sys.exit(ExitCode.OK if report.passed else ExitCode.FINDINGS)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
