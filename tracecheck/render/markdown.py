"""Markdown triage attachment (``tracecheck run --report report.md``, ``tracecheck show --format md``).

The document can be pasted into a GitHub or GitCode issue as is: environment, a probes x stages verdict
table, one section per finding (kind, diagnosis, first failing stage, gb_type / GB code / link, user frame,
op or builtin, trimmed message, fix with snippet, repro command), collapsed ``<details>`` (traceback,
explain output, graph counts), compiled-autograd counts and the structured-trace (tlparse) pointer.

Size: GitHub rejects comments of 65,536 characters or more. ``render`` shrinks the largest ``<details>``
bodies first, then drops details, then whole finding sections from the end, and says so at the top.
Privacy: the home directory becomes ``~``; ``redact=True`` strips every directory from paths. No
environment variables are read into the document.
"""
from __future__ import annotations

import os
import re
import shlex
from typing import Any

from ..model.evidence import ExceptionEvidence, ProcessEvidence, RegistrationEvidence
from ..model.taxonomy import K, kinds, snippet_for
from ..model.report import CRASH, FAIL, FAILED, INTERNAL, LOAD_STAGE, PASS, SKIP, TIMEOUT, Finding, ProbeReport, RunReport
from ..model.report import IMPORT_PROBE, RootCause, StageResult, finding_key, first_line, root_causes
from ..model.ops import ID_PREFIX, OP
from ..model.targets import COMPILE, TARGETS, Gate
from ..stages import REGISTRY as STAGE_REGISTRY
from . import diff, terminal, view
from .cause import ADVICE, of as cause_view, standing
from ..machine import COLLECT_ENV_FIELDS
from .excerpts import TRIMMED, condense_traceback, drop_noise, named_in_message, numeric_lines, trim_message
from .fit import Details, Section, fence, fit
from .paths import PathScrubber

#: GitHub's limit on an issue or comment body, in characters; the document stays strictly below it.
GITHUB_COMMENT_LIMIT = 65536
#: Room kept free for the truncation notice that is written once the final size is known, in characters (the
#: JSON report's path, which it names, comes on top).
_NOTICE_RESERVE = 900
#: Verdict rows shown before the table only lists failing probes.
_MAX_VERDICT_ROWS = 60

# ---------------------------------------------------------------------------------------------------------
# Document pieces


def _code(text: str) -> str:
    """Inline code that survives backticks inside ``text``."""
    text = text.replace("\n", " ")
    ticks = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


#: lines of Dynamo's messages an attachment leaves out: the GB link and the user frames are in the bullets and
#: the traceback already, the rest is advice to torch developers
_ICON = {PASS: "✅", FAIL: "❌", TIMEOUT: "⏱️", CRASH: "💥", SKIP: "➖", INTERNAL: "🐞", view.NOT_REQUIRED: "⚪"}


def verdict_cell(s: StageResult | None, gate: Gate = Gate()) -> str:
    c = view.cell(s, gate)
    if c is None:
        return ""
    return " ".join(x for x in (_ICON[c.shown], c.label) if x)


# ---------------------------------------------------------------------------------------------------------
# Renderer


