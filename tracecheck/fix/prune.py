"""What a probe's call needs from its file (``tracecheck repro``'s minimal script, repro_script.py): the top-level
statements the probe function reaches, found with ``ast`` and ``symtable``, with the imports and assignments that
define what they read and the statements run for their effect on them (a decorator or call that registers their
ops, torch configuration); and where a file names a custom op. Pure text: no torch import here."""
from __future__ import annotations

import ast
import builtins
import re
import symtable
import sys
from dataclasses import dataclass, field

from .prelude import read_source, source_lines

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

    @property
    def imports(self) -> list[ast.Import | ast.ImportFrom]:
        """The statements of an ``import`` unit (all of them: statements sharing a line are an ``effect``)."""
        return [n for n in self.stmts if isinstance(n, (ast.Import, ast.ImportFrom))]

    @property
    def decorators(self) -> list[ast.expr]:
        """The decorators of a ``def`` unit's function or class."""
        head = self.stmts[0]
        return head.decorator_list if isinstance(head, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []


@dataclass
class Pruned:
    """What ``prune`` keeps of a probe file: ``text`` (its lines, as the file has them but for narrowed imports),
    ``kept_lines`` of the file's ``total_lines``, and the top-level nodes kept."""

    text: str
    kept_lines: int
    total_lines: int
    nodes: list[ast.stmt]


def scope_names(node: ast.AST, reads: set[str], stores: set[str]) -> None:
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
            scope_names(gen.target, inner, targets)
            for part in (gen.iter, *gen.ifs):
                scope_names(part, inner, targets)
        for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
            scope_names(part, inner, targets)
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
            scope_names(part, reads, stores)


def scope_reads(source: str) -> list[tuple[int, set[str]]]:
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
    libs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args:
            func, first = node.value.func, node.value.args[0]
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "Library" and isinstance(first, ast.Constant) and isinstance(first.value, str):
                libs.update((t.id, first.value) for t in node.targets if isinstance(t, ast.Name))
    return libs


def _ops(node: ast.AST, libs: dict[str, str], handles: dict[str, str]) -> set[str]:
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            op = _op_name(n.value)
            if op is not None:
                found.add(op)
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
                    if name:
                        found.add(f"{libs[a.id]}::{name.group(1)}")
    return found


def role_of(node: ast.stmt, index: int) -> str:
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


def units_of(source: str, tree: ast.Module) -> list[_Unit]:
    units: list[_Unit] = []
    for i, node in enumerate(tree.body):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        if units and first <= units[-1].last:  # a `;` between statements: one unit
            u = units[-1]
            u.stmts.append(node)
            u.last, u.role = max(u.last, last), "effect" if "main" not in (u.role, role_of(node, i)) else "main"
            continue
        units.append(_Unit([node], first, last, role_of(node, i), bool(getattr(node, "decorator_list", None))))
    scopes = scope_reads(source)
    libs = _libraries(tree)
    for u in units:
        for node in u.stmts:
            scope_names(node, u.reads, u.defines)
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
            for d in u.decorators:
                scope_names(d, u.effect_reads, set())
            u.effect_ops = set().union(*(_ops(d, libs, handles) for d in u.decorators))
    return units


def _bound(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _import_kept(node: ast.Import | ast.ImportFrom, needed: set[str], side_effect: set[str]) -> list[ast.alias]:
    return [a for a in node.names if a.name == "*" or _bound(a) in needed or _bound(a) in side_effect]


def _keeps(u: _Unit, needed: set[str], ops: set[str], objects: set[str], side_effect: set[str],
           process: set[str]) -> bool:
    """Does the call need unit ``u``, given what is kept so far (``needed`` names, their ``ops``, and the
    ``objects`` kept code defines, as opposed to the modules it imports)? ``process``: the names ``os`` and ``sys``
    are imported as."""
    if u.role in ("future", "main", "doc"):
        return False
    if u.role == "import":
        return any(_import_kept(node, needed, side_effect) for node in u.imports)
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
    units = units_of(source, tree)
    if not roots <= set().union(*(u.defines for u in units)):
        return None
    everywhere = set().union(*(u.reads for u in units))
    # an import no line reads is there for its effect (`import torch_npu` registers a device); the standard
    # library's and tracecheck's are not
    side_effect = set() if not effects else {
        _bound(a) for u in units if u.role == "import" for node in u.imports for a in node.names
        if _bound(a) not in everywhere and a.name.split(".")[0] not in sys.stdlib_module_names | {"tracecheck"}
        and not (isinstance(node, ast.ImportFrom) and node.level)}
    process = {_bound(a) for u in units if u.role == "import" for node in u.imports for a in node.names
               if a.name in _PROCESS and isinstance(node, ast.Import)} if effects else set()
    needed = set(roots)
    kept: set[int] = set()
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
        for node in u.imports:
            names = _import_kept(node, needed, side_effect)
            u.narrowed, node.names = u.narrowed or names != node.names, names
        u.stmts = [node for node in u.imports if node.names]
    return units, kept


def render(lines: list[str], units: list[_Unit], kept: set[int]) -> list[str]:
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
    return Pruned("\n".join(render(lines, units, kept)), sum(units[i].last - units[i].first + 1 for i in kept),
                  len(lines), [node for i in sorted(kept) for node in units[i].stmts])


def op_sites(probe_file: str, op: str) -> list[tuple[int, str]]:
    """(first line, source) of each top-level statement of ``probe_file`` that names custom op ``op`` (``ns::name``):
    its definition, its fake, its autograd registration. Empty when the file names it nowhere."""
    source = read_source(probe_file)
    try:
        units = units_of(source, ast.parse(source))
    except (SyntaxError, ValueError):
        return []
    lines = source_lines(source)
    return [(u.first, "\n".join(lines[u.first - 1:u.last])) for u in units if op in u.ops]
