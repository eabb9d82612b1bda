"""``tracecheck fix`` for graph breaks in library code, applied from the user's side (issue 51; fix/library.py).

The library is tests/models/breakylib, installed into this environment as a real distribution (under
site-packages, not editable) with the patterns GraphMend's paper finds in Hugging Face models: a logger call
(``Logger.warning_once``, as transformers defines it), a longrope-style data-dependent branch in a nested function
of a decorator, a validation guard that raises, an ``.item()``. The oracles: plain torch in a fresh process (the
patched copy compiles with ``fullgraph=True``, forward and backward, equal to the unpatched library run eagerly,
where the branch is taken and where it is not), the library's files byte for byte, ``git apply`` of the upstream
diff, and literals written by hand for the pure parts.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from tracecheck.fix import library, rewrites, sourcetext
from tracecheck.fix.sourcetext import Site, Source

TESTS = Path(__file__).resolve().parent
LIBRARY = TESTS / "models" / "breakylib"
PROBES = TESTS / "models" / "breaky_probes.py"
ROPE = (LIBRARY / "src" / "breakylib" / "rope.py").read_text()
LAYERS = (LIBRARY / "src" / "breakylib" / "layers.py").read_text()


@pytest.fixture(scope="module")
def breakylib(tmp_path_factory) -> Path:
    """breakylib installed as a distribution (pip, not editable; built from a copy, so that no build folder is left
    in the repository), its source and installed files the same: the package folder under site-packages."""
    sources = {p.name: p.read_bytes() for p in (LIBRARY / "src" / "breakylib").glob("*.py")}

    def installed() -> Path | None:
        try:
            files = importlib.metadata.files("breakylib") or []
        except importlib.metadata.PackageNotFoundError:
            return None
        found = {Path(str(f.locate())).name: Path(str(f.locate())) for f in files if str(f).endswith(".py")}
        if set(found) != set(sources) or any(found[n].read_bytes() != b for n, b in sources.items()):
            return None
        return next(iter(found.values())).parent

    folder = installed()
    if folder is None:
        copy = tmp_path_factory.mktemp("breakylib") / "breakylib"
        shutil.copytree(LIBRARY, copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(copy)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode:  # (no setuptools to build with here: let pip fetch it)
            proc = subprocess.run([c for c in cmd if c != "--no-build-isolation"], capture_output=True, text=True,
                                  timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        importlib.invalidate_caches()
        folder = installed()
    assert folder is not None and "site-packages" in str(folder), folder
    return folder


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.py"))}


# ---- the pure parts ------------------------------------------------------------------------------------------------


def test_a_library_file_is_named_from_its_top_level_package(tmp_path):
    pkg = tmp_path / "site-packages" / "lib" / "models"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "t5.py").write_text("")
    assert library.label(str(pkg / "t5.py")) == "lib/models/t5.py"
    (tmp_path / "mine.py").write_text("")
    assert library.label(str(tmp_path / "mine.py"), str(tmp_path)) == "mine.py"


def test_the_function_that_holds_a_line_is_found_with_its_closure():
    import ast

    # rope.py: longrope_frequency_update is nested in the decorator dynamic_rope_update; it closes over nothing
    at = ROPE.splitlines().index("        if seq_len > self.original_max_position_embeddings:") + 1
    fn = library.function_at(ast.parse(ROPE), ROPE, at)
    assert (fn.name, fn.qualname, fn.free) == ("longrope_frequency_update",
                                               "dynamic_rope_update.longrope_frequency_update", ())
    assert fn.first == fn.start == ROPE.splitlines().index("    def longrope_frequency_update(self, position_ids, "
                                                           "device):") + 1
    # wrapper closes over longrope_frequency_update and rope_forward, and carries a decorator: its first line
    at = ROPE.splitlines().index("        return rope_forward(self, x, position_ids)") + 1
    fn = library.function_at(ast.parse(ROPE), ROPE, at)
    assert fn.name == "wrapper" and fn.free == ("longrope_frequency_update", "rope_forward")
    assert fn.first == fn.start - 1  # @wraps(rope_forward)
    # a line of a signature or of module-level code has no function to replace
    assert library.function_at(ast.parse(ROPE), ROPE, 1) is None


def test_swapped_code_reaches_every_way_the_library_looks_a_function_up(tmp_path):
    """A nested function in a closure's cell, a decorator's wrapped function, a method, a name imported elsewhere,
    and a nested function made after the swap: all run the rewritten code; the library's file is unchanged."""
    pkg = tmp_path / "swaplib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source = textwrap.dedent('''\
        import functools


        def deco(f):
            def inner(x):
                return f(x) + k
            k = 1
            return functools.wraps(f)(inner)


        @deco
        def base(x):
            return x * 2


        class C:
            def m(self, x):
                return x + 1


        class D(C):
            def m(self, x):
                return super().m(x) * 3
        ''')
    (pkg / "mod.py").write_text(source)
    (pkg / "lazy.py").write_text("def later_one(x):\n    return x - 1\n")  # imported by nothing before the swap
    (tmp_path / "user.py").write_text("from swaplib.mod import base, deco, C\n")
    rewritten = source.replace("return f(x) + k", "return f(x) + k + 100").replace("return x + 1", "return x + 10") \
        .replace("return super().m(x) * 3", "return super().m(x) * 5")
    import ast

    tree = ast.parse(source)
    inner = library.function_at(tree, source, source.splitlines().index("        return f(x) + k") + 1)
    method = library.function_at(tree, source, source.splitlines().index("        return x + 1") + 1)
    sub = library.function_at(tree, source, source.splitlines().index("        return super().m(x) * 3") + 1)
    assert inner.free == ("f", "k") and sub.free == ("__class__",)  # (zero-argument super() reads the class cell)
    lazy = "def later_one(x):\n    return x - 1\n"
    lazy_fn = library.function_at(ast.parse(lazy), lazy, 2)
    code = "import torch\n" + library.SWAP_HELPER + "\n\n" + "\n".join(
        library.block(fn, rewritten, fn.first, "swaplib/mod.py", "test", "x.diff")[0] for fn in (inner, method, sub)) + \
        "\n" + library.block(lazy_fn, lazy.replace("x - 1", "x - 2"), 1, "swaplib/lazy.py", "test", "x.diff")[0]
    check = textwrap.dedent('''\
        import sys
        sys.path.insert(0, sys.argv[1])
        import importlib.util
        import user
        import swaplib.mod as mod
        # another file whose path ends the same way, its C.m at the same line but another body: left alone
        spec = importlib.util.spec_from_file_location("decoy", sys.argv[1] + "/decoy/swaplib/mod.py")
        decoy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(decoy)
        import weakref
        class Gone:
            pass
        gone = Gone()
        dead = weakref.proxy(gone)  # a dead proxy among the collector's objects: its __class__ raises
        del gone
        exec(open(sys.argv[2]).read(), {"__name__": "patch"})
        exec(open(sys.argv[2]).read(), {"__name__": "patch"})  # twice (a block pasted beside the patched copy)
        later = mod.deco(lambda x: x - 1)
        import swaplib.lazy
        print(mod.base(3), user.base(3), mod.C().m(1), later(5), mod.D().m(1), swaplib.lazy.later_one(5),
              decoy.C().m(1))
        ''')
    (tmp_path / "decoy" / "swaplib").mkdir(parents=True)
    (tmp_path / "decoy" / "swaplib" / "mod.py").write_text(source.replace("return x + 1", "return x + 7"))
    (tmp_path / "patch.py").write_text(code)
    (tmp_path / "check.py").write_text(check)
    out = subprocess.run([sys.executable, str(tmp_path / "check.py"), str(tmp_path), str(tmp_path / "patch.py")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    # base(3) = 3 * 2 + 1 + 100; m(1) = 1 + 10; a deco made later: 5 - 1 + 1 + 100; D().m(1) = (1 + 10) * 5; a module
    # nothing had imported (a lazy package's): imported by the block, 5 - 2; the decoy's own C.m: 1 + 7
    assert out.stdout.split() == ["107", "107", "11", "105", "55", "3", "8"]
    assert (pkg / "mod.py").read_text() == source
    # the library edited since the fix was made (the same line, another body): the block refuses, never swaps
    (pkg / "lazy.py").write_text("def later_one(x):\n    return x - 3\n")
    out = subprocess.run([sys.executable, str(tmp_path / "check.py"), str(tmp_path), str(tmp_path / "patch.py")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "the library changed since the fix was made: regenerate it" in out.stderr


def test_a_library_site_gets_settings_in_the_probe_and_code_in_a_function_of_its_own():
    probe = Source("import torch\nfrom breakylib import TinyModel\n\n\ndef probe():\n    return TinyModel(), ()\n")
    logger_line = LAYERS.splitlines().index(
        '            logger.warning_once("Passing a tuple of past key values is deprecated; pass a Cache instead.")') + 1
    site = Site(logger_line, "graph-break", "logging.Logger method not supported for non-export cases", "",
                file="/x/site-packages/breakylib/layers.py")
    (cand, *_) = rewrites.candidates(probe, site, Source(LAYERS))
    assert cand.rewrite == "ignore-logging" and not cand.library
    assert sourcetext.apply(probe.text, cand.edits).endswith(
        "\n\nimport logging  # noqa: E402  (tracecheck fix)\ntorch._dynamo.config.ignore_logging_functions.add("
        "logging.Logger.warning_once)  # tracecheck fix: `.warning_once(...)` of a logging.Logger is a no-op while "
        "compiling (it logs in eager)\n")
    # a Logger method that returns a value (isEnabledFor) is never made a no-op: the code reads what it returns
    enabled = Site(logger_line, "graph-break", "logging.Logger method not supported for non-export cases", "",
                   file="/x/site-packages/breakylib/layers.py")
    asks = LAYERS.replace('logger.warning_once("Passing', 'logger.isEnabledFor(30) and print("Passing')
    assert "ignore-logging" not in {c.rewrite for c in rewrites.candidates(probe, enabled, Source(asks))}
    # the same logger call in the probe's own file keeps its exact rewrite (no setting for the whole process)
    assert "ignore-logging" not in {c.rewrite for c in rewrites.candidates(Source(LAYERS), Site(
        logger_line, "graph-break", "logging.Logger method not supported for non-export cases", ""))}
    branch = ROPE.splitlines().index("        if seq_len > self.original_max_position_embeddings:") + 1
    site = Site(branch, "data-dependent", "Data-dependent branching", "", file="/x/site-packages/breakylib/rope.py")
    cands = {c.rewrite: c for c in rewrites.candidates(probe, site, Source(ROPE))}
    assert "compile-guard" not in cands and "branchless" not in cands  # (no input of the probe judges them)
    select = cands["select"]
    assert select.function.name == "longrope_frequency_update" and not [e for e in select.edits
                                                                         if "import torch" not in e.text]
    assert sourcetext.apply(ROPE, select.library) == ROPE.replace(
        "        if seq_len > self.original_max_position_embeddings:\n"
        "            if not hasattr(self, \"long_inv_freq\"):\n"
        "                self.long_inv_freq = self.original_inv_freq / self.long_factor\n"
        "            self.register_buffer(\"inv_freq\", self.long_inv_freq, persistent=False)\n"
        "        else:\n"
        "            self.original_inv_freq = self.original_inv_freq.to(device)\n"
        "            self.register_buffer(\"inv_freq\", self.original_inv_freq, persistent=False)\n",
        "        _tc_pred = seq_len > self.original_max_position_embeddings  # tracecheck fix: both branches run, "
        "torch.where picks (was `if seq_len > self.original_max_position_embeddings:`)\n"
        "        if not hasattr(self, \"long_inv_freq\"):\n"
        "            self.long_inv_freq = self.original_inv_freq / self.long_factor\n"
        "        self.original_inv_freq = self.original_inv_freq.to(device)\n"
        "        _tc_then, _tc_else = self.long_inv_freq, self.original_inv_freq\n"
        "        torch._check(_tc_then.shape == _tc_else.shape and _tc_then.dtype == _tc_else.dtype, lambda: "
        "'tracecheck fix: the two sides of the if at line 15 differ in shape or dtype')\n"
        "        self.register_buffer(\"inv_freq\", torch.where(_tc_pred, _tc_then, _tc_else), persistent=False)\n")


def test_select_runs_the_other_side_only_where_nothing_can_see_it():
    """Both sides' statements run for every input: only temporaries, an attribute filled once (hasattr) or given its
    own value converted may; a name bound before or read after, an item or in-place change of something the caller
    holds, a call run for its effect, an attribute set on both sides: refused (the bad-input tester's repros)."""
    def site_of(text: str) -> Site:
        return Site(text.splitlines().index("    if x.sum() > 0:") + 1, "data-dependent", "Data-dependent branching", "")

    def proposed(text: str) -> bool:
        return "select" in {c.rewrite for c in rewrites.candidates(Source(text), site_of(text))}

    refused = {
        "a name bound before, read after": "def f(x):\n    scale = 1.0\n    if x.sum() > 0:\n        scale = 2.0\n"
                                           "        y = x * 1.0\n    else:\n        y = x * 2.0\n    return y * scale\n",
        "an item of the caller's tensor": "def f(x, state):\n    if x.sum() > 0:\n        state[0] = 100.0\n"
                                          "        y = x * 1.0\n    else:\n        y = x * 2.0\n    return y\n",
        "an in-place op": "def f(x):\n    if x.sum() > 0:\n        t = x.add_(1)\n        y = t * 1.0\n    else:\n"
                          "        y = x * 2.0\n    return y\n",
        "a call run for its effect": "def f(x, s):\n    if x.sum() > 0:\n        s.log.append(1)\n        y = x\n"
                                     "    else:\n        y = x * 2.0\n    return y\n",
        "an attribute set, not cached": "def f(x, s):\n    if x.sum() > 0:\n        s.mode = 1\n        y = x\n"
                                        "    else:\n        y = x * 2.0\n    return y\n",
    }
    for why, text in refused.items():
        assert not proposed("import torch\n\n" + text), why
    ok = ("import torch\n\ndef f(x, s):\n    if x.sum() > 0:\n        t = x * 2\n        if not hasattr(s, \"big\"):\n"
          "            s.big = t.abs() + 1\n        y = x / s.big\n    else:\n        s.small = s.small.to(x.device)\n"
          "        y = x / s.small\n    return y\n")
    assert proposed(ok)
    cand = next(c for c in rewrites.candidates(Source(ok), site_of(ok)) if c.rewrite == "select")
    assert "`s.big`, `s.small` now set for every input (filled once, or given its own value converted)" in cand.note
    # two sides of another shape: the select refuses them at run time, where torch.where would broadcast
    shapes = "import torch\n\ndef f(x):\n    if x.sum() > 0:\n        y = x * 1.0\n    else:\n        y = x.mean(0)\n" \
             "    return y\n"
    cand = next(c for c in rewrites.candidates(Source(shapes), site_of(shapes)) if c.rewrite == "select")
    namespace: dict = {}
    exec(sourcetext.apply(shapes, cand.edits), namespace)
    import torch

    with pytest.raises(RuntimeError, match="differ in shape or dtype"):
        namespace["f"](torch.ones(4, 4))


def test_a_library_break_is_routed_to_fix_by_its_gb_type(tmp_path):
    from tracecheck.model.report import Finding
    from tracecheck.model.taxonomy import rewrites_model_code

    lib = tmp_path / "lib.py"
    lib.write_text("import os\n\ndef f(x):\n    os.path.isdir('.')\n    return x\n")

    def finding(kind: str, gb_type: str) -> Finding:
        return Finding(kind, "", {"gb_type": gb_type}, {"gb_type": gb_type,
                                                        "user_frame": {"file": str(lib), "line": 4, "code": ""}})

    probe = str(tmp_path / "model.py")
    assert rewrites_model_code(finding("graph-break", "logging.Logger method not supported for non-export cases"),
                               probe)
    assert rewrites_model_code(finding("data-dependent", "Data-dependent branching"), probe)
    # a loader's os.path.isdir (gb_type 'Attempted to call function marked as skipped'): no setting or rewrite
    assert not rewrites_model_code(finding("graph-break", "Attempted to call function marked as skipped"), probe)


# ---- end to end -----------------------------------------------------------------------------------------------------

ORACLE = '''
import importlib.util, sys, torch
sys.path.insert(0, sys.argv[1])
import breaky_probes
from breakylib import TinyModel