class MarkdownRenderer:
    """Builds the document from a ``RunReport``; decides nothing about outcomes."""

    def __init__(self, report: RunReport, *, redact: bool = False, home: str | None = None,
                 trace_dir: str | None = None, limit: int = GITHUB_COMMENT_LIMIT,
                 comparison: Any = None, json_path: str | None = None) -> None:
        self._fix_shown: dict[str, str] = {}  # fix text -> the finding that showed it
        self._snippet_shown: set[str] = set()  # kinds whose example was shown
        self._traceback_shown: dict[tuple, int] = {}  # (kind, gb_type) -> the finding that showed a traceback
        self._message_shown: dict[tuple, int] = {}  # (kind, gb_type, first line) -> finding number
        self.report = report
        self.scrub = PathScrubber(redact, home, report.rootdir)
        self.redact = redact
        self.trace_dir = trace_dir
        self.limit = limit
        self.comparison = comparison
        self.json_path = json_path  # where the full report is, for what the size limit cut
        # (``tracecheck ops``' ids name no file: ``ops::ns::name``)
        files = {p.id.partition("::")[0] for p in report.probes} if report.ops is None else set()
        #: the model file when every probe comes from it: probes are then named without it, the header names it
        self.one_file = files.pop() if len(files) == 1 else None

    def probe_label(self, pid: str) -> str:
        """A probe as the document names it: ``file::probe``, or the probe alone in a one-file report."""
        file, _, name = pid.partition("::")
        return name if name and file == self.one_file else self.scrub.probe_id(pid)

    # -- sections -------------------------------------------------------------------------------------
    def gating(self, cause: RootCause) -> bool:
        return view.gates(self.report.gate, cause)

    def header(self) -> str:
        r = self.report
        failing = [p for p in r.probes if p.verdict.status == FAIL]
        n_findings = len([c for c in root_causes(failing) if self.gating(c)])
        where = ""
        if self.one_file:
            file = os.path.basename(self.one_file) if self.redact else self.scrub(self.one_file)
            where = f" of {_code(file)}"
        elif r.ops is not None:
            where = f" of the ops of {_code(r.ops.package)}"
        internal = len(r.internal_errors)
        return (f"# tracecheck report: {len(r.probes)} probe(s){where}, {len(failing)} failing, "
                f"{n_findings} finding(s)" + (f", {internal} tracecheck internal error(s)" if internal else "")
                + (f", {len(r.ops.not_covered)} not covered" if r.ops and r.ops.not_covered else "")
                + f"\n\nStages run: {', '.join(_code(s) for s in r.stages) or '(none)'}. Required targets (they "
                f"gate the verdicts and the exit code): {', '.join(_code(t) for t in r.gate.require)}"
                + (f"; not required: {', '.join(_code(t) for t in TARGETS if t not in r.gate.require)}"
                   if len(r.gate.require) < len(TARGETS) else "") + ".\n\n")

    def environment(self) -> str:
        r, env = self.report, self.report.env
        rows: list[tuple[str, str]] = [("tracecheck", r.tracecheck_version or "?")]
        if r.command:
            rows.append(("command", _code(self.scrub(shlex.join(r.command)))))
        if r.rootdir and not self.redact:
            rows.append(("rootdir", f"{_code(self.scrub(r.rootdir))} (probe ids and repro commands are relative "
                                    "to it)"))
        reused = sorted({p.reused for p in r.probes if p.reused})
        if reused:  # results taken from the cache (collect/cache.py): say whose run made them
            n = sum(1 for p in r.probes if p.reused)
            rows.append(("reused results", f"{n} of {len(r.probes)} probes, from the run of {', '.join(reused)} "
                                           "(nothing they depend on changed; `--no-cache` re-runs them)"))
        full = bool(env.collect_env) and env.collect_env_error is None
        if full:
            for label, name in COLLECT_ENV_FIELDS:
                if name in env.collect_env:
                    rows.append((label, self.scrub(env.collect_env[name]).replace("\n", "; ")))
        else:
            rows += [("torch", env.torch or "?"), ("Python", env.python or "?"), ("platform", env.platform or "?"),
                     ("CUDA", env.cuda or "not built with CUDA")]
        rows.append(("device", env.device_text))
        if env.torch_npu:
            rows.append(("torch_npu", f"{env.torch_npu} (NPU available: {env.npu_available})"))
            rows.append(("CANN", env.cann or "unknown"))
        else:
            rows.append(("torch_npu", self.scrub(env.npu_note or "not installed")))
        if env.merged_torch_versions:
            rows.append(("merged from torch", ", ".join(env.merged_torch_versions)))
        caches = view.inductor_caches(r)
        if caches:
            rows.append(("caches", caches))
        note = "" if full else (
            "\n_Summary of tracecheck's own environment record; `python -m torch.utils.collect_env` gives "
            "the full picture._\n")
        body = "\n".join(f"| {k} | {_cell(v)} |" for k, v in rows)
        return f"## Environment\n\n| | |\n|---|---|\n{body}\n{note}\n"

    def verdicts(self) -> str:
        r = self.report
        columns = view.columns(r)
        probes = r.probes
        hidden = 0
        if len(probes) > _MAX_VERDICT_ROWS:
            failing = [p for p in probes if p.verdict.status != PASS or p.verdict.not_required]
            shown = failing[:_MAX_VERDICT_ROWS]
            hidden = len(probes) - len(shown)
            probes = shown
        head = "| probe | " + " | ".join(columns) + " | graph breaks |\n|---|" + "---|" * len(columns) + "---:|\n"
        rows = []
        for p in probes:
            breaks = view.probe_breaks_cell(p)
            cells = [verdict_cell(p.stages.get(c), self.report.gate) for c in columns]
            rows.append(f"| {_cell(_code(self.probe_label(p.id)))} | " + " | ".join(cells) + f" | {breaks} |")
        more = (f"\n_{hidden} more probe(s) not listed (passing probes, and failing ones past the first "
                f"{_MAX_VERDICT_ROWS}); see the JSON report._\n" if hidden else "")
        legend = ("✅ pass · ✅ fwd pass, forward only (nothing trains, or the backward was not checked: see below) · "
                  "✅ kind pass, with advice of that kind" + (" (failing: --strict)" if r.strict else "") +
                  " · ❌ fail (kinds) · ⏱️ timeout · 💥 crash · ➖ skipped · – not measured"
                  + (f" · ⚪ kind: failed, target not required ({view.not_required_note(r.gate, r.probes)})"
                     if any(p.verdict.not_required for p in r.probes) else "")
                  + (" · 🐞 tracecheck internal error (not the probe's; exit 3)" if r.internal_errors else "")
                  + " · " + view.BREAKS_DEFINED)
        unchecked = [f"- {_code(self.probe_label(p.id))}: " + "; ".join(self.scrub(x) for x in view.not_checked(p))
                     for p in probes if view.not_checked(p)]
        not_checked = ("\n**Not checked**\n\n" + "\n".join(unchecked) + "\n") if unchecked else ""
        return f"## Verdicts\n\n{legend}\n\n{head}" + "\n".join(rows) + f"\n{more}{not_checked}\n"

    def ops(self) -> str:
        """``tracecheck ops``: the test command's own result, what was checked, each probe's call, and what no probe
        covers (never a pass)."""
        ops = self.report.ops
        if ops is None:
            return ""
        c, checked = ops.command, terminal.checked_said(ops)
        said = terminal.command_said(c, quote=lambda s: _code(self.scrub(s)))
        module = os.path.basename(ops.probe_module) if self.redact else self.scrub(ops.probe_module)
        head = (f"## Ops of {_code(ops.package)}, called by its tests\n\n- {said[0].upper()}{said[1:]}"
                + (f"; its whole output: {_code(self.scrub(c.log))}" if c.log and not self.redact else "")
                + f"\n- {checked[0].upper()}{checked[1:]}\n- Op namespaces: "
                + (", ".join(_code(n) for n in ops.namespaces) or "none")
                + f"; probe module: {_code(module)} (`tracecheck fix MODULE::PROBE` fixes an entry)\n\n")
        tail = Details("The end of the test command's output", self.scrub(c.tail.rstrip()), "text", "tail").render() \
            + "\n" if c.tail.strip() else ""
        rows = [f"| {_cell(_code(e.probe_id))} | {_cell(_code(e.probe))} | {_cell(_code(e.call.signature))} | "
                f"{e.call.calls} | {_cell(_code(e.call.test)) if e.call.test else '–'} |" for e in ops.entries]
        more = len(rows) - _MAX_VERDICT_ROWS
        table = ("| probe | probe function | input signature | calls | first test |\n|---|---|---|---:|---|\n"
                 + "\n".join(rows[:_MAX_VERDICT_ROWS]) + (f"\n\n_{more} more in the JSON report._" if more > 0 else "")
                 + "\n\n") if rows else ""
        missing = [f"| {_cell(_code(u.target))} | {'op' if u.what == OP else 'Function'} | {_cell(u.why)} |"
                   for u in ops.not_covered]
        uncovered = ("**Not covered** (no probe checked them: never a pass, and never a failure of the run):\n\n"
                     "| op or Function | what | why |\n|---|---|---|\n" + "\n".join(missing) + "\n\n") if missing \
            else "Not covered: none (every op and Function of the package that the recorder saw was called).\n\n"
        twice = "".join(f"- Registered twice: {_code(r.op)}, as {_code(r.first_schema)}, then as "
                        f"{_code(r.second_schema)}\n" for r in ops.redefinitions)
        return head + tail + table + uncovered + (twice + "\n" if twice else "")

    def compiled_autograd(self) -> str:
        rows = []
        measured = view.ca_rows(self.report)
        for p, s, ca in measured:
            counts = (ca.unique_graphs_without_ca, ca.unique_graphs_with_ca, ca.captures, s.recompile_count,
                      ca.hooks_captured)
            vals = [str(_none_dash(c)) for c in counts]
            rows.append(f"| {_cell(_code(self.probe_label(p.id)))} | {verdict_cell(s, self.report.gate)} | " + " | ".join(vals) + " |")
        if not rows:
            return ""
        head = ("| probe | verdict | unique graphs without CA | unique graphs with CA | captures | recompiles "
                "| hooks captured |\n|---|---|---:|---:|---:|---:|---:|\n")
        return (f"## Compiled autograd\n\nBackend: {view.ca_backends(measured)} (forward, and the "
                "backward graphs compiled autograd captures).\n\n" + head + "\n".join(rows) + "\n\n"
                f"{view.CA_GRAPHS_NOTE[0].upper()}{view.CA_GRAPHS_NOTE[1:]}.\n\n")

    def structured_trace(self) -> str:
        if not self.trace_dir or not os.path.isdir(self.trace_dir):
            return ""
        from ..model.reportio import trace_subdir

        root = "TRACE_DIR" if self.redact else self.scrub(self.trace_dir)
        where = "the trace directory" if self.redact else _code(self.scrub(os.path.abspath(self.trace_dir)))
        kept = [(p, stage) for p in self.report.probes for stage, s in p.stages.items()
                if s.status in FAILED
                and _has_log(os.path.join(self.trace_dir, trace_subdir(p.id, stage)))]
        example = (f"{root}/{trace_subdir(kept[0][0].id, kept[0][1])}" if kept else f"{root}/<probe>/<stage>")
        listed = "".join(f"- {_code(self.probe_label(p.id))} `{stage}`: "
                         f"{_code(root + '/' + trace_subdir(p.id, stage))}\n" for p, stage in kept[:12])
        more = f"- ... and {len(kept) - 12} more\n" if len(kept) > 12 else ""
        return ("## Structured trace\n\n"
                f"Each (probe, stage) kept its structured compile trace (TORCH_TRACE) under {where}, one "
                "folder per probe and stage. Render one with [tlparse](https://github.com/pytorch/tlparse) and "
                "attach its output:\n\n"
                f"```sh\npip install tlparse\ntlparse {shlex.quote(example)} --latest -o tlparse_out/\n```\n\n"
                + (f"Traces of the failing stages:\n\n{listed}{more}\n" if kept else ""))

    def baseline(self) -> str:
        c = self.comparison
        if c is None:
            return ""
        if not c.changes:
            return "## Against the baseline\n\nNo differences.\n\n"
        # one row per root cause (a new break is one, however many stages it changed); each change in the details
        causes = [f"| {cause.effect} | {_cell(self.scrub(cause.what))} | {_cell(cause.scope + (f'; ⚪ {cause.also_text}' if cause.also else ''))} | "
                  f"{_cell(', '.join(_code(self.probe_label(pid)) for pid in cause.probes))} |" for cause in c.causes]
        rows = [f"| {c2.effect} | {_cell(_code(self.probe_label(c2.probe)))} | {c2.stage or ''} | "
                f"{_cell(self.scrub(c2.detail))} |" for c2 in c.changes]
        metrics = [f"| {_cell(_code(self.probe_label(m.probe)))} | `{m.metric}` | {m.better} | {m.expected} | "
                   f"{m.actual} | {m.result} | {_cell(m.note)} |" for m in diff.metrics_rows(c)]
        return ("## Against the baseline\n\n| effect | root cause | in | probes |\n|---|---|---|---|\n"
                + "\n".join(causes) + "\n\n<details><summary>Each change per probe and stage "
                f"({len(c.changes)})</summary>\n\n| effect | probe | stage | change |\n|---|---|---|---|\n"
                + "\n".join(rows) + "\n\n</details>\n\n"
                + ("Dynamo metrics that moved (as PyTorch's CI gates them; `better`: which way is):\n\n"
                   "| probe | metric | better | baseline | now | result | why |\n|---|---|---|---|---|---|---|\n"
                   + "\n".join(metrics) + "\n\n" if metrics else ""))

    def probe_section(self, p: ProbeReport, numbers: list[int]) -> Section:
        """A failing probe: its verdict, which findings (root causes) it has, graph counts, explain() output."""
        v = p.verdict
        title = f"### {_code(self.probe_label(p.id))}: first failing stage {_code(str(v.first_failing_stage))}"
        refs = ", ".join(f"#{n}" for n in numbers)
        head = Section(droppable=True, parts=[f"{title}\n\nKinds: {', '.join(_code(k) for k in v.kinds)}; "
                                              f"findings {refs} above\n\n"])
        for extra in (self.graph_counts(p), self.explain_output(p)):
            if extra:
                head.parts.append(extra)
        head.parts.append("\n")
        head.line = (f"- {_code(self.probe_label(p.id))}: first failing stage {_code(str(v.first_failing_stage))}; "
                     f"kinds {', '.join(_code(k) for k in v.kinds)}; findings {refs}\n\n")
        return head

    def graph_counts(self, p: ProbeReport) -> Details | None:
        """One line per stage that counted graphs, the forward's compile coverage (explain), then each distinct break
        once with the stages that saw it."""
        lines = []
        breaks: dict[tuple, list[str]] = {}
        for name, s in p.stages.items():
            if s.graph_count is None and s.graph_break_count is None:
                continue
            explain_note = (f" ({view.explain_count_said(s.explain_graph_break_count)})"
                            if s.explain_graph_break_count is not None else "")
            lines.append(f"{name:<12} status={s.status:<7} graphs={_none_dash(s.graph_count)} "
                         f"graph_breaks={_none_dash(s.graph_break_count)}{view.breaks_beside(s)}{explain_note}")
            for b in s.breaks:
                where = f"{self.scrub(b.file)}:{b.line}" if b.file else "?"
                breaks.setdefault((b.kind, b.gb_type, b.gb_code, where, b.file, b.line), []).append(name)
        cov = view.coverage(p)
        if cov is not None:
            lines.append(f"{'coverage':<12} {view.coverage_counts(cov)}")
        costs = view.break_costs(p)
        priced = []  # each break once, the costliest first where the explain stage measured them ("fix these first")
        for (kind, gb_type, gb_code, where, file, line), stages in breaks.items():
            cost = costs.of_site(file, line) if costs is not None else None
            said = "" if cost is None else f", cost not measurable here (noisy: {cost.low:.0%}-{cost.high:.0%} over " \
                "the calls)" if cost.noisy else f", costs {cost.share:.0%} of the forward compiled with backend='eager'"
            priced.append((-cost.ms if cost and not cost.noisy else 1.0,
                           f"break at {where}: {kind}, {gb_code or gb_type} [{', '.join(stages)}]{said}"))
        lines += [text for _, text in sorted(priced, key=lambda t: t[0])]
        if costs is not None and costs.breaks:
            ratio = (f"; without the profiler, timed side by side while other stages may have run, the compiled "
                     f"forward (backend eager) took {costs.compiled_ms / costs.eager_ms:.1f}x the eager one's time, "
                     f"interquartile spread {view.pct(costs.compiled_spread)} of its median"
                     if costs.compiled_ms and costs.eager_ms else "")
            lines.append(f"(costs: the time outside graphs after each break, a share of the compiled forward under "
                         f"torch.profiler over {costs.calls} calls{ratio})")
        if not lines:
            return None
        return Details("Graph counts", "\n".join(lines))

    def explain_output(self, p: ProbeReport) -> Details | None:
        """explain()'s own break reasons, verbatim but for their first lines (the findings have the rest)."""
        s = p.stages.get("explain")
        reasons = (s.notes.explain_reasons if s else None) or []
        if not reasons:
            return None
        body = "\n".join(f"[{i}] " + next((ln.strip() for ln in self.scrub(str(r)).splitlines() if ln.strip()), "")
                          for i, r in enumerate(reasons, 1))
        return Details("explain() output: break reasons (first line of each)", body)

    def finding_section(self, index: int, cause: RootCause, prefix: str = "") -> Section:
        """One root cause, once, however many probes and stages saw it: where, evidence, fix, repro. ``prefix``:
        "A" numbers advice A1, A2, ..., "N" what targets not required found, apart from the findings."""
        advice = bool(prefix)
        v = cause_view(self.report, cause, {q.id: self.probe_label(q.id) for q in self.report.probes})
        f = cause.finding
        p, stages = cause.seen[0]
        ev, cx = f.evidence, f.context
        kind = kinds().get(f.kind)
        lines = [f"#### {prefix}{index}. {_code(f.kind)}: {self.scrub(f.summary)}\n\n"]
        bullets = []
        if v.gates_nothing:
            bullets.append(f"- **Gates nothing:** {v.gates_nothing}")
        if len(cause.seen) > 1:  # each probe's stages in stage order: its first failing stage leads
            seen = "; ".join(f"{_code(self.probe_label(q.id))} ({', '.join(st)})" for q, st in cause.seen)
            bullets.append(f"- **Probes ({len(cause.seen)}):** {seen}")
        else:
            also = f" (also seen at {', '.join(_code(s) for s in stages[1:])})" if len(stages) > 1 else ""
            bullets.append(f"- **{'Stage' if advice else 'First failing stage'}:** {_code(stages[0])}{also}")
        if ev.gb_type:
            link = ev.doc or _gb_link(ev.gb_code)
            code = f"[{ev.gb_code}]({link})" if ev.gb_code and link else (ev.gb_code or "no GB code")
            bullets.append(f"- **Graph break:** gb_type {_code(ev.gb_type)}, {code}")
        frame = f.user_frame
        if frame is not None:
            fn = f" in `{frame.function}`" if frame.function else ""
            bullets.append(f"- **User frame:** {_code(self.scrub(frame.file) + ':' + str(frame.line))}{fn}")
        if ev.owner is not None:
            bullets.append(f"- **Owner:** {_code(view.owner_label(f) or ev.owner.label)}")
        if v.cost is not None:
            bullets.append(f"- **Costs:** {v.cost.text()}")
        named = [(label, value) for value, label in ((cx.op, "Op"), (cx.builtin, "Builtin")) if value]
        if not named and ev.gb_type:
            name = named_in_message(ev.message)
            if name:
                named.append(name)
        for label, value in named:
            in_fn = label == "Builtin" and cx.in_autograd_function
            where = " (inside a torch.autograd.Function)" if in_fn else ""
            bullets.append(f"- **{label}:** {_code(str(value))}{where}")
        if cx.argument:
            bullets.append(f"- **Argument:** {_code(cx.argument)}")
        if ev.exception_type:
            chain = [t for t in (ev.exception_chain if isinstance(ev, ExceptionEvidence) else ())
                     if t != ev.exception_type]
            via = f" (wrapping {', '.join(_code(t) for t in chain)})" if chain else ""
            bullets.append(f"- **Exception:** {_code(ev.exception_type)}{via}")
        generated = view.generated_line(ev)
        if generated:
            bullets.append(f"- **Where:** {_cell(generated)}")
        backends = view.backends_line(ev)
        if backends:
            bullets.append(f"- **Backends:** {_cell(backends)}")
        lines.append("\n".join(bullets) + "\n\n")
        if frame is not None and frame.code:
            lines.append(f"Source line:\n\n```python\n{self.scrub(frame.code)}\n```\n\n")
        if f.kind == K.OP_REDEFINED and isinstance(ev, RegistrationEvidence) and ev.first_schema:
            lines.append(f"Schemas:\n\n```text\nfirst:  {ev.first_schema}\nsecond: {ev.second_schema}\n```\n\n")
        died = ev if isinstance(ev, ProcessEvidence) else None  # a process that died: why, and its stderr
        message = ev.message or (died.cause if died else None) or ""
        opening = next((ln.strip() for ln in str(message).splitlines() if ln.strip()), "")
        same = self._message_shown.get((f.kind, ev.gb_type, opening)) if ev.gb_type else None
        if message and same:  # Dynamo's template for this gb_type again; only the name differs (bullets above)
            lines.append(f"Message: Dynamo's wording of finding {same} above, for this "
                         f"{'op' if cx.op else 'call'} (the JSON report has it in full).\n\n")
            message = ""
        elif message:
            self._message_shown[(f.kind, ev.gb_type, opening)] = index
            trimmed = self.scrub(trim_message(str(message)))
            lines.append(f"Message (trimmed):\n\n{fence(trimmed)}text\n{trimmed}\n{fence(trimmed)}\n\n")
        numeric = numeric_lines(f, f"in {self.probe_label(p.id)}: " if len(cause.seen) > 1 else "")
        if numeric:
            lines.append("Numerics:\n\n" + "\n".join(f"- {self.scrub(x)}" for x in numeric) + "\n\n")
        fix = v.fix or ""
        if fix and fix in self._fix_shown:  # the very same fix: said once, pointed to after
            lines.append(f"**Fix:** as in finding {self._fix_shown[fix]} above.\n\n")
        elif kind:
            self._fix_shown[fix] = f"{prefix}{index}"
            lines.append(f"**Fix:** {fix}\n\n")
            snippet = snippet_for(f)  # the kind's example only where this finding's fix is the kind's own
            if snippet and f.kind not in self._snippet_shown:
                self._snippet_shown.add(f.kind)  # once per kind keeps the report short
                lines.append(f"```python\n{snippet}\n```\n\n")
            lines.append(f"Background: `{v.more}` prints the kind's page.\n\n")
        repro = f"**Repro:**\n\n```sh\n{self.repro(p, stages[0])}\n```\n\n"
        lines.append(repro)
        # shorter forms for the size limit: the evidence bullets and the fix, then the heading and where
        headline = self.scrub(ev.headline() or first_line(died.cause if died else None))[:300]
        short: list[str | Details] = [lines[0], lines[1],
                                      *([f"Message (first line): {_code(headline)}\n\n"] if headline else []),
                 f"**Fix:** {fix}\n\n" if fix else "", repro]
        frameless = frame is None and not cx.op
        places = [self.scrub(frame.location) if frame is not None else "",
                  cx.op or cx.builtin or "",
                  f"{ev.exception_type}: {headline[:160]}" if frameless and ev.exception_type else ""]
        seen = (f"{len(cause.seen)} probes" if len(cause.seen) > 1
                else f"{self.probe_label(p.id)} at {', '.join(stages)}")
        line = (f"{lines[0]}- {''.join(_code(w) + ', ' for w in places if w)}{_cell(seen)}; "
                "the JSON report has the rest\n\n")
        section = Section(list(lines), droppable=True, is_finding=True, short=short, line=line)
        tb = ev.traceback or next(filter(None, (_traceback_from_other_stages(q, f) for q, _ in cause.seen)), None)
        # the same kind, gb_type, exception type and first message line (numbers masked): the same path through torch
        tb_key = (f.kind, ev.gb_type, ev.exception_type, re.sub(r"\d+", "N", first_line(ev.message))[:200])
        if tb and tb_key in self._traceback_shown:
            section.parts.append(f"Traceback: the path through torch of finding {self._traceback_shown[tb_key]} "
                                 "above (the JSON report has this one's).\n\n")
            tb = None
        elif tb:
            self._traceback_shown[tb_key] = index
        if tb:
            section.parts.append(Details("Traceback (user frames and the last frames; the JSON report has all)",
                                         self.scrub(drop_noise(condense_traceback(str(tb).rstrip(),
                                                                           message_shown=bool(message)))),
                                         "python-traceback",
                                         "tail"))
            section.parts.append("\n")
        tail = died.stderr_tail if died else ""
        if tail:
            section.parts.append(Details("stderr tail", self.scrub(str(tail).rstrip()), "text", "tail"))
            section.parts.append("\n")
        if message and trim_message(str(message)).endswith(TRIMMED) and not tb:
            section.parts.append(Details("Full message", self.scrub(str(message).rstrip())))
            section.parts.append("\n")
        return section

    def repro(self, p: ProbeReport, stage: str) -> str:
        file = p.file if p.id.startswith(ID_PREFIX) else p.id_file  # an ops id names no file: its probe module
        file = os.path.basename(file) if self.redact else self.scrub(file)
        stage = "eager" if stage == LOAD_STAGE else stage  # load findings come back on any run
        target = file if p.name == IMPORT_PROBE else f"{file}::{p.name}"  # the import fails: the file alone
        gate = self.report.gate
        s = p.stages.get(stage)
        # a finding of a target not required reproduces (fails the run) only when that target is required
        extra = (s.target,) if s is not None and s.target and not view.cell(s, gate).required else ()
        # compile is always required, and a run with none of its stages is refused: eager runs beside the others
        spec = STAGE_REGISTRY.get(stage)
        stages = stage if spec is None or spec.target == COMPILE else f"eager,{stage}"
        run = (f"tracecheck run {shlex.quote(target)} --stages {stages}" + (" --strict" if gate.strict else "")
               + (f" {gate.how_to_require(*extra)}" if len(gate.require) > 1 or extra else ""))
        if p.name == IMPORT_PROBE or spec is None or not spec.repro or s is None or s.status != FAIL:
            return run  # (a crash, a timeout or a load failure: no plain-torch call to write)
        # the same failure with plain torch, as a script an issue can carry; repro says whose bug it is (docs/fix.md)
        return f"{run}\ntracecheck repro {shlex.quote(target)} --stage {stage} -o repro.py   # plain torch; says whose bug"

    # -- assembly -------------------------------------------------------------------------------------
    def sections(self) -> list[Section]:
        self._fix_shown, self._traceback_shown, self._message_shown = {}, {}, {}
        out = [Section([self.header()]), Section([self.environment()]), Section([self.verdicts()])]
        for extra in (self.ops(), self.baseline(), self.compiled_autograd(), self.structured_trace()):
            if extra:
                out.append(Section([extra]))
        failing = [p for p in self.report.probes if p.verdict.status == FAIL]
        # advice, and whatever only targets not required found, fail nothing: their own sections below
        quiet = [c for c in root_causes(self.report.probes) if not self.gating(c)]
        # as each cause stands (render/cause.py): advice apart from what fails only where its target is not required
        advice = [c for c in quiet if standing(self.report.gate, c) == ADVICE]
        others = [c for c in quiet if standing(self.report.gate, c) != ADVICE]
        if failing:
            causes = view.by_cost([c for c in root_causes(failing) if self.gating(c)])  # the costliest breaks first
            by_owner = view.breaks_by_owner(causes)
            out.append(Section(["## Findings\n\nEach root cause once (one kind at one user frame or op; an unclassified error without "
                                "either, by its exception and first message line), with "
                                "every probe and stage that saw it.\n\n"
                                + (f"Breaks by owner: {by_owner}\n\n" if by_owner else "")]))
            out += [self.finding_section(i, c) for i, c in enumerate(causes, 1)]
            out.append(Section(["## Per probe\n\n"]))
            for p in failing:
                numbers = [i for i, c in enumerate(causes, 1) if any(q is p for q, _ in c.seen)]
                out.append(self.probe_section(p, numbers))
        else:
            out.append(Section(["## Findings\n\nNo failures and no graph breaks.\n\n"]))
        if advice:
            out.append(Section(["## Advice\n\nNot failures: what an op costs or lacks (kinds of severity `advice`; "
                                "`--strict` makes them fail where their target is required).\n\n"]))
            out += [self.finding_section(i, c, "A") for i, c in enumerate(advice, 1)]
        if others:
            note = view.not_required_note(self.report.gate, self.report.probes)
            out.append(Section([f"## Targets not required\n\nWhat the stages of targets this run did not require "
                                f"found ({note}), with the same evidence.\n\n"]))
            out += [self.finding_section(i, c, "N") for i, c in enumerate(others, 1)]
        internal = self.internal_errors()
        if internal is not None:
            out.append(internal)
        return out

    def internal_errors(self) -> Section | None:
        """tracecheck's own failures: which stages checked nothing, and the tracebacks for a bug report."""
        errors = self.report.internal_errors
        if not errors:
            return None
        parts: list[Any] = ["## tracecheck internal errors\n\nThese stages checked nothing: tracecheck's own code "
                            "failed in them (not the probe's; the run exits 3). Please report them to tracecheck.\n\n"]
        for p, s in errors:
            last = (s.internal_error or "").strip().splitlines()[-1:] or ["(no traceback)"]
            parts.append(f"- {_code(self.probe_label(p.id))} `{s.stage}`: {_code(self.scrub(last[0][:300]))}\n")
            parts.append(Details("Traceback", self.scrub((s.internal_error or "").rstrip()), "python-traceback", "tail"))
            parts.append("\n")
        return Section(parts)

    def render(self) -> str:
        sections = self.sections()
        footer = ("---\n_Generated by tracecheck; `tracecheck show report.json --format md` re-renders the "
                  "full JSON report._\n")
        budget = self.limit - 1 - _NOTICE_RESERVE - len(self.scrub(self.json_path or "")) - len(footer)
        stats = fit(sections, budget)
        notice = ""
        if stats.any:
            where = (f"The JSON report {_code(self.scrub(self.json_path))} has everything (`tracecheck show` "
                     "renders it as a table or CSV)" if self.json_path else "The JSON report (`--json`) has everything")
            notice = (f"> **Shortened to stay under GitHub's {GITHUB_COMMENT_LIMIT:,}-character comment limit:** "
                      f"{stats.describe()}. {where}.\n\n")
        doc = sections[0].render() + notice + "".join(s.render() for s in sections[1:]) + footer
        if len(doc) >= self.limit:  # last resort; the budget above makes this unreachable in practice
            cut = "\n\n[... cut at GitHub's comment limit ...]\n"
            doc = doc[: self.limit - 1 - len(cut)] + cut
        return doc


def _none_dash(value: Any) -> Any:
    return "–" if value is None else value


def _has_log(folder: str) -> bool:
    try:
        return any(name.endswith(".log") for name in os.listdir(folder))
    except OSError:
        return False


def _traceback_from_other_stages(p: ProbeReport, f: Finding) -> str | None:
    """A graph break has no traceback of its own; the same finding raised at another stage often has."""
    key = finding_key(f)
    for s in p.stages.values():
        for other in s.findings:
            if other.evidence.traceback and finding_key(other) == key:
                return other.evidence.traceback
    return None


def _gb_link(code: str | None) -> str | None:
    return f"https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{code[2:]}.html" if code else None


def render(report: RunReport, *, redact: bool = False, trace_dir: str | None = None, home: str | None = None,
           limit: int = GITHUB_COMMENT_LIMIT, comparison: Any = None, json_path: str | None = None) -> str:
    """The Markdown document for ``report``; always shorter than ``limit`` characters. ``json_path``: where
    the full JSON report was written, named when the size limit cut something."""
    return MarkdownRenderer(report, redact=redact, trace_dir=trace_dir, home=home, limit=limit, json_path=json_path,
                            comparison=comparison).render()
