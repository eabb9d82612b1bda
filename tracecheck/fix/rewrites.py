"""Source rewrites for graph breaks in model code (``tracecheck fix`` on a ``graph-break`` or ``data-dependent``
finding whose user frame lies in the probe's own file, or a C/pybind11 function called straight from it).

Each rewrite is one that PyTorch documents for its class of break (``Rewrite.doc``). None is trusted:
model_code.py applies a candidate to a copy of the file and keeps it only when the stages say the break is gone,
no new failure came, and eager outputs and gradients held. The registry ``REWRITES`` is the one list; a rewrite
proposes edits for a site or returns None when it does not apply. Pure (ast and text): the parent process never
runs user code (what the ``custom-op`` rewrite needs to know about a C function, c_call.py learns in a stage
process and model_code.py hands over as ``Site.facts``).
"""
from __future__ import annotations

import ast
import keyword
import os
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model.taxonomy import K
from .library import Function, function_at
from .prelude import header_end, source_lines

_GUARD = "torch.compiler.is_compiling()"
_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
_LOG_OBJECTS = {"logging", "logger", "log", "LOGGER", "_logger", "warnings"}
_SCALAR_GB = ("Unsupported Tensor.item() call", "Tensor.tolist()")
_DYNAMIC_SHAPE_GB = ("Dynamic shape operator", "Data dependent operator")
_BRANCH_GB = ("Data-dependent branching",)


@dataclass(frozen=True)
class Site:
    """Where Dynamo stopped in the probe's file: the finding's user frame, kind and gb_type."""

    line: int
    kind: str
    gb_type: str
    code: str
    #: a C call (``custom-op``): the call as c_call_at found it, plus what c_call.py rendered for it
    facts: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: the library file the line is in, for a C call a library makes ("" for the probe's own file): the probe's
    #: file then installs the custom op in that library's module rather than editing the call
    file: str = ""


@dataclass(frozen=True)
class Edit:
    """Replace the text from ``start`` to ``end`` (``(line, col)``: 1-based line, 0-based column) with ``text``.
    ``start == end`` inserts."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass(frozen=True)
class Candidate:
    """One rewrite proposed for one site: its edits of the probe's file, and a line saying what the change does. For
    a site in another file, ``library`` holds the edits of that file's function (``function``), which the probe's
    copy defines and swaps in (library.py), never writes."""

    rewrite: str
    edits: tuple[Edit, ...]
    note: str
    library: tuple[Edit, ...] = ()
    function: "Function | None" = None


Propose = Callable[["Source", Site, "Source"], "tuple[tuple[Edit, ...], str] | None"]


@dataclass(frozen=True)
class Rewrite:
    id: str
    title: str
    #: the PyTorch documentation the rewrite follows
    doc: str
    #: ``propose(src, site, probe)``: ``src`` is the site's file, ``probe`` the probe's (the same for a site in it)
    propose: Propose
    #: a setting of torch's (or an op the probe installs), written in the probe's file whichever file the site is
    #: in; else a rewrite of the site's own code
    setting: bool = False
    #: a rewrite of code that may change a function of another file (library.py); the unverifiable ones
    #: (``branchless``, ``compile-guard``, whose untaken branch no input of the probe judges) may not
    library: bool = False
    #: for a site in another file only (the probe's own logging has exact rewrites of its code)
    library_only: bool = False


REWRITES: dict[str, Rewrite] = {}


def rewrite(id: str, title: str, doc: str, setting: bool = False, library: bool = False,  # noqa: A002
            library_only: bool = False) -> Callable[[Propose], Propose]:
    def register(fn: Propose) -> Propose:
        REWRITES[id] = Rewrite(id, title, doc, fn, setting, library, library_only)
        return fn
    return register


class Source:
    """The probe file's text, its lines and its AST."""

    def __init__(self, text: str):
        self.text = text
        self.lines = source_lines(text, keepends=True)
        self.tree = ast.parse(text)

    def statement_at(self, line: int) -> ast.stmt | None:
        """The innermost statement spanning ``line``."""
        best: ast.stmt | None = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or (node.lineno, -(node.end_lineno or 0)) >= (best.lineno, -(best.end_lineno or 0)):
                    best = node
        return best

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def position(self, line: int, byte_col: int) -> tuple[int, int]:
        """An Edit position from ast's (line, UTF-8 byte offset) pair: Edit columns count characters."""
        return line, len(self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def offset(self, pos: tuple[int, int]) -> int:
        """The index in ``text`` of an Edit position."""
        return sum(len(line) for line in self.lines[:pos[0] - 1]) + pos[1]

    def span(self, node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
        """A node's start and end as Edit positions."""
        return (self.position(node.lineno, node.col_offset),
                self.position(node.end_lineno or node.lineno, node.end_col_offset or 0))

    def indent(self, node: ast.stmt) -> str:
        line = self.lines[node.lineno - 1]
        return line[:len(line) - len(line.lstrip())]

    def owns_its_lines(self, node: ast.stmt) -> bool:
        """The statement starts its first line and ends its last (no ``a; b`` sharing), so it can be re-indented."""
        first, last = self.lines[node.lineno - 1], self.lines[(node.end_lineno or node.lineno) - 1]
        rest = last.encode("utf-8")[node.end_col_offset or 0:].decode("utf-8", errors="ignore").strip()
        return first.encode("utf-8")[:node.col_offset].strip() == b"" and (rest == "" or rest.startswith("#"))

    def whole_lines(self, node: ast.stmt, text: str) -> Edit:
        """Replace the statement's lines (indentation and trailing comment included) with ``text``."""
        end = node.end_lineno or node.lineno
        return Edit((node.lineno, 0), (end, len(self.lines[end - 1].rstrip("\r\n"))), text.rstrip("\n"))

    def module_setting(self, statement: str) -> tuple[Edit, ...]:
        """Edits that run ``statement`` at import, right after the module's ``import torch`` (added when the file
        only has ``from torch import ...``)."""
        body = self.tree.body
        for node in body:
            if isinstance(node, ast.Import) and any(a.name == "torch" and a.asname is None for a in node.names):
                end = node.end_lineno or node.lineno
                return (Edit((end + 1, 0), (end + 1, 0), statement + "\n"),)
        at = header_end(self.tree)
        return (Edit((at, 0), (at, 0), f"import torch\n{statement}\n"),)

    def end_setting(self, lines: list[str]) -> tuple[Edit, ...]:
        """Edits that run ``lines`` once the module's own imports have run: at its end (a setting that names a
        library's object, ``logging.Logger.warning_once``, which exists once that library is imported)."""
        end = (len(self.lines) + 1, 0)
        lead = "" if not self.text or self.text.endswith(("\n", "\r")) else "\n"
        return (Edit(end, end, lead + "\n" + "\n".join(lines) + "\n"),) + self.needs_torch_import()

    def binds(self, name: str) -> bool:
        """Does the module bind ``name`` at top level otherwise than by ``import name``?"""
        for node in self.tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if any((a.asname or a.name.split(".")[0]) == name and not (a.asname is None and a.name == name
                                                                           and isinstance(node, ast.Import))
                       for a in node.names):
                    return True
            elif any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                     for n in ast.walk(node)) or (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and
                                                  node.name == name):
                return True
        return False

    def needs_torch_import(self) -> tuple[Edit, ...]:
        """An ``import torch`` at the top when the module does not bind the name ``torch`` itself."""
        for node in self.tree.body:
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" and a.asname is None
                                                    for a in node.names):
                return ()
        at = header_end(self.tree)
        return (Edit((at, 0), (at, 0), "import torch\n"),)


def candidates(src: Source, site: Site, library: "Source | None" = None) -> list[Candidate]:
    """Every rewrite that applies to ``site``, in the order they are worth trying (registry order). ``src`` is the
    probe's file; ``library`` the site's file where that is another one (``site.file``): settings go into the probe's
    file, code rewrites into a replacement of the library's function that holds the line."""
    out = []
    for r in REWRITES.values():
        if not site.file:
            got = None if r.library_only else r.propose(src, site, src)
            if got is not None:
                out.append(Candidate(r.id, got[0], got[1]))
        elif r.setting:
            got = r.propose(library or src, site, src)
            if got is not None:
                out.append(Candidate(r.id, got[0], got[1]))
        elif r.library and library is not None:
            cand = _in_function(r.id, library, site, src)
            if cand is not None:
                out.append(cand)
    return out


def why_none(src: Source, site: Site) -> str:
    """Why no rewrite applies to ``site`` (``src``: the file it is in), where the code says: a branch whose sides run
    different code, on a value computed elsewhere or here; an op whose output size the data decides."""
    node = src.statement_at(site.line)
    if isinstance(node, ast.If) and node.lineno == site.line:
        scope = _scope(src.tree, node)
        args = getattr(scope, "args", None)
        params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} if args is not None else set()
        read = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} & params
        elsewhere = f"it tests {', '.join(f'`{r}`' for r in sorted(read))}, which its caller computed from the " \
            "data; " if read and not any(isinstance(n, ast.Call) for n in ast.walk(node.test)) else ""
        return elsewhere + "its two sides run different code (not one statement differing in one value, one name " \
            "assigned on each side, nor a raise), which no torch.where, torch.cond or graph assert expresses: a real " \
            "data-dependent path"
    if site.gb_type.startswith(_DYNAMIC_SHAPE_GB) or ".tolist()" in site.code:
        return "a size or a loop count that the data decides (a real data-dependent output shape)"
    return ""


