"""The standalone reproducer ``tracecheck repro`` writes: one script, plain torch, no tracecheck import.

The script is what the probe's call needs from the probe file (prune.py: the statements the probe function reaches,
found with ``ast`` and ``symtable``, plus the ones that register its ops), or the whole file when that cannot be
told (``build(minimal=False)``), with a stand-in ``tracecheck`` module when the kept code imports it, so that
``@tracecheck.probe`` and ``tracecheck.Case`` still mean what they did. Then the call tracecheck diagnosed, seeded
as the stages seed it, run the way the stage runs it, with only the helpers that stage needs. It ends with the
failure uncaught, as an issue wants. Pure text: no torch import here.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ..model.taxonomy import K
from ..stages import REGISTRY
from .prelude import read_source, source_lines
from .prune import needed_code, prune, render, role_of, scope_names, scope_reads, units_of

#: a line of every script ``tracecheck repro`` writes: only such a file is overwritten
REPRO_MARK = "# ---- written by tracecheck repro ----"
#: the stages a script can be written for, and the statements it runs for each (``StageSpec.repro``)
STAGE_CALLS = {name: spec.repro for name, spec in REGISTRY.items() if spec.repro}
#: an explain stage that raised (an error, not a graph break) is run as the stage runs it: the stage's own call runs
#: ``fullgraph=True`` first, which stops at any earlier graph break with another error
RAISED_EXPLAIN = ("# the explain stage: torch._dynamo.explain on the probe's first call, forward only\n"
                  "torch._dynamo.explain(_repro_fn)(*_repro_args, **_repro_kwargs)")

_HELPERS = '''
import random as _repro_random

import torch
from torch.utils import _pytree as _repro_pytree


def _repro_seed():  # tracecheck seeds torch, random and NumPy before every run
    torch.manual_seed(0)
    _repro_random.seed(0)
    if "numpy" in _repro_sys.modules:
        _repro_sys.modules["numpy"].random.seed(0)


def _repro_case():
    _repro_seed()
    value = {probe}()
    if isinstance(value, tuple):  # (fn, args[, kwargs])
        return value[0], tuple(value[1]), dict(value[2] if len(value) > 2 else {{}}), None
    return value.fn, tuple(value.args), dict(value.kwargs or {{}}), value.grad


def _repro_loss(out, grad):
    """The loss tracecheck backpropagates: Case.grad(outputs), else the sum of the floating outputs."""
    if callable(grad):
        return grad(out)
    leaves = [t for t in _repro_pytree.tree_leaves(out)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    return sum(t.float().sum() for t in leaves) if leaves else None


def _repro_step(fn, backward=True, reseed=True):
    """The probe's call (and its backward, where something requires grad)."""
    global _repro_args, _repro_kwargs, _repro_grad
    if reseed:
        _repro_seed()
    out = fn(*_repro_args, **_repro_kwargs)
    loss = _repro_loss(out, _repro_grad) if backward and _repro_grad is not False else None
    if loss is not None:
        loss.backward()
    return out


def _repro_targets(fn):
    """The leaves whose gradients are compared: inputs that require grad, then the module's parameters."""
    leaves = [t for t in _repro_pytree.tree_leaves((_repro_args, _repro_kwargs)) if isinstance(t, torch.Tensor)
              and t.requires_grad and t.is_leaf]
    return leaves + (list(fn.parameters()) if isinstance(fn, torch.nn.Module) else [])


def _repro_run_for_grads(fn, call):
    for t in _repro_targets(fn):
        t.grad = None  # a probe may hand out the same module twice: compare this backward's gradients only
    out = _repro_step(call)
    return out, [t.grad for t in _repro_targets(fn)]


def _repro_compare(compiled):
    """Compiled forward and backward against a fresh eager run of the same call (torch.testing.assert_close's
    tolerances: tracecheck judges against a float64 reference, so a borderline mismatch may pass here)."""
    global _repro_fn, _repro_args, _repro_kwargs, _repro_grad
    got = _repro_run_for_grads(_repro_fn, compiled)
    _repro_fn, _repro_args, _repro_kwargs, _repro_grad = _repro_case()
    want = _repro_run_for_grads(_repro_fn, _repro_fn)
    torch.testing.assert_close(got[0], want[0])  # outputs; a numeric mismatch raises here
    torch.testing.assert_close(got[1], want[1])  # gradients


class _ReproWrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


