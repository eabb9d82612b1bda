"""Terminal output: the probes x stages verdict table and the findings, as rich renderables."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Callable

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ..model.taxonomy import MODEL_CODE_KINDS, K, kinds, needs_registration_fix, rewrites_model_code
from ..model.report import CRASH, FAIL, FAILED, IMPORT_PROBE, INTERNAL, PASS, SKIP, TIMEOUT, Finding, ProbeReport, RunReport, StageResult, finding_key, group_findings
from ..model.ops import OP, CommandResult, OpsAudit, Uncovered
from ..model.targets import Gate
from . import cause, view


_ICON = {PASS: "✓", SKIP: "–", FAIL: "✗", TIMEOUT: "⏱", CRASH: "✗", INTERNAL: "!", view.NOT_REQUIRED: "○"}
_STYLE = {PASS: "green", SKIP: "dim", FAIL: "red", TIMEOUT: "magenta", CRASH: "magenta", INTERNAL: "bold magenta",
          view.NOT_REQUIRED: "yellow"}


def cell(result: StageResult | None, gate: Gate = Gate()) -> Text:
    """``✓``, ``✓ fwd``, ``✗ kind, kind``, ``○ kind`` (a target not required)."""
    c = view.cell(result, gate)
    if c is None:
        return Text("")
    return Text(" ".join(x for x in (_ICON[c.shown], c.label) if x), style=_STYLE[c.shown])


def status_text(status: str) -> Text:
    """A status word (``pass``, ``fail``, ``internal-error``…) in the style the verdict table gives it."""
    return Text(status, style=_STYLE.get(status, ""))


def probe_labels(report: RunReport) -> dict[str, str]:
    """How a probe is named in a table or list: its id in a ``tracecheck ops`` report (``ops::ns::name``: the
    generated module's probe names say less), its name when every probe is of one file (named in the title), else
    ``short_labels``."""
    if report.ops is not None:
        return {p.id: p.id for p in report.probes}
    if len({p.file for p in report.probes}) == 1:
        return {p.id: p.name for p in report.probes}
    return short_labels(report)


def short_labels(report: RunReport) -> dict[str, str]:
    """``file.py::name`` per probe id; the full id where two files share a base name."""
    base = {p.id: f"{os.path.basename(p.file)}::{p.name}" for p in report.probes}
    clash = {b for b in base.values() if list(base.values()).count(b) > 1}
    return {pid: (pid if b in clash else b) for pid, b in base.items()}


_CAPTION = ("✓ fwd: passed, forward only (nothing trains: no input or parameter requires grad, or no floating "
            "output; or the backward was not checked: see \"not checked\"). ✓ kind: passed, with advice of that kind (advice gates only under --strict). " + view.BREAKS_DEFINED + ". – not "
            "measured or skipped")

#: the probe column folds, down to this width, before a more compact layout is tried
PROBE_MIN_WIDTH = 16


def verdict_view(report: RunReport, width: int) -> RenderableType:
    """The verdicts laid out for ``width`` columns: the probes x stages table where a layout of it fits whole (every
    probe id, heading and kind name), else one block per probe (``verdict_list``), which fits any width from 60
    columns: rich measures, so nothing is cropped or cut inside a kind."""
    for table, legend in (_verdict_table(report, short) for short in (False, True)):  # full headings, then short
        if _min_width(table) <= width:  # the legend below it at the terminal's width, not folded to the table's
            return Group(table, Text(legend, style="dim"))
    return verdict_list(report)  # never a probe id folded mid-word: a list where the table does not fit


def verdict_list(report: RunReport) -> Group:
    """Per probe: its verdict and id, then one line per outcome with the stages that had it (``✗ missing-fake
    explain, aot_eager, ...``): the kind in a column of its own, never wrapped, as wide in every probe; the stage
    names wrap. A one-line legend ends it."""
    labels = probe_labels(report)
    title = _title(report, len({p.file for p in report.probes}) == 1)
    parts: list[RenderableType] = [Text(title, style="italic")]
    blocks = [(p, _outcome_groups(p, report.gate)) for p in report.probes]
    widest = max((cell_len(label) for _, groups in blocks for label in groups), default=1)
    for p, groups in blocks:
        v = p.verdict
        breaks = view.probe_breaks_said(p)
        head = Text(f"{_ICON.get(v.status, '?')} ", style=_STYLE.get(v.status, ""))
        head.append(labels[p.id], style="bold")
        if breaks is not None:
            head.append(f" · {breaks}", style="dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=3)
        grid.add_column(no_wrap=True, min_width=widest)
        grid.add_column()
        for label, (shown, stages) in groups.items():
            targets = sorted({p.stages[st].target or "" for st in stages})
            note = f" ({', '.join(targets)}: not required)" if shown == view.NOT_REQUIRED else ""
            grid.add_row("", Text(label, style=_STYLE[shown]), Text(", ".join(stages) + note))
        parts += [head, grid]
    parts.append(Text(_LIST_LEGEND + " · " + view.BREAKS_DEFINED, style="dim"))
    return Group(*parts)


_LIST_LEGEND = ("✓ pass · ✓ fwd: forward only · ✓ kind: pass with advice · ✗ fail · ○ failed, target not "
                "required · – skipped")
_GROUP_ORDER = {FAIL: 0, CRASH: 0, TIMEOUT: 0, INTERNAL: 0, view.NOT_REQUIRED: 1, PASS: 2, SKIP: 3}


def _outcome_groups(p: ProbeReport, gate: Gate) -> dict[str, tuple[str, list[str]]]:
    """``"✗ missing-fake"`` -> (the mark's status, the stages with that outcome): failures first, then what targets
    not required found, passes, skips."""
    groups: dict[tuple[str, str], list[str]] = {}
    for stage, s in p.stages.items():
        c = view.cell(s, gate)
        if c is None:
            continue
        for word in ((c.kinds or (c.label,)) if c.status in FAILED else (c.label,)):
            groups.setdefault((c.shown, word), []).append(stage)
    ranked = sorted(groups.items(), key=lambda g: _GROUP_ORDER.get(g[0][0], 0))
    return {f"{_ICON[shown]} {word}".rstrip(): (shown, stages) for (shown, word), stages in ranked}


def _verdict_table(report: RunReport, short: bool) -> tuple[Table, str]:
    columns = view.columns(report)
    headings = {c: (stage_heading(c) if short else c) for c in columns}
    notes = [f"{h} = {c}" for c, h in headings.items() if h != c]
    files = {p.file for p in report.probes}
    one_file = len(files) == 1 and report.probes[0].id.endswith("::" + report.probes[0].name)
    labels = {p.id: p.name for p in report.probes} if one_file else probe_labels(report) if report.ops is not None \
        else short_labels(report)
    marks = {c.shown for p in report.probes for c in map(lambda x: view.cell(x, report.gate), p.stages.values()) if c}
    if view.NOT_REQUIRED in marks:
        notes.insert(0, "○ kind: a stage of a target not required failed (" + view.not_required_note(report.gate, report.probes) + ")")
    if INTERNAL in marks:
        notes.insert(0, "! internal error: tracecheck's own bug, not the probe's (exit 3; the traceback is below)")
    caption = _CAPTION + (". " + "; ".join(notes) if notes else "")
    title = _title(report, one_file)
    table = Table(title=title, title_justify="left",
                  box=box.SIMPLE_HEAD if short else box.HEAVY_HEAD, pad_edge=not short, show_edge=not short,
                  padding=(0, 1, 0, 0) if short else (0, 1))
    rows = [[cell(p.stages.get(c), report.gate) for c in columns] + [Text(view.probe_breaks_cell(p))] for p in report.probes]
    first = [labels[p.id] for p in report.probes]
    # never wrapped: an id is drawn whole or the view is a list (verdict_view measures which)
    table.add_column("probe", no_wrap=True, min_width=max([PROBE_MIN_WIDTH, *map(cell_len, first)]))
    for i, heading in enumerate([*headings.values(), "breaks" if short else "graph breaks"]):
        widest = max([cell_len(line) for r in rows for line in r[i].plain.splitlines()] + [cell_len(heading)])
        table.add_column(heading, min_width=widest, no_wrap=True,
                         justify="right" if i == len(headings) else "left")
    for label, row in zip(first, rows):
        table.add_row(label, *row)
    return table, caption


def _title(report: RunReport, one_file: bool) -> str:
    """``tracecheck verdicts``, with the one file of every probe, or the package ``tracecheck ops`` audited."""
    if report.ops is not None:
        return f"tracecheck verdicts: the ops of {report.ops.package}, called by its tests"
    return "tracecheck verdicts" + (f": {report.probes[0].id.rsplit('::', 1)[0]}" if one_file and report.probes else "")


def _min_width(table: Table) -> int:
    """The narrowest the table draws with every column at its ``min_width`` (the probe column's: its longest id)."""
    import io

    console = Console(file=io.StringIO(), width=10_000)
    return Measurement.get(console, console.options, table).minimum


def stage_heading(stage: str) -> str:
    from ..stages import REGISTRY

    spec = REGISTRY.get(stage)
    return (spec.heading or spec.name) if spec else stage


def findings(report: RunReport, verbose: bool = False) -> Group:
    parts: list = []
    for p in report.probes:
        v = p.verdict
        skipped = view.not_checked(p)
        if v.status == PASS:
            # a pass says nothing about what did not run: a skipped dynamic or gradcheck stage is named, with why
            shown_any = bool(v.advice or v.not_required or any(s.status == INTERNAL for s in p.stages.values()))
            if shown_any:
                what = [f"advice ({', '.join(v.advice)}; advice fails nothing unless --strict)"] if v.advice else []
                if v.not_required:
                    what.append(f"targets not required: {view.not_required_note(report.gate, [p])}")
                internal = [s.stage for s in p.stages.values() if s.status == INTERNAL]
                if internal:
                    what.append(f"a tracecheck internal error at {', '.join(internal)} (exit 3)")
                parts.append(Text(f"\n{p.id}: passed ({', '.join(v.require)}), with " + "; ".join(what),
                                  style="bold"))
                parts += _coverage_of(p, verbose) + _findings_of(p, verbose)
            elif verbose and view.coverage(p) is not None:
                parts.append(Text(f"\n{p.id}: passed ({', '.join(v.require)})", style="bold"))
                parts += _coverage_of(p, verbose)
                shown_any = True
            if skipped:
                parts.append(Text(("    " if shown_any else f"\n{p.id}: passed; ") + "not checked: " +
                                  "; ".join(skipped), style="dim"))
            continue
        if v.status == INTERNAL:
            parts.append(Text(f"\n{p.id}: tracecheck failed in a stage (its own bug, not the probe's: exit 3)",
                              style="bold magenta"))
        else:
            parts.append(Text(f"\n{p.id}: first failing stage {v.first_failing_stage}; kinds {', '.join(v.kinds)}",
                              style="bold"))
        parts += _coverage_of(p, verbose) + _findings_of(p, verbose)
        for stage, s in p.stages.items():
            if s.explain_graph_break_count is not None and s.graph_break_sites is not None:
                parts.append(Text(f"    note: {view.explain_count_said(s.explain_graph_break_count)}; "
                                  f"the structured trace shows {s.graph_break_sites}", style="dim"))
        if skipped:
            parts.append(Text("    not checked: " + "; ".join(skipped), style="dim"))
    return Group(*parts)


def _coverage_of(p: ProbeReport, verbose: bool) -> list[RenderableType]:
    """The long form's line under a probe's header: its forward's compile coverage (the explain stage's)."""
    cov = view.coverage(p) if verbose else None
    return [Text("    " + view.coverage_text(cov), style="dim")] if cov is not None else []


def _findings_of(p: ProbeReport, verbose: bool) -> list[RenderableType]:
    """Each distinct finding of the probe once, with its stages (render/cause.sighting); an advice kind's fix once per
    probe; tracecheck's own failures (internal errors) last."""
    out: list[RenderableType] = []
    shown: set[str] = set()
    views = [cause.sighting(p, stages, f) for stages, f in group_findings(p)]

    def cost(v: cause.CauseView) -> float:  # the costliest breaks first, the rest as found
        return -v.cost.cost.ms if v.cost is not None and not v.cost.cost.noisy else 1.0
    for v in sorted(views, key=cost):
        # advice of one kind has one fix: it is printed once per probe (under --strict too, where it gates)
        out.append(finding_text(v, verbose, show_fix=v.kind not in shown))
        if v.advice:
            shown.add(v.kind)
    for stage, s in p.stages.items():
        if s.status == INTERNAL:
            out.append(internal_text(stage, s, verbose))
    return out


def internal_text(stage: str, s: StageResult, verbose: bool) -> Text:
    lines = (s.internal_error or "").strip().splitlines() or ["(no traceback)"]
    t = Text(f"  [{stage}] ", style="cyan")
    t.append("internal error", style="bold magenta")
    t.append(f": tracecheck's own code failed in this stage, so it checked nothing: {lines[-1][:300]}\n")
    if verbose:
        t.append("    " + "\n    ".join(lines) + "\n", style="dim")
    else:
        t.append("    please report it to tracecheck with the traceback (-v shows it; --json keeps it)\n", style="dim")
    return t


@dataclass(frozen=True)
class Indented:
    """``text`` ``indent`` columns in, its wrapped lines too; unlike rich's ``Padding``, no line is padded out to the
    width (a CI log of ``-v`` keeps no trailing blanks)."""

    text: Text
    indent: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        pad = Segment(" " * self.indent)
        for line in self.text.wrap(console, max(1, options.max_width - self.indent)):
            if line.plain:  # a blank line stays blank
                yield pad
            yield from line.render(console)
            yield Segment.line()


def finding_text(v: cause.CauseView, verbose: bool, show_fix: bool = True) -> Group:
    """One finding of one probe (``cause.sighting``): its stages, kind (``cause.label``) and summary, then, indented,
    its long form (``cause.lines``, the line relative to the working directory); ``verbose``: its whole account (the
    traceback), else the root cause's words."""
    head = Text(f"[{', '.join(v.reach.stages)}] ", style="cyan")
    head.append(f"{v.kind}{cause.label(v)}", style="red" if v.standing == cause.GATES else "yellow")
    head.append(f": {v.summary}")
    body = Text()
    for line in cause.lines(v, v.site.here if v.site is not None else "", message=not verbose, fix=show_fix):
        body.append(f"{line.text}\n", style="" if line.action else "dim")
    if verbose and v.detail:
        body.append(v.detail + "\n", style="dim")
    # indented, wrapped lines too: a block reads as one finding at any width
    return Group(Indented(head, 2), Indented(body, 4))


def command_said(c: CommandResult, quote: Callable[[str], str] = lambda s: f"`{s}`") -> str:
    """``tests: `python -m pytest -q tests` exited 1 in 12.3 s (...)``: the test command ``tracecheck ops`` ran,
    ``quote`` quoting it."""
    how = f"exited {c.exit_code}" if c.exit_code is not None else \
        f"was killed by signal {c.signal}" if c.signal is not None else "did not finish"
    return f"tests: {quote(shlex.join(c.argv))} {how} in {c.seconds:.1f} s (their own result; not tracecheck's verdict)"


def checked_said(ops: OpsAudit) -> str:
    """``checked: 5 calls of 4 ops and Functions (...)``: the distinct calls ``tracecheck ops`` made probes of."""
    if not ops.entries:
        return (f"checked: nothing: the tests called no op or Function of {ops.package} (in {ops.processes} "
                f"process{'es' if ops.processes != 1 else ''} with the recorder)")
    targets = {e.call.target: e.call.what for e in ops.entries}
    n_ops = sum(1 for what in targets.values() if what == OP)
    calls = sum(e.call.calls for e in ops.entries)
    return (f"checked: {len(ops.entries)} call{_s(len(ops.entries))} of {len(targets)} ops and Functions ({n_ops} op"
            f"{_s(n_ops)}, {len(targets) - n_ops} Function{_s(len(targets) - n_ops)}; one call per input signature, "
            f"of the {calls} the tests made in {ops.processes} process{'es' if ops.processes != 1 else ''})")


def not_covered_said(u: Uncovered) -> str:
    """``tcops::unused (op): no test calls it``."""
    return f"{u.target} ({'op' if u.what == OP else 'Function'}): {u.why}"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def ops_block(report: RunReport, verbose: bool = False) -> Group | None:
    """``tracecheck ops``: the test command's own result (``verbose``: the tail of its output), what was checked,
    each op and Function no probe covers with why, and names registered twice; nothing for a ``run``."""
    ops = report.ops
    if ops is None:
        return None
    c = ops.command
    parts: list[RenderableType] = [Text(""), Text(command_said(c), style="" if c.exit_code == 0 else "yellow")]
    if verbose and c.tail.strip():
        parts.append(Indented(Text(c.tail.rstrip(), style="dim"), 4))
    if c.log and (verbose or c.exit_code != 0):
        parts.append(Indented(Text(f"its whole output: {os.path.relpath(c.log)}", style="dim"), 2))
    parts.append(Text(checked_said(ops)))
    parts += [Text(f"not covered: {not_covered_said(u)}", style="yellow") for u in ops.not_covered]
    parts += [Text(f"registered twice: {r.op}, as {r.first_schema}, then as {r.second_schema}", style="yellow")
              for r in ops.redefinitions]
    return Group(*parts)


def environment_line(report: RunReport) -> Text:
    env = report.env
    npu = f"torch_npu {env.torch_npu}" if env.torch_npu else (env.npu_note or "no torch_npu")
    return Text(f"torch {env.torch} · Python {env.python} · device {env.device_text} · {npu}",
                style="dim")


def compiled_autograd_table(report: RunReport) -> Table | None:
    """probe x (graphs without CA, with CA, captures, recompiles and why), when that stage ran."""
    rows = view.ca_rows(report)
    if not rows:
        return None
    table = Table(title=f"compiled autograd (backend {view.ca_backends(rows)})", title_justify="left",
                  caption=view.CA_GRAPHS_NOTE, caption_justify="left")
    for col in ("probe", "steps", "graphs without CA", "graphs with CA", "backward graphs / capture", "captures",
                "hooks captured", "recompiles (steady-state: why)"):
        table.add_column(col, overflow="fold")
    labels = probe_labels(report)
    for p, s, ca in rows:
        steady = [(f.context.reason or "")[:80] for f in s.findings if f.kind == K.RECOMPILE]
        count = s.recompile_count
        why = _dash(count) + (f" (every step: {'; '.join(steady)})" if steady else " (warm-up only)"
                              if count else "")
        counts = (ca.steps, ca.unique_graphs_without_ca, ca.unique_graphs_with_ca, ca.backward_graphs_per_capture,
                  ca.captures, ca.hooks_captured)
        table.add_row(labels[p.id], *map(_dash, counts), why)
    return table


def _dash(value: object) -> str:
    """``–`` for a count that was not measured (None), never ``None`` or 0."""
    return "–" if value is None else str(value)


#: causes ``tracecheck fix`` has nothing to generate for: the user's own code is to be written (a stub fake impl)
_NOT_GENERATED = {"stub"}


def _fixable_kinds(p: ProbeReport) -> list[str]:
    """The probe's kinds that ``tracecheck fix`` generates code for, judged by its findings."""
    found = [f for s in p.stages.values() for f in s.findings]
    return [k for k in p.verdict.kinds if k in kinds() and kinds()[k].code_fix
            and any(f.kind == k and _generated(f, p.file) for f in found)]


def _generated(f: Finding, probe_file: str) -> bool:
    """Does ``tracecheck fix`` generate code for this finding: not for a stub it names as the user's to write; a
    rewrite of the probe's own file for a graph break or a C function called from it; custom ops for a C/pybind11
    builtin inside an autograd.Function."""
    if f.context.cause in _NOT_GENERATED:
        return False
    if f.kind == K.FAKE_MISMATCH and f.context.cause == "aot_outputs":
        return False  # a fake that returns values, not metadata: regenerating shapes does not answer it
    if f.kind in MODEL_CODE_KINDS or f.kind == K.PYBIND_BUILTIN:
        return rewrites_model_code(f, probe_file) or needs_registration_fix(f, probe_file)
    return True


def _fix_keys(p: ProbeReport, fixable: list[str]) -> set[tuple]:
    """The root causes (``finding_key``, as ``root_causes`` keys them) behind a probe's fixable kinds."""
    keys = set()
    for f in (f for s in p.stages.values() for f in s.findings if f.kind in fixable and _generated(f, p.file)):
        key = finding_key(f)
        keys.add(key if f.context.op or f.user_frame is not None else key + (p.id,))
    return keys


def _fix_commands(report: RunReport) -> dict[str, list[str]]:
    """The probes that get a ``tracecheck fix`` command, each with the other probes it also fixes: one command per
    root cause, so one ``print`` on one line seen by two probes is one command (its fix rewrites that line for
    both). A probe gets a command when it has a fixable root cause no earlier command has."""
    done: dict[tuple, str] = {}  # root cause -> the probe whose command fixes it
    commands: dict[str, list[str]] = {}
    for p in report.probes:
        if p.verdict.status == PASS or p.name == IMPORT_PROBE:
            continue
        keys = _fix_keys(p, _fixable_kinds(p))
        if not keys:
            continue
        if keys - done.keys():
            commands[p.id] = []
            done.update({k: p.id for k in keys if k not in done})
        else:  # every cause it has is fixed by an earlier command: named there (by name in the same file)
            first = done[next(iter(sorted(keys, key=repr)))]
            same_file = next(q.file for q in report.probes if q.id == first) == p.file
            commands[first].append(p.id if report.ops is not None else p.name if same_file
                                   else f"{os.path.relpath(p.file)}::{p.name}")
    return commands


def next_steps(report: RunReport, attachment: str | None = None, source: str | None = None) -> list[str]:
    """One line per root cause of the failing probes: ``tracecheck fix FILE::PROBE`` when a kind it found has a
    code fix (one command for the probes that share it), else ``tracecheck explain KIND`` for its first kind; then
    the attachment for an issue (``attachment``: the --report file already asked for). Paths relative to the cwd.
    Where several probes of one file have a fix, each command names its own outputs: run one after the other as
    printed, the second would otherwise overwrite the first's patched copy (``<model>_fixed.py``), fixed-ops module
    or diff."""
    lines = []
    commands = _fix_commands(report)
    fixes_per_file: dict[str, int] = {}
    for p in report.probes:
        if p.id in commands:
            fixes_per_file[p.file] = fixes_per_file.get(p.file, 0) + 1
    for p in report.probes:
        v = p.verdict
        if v.status == PASS:
            continue
        node = f"{os.path.relpath(p.file)}::{p.name}"
        fixable = _fixable_kinds(p) if p.name != IMPORT_PROBE else []  # an import failure has no probe to fix
        if fixable and p.id not in commands:
            continue  # an earlier command fixes its causes
        if fixable:
            registration = any(needs_registration_fix(f, p.file) for r in p.stages.values() for f in r.findings)
            # a diff named after its file (two files in one folder never overwrite each other's fix.diff)
            stem = os.path.splitext(os.path.basename(p.file))[0]
            output = "-o fixed_ops.py" if registration else f"--diff {stem}.diff"
            if fixes_per_file[p.file] > 1:
                output = (f"-o fixed_ops_{p.name}.py" if registration else f"--diff {stem}_{p.name}.diff") + \
                    f" --patched {stem}_{p.name}_fixed.py"
            also = f"; also fixes {', '.join(commands[p.id])}" if commands[p.id] else ""
            which = f"{p.id}: " if report.ops is not None else ""  # the generated probe's name says less
            lines.append(f"tracecheck fix {node} {output}   ({which}{', '.join(fixable)}{also})")
        elif v.kinds and v.kinds[0] in kinds():
            node = os.path.relpath(p.file) if p.name == IMPORT_PROBE else p.id if report.ops is not None else node
            first = next((k for k in v.kinds if k not in v.advice), v.kinds[0])  # --strict: the error first
            lines.append(f"{kinds()[first].explain_command}   ({node})")
    if lines:
        if attachment:
            lines.append(f"attach to an issue: {attachment} (--report)")
        elif source:  # a saved report: its Markdown is one command away, no rerun
            lines.append(f"attach to an issue: tracecheck show {source} --format md -o report.md")
        else:
            lines.append("attach to an issue: rerun with --report report.md (a Markdown file under GitHub's size "
                         "limit)")
    return lines


def render(report: RunReport, console: Console, verbose: bool = False, attachment: str | None = None,
           advise: bool = True, source: str | None = None) -> None:
    """The run's terminal report. ``advise=False``: no ``next:`` lines (``fix`` shows its verification run, whose
    probe is the patched copy: advice to fix that copy would mislead)."""
    console.print(environment_line(report))
    console.print(verdict_view(report, console.width))
    ca = compiled_autograd_table(report)
    if ca is not None:
        console.print(ca)
    console.print(findings(report, verbose))
    ops = ops_block(report, verbose)
    if ops is not None:
        console.print(ops)
    print_next_steps(console, next_steps(report, attachment, source) if advise else [])
    console.print(summary_line(report))


def print_next_steps(console: Console, steps: list[str]) -> None:
    """The ``next:`` block. A command is printed whole (soft wrap: the terminal folds it, and copied it is one
    line); the other lines wrap."""
    if not steps:
        return
    console.print(Text("\nnext:", style="bold"))
    for line in steps:
        command, _, why = line.partition("   (")
        if line.startswith("tracecheck ") and why:  # what it is for on a line of its own: wrapped, never cut
            console.print(Text(f"  ({why}", style="dim"))
            console.print(Text(f"    {command}"), soft_wrap=True)
        else:
            console.print(Text(f"  {line}"), soft_wrap=line.startswith("tracecheck "))


def summary_line(report: RunReport) -> str:
    """``8 probes, 6 failing (compile), 74.4 s``: the run's last line."""
    verdicts = [p.verdict.status for p in report.probes]
    n, n_fail, n_internal = len(verdicts), verdicts.count(FAIL), len(report.internal_errors)
    required = ", ".join(report.gate.require)
    reused = [p.reused for p in report.probes if p.reused]
    when = f" from the run of {min(reused)}" if reused and len(set(reused)) == 1 else \
        f" from runs of {min(reused)} to {max(reused)}" if reused else ""
    return (f"\n{n} probe{'s' if n != 1 else ''}"
            + (f" ({len(reused)} reused{when}: nothing they depend on changed; --no-cache re-runs them)"
               if reused else "")
            + f", {n_fail} failing ({required})"
            + (f", {len(report.ops.not_covered)} not covered" if report.ops and report.ops.not_covered else "")
            + (f", {n_internal} stage(s) with a tracecheck internal error (exit 3)" if n_internal else "")
            + f", {report.seconds:.1f} s")