def _in_function(rid: str, lib: Source, site: Site, probe: Source) -> Candidate | None:
    """Rewrite ``rid`` of a library's line as a change of the function that holds it: the edits inside that function
    stay the library's (library.block makes the replacement from them); a setting it adds to the library's module
    (torch-check's ``capture_scalar_outputs``) goes into the probe's file; an ``import torch`` is the block's own."""
    fn = function_at(lib.tree, lib.text, site.line)
    got = REWRITES[rid].propose(lib, site, probe) if fn is not None else None
    if got is None or fn is None:
        return None
    inside: list[Edit] = []
    settings: list[Edit] = []
    for e in got[0]:
        if fn.start <= e.start[0] and e.end[0] <= fn.end:
            inside.append(e)
        elif e.text.startswith("torch._dynamo.config."):
            settings += probe.module_setting(e.text.rstrip("\n"))
        elif e.text.strip() != "import torch":
            return None  # an edit outside the function, which a replacement of it cannot carry
    return Candidate(rid, tuple(settings) + probe.needs_torch_import(), got[1], tuple(inside), fn)


def overlap(a: "list[Edit] | tuple[Edit, ...]", b: "list[Edit] | tuple[Edit, ...]") -> bool:
    """Do two sets of edits touch the same text (an insertion at the same point is no overlap)?"""
    return any(x != y and x.start < y.end and y.start < x.end for x in a for y in b)


def apply(text: str, edits: "list[Edit] | tuple[Edit, ...]") -> str:
    """``text`` with ``edits`` applied, bottom-up so that positions stay valid. Raises ValueError on overlapping
    edits (a rewrite inside text another rewrite replaced)."""
    if overlap(edits, edits):
        raise ValueError("overlapping edits")
    lines = source_lines(text, keepends=True) + [""]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lc: tuple[int, int]) -> int:
        return offsets[lc[0] - 1] + lc[1] if lc[0] - 1 < len(offsets) else len(text)

    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:pos(e.start)] + e.text + text[pos(e.end):]
    return text


