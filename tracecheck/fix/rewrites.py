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
    """One rewrite proposed for one site: its edits, and a line saying what the change does."""

    rewrite: str
    edits: tuple[Edit, ...]
    note: str


@dataclass(frozen=True)
class Rewrite:
    id: str
    title: str
    #: the PyTorch documentation the rewrite follows
    doc: str
    propose: Callable[["Source", Site], "tuple[tuple[Edit, ...], str] | None"]


REWRITES: dict[str, Rewrite] = {}


def rewrite(id: str, title: str, doc: str):  # noqa: A002 - the registry's field name
    def register(fn: Callable[["Source", Site], "tuple[tuple[Edit, ...], str] | None"]):
        REWRITES[id] = Rewrite(id, title, doc, fn)
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

    def needs_torch_import(self) -> tuple[Edit, ...]:
        """An ``import torch`` at the top when the module does not bind the name ``torch`` itself."""
        for node in self.tree.body:
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" and a.asname is None
                                                    for a in node.names):
                return ()
        at = header_end(self.tree)
        return (Edit((at, 0), (at, 0), "import torch\n"),)


def candidates(src: Source, site: Site) -> list[Candidate]:
    """Every rewrite that applies to ``site``, in the order they are worth trying (registry order)."""
    out = []
    for r in REWRITES.values():
        if site.file and r.id != "custom-op":
            continue  # a library's line: only the op the probe's file installs reaches it (its text is not src)
        got = r.propose(src, site)
        if got is not None:
            edits, note = got
            out.append(Candidate(r.id, edits, note))
    return out


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

    def test(self, src: Source) -> str:
        """The ``if``'s test with the tensor in place of the name."""
        t0, t1 = src.span(self.branch.test)
        n0, n1 = src.span(next(n for n in ast.walk(self.branch.test) if isinstance(n, ast.Name) and n.id == self.name))
        return src.text[src.offset(t0):src.offset(n0)] + self.tensor + src.text[src.offset(n1):src.offset(t1)]

    def replace(self, src: Source, edit: Edit) -> Edit:
        """``edit`` (which starts on the ``if``'s first line) widened up to the assignment, which it drops: one
        edit, so that new_span maps the lines below it; the comment and blank lines between the two stay."""
        after = ((self.assign.end_lineno or self.assign.lineno) + 1, 0)
        return Edit((self.assign.lineno, 0), edit.end, src.text[src.offset(after):src.offset(edit.start)] + edit.text)


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
    return _Scalar(assign, branch, name, tensor, dead=reads == 1 and not shared)


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
         "instead of reading it with .item() and branching on it)")
def _tensor_where(src: Source, site: Site):
    scalar = _scalar_branch(src, site)
    if scalar is None or not scalar.dead or scalar.branch.orelse:
        return None
    node = scalar.branch
    then = _assigned(node.body)
    # the else side is the name's value before the `if`: it must have one
    if then is None or then[0] in ("return", scalar.name) or not _bound_before(src, node, then[0]):
        return None
    target = then[0]
    line = f"{target} = torch.where({scalar.test(src)}, {src.segment(then[1])}, {target})"
    edit = src.whole_lines(node, src.indent(node) + line + "  # tracecheck fix: a tensor select, no .item()")
    return (scalar.replace(src, edit),) + src.needs_torch_import(), \
        f"torch.where: the `if` at line {node.lineno} tests the tensor and the .item() at line " \
        f"{scalar.assign.lineno} is removed; both sides are computed and the test picks one (exact while " \
        f"`{_one_line(src.segment(then[1]))}` keeps {target}'s shape and dtype)"


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
         "torch._dynamo.config.capture_scalar_outputs)")
def _torch_check(src: Source, site: Site):
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


@rewrite("capture-scalar-outputs", "capture .item()/.tolist() as graph values",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_scalar_outputs")
def _capture_scalar(src: Source, site: Site):
    if "non-integer" in site.gb_type:  # 'Tensor.tolist() with non-integer tensor': the flag does not cover it
        return None
    if not (site.gb_type.startswith(_SCALAR_GB) or
            (site.kind == K.DATA_DEPENDENT and (".item()" in site.code or ".tolist()" in site.code)
             and not site.gb_type.startswith(_BRANCH_GB))):
        return None
    return (src.module_setting(_CAPTURE_SCALAR),
            "torch._dynamo.config.capture_scalar_outputs = True: Dynamo keeps the scalar in the graph")


@rewrite("capture-dynamic-output-shape-ops", "capture ops whose output shape depends on the data",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_dynamic_output_shape_ops")
def _capture_dynamic(src: Source, site: Site):
    if not site.gb_type.startswith(_DYNAMIC_SHAPE_GB):
        return None
    return (src.module_setting("torch._dynamo.config.capture_dynamic_output_shape_ops = True  # tracecheck fix: "
                               "nonzero/boolean masks stay in the graph with unbacked sizes"),
            "torch._dynamo.config.capture_dynamic_output_shape_ops = True: nonzero and boolean-mask indexing "
            "stay in the graph")


def _branch(src: Source, site: Site) -> ast.If | None:
    node = src.statement_at(site.line)
    if not isinstance(node, ast.If) or node.lineno != site.line or not src.owns_its_lines(node):
        return None
    if src.lines[node.lineno - 1].lstrip().startswith("elif"):  # an elif is not a statement of its own
        return None
    if not (site.gb_type.startswith(_BRANCH_GB) or (site.kind == K.DATA_DEPENDENT and not site.gb_type)):
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
         "torch.cond (PyTorch docs, Control Flow - Cond; Common Graph Breaks, 'Data-dependent operations')")
def _torch_cond(src: Source, site: Site):
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


@rewrite("branchless", "apply the transform unconditionally",
         "the hint of gb_type 'Data-dependent branching': make `if tensor_cond: x = transform(x)` branchless")
def _branchless(src: Source, site: Site):
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
def _compile_guard(src: Source, site: Site):
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


@rewrite("reorderable-logging", "print after the graph runs",
         "torch._dynamo.config.reorderable_logging_functions (the hint of gb_type 'Failed to trace builtin "
         "operator' for print)")
def _reorderable(src: Source, site: Site):
    node = _logging_call(src, site)
    if node is None or not (isinstance(node.value.func, ast.Name) and node.value.func.id == "print"):
        return None
    call = node.value
    # Dynamo reorders a print of graph values only; an f-string or str() of a tensor still breaks the graph
    if call.keywords or not all(isinstance(a, (ast.Name, ast.Attribute, ast.Constant)) for a in call.args):
        return None
    return src.module_setting("torch._dynamo.config.reorderable_logging_functions.add(print)  # tracecheck fix: "
                              "prints run after the graph"), \
        "print is reorderable: Dynamo runs it after the graph, with the graph's values"


@rewrite("compile-guard-logging", "skip logging while compiling",
         "torch.compiler.is_compiling() (PyTorch docs: code to skip under torch.compile)")
def _guard_logging(src: Source, site: Site):
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
         "remedy for gb_type 'Attempted to call function marked as skipped' on a C/pybind11 function")
def _custom_op(src: Source, site: Site):
    facts = site.facts or {}
    if site.kind != K.PYBIND_BUILTIN or "definition" not in facts:
        return None
    if site.file:
        return _library_custom_op(src, site, facts)
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
