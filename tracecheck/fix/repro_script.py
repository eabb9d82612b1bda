"""The standalone reproducer ``tracecheck repro`` writes: one script, plain torch, no tracecheck import.

The script is what the probe's call needs from the probe file (``prune``: the statements the probe function reaches,
found with ``ast`` and ``symtable``, plus the ones that register its ops), or the whole file when that cannot be
told (``build(minimal=False)``), with a stand-in ``tracecheck`` module when the kept code imports it, so that
``@tracecheck.probe`` and ``tracecheck.Case`` still mean what they did. Then the call tracecheck diagnosed, seeded
as the stages seed it, run the way the stage runs it, with only the helpers that stage needs. It ends with the
failure uncaught, as an issue wants. Pure text: no torch import here.
"""
from __future__ import annotations

import ast
import builtins
import os
import re
import symtable
import sys
from dataclasses import dataclass, field

from ..model.taxonomy import K
from ..stages import REGISTRY
from .prelude import read_source, source_lines

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

# ---- what the probe's call needs ------------------------------------------------------------------------------

#: "ns::name", "ns::name.overload", "ns::name(Tensor x) -> Tensor": a custom op's qualified name
_OP = re.compile(r"^\s*(\w+)::(\w+)")
#: names whose reads make the kept set unknowable: the code looks names up by string
_DYNAMIC = frozenset({"globals", "vars", "eval", "exec", "__import__"})
_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__"}
#: modules whose top-level use sets up the process (``os.environ[...] = ...``, ``sys.path.insert``): kept with the
#: rest of the set-up even where nothing else reads them
_PROCESS = ("os", "sys")
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass
class _Unit:
    """Top-level statements that share lines (``a = 1; b = 2``): kept or dropped together."""

    stmts: list[ast.stmt]
    first: int
    last: int
    #: future, main (``if __name__ == "__main__"``), doc, import, def, bind (names assigned), block, effect
    role: str
    decorated: bool = False
    defines: set[str] = field(default_factory=set)
    #: module-level names read, by the statement itself and by the functions and classes it defines
    reads: set[str] = field(default_factory=set)
    #: custom ops the statement names (``"ns::name"``, ``torch.ops.ns.name``, a Library's define/impl,
    #: ``op.register_*``)
    ops: set[str] = field(default_factory=set)
    #: an import cut to the names kept code reads (written with ast.unparse)
    narrowed: bool = False
    #: what the statement reads and names for its effect: a def's or class's decorators (its body runs when called,
    #: if at all), else the same as ``reads`` and ``ops``
    effect_reads: set[str] = field(default_factory=set)
    effect_ops: set[str] = field(default_factory=set)


@dataclass
class Pruned:
    """What ``prune`` keeps of a probe file: ``text`` (its lines, as the file has them but for narrowed imports),
    ``kept_lines`` of the file's ``total_lines``, and the top-level nodes kept."""

    text: str
    kept_lines: int
    total_lines: int
    nodes: list[ast.stmt]