def new_span(edits: "list[Edit] | tuple[Edit, ...]", first: int, last: int) -> tuple[int, int]:
    """Where the original lines ``first..last`` are once ``edits`` are applied: shifted by the lines the edits
    above them add or remove, and widened to any edit that touches them."""
    shift = 0
    lo, hi = first, last
    for e in sorted(edits, key=lambda e: e.start):
        added = e.text.count("\n") - (e.end[0] - e.start[0])
        if e.end[0] < first or (e.start == e.end and e.start[0] <= first):
            shift += added
        elif e.start[0] <= last:
            lo, hi = min(lo, e.start[0]), max(hi + added, e.start[0] + e.text.count("\n"))
    return lo + shift, hi + shift


_SCALAR_TESTS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_CAPTURE_SCALAR = ("torch._dynamo.config.capture_scalar_outputs = True  # tracecheck fix: .item()/.tolist() stay in "
                   "the graph as unbacked SymInts/SymFloats")


@dataclass(frozen=True)
class _Scalar:
    """``name = <tensor>.item()`` as the statement right before an ``if`` whose test is one comparison reading
    ``name`` once: the host round-trip a branch on a tensor's value takes."""

    assign: ast.Assign
    branch: ast.If
    name: str
    #: the receiver of ``.item()``, parenthesised where the test's precedence needs it
    tensor: str
    #: ``name`` is read by the test and nowhere else in its function: the assignment can go
    dead: bool
    #: every other read of ``name`` takes a tensor as well as a float (arithmetic, a comparison, an argument of
    #: ``print`` or a logger call): the assignment can keep the tensor instead (``name = t``, no ``.item()``)
    tensor_safe: bool = False

    def test(self, src: Source) -> str:
        """The ``if``'s test with the tensor in place of the name."""
        t0, t1 = src.span(self.branch.test)
        n0, n1 = src.span(next(n for n in ast.walk(self.branch.test) if isinstance(n, ast.Name) and n.id == self.name))
        return src.text[src.offset(t0):src.offset(n0)] + self.tensor + src.text[src.offset(n1):src.offset(t1)]

    def replace(self, src: Source, edit: Edit) -> Edit:
        """``edit`` (which starts on the ``if``'s first line) widened up to the assignment, which it drops (a dead
        scalar) or keeps as the tensor, without ``.item()``: one edit, so that new_span maps the lines below it; the
        comment and blank lines between the two stay."""
        after = ((self.assign.end_lineno or self.assign.lineno) + 1, 0)
        # (detached: .item() carried no gradient, and the value may now reach arithmetic that trains)
        kept = "" if self.dead else f"{src.indent(self.assign)}{self.name} = {self.tensor}.detach()  # tracecheck " \
            "fix: kept a tensor (no .item())\n"
        return Edit((self.assign.lineno, 0), edit.end,
                    kept + src.text[src.offset(after):src.offset(edit.start)] + edit.text)


def _scope(tree: ast.Module, node: ast.stmt) -> ast.AST:
    """The innermost function holding ``node`` (the module at top level)."""
    best: ast.AST = tree
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.lineno <= node.lineno <= (f.end_lineno or 0) \
                and f is not node and (best is tree or f.lineno >= best.lineno):
            best = f
    return best


def _siblings(tree: ast.Module, node: ast.stmt) -> list[ast.stmt]:
    for parent in ast.walk(tree):
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and any(v is node for v in value):
                return value
    return []


def _scalar_branch(src: Source, site: Site) -> _Scalar | None:
    """The ``.item()`` scalar an ``if`` tests, from a site at either statement: the ``.item()`` line (gb_type
    'Unsupported Tensor.item() call') or the ``if`` (the branch on it, once the scalar is captured)."""
    node = src.statement_at(site.line)
    body = _siblings(src.tree, node) if node is not None else []
    at = next((i for i, s in enumerate(body) if s is node), None)
    if at is None:
        return None
    if isinstance(node, ast.If) and node.lineno == site.line and _branch(src, site) is not None and at > 0:
        assign, branch = body[at - 1], node
    elif isinstance(node, ast.Assign) and (site.gb_type.startswith(_SCALAR_GB[0]) or site.kind == K.DATA_DEPENDENT) \
            and at + 1 < len(body):
        assign, branch = node, body[at + 1]
    else:
        return None
    if not (isinstance(assign, ast.Assign) and isinstance(branch, ast.If) and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name) and src.owns_its_lines(assign) and src.owns_its_lines(branch)):
        return None
    call, name = assign.value, assign.targets[0].id
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "item"
            and not call.args and not call.keywords):
        return None
    test = branch.test  # one comparison: `a and b`, `not a`, `a < b < c` would call bool() on a tensor again
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], _SCALAR_TESTS)):
        return None
    if sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(test)) != 1:
        return None
    scope = _scope(src.tree, branch)
    reads = sum(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Store) for n in ast.walk(scope))
    shared = any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(scope))
    receiver = call.func.value
    tensor = src.segment(receiver)
    if not isinstance(receiver, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) or "\n" in tensor:
        tensor = f"({tensor})"
    safe = not shared and _reads_take_a_tensor(scope, name, test, assign)
    return _Scalar(assign, branch, name, tensor, dead=reads == 1 and not shared, tensor_safe=safe)


#: calls whose arguments may be a 0-dim tensor where they were a float: the value is only shown
_SHOWS = {"print"} | {m for m in ("debug", "info", "warning", "warn", "error", "critical", "log")}