_repro_fn, _repro_args, _repro_kwargs, _repro_grad = _repro_case()
'''

_SHIM = '''# a stand-in for tracecheck's two probe names (tracecheck.probe, tracecheck.Case): this script needs only torch
class _ReproCase:
    def __init__(self, fn, args, kwargs=None, grad=None):
        self.fn, self.args, self.kwargs, self.grad = fn, tuple(args), dict(kwargs or {}), grad


_repro_sys.modules["tracecheck"] = _repro_types.SimpleNamespace(probe=lambda fn: fn, Case=_ReproCase)
'''

# ---- the script ------------------------------------------------------------------------------------------------


@dataclass
class Script:
    """``text``; ``pruned``: the probe file was cut to what the call needs (``kept_lines`` of ``total_lines``)."""

    text: str
    pruned: bool
    kept_lines: int
    total_lines: int


def _bare(fn: str) -> str:
    return f"_repro_seed()\n{fn}(*_repro_args, **_repro_kwargs)"


def _step(node: ast.stmt, call: str) -> tuple[str, str, bool] | None:
    """A statement ``_repro_step(fn[, backward=False])`` or ``_repro_compare(fn)``: (helper, fn's source, backward)."""
    step = node.value if isinstance(node, ast.Expr) else None
    if not (isinstance(step, ast.Call) and isinstance(step.func, ast.Name) and len(step.args) == 1
            and step.func.id in ("_repro_step", "_repro_compare")):
        return None
    keywords = {k.arg: ast.literal_eval(k.value) for k in step.keywords if isinstance(k.value, ast.Constant)}
    if len(keywords) != len(step.keywords) or set(keywords) - {"backward"}:
        return None
    return step.func.id, ast.get_source_segment(call, step.args[0]) or "", keywords.get("backward", True)


def stage_call(stage: str, expected: dict[str, str]) -> str:
    """The statements that run ``stage`` on the call: the stage's own (``StageSpec.repro``), less what needs helpers
    the failure makes moot. A forward-only ``_repro_step(fn, backward=False)`` is the bare call ``fn(*args)``. For
    an exception: one raised in the forward needs no backward, and none the comparison with eager it never reached,
    so ``_repro_step(fn)``/``_repro_compare(fn)`` become ``fn(*args)``, or ``_repro_step(fn)``; an explain stage
    that raised runs explain alone (RAISED_EXPLAIN)."""
    # the op as torch prints it (`str(op.overloadpacket)`: ns.name), not as a report names it (ns::name)
    call = STAGE_CALLS[stage].replace("{op!r}", repr(expected.get("op", "").replace("::", ".")))
    raised = bool(expected.get("exception_type")) and expected.get("kind") != K.NUMERIC_MISMATCH
    if raised and stage == "explain":
        return RAISED_EXPLAIN
    lines = call.splitlines()
    body = ast.parse(call).body
    for node in reversed(body):
        found = _step(node, call)
        if found is None or node.lineno != node.end_lineno:
            continue
        helper, fn, backward = found
        if helper == "_repro_step" and not backward:
            lines[node.lineno - 1] = _bare(fn)
        elif raised and len(body) == 1 and expected.get("phase") == "forward":
            lines = [f"# the {stage} stage, which raised in the forward (its backward never ran)", _bare(fn)]
        elif raised and len(body) == 1 and helper == "_repro_compare":
            lines = [f"# the {stage} stage, which raised before it compared anything with eager", f"_repro_step({fn})"]
    return "\n".join(lines)


def _helpers(probe: str, call: str, user_nodes: list[ast.stmt]) -> str:
    """The helpers ``call`` reads, and the ones those read (not ``import torch`` again after the file's own)."""
    text = _HELPERS.format(probe=probe)
    reads: set[str] = set()
    for node in ast.parse(call).body:
        scope_names(node, reads, set())
    reads.update(*(names for _, names in scope_reads(call)))
    units, kept = prune(text, reads & set().union(*(u.defines for u in units_of(text, ast.parse(text)))),
                        effects=False) or ([], set())
    had = {ast.unparse(n) for n in user_nodes if isinstance(n, (ast.Import, ast.ImportFrom))}
    kept = {i for i in kept if not (units[i].role == "import" and {ast.unparse(n) for n in units[i].stmts} <= had)}
    return "\n".join(render(source_lines(text), units, kept))


def _imports_siblings(probe_file: str, nodes: list[ast.stmt]) -> bool:
    """Does the code import a module that lives next to the probe file (``import mhc`` beside ``mhc/``)?"""
    here = os.path.dirname(os.path.abspath(probe_file))
    names: set[str] = set()
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return any(os.path.exists(os.path.join(here, n + ".py")) or os.path.isdir(os.path.join(here, n)) for n in names)


def script(probe_file: str, probe: str, stage: str, expected: dict[str, str], torch_version: str,
           sibling_imports: bool, name: str = "repro.py") -> str:
    """The reproducer's text, with the whole probe file (``build`` for the minimal one)."""
    return build(probe_file, probe, stage, expected, torch_version, sibling_imports, name, minimal=False).text


def build(probe_file: str, probe: str, stage: str, expected: dict[str, str], torch_version: str,
          sibling_imports: bool, name: str = "repro.py", minimal: bool = True, stage_note: str = "",
          whose: str = "") -> Script:
    """The reproducer. ``expected``: ``kind``, ``exception_type``, ``gb_type``, ``message``, ``op`` of the finding;
    ``sibling_imports``: the probe file imports modules next to it (the script puts its folder on sys.path);
    ``minimal``: only what the call needs from the file (the whole file where that cannot be told); ``stage_note``:
    why this stage (``the first failing stage``); ``whose``: whose code the evidence blames, one line."""
    source = read_source(probe_file)
    tree = ast.parse(source)
    lines = source_lines(source)
    base = os.path.basename(probe_file)
    future = [ast.unparse(n) for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    cut = needed_code(probe_file, probe) if minimal else None
    if cut is not None:
        body, nodes = cut.text, cut.nodes
        title = f"# ---- {base}: only what {probe}'s call needs ({cut.kept_lines} of {cut.total_lines} lines) ----"
        sibling_imports = sibling_imports and _imports_siblings(probe_file, nodes)
    else:
        body, nodes = _verbatim(tree, lines), tree.body
        title = f"# ---- {base}, verbatim ----"
    imports_tracecheck = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
        (a.name if isinstance(n, ast.Import) else (n.module or "")).split(".")[0] == "tracecheck" for a in n.names)
        for top in nodes for n in ast.walk(top))
    want = expected.get("exception_type") or ""
    gb = expected.get("gb_type") or ""
    head = [
        f'"""Reproducer of a {expected.get("kind", "?")} finding: {base}::{probe}, stage {stage}'
        + (f" ({stage_note})." if stage_note else "."),
        "",
        f"Written by `tracecheck repro` with torch {torch_version}. Plain torch: run it with python.",
        '"""',
        "# Expected: it raises " + (want or "a graph break") + (f" (gb_type '{gb}')" if gb else ""),
    ]
    if expected.get("message"):  # a comment: a message may hold backslashes or quotes that a docstring would not
        head.append("# First line of the message: " + expected["message"].splitlines()[0])
    if whose:
        head.append("# Whose bug: " + whose)
    if sibling_imports:
        head.append(f"# The probe file imports modules from its folder ({os.path.dirname(os.path.abspath(probe_file))}), "
                    "which this script puts on sys.path: attach them too.")
    out = head + future + [REPRO_MARK, "import sys as _repro_sys"]
    if imports_tracecheck:
        out.append("import types as _repro_types")
    out.append("")
    if sibling_imports:
        out.append(f"_repro_sys.path.insert(0, {os.path.dirname(os.path.abspath(probe_file))!r})")
    if imports_tracecheck:
        out.append(_SHIM)
    call = stage_call(stage, expected)
    out += [title, body.rstrip("\n"), "",
            f"# ---- the call tracecheck diagnosed ({probe}), as its {stage} stage runs it ----",
            _helpers(probe, call, nodes).strip("\n"), "", call, ""]
    text = "\n".join(out)
    return Script(text, cut is not None, cut.kept_lines if cut else len(lines), len(lines))


def _verbatim(tree: ast.Module, lines: list[str]) -> str:
    """The whole file, less its ``__main__`` block; its ``__future__`` imports become ``pass`` (the script puts
    them first)."""
    lines = list(lines)
    edits: list[tuple[int, int, int, int]] = []
    drop: set[int] = set()
    for i, node in enumerate(tree.body):
        end = node.end_lineno or node.lineno
        role = role_of(node, i)
        if role == "future":  # `pass` keeps the line (and any `; x` after it)
            edits.append((node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0))
        elif role == "main":
            drop.update(range(node.lineno, end + 1))
    for first, start, last, stop in edits:  # (a parenthesised import spans lines: its others become blank)
        head, tail = lines[first - 1].encode("utf-8")[:start], lines[last - 1].encode("utf-8")[stop:]
        for i in range(first, last):
            lines[i] = ""
        lines[first - 1] = (head + b"pass" + tail).decode("utf-8")
    return "\n".join(line for i, line in enumerate(lines, 1) if i not in drop)
