"""Command line (click). Parses, calls ``api.run``, renders, returns an ExitCode; decides nothing else."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Iterator, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__, api
from .collect import cache
from .gate import document, shards
from .gate.comparison import Comparison, compare_report
from .gate.comparison import compare as compare_baselines  # cli.compare is the command
from .model.exitcodes import ExitCode, UsageError
from .render import diff, junit, markdown, outputs
from .render import annotations as github_annotations  # not the __future__ feature of that name
from .render.live import LiveProgress
from .fix.repro_script import STAGE_CALLS
from .model.progress import Progress
from .model.report import FAIL, RunReport, load_report
from .model.reportio import is_baseline, read_json, write_json_atomic, write_text_atomic
from .stages import STAGES, StageOptions
from .model.tasks import DEFAULT_TIMEOUT_S
from .model.targets import normalized, parse_require

EXIT_CODES_HELP = """\b
Exit codes:
  0  every probe passed every stage of the required targets (compile, and --require's; advice
     such as opaque-op does not fail one unless --strict; with --baseline: nothing regressed;
     --update-baseline: written)
  1  a failure or graph break was found in a required target (with --baseline: a regression)
  2  usage or input error (bad path, unloadable model file, no probes, bad probe, unknown stage,
     unwritable output)
  3  internal error in tracecheck
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP): stage processes killed, no report written"""


SIMPLE_EXIT_CODES_HELP = """\b
Exit codes:
  0  done
  2  usage or input error (missing, malformed or unwritable file)
  3  internal error in tracecheck"""


def _write_html(directory: str, report: RunReport, out: Console) -> None:
    from .render import html

    written = html.write(directory, report)
    out.print(f"source view: {written[0]} ({len(written) - 2} source page(s))", highlight=False, soft_wrap=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracecheck")
def cli() -> None:
    """tracecheck: why does torch.compile refuse this model or custom operator?"""


#: the options of ``run``, which ``ops`` takes too (``run_options``), each read into ``RunArgs``
_RUN_OPTIONS = (
    click.option("-k", "select", metavar="EXPR", help="Only probes whose id matches EXPR (pytest -k syntax)."),
    click.option("--stages", default=",".join(STAGES), show_default=True,
                  help="Comma-separated stages to run, from: " + ", ".join(STAGES) + "."),
    click.option("-j", "--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="cores",
                  help="Stage processes run in parallel."),
    click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT_S, show_default=True,
                  help="The most CPU seconds a (probe, stage) process may use (a busy machine does not fail a stage; "
                       "one that waits is stopped at 3x this on the clock); less (10x its probe's longest comparable "
                       "stage that passed, at least half this and 120 s) once such a stage has passed."),
    click.option("--device", default="auto", show_default=True,
                  help="auto (npu if torch_npu works, else cpu), cpu, cuda or npu."),
    click.option("--emulate-npu", is_flag=True,
                  help="Run on an emulated NPU (PrivateUse1 renamed npu, on CPU memory; no CANN kernel runs): checks "
                       "ops registered for PrivateUse1, their fakes and autograd without Ascend hardware."),
    click.option("--json", "json_path", metavar="PATH", help="Write the full report as JSON (atomically)."),
    click.option("--report", "report_path", metavar="PATH",
                  help="Write a Markdown triage report to paste into an issue (< 65,536 characters)."),
    click.option("--redact", is_flag=True, help="Remove all paths from the --report (home is always shortened to ~)."),
    click.option("--html", "html_dir", metavar="DIR",
                  help="Write the source view: a static page per model file, each line marked inside a graph, run in "
                       "eager or a graph break (open DIR/index.html; nothing is fetched)."),
    click.option("--trace-dir", metavar="DIR",
                  help="Keep each stage's structured trace (TORCH_TRACE) under DIR/<probe>/<stage>/ for tlparse."),
    click.option("--baseline", "baseline_path", metavar="PATH",
                  help="Compare with this baseline (or saved --json report); exit 1 on regression, 0 otherwise."),
    click.option("--update-baseline", is_flag=True, help="Rewrite the --baseline file from this run, on purpose."),
    click.option("--junit-xml", "junit_path", metavar="PATH", help="Write JUnit XML: one testcase per probe x stage."),
    click.option("--shard", metavar="K/N", help="Run every N-th probe (sorted ids), starting at the K-th (1-based)."),
    click.option("--steps", type=click.IntRange(min=3), default=StageOptions.steps, show_default=True,
                  help="compiled_autograd stage: training steps per run (warm-up is 2)."),
    click.option("--dynamic", is_flag=True,
                  help="compiled_autograd stage: add steps with a second input shape (batch dim x10)."),
    click.option("--fresh-imports", is_flag=True,
                  help="Import each model file afresh in every stage process, not once per file (slower)."),
    click.option("--no-cache", is_flag=True,
                  help="Run every probe; by default a file's results are reused while nothing they depend on changed "
                       "(its content, the modules and files it loaded, torch, the options, TORCH_* variables; "
                       f"also {cache.NO_CACHE_ENV}=1)."),
    click.option("--cache-dir", metavar="DIR", default=cache.DEFAULT_DIR, show_default=True,
                  help="Where reused results are kept (a CI cache action can keep the folder)."),
    click.option("--strict", is_flag=True,
                  help="Advice (no-batching-rule, opaque-op) fails its stage, the probe, the exit code and --baseline "
                       "where the stage's target is required (no-batching-rule: vmap, so also --require func)."),
    click.option("--require", "require", metavar="TARGETS", default="",
                  help="Targets that gate the exit code and --baseline besides compile (always): export (the export "
                       "stage), func (torch.func: the vmap stage). Their stages run either way; a failure of a target "
                       "not required is shown and fails nothing."),
    click.option("-v", "--verbose", is_flag=True, help="The long report: every finding of every probe with its full "
                                                           "evidence (tracebacks, messages, stderr tails) and the "
                                                           "compiled-autograd counts; with --baseline, every per-stage "
                                                           "change. By default: the verdicts, one block per root cause, "
                                                           "next steps."),
)


F = TypeVar("F", bound=Callable[..., None])


def run_options(command: F) -> F:
    """Give ``command`` every option of ``run`` (``_RUN_OPTIONS``): it reads them as ``RunArgs(**options)``."""
    for option in reversed(_RUN_OPTIONS):
        command = option(command)
    return command


@dataclass(frozen=True)
class RunArgs:
    """What ``run_options`` parsed, one field per option (its click name)."""

    select: str | None
    stages: str
    jobs: int
    timeout_s: float
    device: str
    emulate_npu: bool
    json_path: str | None
    report_path: str | None
    redact: bool
    html_dir: str | None
    trace_dir: str | None
    baseline_path: str | None
    update_baseline: bool
    junit_path: str | None
    shard: str | None
    steps: int
    dynamic: bool
    fresh_imports: bool
    no_cache: bool
    cache_dir: str
    strict: bool
    require: str
    verbose: bool


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True)
@run_options
def run(paths: tuple[str, ...], **options: Any) -> None:
    """Diagnose the probes in PATHS (model files, folders, or file.py::probe) under every stage.

    \b
    A probe is a function in a model file that returns the call to diagnose:
      def probe_block():          # probe() or probe_<name>(): no import
          return Block(), (torch.randn(2, 8, requires_grad=True),)
    It returns (fn, args) or (fn, args, kwargs), or, decorated with
    @tracecheck.probe, a tracecheck.Case(fn, args). The backward runs too when
    an input or a parameter requires grad.
    """
    _diagnose(RunArgs(**options), list(paths), api.run)


def _diagnose(a: RunArgs, paths: list[str], diagnose: Callable[[api.RunOptions, Progress], RunReport]) -> None:
    """Check the outputs, ``diagnose`` (``api.run``, or ``api.run_ops`` bound to its command), print the brief,
    write the outputs and the baseline, and exit with the run's code: ``run``'s body, ``ops``'s too."""
    console = Console(stderr=True)
    out = _stdout()
    with _errors(console, a.verbose):
        outputs.check_distinct(("--json", a.json_path), ("--report", a.report_path), ("--junit-xml", a.junit_path),
                        ("--html", a.html_dir), ("--baseline", a.baseline_path if a.update_baseline else None))
        for path, option in ((a.json_path, "--json"), (a.report_path, "--report"), (a.junit_path, "--junit-xml")):
            outputs.check_writable(path, option)
        outputs.check_directory(a.html_dir, "--html")
        shard_kn = shards.parse_shard(a.shard) if a.shard else None
        if a.trace_dir:
            try:
                os.makedirs(a.trace_dir, exist_ok=True)
            except OSError as e:
                raise UsageError(f"--trace-dir {a.trace_dir}: cannot create it ({e.strerror})") from e
        base = None
        if a.update_baseline:
            if not a.baseline_path:
                raise UsageError("--update-baseline needs --baseline PATH (the file to rewrite)")
            if shard_kn:
                raise UsageError("--update-baseline with --shard would drop the other shards' probes; "
                                 "merge the shard reports, then: tracecheck compare BASE MERGED --update-baseline")
            outputs.check_writable(a.baseline_path, "--baseline")
        if a.baseline_path and not (a.update_baseline and not os.path.exists(a.baseline_path)):
            base = document.load_baseline(a.baseline_path, "--baseline")  # before the run: fail fast
        required = normalized([*parse_require(a.require), *(base.require if base else ())])
        opts = api.RunOptions(paths=paths, stages=[s.strip() for s in a.stages.split(",") if s.strip()],
                              select=a.select, jobs=a.jobs, timeout_s=a.timeout_s, device=a.device,
                              command=["tracecheck", *sys.argv[1:]], shard=shard_kn, trace_dir=a.trace_dir,
                              steps=a.steps, dynamic=a.dynamic, fresh_imports=a.fresh_imports,
                              collect_env=bool(a.json_path or a.report_path), strict=a.strict, require=required,
                              emulate_npu=a.emulate_npu, cache_dir=None if a.no_cache else a.cache_dir)
        live = LiveProgress(console)
        with live.bar:
            report = diagnose(opts, live)
        comparison = compare_report(base, report) if base is not None else None
    from .render import brief

    # first: a failed write below must not hide the results
    brief.render(report, out, verbose=a.verbose, attachment=a.report_path)
    json_path, report_path, junit_path, html_dir, baseline = a.json_path, a.report_path, a.junit_path, a.html_dir, \
        a.baseline_path
    with _errors(console, a.verbose):
        # every output is tried: one that cannot be written (a full disk) loses only itself, and is named
        failed = [e for e in (
            json_path and outputs.try_output("--json", json_path, lambda: write_json_atomic(json_path, report.to_dict())),
            report_path and outputs.try_output("--report", report_path, lambda: write_text_atomic(report_path, markdown.render(
                report, redact=a.redact, trace_dir=a.trace_dir, comparison=comparison, json_path=json_path))),
            junit_path and outputs.try_output("--junit-xml", junit_path, lambda: junit.write(junit_path, report, comparison)),
            html_dir and outputs.try_output("--html", html_dir, lambda: _write_html(html_dir, report, out)),
        ) if e]
        for message in failed[:-1]:
            console.print(f"tracecheck: error: {message}", highlight=False, markup=False, soft_wrap=True)
        if failed:
            raise UsageError(failed[-1])
        if a.update_baseline and baseline:  # (given with it: checked before the run)
            _refuse_partial_baseline(report)
            outputs.write_output("--baseline", baseline, lambda: document.write_baseline(baseline, report, base))
    _report_comparison(out, report, comparison, a.baseline_path, detail=a.verbose)
    if a.update_baseline:
        out.print(f"baseline {a.baseline_path} rewritten from this run ({len(report.probes)} probes)", highlight=False)
    sys.exit(_exit_code(report, comparison, a.update_baseline))