def _reads_take_a_tensor(scope: ast.AST, name: str, test: ast.expr, assign: ast.Assign) -> bool:
    """Is every read of ``name`` in ``scope`` (other than in the ``if``'s ``test``) a place where a 0-dim tensor
    does what the float did: an operand of arithmetic or a comparison, or a plain argument of ``print`` or a
    logger call (which then shows ``tensor(…)``)? ``name`` assigned once, by ``assign``."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(scope):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    in_test = {id(n) for n in ast.walk(test)}
    stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    if len(stores) != 1 or parents.get(id(stores[0])) is not assign:
        return False
    for n in ast.walk(scope):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)) or id(n) in in_test:
            continue
        up = parents.get(id(n))
        if isinstance(up, (ast.BinOp, ast.UnaryOp, ast.Compare)):
            continue
        if isinstance(up, ast.Call) and n in up.args:
            f = up.func
            callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if callee in _SHOWS:
                continue
        return False
    return True


def _branch_site(src: Source, site: Site) -> "tuple[ast.If, _Scalar | None] | None":
    """The ``if`` a branch rewrite changes at ``site``, with the dead ``.item()`` scalar it tests (the rewrite
    tests the tensor and drops the assignment, whose ``.item()`` would break the graph still)."""
    scalar = _scalar_branch(src, site)
    if scalar is not None and scalar.dead:
        return scalar.branch, scalar
    node = _branch(src, site)
    return None if node is None else (node, None)


def branch_at(src: Source, site: Site) -> ast.If | None:
    """The ``if`` that the branch rewrites (torch-cond, branchless, compile-guard, tensor-where) change for
    ``site``: the site's own, or the one testing the ``.item()`` scalar assigned on the site's line."""
    got = _branch_site(src, site)
    if got is not None:
        return got[0]
    scalar = _scalar_branch(src, site)  # (torch-check: the scalar stays)
    return None if scalar is None else scalar.branch


def _bound_before(src: Source, node: ast.stmt, name: str) -> bool:
    """``name`` is a parameter of ``node``'s function or assigned above ``node`` in it."""
    scope = _scope(src.tree, node)
    args = getattr(scope, "args", None)
    if args is not None and name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                     args.vararg, args.kwarg) if a is not None}:
        return True
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) and n.lineno < node.lineno
               for n in ast.walk(scope))


def _one_line(text: str) -> str:
    """Source text for a comment: one line."""
    return " ".join(text.split())


# ---- the rewrites, in the order they are tried for a site -------------------------------------------------------


@rewrite("tensor-where", "a branch on an .item() scalar as torch.where",
         "torch.where (PyTorch docs, Common Graph Breaks, 'Data-dependent operations': keep the value a tensor "
         "instead of reading it with .item() and branching on it)", library=True)
def _tensor_where(src: Source, site: Site, probe: Source):
    scalar = _scalar_branch(src, site)
    if scalar is None or not (scalar.dead or scalar.tensor_safe):
        return None
    node = scalar.branch
    then = _assigned(node.body)
    if then is None or then[0] in ("return", scalar.name):
        return None
    target = then[0]
    if node.orelse:  # `else: <the same name> = B`
        other = _assigned(node.orelse)
        if other is None or other[0] != target:
            return None
        otherwise = src.segment(other[1])
    elif _bound_before(src, node, target):  # no else: the name's value before the `if`
        otherwise = target
    else:
        return None
    test = scalar.test(src) if scalar.dead else src.segment(node.test)
    line = f"{target} = torch.where({test}, {src.segment(then[1])}, {otherwise})"
    edit = src.whole_lines(node, src.indent(node) + line + "  # tracecheck fix: a tensor select, no .item()")
    kept = "" if scalar.dead else f" (`{scalar.name}` stays a 0-dim tensor: its other reads take one, and a print of " \
        "it shows `tensor(…)`)"
    return (scalar.replace(src, edit),) + src.needs_torch_import(), \
        f"torch.where: the `if` at line {node.lineno} tests the tensor and the .item() at line " \
        f"{scalar.assign.lineno} is removed{kept}; both sides are computed and the test picks one (exact while " \
        f"`{_one_line(src.segment(then[1]))}` " + (f"and `{_one_line(otherwise)}` have one shape and dtype)"
                                                     if node.orelse else f"keeps {target}'s shape and dtype)")


def _raised(src: Source, body: list[ast.stmt]) -> "tuple[str, str] | None":
    """``raise E("message")`` as a branch's only statement: (E, the message's literal)."""
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].cause is not None:
        return None
    exc = body[0].exc
    if not (isinstance(exc, ast.Call) and _dotted(exc.func) and len(exc.args) == 1 and not exc.keywords
            and isinstance(exc.args[0], ast.Constant) and isinstance(exc.args[0].value, str)):
        return None  # a formatted message cannot be: Dynamo refuses a torch._check message that reads traced values
    return src.segment(exc.func), src.segment(exc.args[0])


@rewrite("torch-check", "a guard that raises on an .item() scalar as torch._check",
         "torch._check_with on the captured scalar (PyTorch docs: torch._check for data-dependent values; "
         "torch._dynamo.config.capture_scalar_outputs)", library=True)
def _torch_check(src: Source, site: Site, probe: Source):
    scalar = _scalar_branch(src, site)
    if scalar is None or scalar.branch.orelse:
        return None
    node = scalar.branch
    raised = _raised(src, node.body)
    if raised is None:
        return None
    exc, message = raised
    # torch.sym_not: `not` would ask for the scalar's value (a data-dependent guard); a negated comparison is not
    # the same for NaN
    line = f"torch._check_with({exc}, torch.sym_not({src.segment(node.test)}), lambda: {message})"
    edit = src.whole_lines(node, src.indent(node) + line + "  # tracecheck fix: a check the graph keeps")
    return (edit,) + src.module_setting(_CAPTURE_SCALAR), \
        f"torch._check_with: the guard at line {node.lineno} stays in the graph as a runtime assert on the " \
        f"captured scalar; eager raises {exc} as before, compiled code a RuntimeError"


