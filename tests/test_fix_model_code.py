"""``tracecheck fix`` on graph breaks in model code: source rewrites, each verified (tracecheck/fix/model_code.py).

The rewrites' text is checked against literals written by hand; the end-to-end runs against plain torch in its
own process (tests/fix_oracle.py): the patched copy compiles with ``fullgraph=True`` (no break left) and its
outputs and gradients equal the original's eager ones. The diff is checked by applying it with ``git apply``.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracecheck.fix import rewrites, sourcetext
from tracecheck.fix.sourcetext import Site, Source

TESTS = Path(__file__).resolve().parent
PROBES = TESTS / "models" / "graph_breaks.py"


def _only(src_text: str, site: Site, rewrite: str) -> str:
    """The source with the named rewrite's edits applied (the rewrite must apply)."""
    src = Source(src_text)
    cands = {c.rewrite: c for c in rewrites.candidates(src, site)}
    assert rewrite in cands, sorted(cands)
    return sourcetext.apply(src_text, cands[rewrite].edits)


MODEL = '''import torch
from torch import nn


class M(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # fast path
            y = x.sin()
        else:
            y = x.cos()
        print(f"{y.mean()}")
        return y
'''
BRANCH = Site(7, "data-dependent", "Data-dependent branching", "if x.sum() > 0:  # fast path")


def test_torch_cond_replaces_an_if_else_that_assigns_one_name():
    got = _only(MODEL, BRANCH, "torch-cond")
    assert "        y = torch.cond(x.sum() > 0, lambda: x.sin(), lambda: x.cos())  # tracecheck fix: both branches " \
           "in one graph\n        print(" in got


def test_compile_guard_keeps_the_test_and_its_comment():
    got = _only(MODEL, BRANCH, "compile-guard")
    assert "        if not torch.compiler.is_compiling() and (x.sum() > 0):  # fast path\n            y = x.sin()" in got


def test_a_host_side_check_becomes_a_graph_assert_or_is_skipped_while_compiling():
    text = "import torch\n\ndef f(x):\n    if (x < 0).all():\n        raise ValueError('negative')\n    return x\n"
    site = Site(4, "data-dependent", "Data-dependent branching", "")
    # no cond, no branchless: the assert first (eager raises as before), skipping it while compiling after
    assert [c.rewrite for c in rewrites.candidates(Source(text), site)] == ["graph-assert", "compile-guard"]
    assert "    if not torch.compiler.is_compiling() and ((x < 0).all()):\n        raise" in \
        _only(text, site, "compile-guard")
    assert _only(text, site, "graph-assert") == (
        "import torch\n\ndef f(x):\n    if torch.compiler.is_compiling():  # tracecheck fix: the check stays in the "
        "graph as an assert\n        torch._assert_async(torch.logical_not((x < 0).all()), 'negative')\n"
        "    elif (x < 0).all():\n        raise ValueError('negative')\n    return x\n")


def test_the_branchless_form_needs_an_if_without_else():
    src = Source(MODEL)
    assert "branchless" not in {c.rewrite for c in rewrites.candidates(src, BRANCH)}
    text = "import torch\n\ndef f(x):\n    if torch.isnan(x).any():\n        x = torch.nan_to_num(x)\n    return x\n"
    got = _only(text, Site(4, "data-dependent", "Data-dependent branching", ""), "branchless")
    assert got == ("import torch\n\ndef f(x):\n    # tracecheck fix: branchless (was `if torch.isnan(x).any():`)\n"
                   "    x = torch.nan_to_num(x)\n    return x\n")


def test_a_print_of_an_f_string_is_guarded_not_reordered():
    site = Site(11, "graph-break", "Failed to trace builtin operator", 'print(f"{y.mean()}")')
    cands = [c.rewrite for c in rewrites.candidates(Source(MODEL), site)]
    assert cands == ["compile-guard-logging"]  # Dynamo reorders prints of graph values only, not str() of them
    got = _only(MODEL, site, "compile-guard-logging")
    assert ('        if not torch.compiler.is_compiling():  # tracecheck fix: logs in eager only\n'
            '            print(f"{y.mean()}")\n        return y') in got