@cli.command(epilog=EXIT_CODES_HELP, context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
@click.option("--package", metavar="PKG", help="The library to audit, by its import name: its custom ops (the "
              "namespaces it registers) and its torch.autograd.Function classes.  [required]")
@click.option("--namespace", "namespaces", metavar="NS", multiple=True,
              help="Also an op namespace of the library's (one it registers from C++, say); repeatable.")
@click.option("--work-dir", metavar="DIR", help="Where the recorded calls, their inputs, the command's output and "
              f"the generated probe module go, cleared first [default: {api.OPS_WORK_DIR}/PKG].")
@run_options
def ops(command: tuple[str, ...], package: str | None, namespaces: tuple[str, ...], work_dir: str | None,
        **options: Any) -> None:
    """Audit an operator library from its own tests: run COMMAND with tracecheck's recorder on,
    check each distinct call it made of PKG's custom ops and autograd.Functions, on the recorded
    inputs, as a probe under every stage (as `run`), and list those no test called as not covered.
    COMMAND's own result is shown beside, never mixed into the verdicts or the exit code.

    \b
      tracecheck ops --package my_ops -- python -m pytest -q tests/
    """
    a = RunArgs(**options)
    if not package:  # click's own message is four lines; a missing option is one here
        with _errors(Console(stderr=True), a.verbose):
            raise UsageError("--package PKG is required: the import name of the library to audit")
    _diagnose(a, [], lambda opts, live: api.run_ops(opts, command, str(package), namespaces, work_dir, live))


FIX_EXIT_CODES_HELP = """\b
Exit codes:
  0  the fix is verified (every stage passes on the patched probe, eager outputs and
     gradients match the original), or there was nothing to fix
  1  a fix was written but is not verified (a TODO, a stage still failing), or the kind
     found has no code fix
  2  usage or input error (bad target, unloadable file, unwritable output)
  3  internal error in tracecheck
  130  interrupted"""


@cli.command(epilog=FIX_EXIT_CODES_HELP)
@click.argument("target", metavar="MODEL.py::PROBE")
@click.option("-o", "--output", default="fixed_ops.py", show_default=True, metavar="PATH",
              help="The fixed-ops module to write (a .py file with a module name).")
@click.option("--patched", metavar="PATH", help="The patched copy of the probe file [default: <model>_fixed.py "
              "beside -o].")
@click.option("--namespace", default="tracecheck_fix", show_default=True, help="Custom-op namespace of the new ops.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default="cores",
              help="Stage processes at once.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds per stage process.")
@click.option("--diff", "diff_path", metavar="PATH", help="Graph breaks in model code: also write the rewrite as a "
              "unified diff against the probe file (git apply / patch -p1).")
@click.option("--no-verify", is_flag=True, help="Write the fix without re-running the stages on it.")
@click.option("-v", "--verbose", is_flag=True, help="Perturbations the op refused, full evidence, tracebacks.")
def fix(target: str, output: str, patched: str | None, namespace: str, jobs: int, timeout_s: float,
        diff_path: str | None, no_verify: bool, verbose: bool) -> None:
    """Generate the fix for a failing probe and prove it: the fixed registration of its custom ops, or a
    rewrite of its model code for graph breaks."""
    from .fix.pipeline import NOTHING_TO_FIX, VERIFIED, FixOptions
    from .fix.pipeline import fix as run_fix
    from .render import fix as render_fix

    console = Console(stderr=True)
    with _errors(console, verbose):
        live = LiveProgress(console)
        with live.bar:
            outcome = run_fix(FixOptions(target, output, patched, namespace, min(jobs, os.cpu_count() or 1),
                                         timeout_s, verify=not no_verify, diff=diff_path), live)
    render_fix.render(outcome, _stdout(), verbose=verbose)
    sys.exit(ExitCode.OK if outcome.status in (VERIFIED, NOTHING_TO_FIX) else ExitCode.FINDINGS)


@cli.command(epilog="""\b
Exit codes:
  0  the script was written and, run with plain python, fails as the finding did
  1  nothing to reproduce (the stage passes), or the script does not fail the same way
  2  usage error (bad target, stage or -o)
  3  internal error in tracecheck
  130  interrupted""")
@click.argument("target", metavar="MODEL.py::PROBE")
@click.option("--stage", type=click.Choice(list(STAGE_CALLS)), help="The stage whose failure to reproduce [default: the "
              "first failing one].")
@click.option("-o", "--output", default="repro.py", show_default=True, metavar="PATH", help="The script to write.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds for the stage process, and for the script's check run.")
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks for errors.")
def repro(target: str, stage: str | None, output: str, timeout_s: float, verbose: bool) -> None:
    """Write a standalone script that reproduces a probe's failure with plain torch (no tracecheck), and check it by
    running it. It keeps only what the probe's call needs from its file, and says whose code the evidence blames:
    torch's (the script is for an upstream issue), yours, or a library's."""
    from .fix.repro import NOTHING, REPRODUCED, ReproOptions
    from .fix.repro import repro as run_repro

    console = Console(stderr=True)
    with _errors(console, verbose):
        live = LiveProgress(console)
        with live.bar:
            o = run_repro(ReproOptions(target, output, stage, min(2, os.cpu_count() or 1), timeout_s), live)
    say = lambda text: _stdout().print(text, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    if o.status == NOTHING:
        say(f"{o.probe_id}: nothing to reproduce: {o.reason}")
        sys.exit(ExitCode.FINDINGS)
    e = o.expected
    want = e["exception_type"] or "a graph break"
    say(f"{o.probe_id} [{o.stage}] {e['kind']}: {want}" + (f" (gb_type '{e['gb_type']}')" if e["gb_type"] else ""))
    say(f"the script runs the {o.stage} stage ({o.stage_note})")
    cut = f"only what the call needs from the probe file ({o.kept_lines} of its {o.file_lines} lines)" if o.pruned \
        else f"the whole probe file ({o.file_lines} lines)"
    say(f"wrote {o.written}: {o.lines} lines, {cut}")
    if o.fallback:
        say(f"note: {o.fallback}")
    if o.status == REPRODUCED:
        say(f"checked: `python {o.written}` fails the same way with plain torch (exit {o.returncode})")
    if o.owner is not None:
        say(f"whose bug: {o.owner.line()}")
    if o.status == REPRODUCED:
        sys.exit(ExitCode.OK)
    say(f"NOT reproduced: {o.reason} (exit {o.returncode}); the end of its output:")
    say(o.tail or "(none)")
    sys.exit(ExitCode.FINDINGS)


@cli.command(epilog=SIMPLE_EXIT_CODES_HELP)
@click.argument("report_json", metavar="REPORT.json")
@click.option("--format", "fmt", type=click.Choice(["md", "terminal", "table", "csv", "html"]), default="md",
              show_default=True,
              help="md: the Markdown triage report; terminal: what `tracecheck run` printed, laid out for this "
                   "terminal's width (-v: the long form); table: probes x stages; csv: one row per probe x stage.")
@click.option("-o", "--output", metavar="PATH", help="Write to PATH instead of stdout.")
@click.option("--redact", is_flag=True, help="Markdown: remove all paths (home is always shortened to ~).")
@click.option("--trace-dir", metavar="DIR", help="Markdown: the --trace-dir the run used (default: from its command).")
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks for errors.")
def show(report_json: str, fmt: str, output: str | None, redact: bool, trace_dir: str | None,
         verbose: bool) -> None:
    """Re-render a saved --json report as Markdown, the terminal report, a table or CSV (tables via pandas), or the source view (html: -o DIR)."""
    console = Console(stderr=True)
    with _errors(console, verbose):
        if fmt == "html":  # a folder of pages, not one text
            if output is None:
                raise UsageError("--format html writes a folder: give it with -o DIR")
            outputs.check_directory(output, "-o")
            _write_html(output, load_report(report_json), _stdout())
            sys.exit(ExitCode.OK)
        outputs.check_writable(output, "-o")
        report = load_report(report_json)
        if fmt == "terminal":
            from .render import brief

            if not output:
                brief.render(report, _stdout(), verbose=verbose, source=report_json)
                sys.exit(ExitCode.OK)
            buf = io.StringIO()
            brief.render(report, Console(file=buf, width=200), verbose=verbose, source=report_json)
            text = buf.getvalue()
        elif fmt == "md":
            trace_dir = trace_dir or _option_from_command(report.command, "--trace-dir")
            text = markdown.render(report, redact=redact, trace_dir=trace_dir, json_path=report_json)
        else:
            from .render import tables

            text = tables.to_csv(report) if fmt == "csv" else tables.to_table(report, _stdout().width)
        if output:
            write_text_atomic(output, text)
        else:
            click.echo(text, nl=False)
    sys.exit(ExitCode.OK)


@cli.command(epilog="""\b
Exit codes:
  0  nothing regressed (equal or better)
  1  a regression: new failure or kind, more graph breaks, graphs or recompiles, or a missing probe
  2  usage or input error (missing or malformed file)
  3  internal error in tracecheck""")
@click.argument("base_json", metavar="BASE.json")
@click.argument("new_json", metavar="NEW.json")
@click.option("--junit-xml", "junit_path", metavar="PATH", help="Write JUnit XML of NEW (needs a full report).")
@click.option("--update-baseline", is_flag=True, help="Rewrite BASE.json as a baseline of NEW.json.")
@click.option("-v", "--verbose", is_flag=True, help="Every per-stage change under the root causes; tracebacks for errors.")
def compare(base_json: str, new_json: str, junit_path: str | None, update_baseline: bool, verbose: bool) -> None:
    """Compare two saved reports or baselines: what regressed and what improved."""
    console = Console(stderr=True)
    out = _stdout()
    with _errors(console, verbose):
        outputs.check_writable(junit_path, "--junit-xml")
        if update_baseline and not os.path.exists(base_json):
            base = document.empty()  # the first run on main: nothing to compare with yet
        else:
            base = document.load_baseline(base_json, "BASE")
        new_doc = read_json(new_json, "NEW")
        report = load_report(new_json, "NEW") if not is_baseline(new_doc) else None
        if report is not None:
            comparison = compare_report(base, report)
        else:
            comparison = compare_baselines(base, document.load_baseline(new_json, "NEW"))
        if junit_path:
            if report is None:
                raise UsageError(f"--junit-xml: {new_json} is a baseline; JUnit needs a full --json report")
            junit.write(junit_path, report, comparison)
        if update_baseline:
            outputs.check_writable(base_json, "BASE")
            if report is not None:
                _refuse_partial_baseline(report)
            if report is not None and shards.shard_from_command(report.command):
                raise UsageError(f"--update-baseline: {new_json} is one shard; merge the shards first "
                                 "(tracecheck merge ... -o all.json)")
            # the user's settings are the old baseline's (a run's --require is its CI command's, not recorded)
            if report is not None:
                doc = document.Baseline.of(report).keeping(base).to_json()
            else:  # a baseline as NEW: its probes as written (keys a newer tracecheck wrote survive), base's settings
                doc = {**document.load_baseline(new_json, "NEW").keeping(base).to_json(), "probes": new_doc["probes"]}
            write_json_atomic(base_json, doc)
    _report_comparison(out, report, comparison, base_json, detail=verbose)
    if update_baseline:
        out.print(f"baseline {base_json} rewritten from {new_json}", highlight=False)
    sys.exit(_exit_code(report, comparison, update_baseline))


@cli.command(epilog=SIMPLE_EXIT_CODES_HELP)
@click.argument("reports", nargs=-1, required=True, metavar="REPORT.json...")
@click.option("-o", "--output", metavar="PATH", required=True, help="Merged JSON report to write.")
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks for errors.")
def merge(reports: tuple[str, ...], output: str, verbose: bool) -> None:
    """Join shard reports (run --shard K/N --json) into one report."""
    console = Console(stderr=True)
    with _errors(console, verbose):
        outputs.check_writable(output, "-o")
        merged = shards.merge([load_report(p) for p in reports], list(reports))
        write_json_atomic(output, merged.to_dict())
    n_fail = sum(1 for p in merged.probes if p.verdict.status == FAIL)
    console.print(f"merged {len(reports)} report(s): {len(merged.probes)} probes, {n_fail} failing -> {output}",
                  highlight=False, markup=False)
    sys.exit(ExitCode.OK)


@cli.command(epilog="""\b
Exit codes:
  0  printed
  2  unknown kind (the closest ids are named)
  3  internal error in tracecheck""")
@click.argument("kind", required=False)
@click.option("-v", "--verbose", is_flag=True, help="Tracebacks for errors.")
def explain(kind: str | None, verbose: bool) -> None:
    """Print a failure kind's page; without KIND, list the kinds.

    A page gives the symptom (torch's messages), the root cause, how tracecheck detects it and the fix, with code.
    The pages ship with tracecheck; reports name them as `tracecheck explain KIND`."""
    from rich.markdown import Markdown

    from .model import taxonomy

    console = Console(stderr=True)
    out = _stdout()
    with _errors(console, verbose):
        if kind is None:
            table = Table(box=None, pad_edge=False, show_edge=False)
            for column in ("kind", "severity", "title"):
                table.add_column(column, no_wrap=column != "title")
            for k in taxonomy.kinds().values():
                table.add_row(k.id, k.severity, k.title)
            out.print(table)
            out.print("\ntracecheck explain KIND prints a kind's page.", highlight=False, markup=False)
            sys.exit(ExitCode.OK)
        k = taxonomy.kind_named(kind.strip())
        page = k.page()
        # the registry's title first: the words a report headed the finding with
        if out.is_terminal:
            out.print(Text(f"{k.id} ({k.severity}): {k.title}", style="bold"))
            out.print(Markdown(page))
        else:  # piped: the Markdown as it is, for less, grep or a file
            click.echo(f"{k.id} ({k.severity}): {k.title}\n\n{page}", nl=False)
    sys.exit(ExitCode.OK)


def _stdout() -> Console:
    return Console() if Console().is_terminal else Console(width=200)  # logs and pipes: don't fold at 80


@contextlib.contextmanager
def _errors(console: Console, verbose: bool) -> Iterator[None]:
    """Usage errors: one line, exit 2; our own bugs: one line, exit 3; tracebacks only with --verbose."""
    try:
        yield
    except UsageError as e:
        console.print(f"tracecheck: error: {e}", highlight=False, markup=False, emoji=False, soft_wrap=True)
        detail = e.detail or ("".join(traceback.format_exception(e.__cause__)) if e.__cause__ else None)
        if verbose and detail:
            console.print(detail, markup=False, highlight=False)
        sys.exit(ExitCode.USAGE_ERROR)
    except OSError as e:  # an output that could not be written after all
        console.print(f"tracecheck: error: {e}", highlight=False, markup=False, emoji=False, soft_wrap=True)
        sys.exit(ExitCode.USAGE_ERROR)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM/SIGHUP: the runner has already killed its stage processes
        console.print("tracecheck: interrupted; no report written", highlight=False, markup=False)
        sys.exit(ExitCode.INTERRUPTED)
    except Exception as e:  # our bug: one line, traceback behind --verbose
        console.print(f"tracecheck: internal error: {type(e).__name__}: {e}".splitlines()[0], markup=False,
                      emoji=False, soft_wrap=True)
        if verbose:
            console.print(traceback.format_exc(), markup=False, highlight=False)
        sys.exit(ExitCode.INTERNAL_ERROR)


def _refuse_partial_baseline(report: RunReport) -> None:
    """A stage that failed inside tracecheck checked nothing: a baseline written from it would drop what it knew."""
    if report.internal_errors:
        p, s = report.internal_errors[0]
        raise RuntimeError(f"{len(report.internal_errors)} stage(s) failed inside tracecheck ({p.id} {s.stage}, ...); "
                           "the baseline is not rewritten from a run that checked less")


def _option_from_command(command: list[str], option: str) -> str | None:
    for i, arg in enumerate(command):
        if arg == option and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def _report_comparison(out: Console, report: RunReport | None, comparison: Comparison | None,
                       source: str | None, detail: bool = False) -> None:
    """The diff table (root causes; ``detail``: and every per-stage change), and GitHub annotations on stdout
    when GITHUB_ACTIONS=true."""
    if comparison is not None:
        out.print(diff.render(comparison, source or "", detail=detail))
    if github_annotations.enabled() and (report is not None or comparison is not None):
        for line in github_annotations.lines(report, comparison):
            click.echo(line)


def _exit_code(report: RunReport | None, comparison: Comparison | None, updated_baseline: bool) -> ExitCode:
    """The one mapping from results to the exit code: a baseline decides when given, else the verdicts."""
    if updated_baseline:
        return ExitCode.OK
    if report is not None and report.internal_errors:
        return ExitCode.INTERNAL_ERROR  # the run went on, but a stage hit a tracecheck bug: say so
    if comparison is not None:
        return ExitCode.FINDINGS if comparison.regressed else ExitCode.OK
    if report is not None and report.ops is not None and not report.ops.entries:
        return ExitCode.FINDINGS  # ``tracecheck ops`` whose tests called none of the package's ops: nothing passed
    return ExitCode.OK if report is not None and report.passed else ExitCode.FINDINGS


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the runner, which kills every running stage process group


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    cli()


if __name__ == "__main__":
    main()