def _as_tensor(src: Source, test: ast.expr) -> str | None:
    """A data-dependent test written as a tensor expression (for ``torch._assert_async``), or None where its form is
    not one of those known to be a tensor: ``not``/``and``/``or`` of such, ``torch.equal(a, b)``, a comparison, and a
    reduction to one value (``.any()``, ``.all()``, ``torch.any(...)``, ``torch.all(...)``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _as_tensor(src, test.operand)
        return None if inner is None else f"torch.logical_not({inner})"
    if isinstance(test, ast.BoolOp) and len(test.values) == 2:
        a, b = (_as_tensor(src, v) for v in test.values)
        fn = "torch.logical_and" if isinstance(test.op, ast.And) else "torch.logical_or"
        return None if a is None or b is None else f"{fn}({a}, {b})"
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        # a scalar read with .item() compares as the 0-dim tensor it came from
        text, start = src.segment(test), src.offset(src.span(test)[0])
        for call in sorted((c for c in ast.walk(test) if _is_item(c)), key=lambda c: -c.col_offset):
            lo, hi = src.offset(src.span(call.func.value)[1]) - start, src.offset(src.span(call)[1]) - start
            text = text[:lo] + text[hi:]  # (the `.item()` after its receiver)
        return f"({text})"
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.keywords:
        owner, attr = src.segment(test.func.value), test.func.attr
        if owner == "torch" and attr == "equal" and len(test.args) == 2:
            a, b = (src.segment(x) for x in test.args)  # torch.equal: same shape and elements
            return f"(torch.eq({a}, {b}).all() if ({a}).shape == ({b}).shape else torch.tensor(False))"
        if attr in ("any", "all") and (owner == "torch" and len(test.args) == 1 or owner != "torch" and not test.args):
            return src.segment(test)
    return None


@rewrite("graph-assert", "a validation guard that raises as an assert the graph keeps",
         "torch._assert_async (a check that stays in the compiled graph) under torch.compiler.is_compiling(); "
         "the gb_type 'Data-dependent branching' hint: keep the condition a tensor", library=True)
def _graph_assert(src: Source, site: Site, probe: Source):
    stmt = src.statement_at(site.line)
    if isinstance(stmt, ast.Assert) and stmt.lineno == site.line and src.owns_its_lines(stmt):
        return _assert_statement(src, stmt)
    node = _branch(src, site, ops=True)
    if node is None or node.orelse or len(node.body) != 1 or not isinstance(node.body[0], ast.Raise):
        return None
    exc = node.body[0].exc
    message = "assertion failed"
    if isinstance(exc, ast.Call) and exc.args and isinstance(exc.args[0], ast.Constant) and \
            isinstance(exc.args[0].value, str):
        message = exc.args[0].value
    ok = _as_tensor(src, node.test.operand) if isinstance(node.test, ast.UnaryOp) and \
        isinstance(node.test.op, ast.Not) else None
    if ok is None:
        bad = _as_tensor(src, node.test)
        ok = None if bad is None else f"torch.logical_not({bad})"
    if ok is None:
        return None
    ind = src.indent(node)
    unit = "\t" if "\t" in ind else "    "
    text = (f"{ind}if {_GUARD}:  # tracecheck fix: the check stays in the graph as an assert\n"
            f"{ind}{unit}torch._assert_async({ok}, {message!r})\n"
            f"{ind}elif {src.segment(node.test)}:\n" + "".join(src.lines[node.body[0].lineno - 1:node.end_lineno]))
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the guard at line {node.lineno} raises as before in eager; compiled, it is a torch._assert_async in the " \
        "graph (a RuntimeError with the same message when it fails)"


def _is_item(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item" and \
        not node.args and not node.keywords


def _assert_statement(src: Source, node: ast.Assert) -> "tuple[tuple[Edit, ...], str] | None":
    """``assert TEST[, "message"]`` on tensor data (XLM's ``assert lengths.max().item() <= slen``): the same check as
    a graph assert while compiling, the statement itself in eager."""
    ok = _as_tensor(src, node.test)
    if ok is None or (node.msg is not None and not (isinstance(node.msg, ast.Constant) and
                                                    isinstance(node.msg.value, str))):
        return None
    message = node.msg.value if node.msg is not None else f"assertion failed: {_one_line(src.segment(node.test))}"
    ind = src.indent(node)
    unit = "\t" if "\t" in ind else "    "
    text = (f"{ind}if {_GUARD}:  # tracecheck fix: the check stays in the graph as an assert\n"
            f"{ind}{unit}torch._assert_async({ok}, {message!r})\n{ind}else:\n{ind}{unit}"
            + "".join(src.lines[node.lineno - 1:node.end_lineno]).lstrip())
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the assert at line {node.lineno} runs as before in eager; compiled, it is a torch._assert_async in the graph"


@rewrite("capture-scalar-outputs", "capture .item()/.tolist() as graph values",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_scalar_outputs", setting=True)
def _capture_scalar(src: Source, site: Site, probe: Source):
    if "non-integer" in site.gb_type:  # 'Tensor.tolist() with non-integer tensor': the flag does not cover it
        return None
    if not (site.gb_type.startswith(_SCALAR_GB) or
            (site.kind == K.DATA_DEPENDENT and (".item()" in site.code or ".tolist()" in site.code)
             and not site.gb_type.startswith(_BRANCH_GB))):
        return None
    return (probe.module_setting(_CAPTURE_SCALAR),
            "torch._dynamo.config.capture_scalar_outputs = True: Dynamo keeps the scalar in the graph")


@rewrite("capture-dynamic-output-shape-ops", "capture ops whose output shape depends on the data",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_dynamic_output_shape_ops", setting=True)
def _capture_dynamic(src: Source, site: Site, probe: Source):
    if not site.gb_type.startswith(_DYNAMIC_SHAPE_GB):
        return None
    return (probe.module_setting("torch._dynamo.config.capture_dynamic_output_shape_ops = True  # tracecheck fix: "
                               "nonzero/boolean masks stay in the graph with unbacked sizes"),
            "torch._dynamo.config.capture_dynamic_output_shape_ops = True: nonzero and boolean-mask indexing "
            "stay in the graph")


def _branch(src: Source, site: Site, ops: bool = False) -> ast.If | None:
    """The ``if`` at the site, when Dynamo broke on its test: a branch on a tensor, or (``ops``) an op in the test
    that returns a Python value from the data (``torch.equal``: gb_type 'Data dependent operator')."""
    node = src.statement_at(site.line)
    if not isinstance(node, ast.If) or node.lineno != site.line or not src.owns_its_lines(node):
        return None
    if src.lines[node.lineno - 1].lstrip().startswith("elif"):  # an elif is not a statement of its own
        return None
    if not (site.gb_type.startswith(_BRANCH_GB) or (site.kind == K.DATA_DEPENDENT and not site.gb_type)
            or (ops and site.gb_type.startswith(_DYNAMIC_SHAPE_GB[1]))):
        return None
    return node


def _assigned(body: list[ast.stmt]) -> "tuple[str, ast.expr] | None":
    """``name = expr`` or ``return expr`` as a branch's only statement: (name or "return", expr)."""
    if len(body) != 1:
        return None
    s = body[0]
    if isinstance(s, ast.Return) and s.value is not None:
        return "return", s.value
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id, s.value
    return None


@rewrite("torch-cond", "a value branch as torch.cond",
         "torch.cond (PyTorch docs, Control Flow - Cond; Common Graph Breaks, 'Data-dependent operations')",
         library=True)
def _torch_cond(src: Source, site: Site, probe: Source):
    got = _branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    then = _assigned(node.body)
    if then is None:
        return None
    if node.orelse:
        other = _assigned(node.orelse)
        if other is None or other[0] != then[0]:
            return None
        other_text = src.segment(other[1])
    elif then[0] != "return":
        other_text = f"{then[0]}.clone()"  # no else: the value it had (a branch may not return an input as is)
    else:
        return None
    target, pred = then[0], scalar.test(src) if scalar else src.segment(node.test)
    call = f"torch.cond({pred}, lambda: {src.segment(then[1])}, lambda: {other_text})"
    line = f"return {call}" if target == "return" else f"{target} = {call}"
    edit = src.whole_lines(node, src.indent(node) + line + "  # tracecheck fix: both branches in one graph")
    return (scalar.replace(src, edit) if scalar else edit,) + src.needs_torch_import(), \
        f"torch.cond: both branches are traced and the one the data picks runs (line {node.lineno})" + \
        (f"; the .item() at line {scalar.assign.lineno} is removed" if scalar else "")


_EXITS = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.Global,
          ast.Nonlocal)