def test_module_settings_go_after_import_torch_and_add_it_when_missing():
    site = Site(3, "data-dependent", "Unsupported Tensor.item() call with capture_scalar_outputs=False", "")
    text = '"""doc"""\nfrom torch import nn\ndef f(x):\n    return x.item()\n'
    got = _only(text, site, "capture-scalar-outputs")
    assert got.startswith('"""doc"""\nimport torch\ntorch._dynamo.config.capture_scalar_outputs = True  #')
    got = _only("import os\nimport torch\n" + text.split("\n", 1)[1], Site(4, site.kind, site.gb_type, ""),
                "capture-scalar-outputs")
    assert got.startswith("import os\nimport torch\ntorch._dynamo.config.capture_scalar_outputs = True  #")


def test_no_rewrite_for_tolist_of_floats():
    # the docs: .tolist() of a non-integer tensor always breaks; capture_scalar_outputs does not cover it
    site = Site(3, "data-dependent", "Tensor.tolist() with non-integer tensor", "y = x.tolist()")
    assert rewrites.candidates(Source("import torch\ndef f(x):\n    y = x.tolist()\n    return y\n"), site) == []


def test_edits_stay_valid_python_around_decorators_elif_and_non_ascii_text():
    item = "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    text = '"""doc"""\n@some.decorator\ndef f(x):\n    return x.item()\n'  # the module setting goes above the decorator
    got = _only(text, Site(4, "data-dependent", item, ""), "capture-scalar-outputs")
    assert got.startswith('"""doc"""\nimport torch\ntorch._dynamo.config.capture_scalar_outputs = True  #')
    assert got.endswith("\n@some.decorator\ndef f(x):\n    return x.item()\n")
    branch = Site(6, "data-dependent", "Data-dependent branching", "")
    text = "import torch\n\ndef f(x):\n    if x.sum() > 0:\n        y = x\n    elif x.mean() > 0:\n        y = x.sin()\n" \
           "    else:\n        y = x.cos()\n    return y\n"
    assert rewrites.candidates(Source(text), branch) == []  # an elif is not a statement of its own
    text = "import torch\n\ndef f(x):\n    if 'é' != '' and x.sum() > 0:  # ü\n        x = x * 2\n    return x\n"
    got = _only(text, Site(4, "data-dependent", "Data-dependent branching", ""), "compile-guard")
    assert "    if not torch.compiler.is_compiling() and ('é' != '' and x.sum() > 0):  # ü\n" in got


def test_overlapping_edits_are_refused():
    inner = sourcetext.Edit((5, 8), (5, 15), "pass")
    outer = sourcetext.Edit((4, 0), (6, 0), "x = 1\n")
    assert sourcetext.overlap([outer], [inner]) and not sourcetext.overlap([inner], [sourcetext.Edit((7, 0), (7, 0), "y\n")])
    with pytest.raises(ValueError):
        sourcetext.apply("a\nb\nc\nd\ne = 12345678901\nf\ng\n", [outer, inner])


def test_the_diff_applies_to_a_file_without_a_last_newline(tmp_path):
    from tracecheck.fix.copies import DIFF_MARK, Copies, Patch

    text = "import torch\n\ndef f(x):\n    print(x)\n    return x"  # no newline at the end
    site = Site(4, "graph-break", "Failed to trace builtin operator", "print(x)")
    cand = next(c for c in rewrites.candidates(Source(text), site) if c.rewrite == "compile-guard-logging")
    (tmp_path / "m.py").write_text(text)
    diff = Copies(str(tmp_path / "m.py"), text).diff(Patch(cand.edits), "m.py")
    assert diff.startswith(DIFF_MARK)
    (tmp_path / "fix.diff").write_text(diff)
    run = subprocess.run(["git", "apply", "fix.diff"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "m.py").read_text() == ("import torch\n\ndef f(x):\n    if not torch.compiler.is_compiling():  "
                                               "# tracecheck fix: logs in eager only\n        print(x)\n    return x")


def test_a_tab_indented_print_is_guarded_with_a_tab():
    text = "import torch\n\ndef f(x):\n\tprint(x)\n\treturn x\n"
    got = _only(text, Site(4, "graph-break", "Failed to trace builtin operator", "print(x)"), "compile-guard-logging")
    compile(got, "m.py", "exec")
    assert "\tif not torch.compiler.is_compiling():  # tracecheck fix: logs in eager only\n\t\tprint(x)\n" in got


def test_own_files_only_are_overwritten_and_only_utf8_is_rewritten(tmp_path):
    from tracecheck.fix.copies import DIFF_MARK
    from tracecheck.fix.pipeline import check_output
    from tracecheck.fix.prelude import read_source
    from tracecheck.model.exitcodes import UsageError

    notes = tmp_path / "notes.md"
    notes.write_text(f"my notes\n{DIFF_MARK} m.py\n")  # the mark pasted into a user's file, not on its first line
    with pytest.raises(UsageError, match="not written by"):
        check_output(str(notes), "--diff", DIFF_MARK, module=False, suffix="", first_lines=1)
    notes.write_text(f"{DIFF_MARK} m.py\n--- a/m.py\n")
    check_output(str(notes), "--diff", DIFF_MARK, module=False, suffix="", first_lines=1)  # a diff fix wrote
    latin = tmp_path / "latin.py"
    latin.write_bytes("# -*- coding: latin-1 -*-\ns = 'été'\n".encode("latin-1"))
    assert read_source(str(latin)).endswith("s = 'été'\n")
    with pytest.raises(UsageError, match="UTF-8 files only"):
        read_source(str(latin), utf8_only=True)


def test_new_span_follows_lines_added_above():
    edits = [sourcetext.Edit((2, 0), (2, 0), "a\nb\n")]  # two lines inserted before line 2
    assert sourcetext.new_span(edits, 5, 5) == (7, 7)
    guard = sourcetext.Edit((5, 0), (5, 9), "if c:\n    print()")  # one line becomes two
    assert sourcetext.new_span(edits + [guard], 5, 5) == (7, 8)


LM = '''import torch
from torch import nn


class LM(nn.Module):
    def forward(self, x):
        x = self.emb(x)
        peak = x.abs().max().item()
        if peak > 50:
            x = x.clamp(-50, 50)
        print(x)
        return x
'''
ITEM = Site(8, "data-dependent", "Unsupported Tensor.item() call with capture_scalar_outputs=False",
            "peak = x.abs().max().item()")
ITEM_BRANCH = Site(9, "data-dependent", "", "if peak > 50:")  # (fullgraph stops at the `if`: no gb_type)


def test_a_branch_on_an_item_scalar_becomes_torch_where_without_the_item():
    want = LM.replace("        peak = x.abs().max().item()\n        if peak > 50:\n            x = x.clamp(-50, 50)\n",
                      "        x = torch.where(x.abs().max() > 50, x.clamp(-50, 50), x)  # tracecheck fix: a tensor "
                      "select, no .item()\n")
    for site in (ITEM, ITEM_BRANCH):  # the same rewrite from either line
        assert _only(LM, site, "tensor-where") == want
    cands = [c.rewrite for c in rewrites.candidates(Source(LM), ITEM)]
    assert cands.index("tensor-where") < cands.index("branchless") and cands[0] == "tensor-where", cands
    # one edit over both statements: the lines below it move up by two (the print: line 11 -> 9)
    cand = next(c for c in rewrites.candidates(Source(LM), ITEM) if c.rewrite == "tensor-where")
    assert sourcetext.new_span(cand.edits, 11, 11) == (9, 9) and sourcetext.new_span(cand.edits, 8, 8) == (8, 8)


def test_the_other_branch_rewrites_drop_the_dead_item_too():
    assert _only(LM, ITEM_BRANCH, "branchless") == LM.replace(
        "        peak = x.abs().max().item()\n        if peak > 50:\n            x = x.clamp(-50, 50)\n",
        "        # tracecheck fix: branchless (was `if peak > 50:` on `peak = x.abs().max().item()`)\n"
        "        x = x.clamp(-50, 50)\n")
    assert _only(LM, ITEM, "compile-guard") == LM.replace(
        "        peak = x.abs().max().item()\n        if peak > 50:\n",
        "        if not torch.compiler.is_compiling() and (x.abs().max() > 50):\n")
    text = ("import torch\n\ndef f(x):\n    s = (x - 1).mean().item()\n    # the sign decides\n    if s > 0:\n"
            "        z = x.sin()\n    else:\n        z = x.cos()\n    return z\n")
    site = Site(6, "data-dependent", "Data-dependent branching", "if s > 0:")
    # (tensor-where first: both branches assign z; select leaves a test on an .item() scalar to it)
    assert [c.rewrite for c in rewrites.candidates(Source(text), site)] == ["tensor-where", "torch-cond",
                                                                            "compile-guard"]
    assert _only(text, site, "tensor-where") == (
        "import torch\n\ndef f(x):\n    # the sign decides\n    z = torch.where((x - 1).mean() > 0, x.sin(), x.cos())"
        "  # tracecheck fix: a tensor select, no .item()\n    return z\n")
    assert _only(text, site, "torch-cond") == (
        "import torch\n\ndef f(x):\n    # the sign decides\n    z = torch.cond((x - 1).mean() > 0, lambda: x.sin(), "
        "lambda: x.cos())  # tracecheck fix: both branches in one graph\n    return z\n")


def test_a_guard_that_raises_on_an_item_scalar_becomes_torch_check():
    text = ("import torch\n\ndef f(x):\n    peak = x.abs().max().item()\n    if peak > 50:\n"
            "        raise ValueError('activations blew up')\n    return x\n")
    site = Site(4, "data-dependent", "Unsupported Tensor.item() call with capture_scalar_outputs=False", "")
    assert _only(text, site, "torch-check") == (
        "import torch\ntorch._dynamo.config.capture_scalar_outputs = True  # tracecheck fix: .item()/.tolist() stay in "
        "the graph as unbacked SymInts/SymFloats\n\ndef f(x):\n    peak = x.abs().max().item()\n"
        "    torch._check_with(ValueError, torch.sym_not(peak > 50), lambda: 'activations blew up')  # tracecheck fix: "
        "a check the graph keeps\n    return x\n")
    # a message that formats the scalar in: Dynamo cannot keep it, so no torch.check (left as it is)
    formatted = text.replace("'activations blew up'", "f'peak {peak}'")
    assert "torch-check" not in {c.rewrite for c in rewrites.candidates(Source(formatted), site)}


@pytest.mark.parametrize("change", [
    ("        return x\n", "        return x, peak\n"),  # the scalar is returned: a float there, not a tensor
    ("        return x\n", "        return x / int(peak)\n"),  # read by a call that wants the number
    ("        if peak > 50:", "        x = x * 2\n        if peak > 50:"),  # not adjacent: x changed in between
    ("        if peak > 50:", "        if peak > 50 and x.numel() > 1:"),  # `and` calls bool() on a tensor again
    ("            x = x.clamp(-50, 50)\n", "            y = x.clamp(-50, 50)\n"),  # y has no value to keep otherwise
    ("            x = x.clamp(-50, 50)\n", "            x = x.clamp(-50, 50)\n        else:\n            y = x * 0\n"),
])
def test_no_tensor_where_unless_the_scalar_is_dead_and_the_branch_assigns_a_bound_name(change):
    text = LM.replace(*change)
    src = Source(text)
    at = {t.strip().split(" ")[0]: i for i, t in enumerate(text.splitlines(), 1)}
    for site in (Site(at["peak"], ITEM.kind, ITEM.gb_type, ""), Site(at["if"], ITEM_BRANCH.kind, "", "")):
        assert "tensor-where" not in {c.rewrite for c in rewrites.candidates(src, site)}


def test_a_scalar_read_again_as_a_number_stays_a_tensor_under_tensor_where():
    """Issue 51: the scalar is read again by arithmetic or a print (which take a 0-dim tensor as well): the
    assignment keeps the tensor, without .item(), and the `if` (with or without else) becomes torch.where."""
    text = LM.replace("        print(x)\n        return x\n", "        print(x, peak)\n        return x / peak\n")
    assert _only(text, ITEM, "tensor-where") == text.replace(
        "        peak = x.abs().max().item()\n        if peak > 50:\n            x = x.clamp(-50, 50)\n",
        "        peak = x.abs().max().detach()  # tracecheck fix: kept a tensor (no .item())\n"
        "        peak = peak.double() if peak.is_floating_point() else peak  # (a Python float's precision)\n"
        "        x = torch.where(peak > 50, x.clamp(-50, 50), x)  # tracecheck fix: a tensor select, no .item()\n")
    both = LM.replace("            x = x.clamp(-50, 50)\n", "            x = x.clamp(-50, 50)\n        else:\n"
                      "            x = x * 0.5\n")
    assert "        x = torch.where(x.abs().max() > 50, x.clamp(-50, 50), x * 0.5)  # tracecheck fix: a tensor " \
           "select, no .item()\n" in _only(both, ITEM, "tensor-where")


def test_a_scalar_read_later_is_kept_by_the_branch_rewrites():
    text = LM.replace("        return x\n", "        return x / peak\n")
    got = _only(text, ITEM_BRANCH, "branchless")
    assert "        peak = x.abs().max().item()\n        # tracecheck fix: branchless (was `if peak > 50:`)\n" in got


def test_a_candidate_runs_the_stages_it_changes_first():
    from tracecheck.fix.trial import VERIFY_PHASES, VERIFY_STAGES

    assert sorted(s for phase in VERIFY_PHASES for s in phase) == sorted(VERIFY_STAGES)
    assert {"explain", "fullgraph"} <= set(VERIFY_PHASES[0]) and "compiled_autograd" in VERIFY_PHASES[-1]


# ---- end to end ----------------------------------------------------------------------------------------------------


def fix(tmp_path: Path, source: Path, probe: str) -> tuple[subprocess.CompletedProcess, Path, Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    original = work / source.name
    shutil.copy(source, original)
    patched, diff = work / "patched.py", work / "fix.diff"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "fix", f"{original.name}::{probe}", "--patched",
                           str(patched), "--diff", str(diff), "-j", "2"], capture_output=True, text=True, cwd=work,
                          timeout=900, env={**os.environ, "COLUMNS": "200"})
    return proc, original, patched, diff


def oracle(original: Path, patched: Path, probe: str) -> dict:
    proc = subprocess.run([sys.executable, str(TESTS / "fix_oracle.py"), str(original), str(patched), probe],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_verified(tmp_path: Path, source: Path, probe: str, rewrite: str) -> None:
    proc, original, patched, diff = fix(tmp_path, source, probe)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "fix VERIFIED" in proc.stdout and f"rewrite {rewrite}:" in proc.stdout, proc.stdout[-4000:]
    got = oracle(original, patched, probe)
    assert got["fullgraph"] == "ok" and got["outputs_equal"] and got["grads_equal"], got
    # the diff, applied to the original, gives the patched copy without its prelude
    applied = tmp_path / "applied"
    applied.mkdir()
    shutil.copy(original, applied / original.name)
    run = subprocess.run(["git", "apply", str(diff)], cwd=applied, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = patched.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("# ---- tracecheck fix: this is a patched"))
    end = lines.index("# ----\n", start)
    assert (applied / original.name).read_text() == "".join(lines[:start] + lines[end + 2:])
    assert (applied / original.name).read_text() != original.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("probe,rewrite", [
    ("probe_item", "capture-scalar-outputs"),
    ("probe_mask", "capture-dynamic-output-shape-ops"),
    ("probe_cond", "torch-cond"),
    ("probe_print", "reorderable-logging"),
    # (compile-guard and compile-guard-logging: shared cases 16 and 19 below)
])
def test_each_rewrite_class_gives_a_verified_diff(tmp_path, probe, rewrite):
    check_verified(tmp_path, PROBES, probe, rewrite)


@pytest.mark.slow
def test_a_branch_on_an_item_scalar_gets_a_verified_torch_where(tmp_path):
    """A model in training clamps outliers when `peak = y.abs().max().item()` is large, then prints: the `.item()`
    and its `if` become one torch.where (the dead `.item()` line goes), the print is made reorderable; the oracle
    compiles the copy with fullgraph=True and compares outputs and gradients (the probe's inputs take the clamp)."""
    check_verified(tmp_path, PROBES, "probe_item_branch", "tensor-where")
    diff = (tmp_path / "work" / "fix.diff").read_text()
    assert "-        peak = y.abs().max().item()\n-        if peak > 0.5:\n-            y = y.clamp(-0.5, 0.5)\n" \
           "+        y = torch.where(y.abs().max() > 0.5, y.clamp(-0.5, 0.5), y)  # tracecheck fix:" in diff, diff


@pytest.mark.slow
@pytest.mark.parametrize("case,rewrite", [("16_mask_dependent_branch.py", "compile-guard"),
                                          ("19_print_stats_in_forward.py", "compile-guard-logging")])
def test_shared_cases_get_a_verified_diff(tmp_path, shared_cases, case, rewrite):
    check_verified(tmp_path, shared_cases / case, "probe", rewrite)


@pytest.mark.slow
def test_shared_case_22_has_nothing_to_fix(tmp_path, shared_cases):
    proc, _, patched, diff = fix(tmp_path, shared_cases / "22_module_setattr_in_forward.py", "probe")
    assert proc.returncode == 0 and "nothing to fix" in proc.stdout, proc.stdout[-3000:]
    assert not patched.exists() and not diff.exists()


@pytest.mark.slow
def test_a_break_no_rewrite_covers_is_said_plainly(tmp_path):
    proc, _, patched, diff = fix(tmp_path, PROBES, "probe_history")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "(Tensor.tolist() with non-integer tensor)" in proc.stdout and "no rewrite applies" in proc.stdout
    assert "no code fix generated" in proc.stdout
    assert not patched.exists() and not diff.exists()


@pytest.mark.slow
def test_a_branchless_rewrite_is_offered_but_never_called_verified(tmp_path):
    """torch.cond is refused (its backward under compiled autograd), branchless is kept: the stages pass and the
    eager results match at the probe's inputs, but the branch now runs for every input, in eager too."""
    proc, original, patched, diff = fix(tmp_path, PROBES, "probe_nan_guard")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "tried torch-cond:" in proc.stdout and "rewrite branchless:" in proc.stdout
    assert "the branch now runs for every input" in proc.stdout and "fix NOT verified" in proc.stdout
    got = oracle(original, patched, "probe_nan_guard")  # what was checked holds: one graph, the same numbers
    assert got["fullgraph"] == "ok" and got["outputs_equal"] and got["grads_equal"], got


@pytest.mark.slow
def test_a_rewrite_the_inputs_cannot_tell_apart_is_not_called_verified(tmp_path):
    """The probe's scale is 2, so its inputs never take the fast path: the compile-guard removes the break and
    every stage passes, but nothing compared the skipped branch with the code that runs instead."""
    proc, _, patched, diff = fix(tmp_path, PROBES, "probe_untaken_fast_path")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "rewrite compile-guard:" in proc.stdout and "fix NOT verified" in proc.stdout
    assert "the probe's inputs never take this branch" in proc.stdout
    assert patched.exists() and diff.exists()  # the rewrite is offered, not called verified


@pytest.mark.slow
def test_candidates_that_fail_a_stage_are_not_kept(tmp_path):
    """torch.cond traces, but its backward does not under compiled autograd (torch 2.13 and 2.14: 'Attempted to
    inline function marked as skipped', _LazyGraphModule._lazy_forward): refused, and fix says why; the next
    candidate, both sides computed and torch.where picking (select), is kept and verified against plain torch."""
    proc, original, patched, _ = fix(tmp_path, PROBES, "probe_value_branch")
    assert "tried torch-cond: a stage fails that passed, or fails in a new way: compiled_autograd" in proc.stdout
    assert proc.returncode == 0 and "rewrite select:" in proc.stdout, proc.stdout[-3000:]
    got = oracle(original, patched, "probe_value_branch")
    assert got["fullgraph"] == "ok" and got["outputs_equal"] and got["grads_equal"], got


TINY_LM_ORACLE = """
import importlib.util, sys, torch
def build(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = sys.modules[name] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m
original, patched = build(sys.argv[1], "original"), build(sys.argv[2], "patched")
ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
for scale in (1000.0, 1.0):  # the guard taken (activations over 100), and not
    torch.manual_seed(0); want = original.TinyLM(scale)
    torch.manual_seed(0); model = patched.TinyLM(scale)
    out = torch.compile(model, backend="aot_eager", fullgraph=True)(ids)
    ref = want(ids)
    torch.testing.assert_close(out, ref)
    grads = torch.autograd.grad(out.sum(), list(model.parameters()))
    for a, b in zip(grads, torch.autograd.grad(ref.sum(), list(want.parameters()))):
        torch.testing.assert_close(a, b)
    print("scale", scale, "ok")
"""


@pytest.mark.slow
def test_an_item_feeding_an_if_and_a_print_is_fixed_by_rewrites_together(tmp_path):
    """Issue 51's tiny LM: `amax = x.abs().max().item()`, `if amax > 100.0: x = x / amax`, `print(..., amax)`.
    Each rewrite alone left the break ("2 -> 2"); kept a tensor, the scalar feeds torch.where and a reorderable print.
    Plain torch compiles the patched model with fullgraph=True, forward and backward, equal to the original's eager
    results where the guard is taken and where it is not."""
    proc, original, patched, diff = fix(tmp_path, PROBES, "probe_tiny_lm")
    assert proc.returncode == 0 and "fix VERIFIED" in proc.stdout, proc.stdout[-4000:]
    assert "rewrite tensor-where:" in proc.stdout and "rewrite reorderable-logging:" in proc.stdout
    text = diff.read_text()
    assert "+        amax = x.abs().max().detach()  # tracecheck fix: kept a tensor (no .item())\n" \
           "+        amax = amax.double() if amax.is_floating_point() else amax  # (a Python float's precision)\n" \
           "+        x = torch.where(amax > 100.0, x / amax, x)  # tracecheck fix: a tensor select, no .item()\n" in text
    run = subprocess.run([sys.executable, "-c", TINY_LM_ORACLE, str(original), str(patched)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("scale")] == ["scale 1000.0 ok",
                                                                                     "scale 1.0 ok"]


@pytest.mark.slow
def test_two_rewrites_that_only_work_together_are_kept_together(tmp_path):
    """Capturing the `.item()` alone moves the break to its `if` (no fewer breaks); torch.cond alone leaves the
    `.item()`: the captured scalar is held and torch.cond on it is tried with it, and the pair is kept."""
    proc, original, patched, diff = fix(tmp_path, PROBES, "probe_captured_cond")
    assert proc.returncode == 0 and "fix VERIFIED" in proc.stdout, proc.stdout[-4000:]
    assert "rewrite capture-scalar-outputs:" in proc.stdout and "kept together with line" in proc.stdout
    assert "rewrite torch-cond:" in proc.stdout
    got = oracle(original, patched, "probe_captured_cond")
    assert got["fullgraph"] == "ok" and got["outputs_equal"], got