def run(model, compiled, seq):
    torch.manual_seed(0)
    ids, mask = breaky_probes.inputs(seq)
    fn = torch.compile(model, backend="aot_eager", fullgraph=True) if compiled else model
    out = fn(ids, mask)
    grads = torch.autograd.grad(out.sum(), list(model.parameters()), allow_unused=True)
    return out.detach(), [g for g in grads if g is not None]

def model():
    torch.manual_seed(0)
    return TinyModel(legacy_cache=True, scaled=True)

# the library as installed, eagerly: short sequences (8) and long ones (24 > 16: longrope's other branch)
want = {seq: run(model(), False, seq) for seq in (8, 24)}
spec = importlib.util.spec_from_file_location("patched", sys.argv[2])
spec.loader.exec_module(importlib.util.module_from_spec(spec))  # swaps the library's functions' code
result = {}
for seq in (8, 24):
    out, grads = run(model(), True, seq)
    torch.testing.assert_close(out, want[seq][0])
    for a, b in zip(grads, want[seq][1]):
        torch.testing.assert_close(a, b)
    result[seq] = "ok"
# the guard: compiled, a graph assert; eager, the library's own ValueError
ids, mask = breaky_probes.inputs(8)
bad = mask.clone(); bad[0, 0] = 2.0
compiled = torch.compile(model(), backend="aot_eager", fullgraph=True)
try:
    compiled(ids, bad); result["compiled_guard"] = "no error"