def _differ(a: ast.AST, b: ast.AST) -> "list[tuple[ast.expr, ast.expr]] | None":
    """Where two statements of one shape differ: the pairs of expressions at the first places they do (None when their
    shapes differ elsewhere than in an expression)."""
    if type(a) is not type(b):
        return [(a, b)] if isinstance(a, ast.expr) and isinstance(b, ast.expr) else None
    if ast.dump(a) == ast.dump(b):
        return []
    if isinstance(a, ast.Call) and isinstance(b, ast.Call) and ast.dump(a.func) != ast.dump(b.func):
        return [(a, b)]  # another function called: the calls' values differ, not a callee to select
    out: list[tuple[ast.expr, ast.expr]] = []
    for (name, x), (_, y) in zip(ast.iter_fields(a), ast.iter_fields(b)):
        if isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return None
            pairs = list(zip(x, y))
        else:
            pairs = [(x, y)]
        for u, v in pairs:
            if isinstance(u, ast.AST) and isinstance(v, ast.AST):
                got = _differ(u, v)
                if got is None:
                    return None
                out += got
            elif u != v:
                if isinstance(a, ast.expr):
                    return [(a, b)]  # (a constant's value, a name's id): the expression itself differs
                return None
    return out


def _assigns_only(stmts: list[ast.stmt]) -> bool:
    """Statements that only assign (names, attributes, items), or ``if`` blocks of such (a cached attribute:
    ``if not hasattr(self, "x"): self.x = ...``): nothing run for its effect alone."""
    for s in stmts:
        if isinstance(s, ast.If):
            if not (_assigns_only(s.body) and _assigns_only(s.orelse)):
                return False
        elif not isinstance(s, (ast.Assign, ast.AnnAssign)):
            return False
    return True


def _written(stmts: list[ast.stmt], src: Source) -> set[str]:
    """Names and attribute/subscript targets (as text) the statements assign."""
    out: set[str] = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                out.add(src.segment(n))
    return out


def _read(nodes: "list[ast.AST]", src: Source) -> set[str]:
    out: set[str] = set()
    for s in nodes:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Load):
                out.add(src.segment(n))
    return out


@rewrite("select", "both branches run, the last statement takes torch.where",
         "torch.where (PyTorch docs, Common Graph Breaks, 'Data-dependent operations': compute both sides and "
         "select with a tensor condition)", library=True)
