"""Markdown triage report: golden structure, GitHub's size limit, path privacy."""
import dataclasses
import re

import pytest

from report_factory import ROOT, break_finding, probe, small_report
from tracecheck import machine
from tracecheck.render import markdown
from tracecheck.render.paths import PathScrubber
from tracecheck.model.report import FAIL, Finding, ProbeReport, RunReport, StageResult

LIMIT = 65536


def headings(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("#")]


def section(md: str, heading: str) -> str:
    """Text from ``heading`` to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = md.index(heading + "\n")
    rest = md[start + len(heading):]
    m = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return heading + (rest[: m.start()] if m else rest)


def assert_well_formed(md: str) -> None:
    assert md.count("<details>") == md.count("</details>")
    fences = [line for line in md.splitlines() if re.match(r"^`{3,}", line)]
    assert len(fences) % 2 == 0, "unbalanced code fences"


def test_sections_present_in_order():
    md = markdown.render(small_report(), home="/home/alice")
    top = [h for h in headings(md) if h.startswith("## ")]
    assert top == ["## Environment", "## Verdicts", "## Compiled autograd", "## Findings", "## Per probe"]
    assert md.startswith("# tracecheck report: 2 probe(s) of `model.py`, 1 failing, 2 finding(s)")
    assert_well_formed(md)


def test_environment_names_versions_and_the_exact_command():
    md = markdown.render(small_report(), home="/home/alice")
    env = section(md, "## Environment")
    for expected in ("| tracecheck | 0.1.0 |", "| torch | 2.13.0+cpu |", "Debian GNU/Linux 12", "| GCC | 12.2.0 |",
                     "| torch_npu | torch_npu is not installed |",
                     "`tracecheck run ~/proj/model.py --json ~/proj/out/r.json`"):
        assert expected in env


def test_verdict_table_is_probes_by_stages():
    md = markdown.render(small_report())
    table = [line for line in section(md, "## Verdicts").splitlines() if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == ["probe", "eager", "explain", "aot_eager", "fullgraph", "compiled_autograd", "graph breaks"]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")] for r in table[2:]}
    assert set(rows) == {"`probe_ok`", "`probe_bad`"}
    bad = rows["`probe_bad`"]
    assert bad[1] == "✅" and "graph-break" in bad[2] and "graph-break" in bad[3] and "missing-fake" in bad[4]
    assert bad[-1] == "1"
    assert all(c == "✅" for c in rows["`probe_ok`"][1:-1])


def test_one_section_per_finding_with_every_required_part():
    md = markdown.render(small_report(), home="/home/alice")
    findings = section(md, "## Findings")
    finding_heads = [h for h in headings(findings) if h.startswith("#### ")]
    assert len(finding_heads) == 2  # the break seen by explain and aot_eager is one finding
    brk = section(findings, next(h for h in finding_heads if "graph-break" in h))
    assert "Graph break: Failed to trace builtin operator." in brk.splitlines()[0]  # one-sentence diagnosis
    assert "**First failing stage:** `explain` (also seen at `aot_eager`)" in brk
    assert "gb_type `Failed to trace builtin operator`" in brk
    assert "[GB0059](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html)" in brk
    assert "`~/proj/model.py:5`" in brk
    assert '```python\nprint("hi")\n```' in brk  # the source line
    assert "**Builtin:** `print`" in brk
    assert "Message (trimmed):" in brk
    assert "**Fix:** Follow the hints of the gb_type's page" in brk
    assert "<details><summary>Traceback (user frames and the last frames" in brk
    assert "tracecheck run model.py::probe_bad --stages explain" in brk
    # and the plain-torch script for an upstream issue (tracecheck repro; docs/fix.md)
    assert "tracecheck repro model.py::probe_bad --stage explain -o repro.py" in brk

    fake = section(findings, next(h for h in finding_heads if "missing-fake" in h))
    assert "**First failing stage:** `fullgraph`" in fake
    assert "**Op:** `mylib::bucketize`" in fake
    assert '```python\n@torch.library.register_fake("mylib::op")\ndef _(x):' in fake
    assert "UnsupportedOperatorException" in fake
    assert "--stages fullgraph" in fake


def test_probe_details_hold_graph_counts_and_explain_output():
    md = markdown.render(small_report())
    probe_head = section(md, "### `probe_bad`: first failing stage `explain`")
    assert "<details><summary>Graph counts</summary>" in probe_head
    assert re.search(r"explain\s+status=fail\s+graphs=2 graph_breaks=1", probe_head)
    assert "<details><summary>explain() output: break reasons (first line of each)</summary>" in probe_head


def test_compiled_autograd_counts_only_when_that_stage_ran():
    md = markdown.render(small_report(with_ca=True))
    ca = section(md, "## Compiled autograd")
    row = next(line for line in ca.splitlines() if "probe_bad" in line)
    assert [c.strip() for c in row.strip("|").split("|")][2:] == ["3", "1", "2", "0", "1"]
    assert "## Compiled autograd" not in markdown.render(small_report(with_ca=False))


def test_tlparse_is_mentioned_only_when_the_trace_dir_exists(tmp_path):
    traces = tmp_path / "traces"
    assert "tlparse" not in markdown.render(small_report(), trace_dir=str(traces))
    (traces / "model.py_probe_bad" / "explain").mkdir(parents=True)
    (traces / "model.py_probe_bad" / "explain" / "dedicated_log_torch_trace_x.log").write_text("{}\n")
    md = markdown.render(small_report(), trace_dir=str(traces))
    assert "## Structured trace" in md and "tlparse" in md
    assert "model.py_probe_bad/explain" in md


def test_a_clean_report_says_so_and_is_not_shortened():
    r = small_report()
    r.probes = r.probes[:1]
    md = markdown.render(r)
    assert "No failures and no graph breaks." in md
    assert "Shortened" not in md


# ---------------------------------------------------------------------------------------------------------
# Size


def big_report(n_probes: int, findings_per_probe: int, tb_chars: int) -> RunReport:
    probes = []
    for i in range(n_probes):
        findings, breaks = [], []
        for j in range(findings_per_probe):
            tb = f"TB-{i}-{j}\n" + ("  File \"x.py\", line 1, in f\n" * (tb_chars // 30))
            f, b = break_finding(f"{ROOT}/m{i}.py", j + 1, gb_type=f"Unsupported thing {j}", traceback=tb)
            findings.append(f)
            breaks.append(b)
        st = StageResult("explain", FAIL, failure=findings[0], findings=findings, graph_count=len(breaks) + 1,
                         graph_break_count=len(breaks), breaks=breaks)
        probes.append(probe(f"m{i}.py", "probe", f"{ROOT}/m{i}.py", {"explain": st}))
    return RunReport(probes, {"torch": "2.13.0"}, ["explain"], ["tracecheck", "run", "."], "0.1.0")


def test_500_findings_stay_under_githubs_limit_and_say_they_were_cut():
    report = big_report(n_probes=50, findings_per_probe=10, tb_chars=3000)
    assert sum(len(p.stages["explain"].findings) for p in report.probes) == 500
    md = markdown.render(report)
    assert len(md) < LIMIT
    assert "Shortened to stay under GitHub's 65,536-character comment limit" in md
    assert "finding section(s) left out" in md and "cut at GitHub's comment limit" not in md
    assert_well_formed(md)
    # what is kept comes first: the environment, the verdicts and the first finding survive intact
    assert "## Verdicts" in md and "#### 1. `graph-break`" in md


def test_a_single_500_finding_probe_also_fits():
    md = markdown.render(big_report(n_probes=1, findings_per_probe=500, tb_chars=200))
    assert len(md) < LIMIT
    assert_well_formed(md)
    assert "Shortened to stay under" in md and "cut at GitHub's comment limit" not in md  # no blind cut


def test_the_largest_details_are_cut_first():
    report = big_report(n_probes=3, findings_per_probe=1, tb_chars=1000)
    huge = report.probes[1].stages["explain"].findings[0]
    huge.evidence = dataclasses.replace(huge.evidence, traceback="HUGE-START\n" + "x" * 120_000 + "\nHUGE-END")
    # three kinds: an attachment shows one traceback per kind
    report.probes[1].stages["explain"].findings[0].kind = "data-dependent"
    report.probes[2].stages["explain"].findings[0].kind = "pybind-builtin"
    md = markdown.render(report)
    assert len(md) < LIMIT
    assert "characters cut to fit GitHub's comment limit" in md
    assert "HUGE-END" in md and "HUGE-START" not in md  # a traceback keeps its end, where the error is
    for i in (0, 2):  # the small tracebacks are untouched
        small = report.probes[i].stages["explain"].findings[0].evidence.traceback
        assert small.rstrip() in md
    assert "finding section(s) left out" not in md


def test_custom_limit_is_honoured():
    md = markdown.render(big_report(5, 5, 2000), limit=20000)
    assert len(md) < 20000
    assert "Shortened to stay under" in md and "cut at GitHub's comment limit" not in md
    assert_well_formed(md)


# ---------------------------------------------------------------------------------------------------------
# Privacy


def test_home_is_shortened_to_tilde():
    md = markdown.render(small_report(), home="/home/alice")
    assert "/home/alice" not in md
    assert "~/proj/model.py" in md
    assert "site-packages/torch/_dynamo/eval_frame.py" in md and "/opt/venv" not in md


def test_redact_removes_paths_entirely():
    md = markdown.render(small_report(), home="/home/alice", redact=True)
    for leaked in ("/home/alice", "alice", "~/proj", "proj/", "/opt/venv", "out/r.json"):
        assert leaked not in md, leaked
    assert "`model.py:5`" in md  # the file name stays, so the finding is still useful
    assert "tracecheck run model.py --json r.json" in md
    assert "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html" in md  # URLs are not paths


def test_no_environment_variables_are_dumped(monkeypatch):
    monkeypatch.setenv("TRACECHECK_TEST_SECRET", "hunter2-token")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "hunter2-alloc")
    summary = machine.collect_env_summary()
    assert "torch_version" in summary
    r = small_report()
    r.environment["collect_env"] = summary
    md = markdown.render(r)
    assert "hunter2" not in md and "hunter2" not in repr(summary)


@pytest.mark.parametrize("path,expected", [
    ("/home/alice/proj/a.py:3", "a.py:3"),
    ('File "/srv/x/y.py", line 2', 'File "y.py", line 2'),
    ("see ../other/dir/z.py now", "see z.py now"),
    (r"C:\Users\alice\m.py", "m.py"),
    ("a / b and x/y", "a / b and x/y"),
    ("https://pytorch.org/docs/stable/x.html", "https://pytorch.org/docs/stable/x.html"),
])
def test_redaction_of_path_shapes(path, expected):
    assert PathScrubber(redact=True, home="/home/alice")(path) == expected


def test_a_root_cause_seen_by_several_probes_is_written_once():
    from report_factory import missing_fake
    from tracecheck.model.report import FAIL, StageResult

    def bad(name):
        f = missing_fake(f"{ROOT}/ops.py", 9)  # the same op, at the same frame, for both probes
        return probe("model.py", name, f"{ROOT}/model.py", {
            "explain": StageResult("explain", FAIL, failure=f, findings=[f]),
            "fullgraph": StageResult("fullgraph", FAIL, failure=f, findings=[f])})

    r = RunReport([bad("probe_a"), bad("probe_b")], {"torch": "2.13.0"}, ["explain", "fullgraph"], rootdir=ROOT)
    md = markdown.render(r)
    findings = section(md, "## Findings")
    assert len([h for h in headings(findings) if h.startswith("#### ")]) == 1
    assert ("**Probes (2):** `probe_a` (explain, fullgraph); `probe_b` (explain, fullgraph)"
            in findings)
    assert md.count("There was no fake impl registered for") == 1
    per_probe = section(md, "## Per probe")
    assert "### `probe_a`" in per_probe and "### `probe_b`" in per_probe
    assert per_probe.count("findings #1 above") == 2


def test_attachment_tracebacks_keep_user_frames_and_the_raise():
    from tracecheck.render.excerpts import condense_traceback

    tb = "\n".join(["Traceback (most recent call last):",
                    '  File "/home/a/model.py", line 3, in forward',
                    "    y = ext.f(x)",
                    "        ^^^^^^^^",
                    *[f'  File "/venv/site-packages/torch/_dynamo/f{i}.py", line {i}, in g{i}\n    pass'
                      for i in range(20)],
                    "torch._dynamo.exc.Unsupported: boom", "  Explanation: long text"])
    out = condense_traceback(tb, keep_last=2, message_shown=True).splitlines()
    assert out[:3] == ["Traceback (most recent call last):", '  File "/home/a/model.py", line 3, in forward',
                       "    y = ext.f(x)"]                                   # user frame kept, carets gone
    assert out[3] == "  [... 18 frame(s) in torch ...]"
    assert out[4] == '  File "/venv/site-packages/torch/_dynamo/f18.py", line 18, in g18'
    assert "torch._dynamo.exc.Unsupported: boom" in out and "  Explanation: long text" not in out


def test_crashes_in_two_probes_stay_two_root_causes():
    from tracecheck.model.report import CRASH, Finding

    def crashed(name, why):
        f = Finding("crash", f"The eager stage {why}.", {}, {"cause": why, "stderr_tail": f"tail of {name}"})
        return probe("model.py", name, f"{ROOT}/model.py", {"eager": StageResult("eager", CRASH, failure=f,
                                                                                   findings=[f])})

    r = RunReport([crashed("probe_a", "process killed by SIGSEGV"), crashed("probe_b", "exited with code 3")],
                  {"torch": "2.13.0"}, ["eager"], rootdir=ROOT)
    md = markdown.render(r)
    assert md.startswith("# tracecheck report: 2 probe(s) of `model.py`, 2 failing, 2 finding(s)")
    assert "tail of probe_a" in md and "tail of probe_b" in md


def test_probes_are_named_by_file_and_probe_when_the_report_holds_two_files():
    r = small_report()
    r.probes[0] = probe("other.py", "probe_ok", f"{ROOT}/other.py", r.probes[0].stages)
    md = markdown.render(r)
    assert md.startswith("# tracecheck report: 2 probe(s), 1 failing, 2 finding(s)")
    rows = [ln for ln in section(md, "## Verdicts").splitlines() if ln.startswith("| `")]
    assert [ln.split(" | ")[0] for ln in rows] == ["| `other.py::probe_ok`", "| `model.py::probe_bad`"]
    assert "### `model.py::probe_bad`: first failing stage `explain`" in md


# ---------------------------------------------------------------------------------------------------------
# Many probes: every root cause kept, detail cut first


def _unknown(exc: str, message: str) -> Finding:
    return Finding("unknown", "tracecheck could not classify this failure.", {},
                   {"exception_type": exc, "exception_chain": [exc], "message": message,
                    "traceback": "Traceback (most recent call last):\n" + '  File "/venv/torch/x.py", line 1, in f\n'
                                 * 200 + f"{exc}: {message}"})


def many_probes_report(n: int = 36):
    """``n`` probes in ``n`` files, each with a print graph break at its own line (explain, aot_eager), a missing
    fake at its own line (fullgraph), a frameless ``unknown`` of its own at export and another at
    compiled_autograd, and an opaque-op advice; long messages and tracebacks, as real libraries give."""
    from report_factory import missing_fake
    from tracecheck.model.report import Finding

    probes = []
    for i in range(n):
        file = f"{ROOT}/lib{i}.py"
        tb = "Traceback (most recent call last):\n" + f'  File "{file}", line {10 + i}, in forward\n' * 120
        gf, gb = break_finding(file, 10 + i, gb_type=f"Unsupported thing {i}", traceback=tb)
        gf.evidence = dataclasses.replace(gf.evidence, message=gf.evidence.message + "\n" + "long explanation line\n" * 40)
        mf = missing_fake(file, 50 + i, traceback=tb)
        mf.context = dataclasses.replace(mf.context, op=f"lib{i}::op")
        ex = _unknown("torch._subclasses.fake_tensor.DataDependentOutputException", f"export-only error {i}")
        ca = _unknown("IndexError", f"list index out of range {i}")
        adv = Finding("opaque-op", f"lib{i}::op is opaque to Inductor.", {"op": f"lib{i}::op"}, {})
        probes.append(probe(f"lib{i}.py", "probe", file, {
            "explain": StageResult("explain", FAIL, failure=gf, findings=[gf], graph_count=2, graph_break_count=1,
                                   breaks=[gb], extra={"explain_reasons": ["why\n" * 30]}),
            "aot_eager": StageResult("aot_eager", FAIL, failure=gf, findings=[gf, adv], graph_count=2,
                                     graph_break_count=1, breaks=[gb]),
            "fullgraph": StageResult("fullgraph", FAIL, failure=mf, findings=[mf]),
            "export": StageResult("export", FAIL, failure=ex, findings=[ex], target="export"),
            "compiled_autograd": StageResult("compiled_autograd", FAIL, failure=ca, findings=[ca]),
        }))
    stages = ["explain", "aot_eager", "fullgraph", "export", "compiled_autograd"]
    return RunReport(probes, {"torch": "2.13.0"}, stages, ["tracecheck", "run", "."], "0.1.0",
                     require=("compile", "export"))


def test_36_probes_keep_every_root_cause_and_cut_detail_first():
    report = many_probes_report(36)
    md = markdown.render(report, json_path="out/report.json")
    assert len(md) < LIMIT
    assert_well_formed(md)
    findings = section(md, "## Findings")
    # the oracle: each probe's five root causes, written above by hand
    for i in range(36):
        assert f"lib{i}.py:{10 + i}" in findings                      # its graph break
        assert f"lib{i}::op" in findings                             # its missing fake
        assert f"export-only error {i}" in findings                  # each unknown by its own message
        assert f"list index out of range {i}" in findings
    assert len([h for h in headings(findings) if h.startswith("#### ")]) == 36 * 4
    assert len([h for h in headings(section(md, "## Advice")) if h.startswith("#### A")]) == 36
    per_probe = section(md, "## Per probe")
    assert all(f"`lib{i}.py::probe`" in per_probe for i in range(36))
    assert "left out" not in md.replace("explain() output left out", "").replace("traceback left out", "")
    assert "every root cause is still listed" in md
    assert "`out/report.json` has everything" in md
    # the cuts come from the end: the first finding keeps its evidence, fix and repro, the last is one line
    first = section(md, "#### 1. `graph-break`: Graph break: Unsupported thing 0.")
    assert "**Fix:**" in first and "**Repro:**" in first and "lib0.py:10" in first
    last = section(md, "#### 144. `unknown`: tracecheck could not classify this failure.")
    assert "**Fix:**" not in last
    assert "`IndexError: list index out of range 35`, lib35.py::probe at compiled_autograd" in last


def test_two_frameless_unknowns_of_one_type_are_told_apart_by_their_message():
    a = _unknown("RuntimeError", "first failure at 0x7f00aa")
    a2 = _unknown("RuntimeError", "first failure at 0x7f00bb")  # the same error, another address
    b = _unknown("RuntimeError", "second failure")
    stages = {"export": StageResult("export", FAIL, failure=a, findings=[a], target="compile"),
              "dynamic": StageResult("dynamic", FAIL, failure=a2, findings=[a2], target="compile"),
              "compiled_autograd": StageResult("compiled_autograd", FAIL, failure=b, findings=[b])}
    r = RunReport([probe("m.py", "probe", f"{ROOT}/m.py", stages)], {"torch": "2.13.0"}, list(stages), rootdir=ROOT)
    findings = section(markdown.render(r), "## Findings")
    assert len([h for h in headings(findings) if "`unknown`" in h]) == 2
    assert "first failing stage:** `export` (also seen at `dynamic`)" in findings.lower().replace("**first", "first")


def test_two_frameless_unknowns_of_one_probe_are_two_root_causes():
    md = markdown.render(many_probes_report(1))
    findings = section(md, "## Findings")
    unknowns = [h for h in headings(findings) if "`unknown`" in h]
    assert len(unknowns) == 2
    assert "export-only error 0" in findings and "list index out of range 0" in findings
    assert "`IndexError`" in findings and "`torch._subclasses.fake_tensor.DataDependentOutputException`" in findings


# --- one report, no contradictions (issue 40): a fix or traceback pointed to is the same one ------------------------

def _two_functorch_findings() -> RunReport:
    """Two functorch-incompatible findings at two lines, written by hand: an ``.item()`` under vmap (cause ``item``)
    and an old-style autograd.Function (no cause: the kind's own fix), each with its own exception."""
    def finding(line: int, cause: str | None, exc: str, message: str) -> Finding:
        return Finding("functorch-incompatible", f"torch.func refuses line {line}",
                       {"transform": "vmap", **({"cause": cause} if cause else {})},
                       {"exception_type": exc, "message": message,
                        "user_frame": {"file": "/r/m.py", "line": line, "code": "x"},
                        "traceback": f'Traceback (most recent call last):\n  File "/r/m.py", line {line}, in f\n'
                                     f"{exc}: {message}"})
    item = finding(5, "item", "RuntimeError", "vmap: It looks like you're calling .item() on a Tensor")
    fn = finding(9, None, "RuntimeError", "In order to use an autograd.Function with functorch transforms")
    other = finding(12, "item", "RuntimeError", "vmap: It looks like you're calling .item() on a Tensor")
    stage = StageResult("vmap", "fail", failure=item, findings=[item, fn, other], target="func")
    p = ProbeReport("m.py::probe", "/r/m.py", "probe", {"vmap": stage})
    return RunReport([p], {"torch": "2.13.0"}, ["vmap"], rootdir="/r", require=("compile", "func"))


def test_a_fix_is_pointed_to_only_where_it_is_the_same_fix_and_an_example_only_where_it_applies():
    from tracecheck.model.taxonomy import kinds

    md = markdown.render(_two_functorch_findings())
    sections = md.split("#### ")[1:]
    item, fn, other = (next(s for s in sections if f"line {n}" in s.split("\n", 1)[0]) for n in (5, 9, 12))
    by_cause = kinds()["functorch-incompatible"].fix_by_cause
    assert by_cause["item"][:60] in item                     # its cause's own fix, in full
    assert "generate_vmap_rule" not in item                  # the kind's autograd.Function example is not for .item()
    assert "**Fix:** as in finding" not in fn                # a different fix than the first: written out
    assert "generate_vmap_rule" in fn                        # the kind's own fix, with its example
    assert "**Fix:** as in finding 1 above." in other        # the very same fix as finding 1
    assert by_cause["item"][:60] not in other


def test_a_traceback_is_pointed_to_only_for_the_same_exception():
    md = markdown.render(_two_functorch_findings())
    sections = md.split("#### ")[1:]
    fn = next(s for s in sections if "line 9" in s.split("\n", 1)[0])
    other = next(s for s in sections if "line 12" in s.split("\n", 1)[0])
    assert "the path through torch of finding" not in fn     # another message: its own traceback
    assert "Traceback: the path through torch of finding 1 above" in other


def test_a_disabled_function_is_named_a_function_not_a_builtin():
    """Dynamo's words, as torch 2.13 prints them, for a builtin and for a ``torch.compiler.disable``d function."""
    from tracecheck.render.excerpts import named_in_message

    assert named_in_message("Failed to trace builtin operator `print` with argument types") == ("Builtin", "print")
    skipped = ("Attempted to call function marked as skipped\n  Explanation: Dynamo developers have intentionally "
               "marked that the function `heavy_helper` should not be traced.\n  Developer debug context: "
               "<function heavy_helper at 0x7f3a2c1b8d60>")
    assert named_in_message(skipped) == ("Function", "heavy_helper")