except RuntimeError as e:
    result["compiled_guard"] = str(e).splitlines()[0]
try:
    model()(ids, bad); result["eager_guard"] = "no error"
except ValueError as e:
    result["eager_guard"] = str(e)
import json; print(json.dumps(result))
'''


@pytest.mark.slow
def test_breaks_in_an_installed_library_are_fixed_from_the_users_side(tmp_path, breakylib):
    before = _digest(breakylib)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(PROBES, work / PROBES.name)
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "fix", f"{PROBES.name}::probe_all", "--diff",
                           "fix.diff", "-j", "2"], capture_output=True, text=True, cwd=work, timeout=1500,
                          env={**os.environ, "COLUMNS": "200"})
    out = proc.stdout
    assert proc.returncode == 0 and "fix VERIFIED" in out, out[-5000:] + proc.stderr[-2000:]
    # per break, the fix that removed it: torch's setting where the gb_type has one, else the function rewritten
    for rewrite in ("ignore-logging", "graph-assert", "select", "capture-scalar-outputs"):
        assert f"rewrite {rewrite}:" in out, out[-5000:]
    assert _digest(breakylib) == before  # nothing under site-packages changed
    # how to apply it: the setting after the imports, the functions' blocks, or the upstream diff
    assert "every change at once, in breaky_probes.py: git apply fix.diff" in out
    assert "or by hand, after your imports: torch._dynamo.config.capture_scalar_outputs = True; " \
           "torch._dynamo.config.ignore_logging_functions.add(logging.Logger.warning_once)" in out
    # the upstream diff is named after the patched copy (another probe's fix never overwrites it)
    assert "upstream: apply breaky_probes.breakylib.upstream.diff to breakylib's source" in out
    # plain torch, in a fresh process: one graph (fullgraph=True) forward and backward, equal to the library's eager
    # results on both sides of its longrope branch; the guard still refuses a bad mask, compiled and eager
    oracle = subprocess.run([sys.executable, "-c", ORACLE, str(TESTS / "models"), str(work / "breaky_probes_fixed.py")],
                            capture_output=True, text=True, timeout=900, cwd=work)
    assert oracle.returncode == 0, oracle.stderr[-4000:]
    got = json.loads(oracle.stdout.strip().splitlines()[-1])
    assert got == {"8": "ok", "24": "ok", "compiled_guard": "attention mask must hold 0 and 1 only",
                   "eager_guard": "attention mask must hold 0 and 1 only"}, got
    # the upstream diff applies to the library's own source tree, and the result is valid Python
    tree = tmp_path / "upstream"
    shutil.copytree(LIBRARY / "src", tree)
    apply = subprocess.run(["git", "apply", str(work / "breaky_probes.breakylib.upstream.diff")], cwd=tree,
                           capture_output=True,
                           text=True)
    assert apply.returncode == 0, apply.stderr
    for name in ("rope.py", "layers.py"):
        text = (tree / "breakylib" / name).read_text()
        compile(text, name, "exec")
        assert "tracecheck fix" in text
    # the probe's diff applies to the user's file and gives the patched copy without its prelude
    applied = tmp_path / "applied"
    applied.mkdir()
    shutil.copy(PROBES, applied / PROBES.name)
    run = subprocess.run(["git", "apply", str(work / "fix.diff")], cwd=applied, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "_tc_swap_code(" in (applied / PROBES.name).read_text()


def test_the_copy_maps_a_library_line_to_its_rewritten_line_whatever_the_signature(tmp_path):
    """The block writes the signature on one line (no annotations, defaults None) and keeps the body's numbering: a
    library line maps to the copy's line that holds its rewrite, which is where the stages look for Dynamo still
    stopping."""
    from tracecheck.fix.copies import Copies, Patch

    lib = tmp_path / "site-packages" / "siglib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    text = textwrap.dedent('''\
        import torch
        from typing import Optional


        def check(
            mask: torch.Tensor,
            strict: Optional[bool] = None,
        ) -> None:
            # the mask holds 0 and 1 only
            if not torch.equal(mask, (mask > 0).to(mask.dtype)):
                raise ValueError("mask must hold 0 and 1")
        ''')
    (lib / "checks.py").write_text(text)
    probe = tmp_path / "model.py"
    probe.write_text("import torch\nimport siglib.checks\n\n\ndef probe():\n    return siglib.checks.check, ()\n")
    site = Site(10, "data-dependent", "Data dependent operator", "", file=str(lib / "checks.py"))
    copies = Copies(str(probe), probe.read_text())
    (cand,) = [c for c in rewrites.candidates(Source(probe.read_text()), site, copies.library(site.file))
               if c.rewrite == "graph-assert"]
    patch = Patch().with_(cand, site.file)
    runnable, _, lib_line = copies.runnable(patch, str(tmp_path / "model_fixed.py"))
    lines = runnable.splitlines()
    at = lib_line(site.file, sourcetext.new_span(patch.lib_edits(site.file), 10, 10)[0])
    assert lines[at - 1].strip() == "if torch.compiler.is_compiling():  # tracecheck fix: the check stays in the graph " \
                                    "as an assert"
    assert "    def check(mask, strict=None):" in lines  # (Optional is the library's name, not the probe's)
    compile(runnable, "model_fixed.py", "exec")


@pytest.mark.slow
def test_a_module_beside_the_probe_is_fixed_from_the_probe_and_a_setting_covers_every_site(tmp_path, breakylib):
    """A module of the user's beside the probe (not installed) with two `logger.warning_once` calls: the first gets
    torch's setting, which takes the second away too (said so, not tried again: it read "the graph breaks did not
    go down (1 -> 1)" and called the fix not verified); the module itself is not edited; plain torch compiles the
    patched probe with fullgraph=True, forward and backward, equal to eager."""
    (tmp_path / "helpers.py").write_text(textwrap.dedent('''\
        import logging

        logger = logging.getLogger(__name__)


        def first(x):
            logger.warning_once("first stage is experimental")
            return x.sin()


        def second(x):
            logger.warning_once("second stage is experimental")
            return x.cos()
        '''))
    (tmp_path / "model.py").write_text(textwrap.dedent('''\
        import torch
        import breakylib  # noqa: F401  (defines logging.Logger.warning_once, as transformers does)
        from helpers import first, second


        def probe():
            return (lambda x: second(first(x)) * 2), (torch.randn(4, 3, requires_grad=True),)
        '''))
    before = (tmp_path / "helpers.py").read_text()
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "fix", "model.py::probe", "--diff", "fix.diff"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900, env={**os.environ, "COLUMNS": "200"})
    out = proc.stdout
    assert proc.returncode == 0 and "fix VERIFIED" in out, out[-4000:] + proc.stderr[-2000:]
    assert "rewrite ignore-logging: gone with the rewrites kept before it (the last: line 7's ignore-logging)" in out
    assert (tmp_path / "helpers.py").read_text() == before
    check = textwrap.dedent('''
        import importlib.util, sys, torch
        sys.path.insert(0, ".")
        import breakylib, helpers  # (breakylib defines Logger.warning_once)
        x = torch.randn(4, 3, requires_grad=True)
        want = helpers.second(helpers.first(x)) * 2
        spec = importlib.util.spec_from_file_location("patched", "model_fixed.py")
        m = sys.modules["patched"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        fn, _ = m.probe()
        got = torch.compile(fn, backend="aot_eager", fullgraph=True)(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), x)[0], torch.autograd.grad(want.sum(), x)[0])
        print("OK")
    ''')
    got = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert got.returncode == 0 and got.stdout.strip().endswith("OK"), got.stderr[-3000:]