def _select(src: Source, site: Site, probe: Source):
    node = _branch(src, site)
    if _scalar_branch(src, site) is not None:  # a test on an .item() scalar: tensor-where keeps it a tensor
        return None
    if node is None or not node.orelse or not node.body or (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
        return None
    if any(isinstance(n, _EXITS) for n in ast.walk(node)):
        return None
    last_a, last_b = node.body[-1], node.orelse[-1]
    pairs = _differ(last_a, last_b)
    if not pairs or len(pairs) != 1 or isinstance(last_a, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
        return None
    a, b = pairs[0]
    pre_a, pre_b = node.body[:-1], node.orelse[:-1]
    if not (_assigns_only(pre_a) and _assigns_only(pre_b)):
        return None  # a statement run for its effect (an append, a print) would now run on the other side's inputs
    # the then-branch's statements run first, then the else-branch's, then the last one: what the first writes must
    # not be read after it by the other side, nor what the second writes by the then-side's value, and no name or
    # attribute may be written on both sides (the second would win whatever the test says)
    written_a, written_b = _written(pre_a, src), _written(pre_b, src)
    if written_a & _read([*pre_b, b], src) or written_b & _read([a], src) or written_a & written_b:
        return None
    if not all(src.owns_its_lines(s) for s in (*node.body, *node.orelse)):
        return None
    ind = src.indent(node)
    last = src.segment(last_a)
    start = src.offset(src.span(last_a)[0])
    e0, e1 = src.span(a)
    lo, hi = src.offset(e0) - start, src.offset(e1) - start
    last = last[:lo] + f"torch.where(_tc_pred, {src.segment(a)}, {src.segment(b)})" + last[hi:]
    prefix = "".join(textwrap.indent(textwrap.dedent("".join(src.lines[s.lineno - 1:s.end_lineno])), ind)
                     for s in (*pre_a, *pre_b))
    text = (f"{ind}_tc_pred = {src.segment(node.test)}  # tracecheck fix: both branches run, torch.where picks "
            f"(was `if {_one_line(src.segment(node.test))}:`)\n" + prefix + ind + last)
    both = sorted(written_a | written_b)
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the `if` at line {node.lineno}: both branches' statements run, and their last one takes " \
        f"torch.where(test, `{_one_line(src.segment(a))}`, `{_one_line(src.segment(b))}`)" + (
            f"; {', '.join(f'`{w}`' for w in both)} now assigned for every input (review that nothing after the "
            "`if` reads them as a sign of which side ran)" if both else "")


@rewrite("branchless", "apply the transform unconditionally",
         "the hint of gb_type 'Data-dependent branching': make `if tensor_cond: x = transform(x)` branchless")
def _branchless(src: Source, site: Site, probe: Source):
    got = _branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    if node.orelse or any(isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for s in ast.walk(node)):
        return None
    body = "".join(src.lines[node.body[0].lineno - 1:node.end_lineno])
    text = textwrap.indent(textwrap.dedent(body), src.indent(node)).rstrip("\n")
    note = f"the branch at line {node.lineno} always runs (its transform must leave other inputs unchanged)"
    was = f"if {_one_line(src.segment(node.test))}:"
    if scalar:  # the scalar is read by the test alone: its .item() goes with it
        was += f"` on `{_one_line(src.segment(scalar.assign))}"
        note += f"; the .item() at line {scalar.assign.lineno} is removed"
    edit = src.whole_lines(node, src.indent(node) + f"# tracecheck fix: branchless (was `{was}`)\n" + text)
    return (scalar.replace(src, edit) if scalar else edit,), note


@rewrite("compile-guard", "skip a host-side fast path or check while compiling",
         "torch.compiler.is_compiling() (PyTorch docs: code to skip under torch.compile)")
def _compile_guard(src: Source, site: Site, probe: Source):
    got = _branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    start, end = src.span(node.test)
    edit = Edit(start, end, f"not {_GUARD} and ({scalar.test(src) if scalar else src.segment(node.test)})")
    takes = "else branch" if node.orelse else "code after it"
    return (scalar.replace(src, edit) if scalar else edit,) + src.needs_torch_import(), \
        f"while compiling, the `if` at line {node.lineno} is skipped and its {takes} runs; eager is unchanged" + \
        (f" (it tests the tensor: the .item() at line {scalar.assign.lineno} is removed)" if scalar else "")


def _logging_call(src: Source, site: Site) -> ast.Expr | None:
    node = src.statement_at(site.line)
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)) or not src.owns_its_lines(node):
        return None
    func = node.value.func
    if isinstance(func, ast.Name) and func.id == "print":
        return node
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        owner = func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if name in _LOG_OBJECTS or name.endswith(("logger", "log")):
            return node
    return None


_LOGGING_GB = "logging.Logger method not supported"


@rewrite("ignore-logging", "a library's logger calls as no-ops while compiling",
         "torch._dynamo.config.ignore_logging_functions (the hint of gb_type 'logging.Logger method not supported "
         "for non-export cases')", setting=True, library_only=True)
def _ignore_logging(src: Source, site: Site, probe: Source):
    if not site.gb_type.startswith(_LOGGING_GB):
        return None
    node = src.statement_at(site.line)
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and c.lineno <= site.line <= (c.end_lineno or c.lineno)] if node is not None else []
    if len(calls) != 1 or not calls[0].func.attr.isidentifier():
        return None
    method = calls[0].func.attr
    name = "logging" if not probe.binds("logging") else "_tc_logging"
    lines = [f"import logging{'' if name == 'logging' else ' as _tc_logging'}  # noqa: E402  (tracecheck fix)",
             f"torch._dynamo.config.ignore_logging_functions.add({name}.Logger.{method})  # tracecheck fix: "
             f"`.{method}(...)` of a logging.Logger is a no-op while compiling (it logs in eager)"]
    return probe.end_setting(lines), \
        f"logging.Logger.{method} is ignored while compiling (torch._dynamo.config.ignore_logging_functions): " \
        "compiled code does not log it, eager does"


@rewrite("reorderable-logging", "print after the graph runs",
         "torch._dynamo.config.reorderable_logging_functions (the hint of gb_type 'Failed to trace builtin "
         "operator' for print)", setting=True)
def _reorderable(src: Source, site: Site, probe: Source):
    node = _logging_call(src, site)
    if node is None or not (isinstance(node.value.func, ast.Name) and node.value.func.id == "print"):
        return None
    call = node.value
    # Dynamo reorders a print of graph values only; an f-string or str() of a tensor still breaks the graph
    if call.keywords or not all(isinstance(a, (ast.Name, ast.Attribute, ast.Constant)) for a in call.args):
        return None
    return probe.module_setting("torch._dynamo.config.reorderable_logging_functions.add(print)  # tracecheck fix: "
                              "prints run after the graph"), \
        "print is reorderable: Dynamo runs it after the graph, with the graph's values"


