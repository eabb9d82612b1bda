"""The standalone reproducer ``tracecheck repro`` writes: one script, plain torch, no tracecheck import.

The script is the probe file verbatim (a stand-in ``tracecheck`` module when the file imports it, so that
``@tracecheck.probe`` and ``tracecheck.Case`` still mean what they did), then the call tracecheck diagnosed,
seeded as the stages seed it, run the way the stage runs it. It ends with the failure uncaught, as an upstream
issue wants. Pure text: no torch import here.
"""
from __future__ import annotations

import ast
import os

from ..stages import REGISTRY
from .prelude import read_source, source_lines

#: a line of every script ``tracecheck repro`` writes: only such a file is overwritten
REPRO_MARK = "# ---- written by tracecheck repro ----"
#: the stages a script can be written for, and the statements it runs for each (``StageSpec.repro``)
STAGE_CALLS = {name: spec.repro for name, spec in REGISTRY.items() if spec.repro}

_HELPERS = '''
import random as _repro_random

import torch
from torch.utils import _pytree as _repro_pytree


def _repro_seed():
    """tracecheck seeds torch, random and NumPy before every run."""
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


def script(probe_file: str, probe: str, stage: str, expected: dict[str, str], torch_version: str,
           sibling_imports: bool, name: str = "repro.py") -> str:
    """The reproducer's text. ``expected``: ``kind``, ``exception_type``, ``gb_type``, ``message`` of the finding;
    ``sibling_imports``: the probe file imports modules next to it (the script puts its folder on sys.path)."""
    source = read_source(probe_file)
    tree = ast.parse(source)
    lines = source_lines(source)
    future, edits, drop = [], [], set()
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future.append(ast.unparse(node))  # first in the script; `pass` keeps the line (and any `; x` after it)
            edits.append((node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0))
        elif isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            drop.update(range(node.lineno, end + 1))  # the file's own script part does not run here
    for first, start, last, stop in edits:  # (a parenthesised import spans lines: its others become blank)
        head, tail = lines[first - 1].encode("utf-8")[:start], lines[last - 1].encode("utf-8")[stop:]
        for i in range(first, last):
            lines[i] = ""
        lines[first - 1] = (head + b"pass" + tail).decode("utf-8")
    body = "\n".join(line for i, line in enumerate(lines, 1) if i not in drop)
    imports_tracecheck = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
        (a.name if isinstance(n, ast.Import) else (n.module or "")).split(".")[0] == "tracecheck" for a in n.names)
        for n in ast.walk(tree))
    want = expected.get("exception_type") or ""
    gb = expected.get("gb_type") or ""
    head = [
        f'"""Reproducer of a {expected.get("kind", "?")} finding: {os.path.basename(probe_file)}::{probe}, '
        f'stage {stage}.',
        "",
        f"Written by `tracecheck repro` with torch {torch_version}. Plain torch: run it with python.",
        '"""',
        "# Expected: it raises " + (want or "a graph break") + (f" (gb_type '{gb}')" if gb else ""),
    ]
    if expected.get("message"):  # a comment: a message may hold backslashes or quotes that a docstring would not
        head.append("# First line of the message: " + expected["message"].splitlines()[0])
    if sibling_imports:
        head.append(f"# The probe file imports modules from its folder ({os.path.dirname(os.path.abspath(probe_file))}), "
                    "which this script puts on sys.path: attach them too.")
    out = head + future + [REPRO_MARK, "import sys as _repro_sys", "import types as _repro_types", ""]
    if sibling_imports:
        out.append(f"_repro_sys.path.insert(0, {os.path.dirname(os.path.abspath(probe_file))!r})")
    if imports_tracecheck:
        out.append(_SHIM)
    out += [f"# ---- {os.path.basename(probe_file)}, verbatim ----", body.rstrip("\n"), "",
            f"# ---- the call tracecheck diagnosed ({probe}), under the {stage} stage ----",
            _HELPERS.format(probe=probe).strip("\n"), "",
            STAGE_CALLS[stage].replace("{op!r}", repr(expected.get("op", ""))), ""]
    return "\n".join(out)