def _scope_names(node: ast.AST, reads: set[str], stores: set[str]) -> None:
    """The names ``node`` reads and binds in the scope it runs in. The bodies of the functions, classes and lambdas
    it defines are their own scopes (symtable gives their module-level reads); a comprehension's variables are its."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        stores.add(node.name)
        parts: list = [*node.decorator_list, node.args, node.returns]
    elif isinstance(node, ast.ClassDef):
        stores.add(node.name)
        parts = [*node.decorator_list, *node.bases, *node.keywords]
    elif isinstance(node, ast.Lambda):
        parts = [node.args]
    elif isinstance(node, _COMPREHENSIONS):
        inner: set[str] = set()
        targets: set[str] = set()
        for gen in node.generators:
            _scope_names(gen.target, inner, targets)
            for part in (gen.iter, *gen.ifs):
                _scope_names(part, inner, targets)
        for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
            _scope_names(part, inner, targets)
        reads.update(inner - targets)
        return
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        stores.update(a.asname or a.name.split(".")[0] for a in node.names)
        return
    elif isinstance(node, ast.Name):
        (reads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
        return
    else:
        parts = list(ast.iter_child_nodes(node))
    for part in parts:
        if part is not None:
            _scope_names(part, reads, stores)


def _scope_reads(source: str) -> list[tuple[int, set[str]]]:
    """(line, module-level names read) of every function, class, lambda and comprehension scope of the file."""
    out = []

    def walk(table: symtable.SymbolTable) -> None:
        for child in table.get_children():
            out.append((child.get_lineno(), {s.get_name() for s in child.get_symbols() if s.is_global()}))
            walk(child)

    walk(symtable.symtable(source, "<probe>", "exec"))
    return out


def _op_name(text: str) -> str | None:
    m = _OP.match(text)
    return f"{m.group(1)}::{m.group(2)}" if m else None


def _libraries(tree: ast.Module) -> dict[str, str]:
    """Module-level ``lib = torch.library.Library("ns", ...)``: name -> namespace."""
    libs = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args:
            func, first = node.value.func, node.value.args[0]
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "Library" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                libs.update((t.id, first.value) for t in node.targets if isinstance(t, ast.Name))
    return libs


def _ops(node: ast.AST, libs: dict[str, str], handles: dict[str, str]) -> set[str]:
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.add(_op_name(n.value))
        elif isinstance(n, ast.Attribute):
            v = n.value  # torch.ops.<ns>.<name>
            if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Attribute) and v.value.attr == "ops" \
                    and isinstance(v.value.value, ast.Name) and v.value.value.id == "torch":
                found.add(f"{v.attr}::{n.attr}")
            elif isinstance(v, ast.Name) and v.id in handles and n.attr.startswith("register_"):
                found.add(handles[v.id])  # @op.register_fake, op.register_autograd(...)
        elif isinstance(n, ast.Call):  # lib.define("name(...)"), lib.impl("name", ...), torch.library.impl(lib, "name")
            args = [n.func.value, *n.args] if isinstance(n.func, ast.Attribute) else list(n.args)
            for a, b in zip(args, args[1:]):
                if isinstance(a, ast.Name) and a.id in libs and isinstance(b, ast.Constant) \
                        and isinstance(b.value, str):
                    name = re.match(r"\s*(\w+)", b.value)
                    found.add(f"{libs[a.id]}::{name.group(1)}" if name else None)
    return found - {None}


def _role(node: ast.stmt, index: int) -> str:
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return "future"
    if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
        return "main"  # the file's own script part does not run here
    if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return "doc"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return "def"
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Starred)) for t in targets for n in ast.walk(t)
                    if not isinstance(n, ast.expr_context))
        return "bind" if names else "effect"  # `torch._dynamo.config.x = True` changes torch: an effect
    if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
        return "block"
    return "effect"


def _units(source: str, tree: ast.Module) -> list[_Unit]:
    units: list[_Unit] = []
    for i, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        if units and first <= units[-1].last:  # a `;` between statements: one unit
            u = units[-1]
            u.stmts.append(node)
            u.last, u.role = max(u.last, last), "effect" if "main" not in (u.role, _role(node, i)) else "main"
            continue
        units.append(_Unit([node], first, last, _role(node, i), bool(getattr(node, "decorator_list", None))))
    scopes = _scope_reads(source)
    libs = _libraries(tree)
    for u in units:
        for node in u.stmts:
            _scope_names(node, u.reads, u.defines)
        u.reads.update(*(names for line, names in scopes if u.first <= line <= u.last))
    # a name bound to one op (`@torch.library.custom_op("ns::f") def f`, `f = custom_op("ns::f", ...)(impl)`): its
    # `f.register_fake` elsewhere names that op too
    handles = {}
    for u in units:
        if u.role in ("def", "bind") and len(u.defines) == 1:
            node = u.stmts[0]
            heads = getattr(node, "decorator_list", None) or [getattr(node, "value", None)]
            ops = set().union(*(_ops(h, libs, {}) for h in heads if h is not None))
            if len(ops) == 1:
                handles[next(iter(u.defines))] = next(iter(ops))
    for u in units:
        u.ops = set().union(*(_ops(node, libs, handles) for node in u.stmts))
        u.effect_reads, u.effect_ops = u.reads, u.ops
        if u.role == "def":
            u.effect_reads = set()
            for d in u.stmts[0].decorator_list:
                _scope_names(d, u.effect_reads, set())
            u.effect_ops = set().union(*(_ops(d, libs, handles) for d in u.stmts[0].decorator_list))
    return units


def _bound(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _import_kept(node: ast.stmt, needed: set[str], side_effect: set[str]) -> list[ast.alias]:
    return [a for a in getattr(node, "names", []) if a.name == "*" or _bound(a) in needed or _bound(a) in side_effect]


def _keeps(u: _Unit, needed: set[str], ops: set[str], objects: set[str], side_effect: set[str],
           process: set[str]) -> bool:
    """Does the call need unit ``u``, given what is kept so far (``needed`` names, their ``ops``, and the
    ``objects`` kept code defines, as opposed to the modules it imports)? ``process``: the names ``os`` and ``sys``
    are imported as."""
    if u.role in ("future", "main", "doc"):
        return False
    if u.role == "import":
        return any(_import_kept(node, needed, side_effect) for node in u.stmts)
    if u.defines & needed:
        return True
    if u.role == "bind" or (u.role == "def" and not u.decorated):
        return False
    # what is left runs for its effect: registering an op (`@f.register_fake`, `lib.impl("f", ...)`), configuring torch
    if u.effect_ops:
        return bool(u.effect_ops & ops)
    if u.effect_reads & objects:
        return True
    if u.role == "def":  # a decorator that names only modules (`@torch.no_grad()`) registers nothing
        return False
    return bool(u.reads & (needed | process)) and u.reads <= needed | process | _BUILTINS


def prune(source: str, roots: set[str], effects: bool = True) -> tuple[list[_Unit], set[int]] | None:
    """The top-level units of ``source`` that reading ``roots`` reaches, with the imports and assignments that
    define what they read, and (``effects``) the statements run for their effect on what is kept: decorators and
    calls that register its ops, torch configuration. None when that cannot be told: a root defined nowhere, code
    that looks names up by string (``globals()``, ``eval``)."""
    tree = ast.parse(source)
    units = _units(source, tree)
    if not roots <= set().union(*(u.defines for u in units)):
        return None
    everywhere = set().union(*(u.reads for u in units))
    # an import no line reads is there for its effect (`import torch_npu` registers a device); the standard
    # library's and tracecheck's are not
    side_effect = set() if not effects else {
        _bound(a) for u in units if u.role == "import" for node in u.stmts for a in node.names
        if _bound(a) not in everywhere and a.name.split(".")[0] not in sys.stdlib_module_names | {"tracecheck"}
        and not (isinstance(node, ast.ImportFrom) and node.level)}
    process = {_bound(a) for u in units if u.role == "import" for node in u.stmts for a in node.names
               if a.name in _PROCESS and isinstance(node, ast.Import)} if effects else set()
    needed, kept = set(roots), set()
    while True:
        ops = set().union(*(units[i].ops for i in kept))
        objects = set().union(*(units[i].defines for i in kept if units[i].role != "import"))
        added = [i for i, u in enumerate(units)
                 if i not in kept and _keeps(u, needed, ops, objects, side_effect, process)]
        if not added:
            break
        for i in added:
            kept.add(i)
            needed |= units[i].reads
    if set().union(*(units[i].reads for i in kept)) & _DYNAMIC:
        return None
    for u in (units[i] for i in kept if units[i].role == "import"):  # narrowed to the names kept code reads
        for node in u.stmts:
            names = _import_kept(node, needed, side_effect)
            u.narrowed, node.names = u.narrowed or names != node.names, names
        u.stmts = [node for node in u.stmts if node.names]
    return units, kept


def _render(lines: list[str], units: list[_Unit], kept: set[int]) -> list[str]:
    out: list[str] = []
    prev: _Unit | None = None
    for u in (units[i] for i in sorted(kept)):
        text = [ast.unparse(n) for n in u.stmts] if u.narrowed else lines[u.first - 1:u.last]
        if prev is not None and ({u.role, prev.role} & {"def", "block"} or u.last > u.first or prev.last > prev.first
                                 or (u.role == "import") != (prev.role == "import")):
            out.append("")
        out.extend(text)
        prev = u
    return out


def needed_code(probe_file: str, probe: str) -> Pruned | None:
    """What the call of ``probe`` needs from ``probe_file``; None where ``prune`` cannot tell."""
    source = read_source(probe_file)
    try:
        found = prune(source, {probe})
    except (SyntaxError, ValueError):  # symtable and ast agree on what parses; a null byte or the like: no pruning
        return None
    if found is None:
        return None
    units, kept = found
    lines = source_lines(source)
    return Pruned("\n".join(_render(lines, units, kept)), sum(units[i].last - units[i].first + 1 for i in kept),
                  len(lines), [node for i in sorted(kept) for node in units[i].stmts])


def op_sites(probe_file: str, op: str) -> list[tuple[int, str]]:
    """(first line, source) of each top-level statement of ``probe_file`` that names custom op ``op`` (``ns::name``):
    its definition, its fake, its autograd registration. Empty when the file names it nowhere."""
    source = read_source(probe_file)
    try:
        units = _units(source, ast.parse(source))
    except (SyntaxError, ValueError):
        return []
    lines = source_lines(source)
    return [(u.first, "\n".join(lines[u.first - 1:u.last])) for u in units if op in u.ops]


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
        _scope_names(node, reads, set())
    reads.update(*(names for _, names in _scope_reads(call)))
    units, kept = prune(text, reads & set().union(*(u.defines for u in _units(text, ast.parse(text)))),
                        effects=False) or ([], set())
    had = {ast.unparse(n) for n in user_nodes if isinstance(n, (ast.Import, ast.ImportFrom))}
    kept = {i for i in kept if not (units[i].role == "import" and {ast.unparse(n) for n in units[i].stmts} <= had)}
    return "\n".join(_render(source_lines(text), units, kept))


def _imports_siblings(probe_file: str, nodes: list[ast.stmt]) -> bool:
    """Does the code import a module that lives next to the probe file (``import mhc`` beside ``mhc/``)?"""
    here = os.path.dirname(os.path.abspath(probe_file))
    names = set()
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
    edits, drop = [], set()
    for i, node in enumerate(tree.body):
        end = node.end_lineno or node.lineno
        role = _role(node, i)
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