@rewrite("compile-guard-logging", "skip logging while compiling",
         "torch.compiler.is_compiling() (PyTorch docs: code to skip under torch.compile)", library=True)
def _guard_logging(src: Source, site: Site, probe: Source):
    node = _logging_call(src, site)
    if node is None:
        return None
    ind = src.indent(node)
    body = "".join(src.lines[node.lineno - 1:node.end_lineno])
    unit = "\t" if "\t" in ind else "    "  # a tab-indented file stays tab-indented
    text = f"{ind}if not {_GUARD}:  # tracecheck fix: logs in eager only\n" + textwrap.indent(body, unit)
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the logging call at line {site.line} runs in eager only (skipped while compiling)"


def _dotted(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) or (isinstance(node, ast.Attribute) and _dotted(node.value))


def c_call_at(src: Source, line: int, builtin: str) -> "dict[str, Any] | str":
    """The call of the C function ``builtin`` (the finding's context) on ``line``: ``callee`` (a dotted name),
    ``params`` (a name per argument: the argument's own name where it is a plain variable, ``argN`` else; a
    keyword's name), ``positional``, the call's ``first`` and ``last`` lines and the callee's ``span``. A string
    says why there is none to rewrite."""
    node = src.statement_at(line)
    if node is None:
        return "no statement on that line"
    name = builtin[:-len(".__call__")] if builtin.endswith(".__call__") else builtin
    last = name.rpartition(".")[2]
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and c.lineno <= line <= (c.end_lineno or c.lineno)
             and _dotted(c.func) and src.segment(c.func).rpartition(".")[2] == last]
    if len(calls) != 1:
        return f"{len(calls) or 'no'} calls of `{last}` on line {line} (a C function called under another name " \
               "is not followed)"
    call = calls[0]
    root = src.segment(call.func).split(".")[0]
    if root in ("torch", "self"):
        return f"`{src.segment(call.func)}` is not a module-level name of the file"
    scope = _scope(src.tree, node)
    bound = [n for n in ast.walk(scope) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == root for t in n.targets)] if scope is not src.tree else []
    if bound:  # an OpBuilder's loader (`op_module = builder.load()`): no name the copy can rebind holds the callee
        return f"`{src.segment(call.func)}` is called through `{root}`, a local of its function " \
               f"(`{_one_line(src.segment(bound[0]))}`), which no module-level name holds for a custom op to " \
               "replace; where the same call sits in an autograd.Function (the wrapper's training path), fix " \
               "converts that Function"
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return "the call unpacks *args/**kwargs; a custom op needs one parameter per argument"
    # the op's parameters may not hide the names its body reads (torch, the callee's module) nor tracecheck's own
    reserved = {"torch", root}
    params: list[str] = []
    for i, a in enumerate(call.args):
        ok = isinstance(a, ast.Name) and not keyword.iskeyword(a.id) and a.id not in reserved \
            and not a.id.startswith("_tc_") and a.id not in params
        params.append(a.id if ok else f"arg{i}")
    for k in call.keywords:
        if k.arg in reserved or (k.arg or "").startswith("_tc_"):
            return f"the keyword argument {k.arg}= would hide a name the custom op reads"
        params.append(k.arg or "")
    if len(set(params)) != len(params):
        return "two arguments would share a parameter name"
    f = call.func
    return {"callee": src.segment(f), "params": params, "positional": len(call.args),
            "first": call.lineno, "last": call.end_lineno or call.lineno,
            "span": (src.position(f.lineno, f.col_offset), src.position(f.end_lineno or f.lineno, f.end_col_offset or 0))}


@rewrite("custom-op", "a C function called from model code as a custom op",
         "torch.library.custom_op with register_fake and register_autograd (PyTorch custom-ops manual); the "
         "remedy for gb_type 'Attempted to call function marked as skipped' on a C/pybind11 function", setting=True)
def _custom_op(src: Source, site: Site, probe: Source):
    facts = site.facts or {}
    if site.kind != K.PYBIND_BUILTIN or "definition" not in facts:
        return None
    if site.file:
        return _library_custom_op(probe, site, facts)
    top = next(n for n in src.tree.body if n.lineno <= site.line <= (n.end_lineno or n.lineno))
    at = min([top.lineno] + [d.lineno for d in getattr(top, "decorator_list", [])])
    start, end = facts["span"]
    return (Edit((at, 0), (at, 0), facts["definition"]), Edit(tuple(start), tuple(end), facts["name"])) \
        + src.needs_torch_import(), facts["note"]


def _library_custom_op(src: Source, site: Site, facts: dict[str, Any]):
    """A C call in a library's file: the probe's file, at its end, imports that module, keeps the C function under
    ``call_as``, defines the custom op (which calls it through that name) and rebinds the callee there, so the
    library's own line calls the op. The library's files are not edited."""
    alias, callee, module = facts["module_alias"], facts["callee"], facts["module"]
    where = f"{facts.get('file_label') or os.path.basename(site.file)}:{site.line}"
    block = ("" if src.text.endswith("\n") or not src.text else "\n") + "\n\n" + "\n".join([
        f"# ---- tracecheck fix: `{callee}`, called at {where} ({module}), as a custom op: Dynamo cannot trace a "
        "C/pybind11 function ----",
        "import importlib as _tc_importlib  # noqa: E402",
        f"{alias} = _tc_importlib.import_module({module!r})",
        f"{facts['call_as']} = {alias}.{callee}",
        "", "", facts["definition"].rstrip("\n"), "", "",
        f"{alias}.{callee} = {facts['name']}  # the library's call now goes through the custom op", ""])
    end = (len(src.lines) + 1, 0)
    return (Edit(end, end, block),) + src.needs_torch_import(), \
        facts["note"] + f" (installed in {module} by the probe's file: the library is not edited)"
