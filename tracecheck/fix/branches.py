"""What the code at a break looks like, read with ``ast`` for the rewrites (rewrites.py): the ``.item()`` scalar an
``if`` tests and who else reads it, the branch and what its sides assign or change, a guard's test as a tensor, a
logging call, how a name is bound. Pure: no user code runs, no torch."""
from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from ..model.taxonomy import BRANCH_GB, DYNAMIC_SHAPE_GB, SCALAR_GB, K
from .sourcetext import Edit, Site, Source, one_line

_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
_LOG_OBJECTS = {"logging", "logger", "log", "LOGGER", "_logger", "warnings"}
_SCALAR_TESTS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


@dataclass(frozen=True)
class Scalar:
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
        # detached: .item() carried no gradient, and the value may now reach arithmetic that trains; in float64 where
        # it is a float: .item() gave a Python float, whose arithmetic a float16 tensor's would not match
        ind, name = src.indent(self.assign), self.name
        kept = "" if self.dead else (
            f"{ind}{name} = {self.tensor}.detach()  # tracecheck fix: kept a tensor (no .item())\n"
            f"{ind}{name} = {name}.double() if {name}.is_floating_point() else {name}  # (a Python float's precision)\n")
        return Edit((self.assign.lineno, 0), edit.end,
                    kept + src.text[src.offset(after):src.offset(edit.start)] + edit.text)


#: what holds a statement's names: its function, or the module at top level
Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef


def scope_of(tree: ast.Module, node: ast.stmt) -> Scope:
    """The innermost function holding ``node`` (the module at top level)."""
    best: Scope = tree
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.lineno <= node.lineno <= (f.end_lineno or 0) \
                and f is not node and (isinstance(best, ast.Module) or f.lineno >= best.lineno):
            best = f
    return best


def _siblings(tree: ast.Module, node: ast.stmt) -> list[ast.stmt]:
    for parent in ast.walk(tree):
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and any(v is node for v in value):
                return value
    return []


def scalar_branch(src: Source, site: Site) -> Scalar | None:
    """The ``.item()`` scalar an ``if`` tests, from a site at either statement: the ``.item()`` line (gb_type
    'Unsupported Tensor.item() call') or the ``if`` (the branch on it, once the scalar is captured)."""
    node = src.statement_at(site.line)
    body = _siblings(src.tree, node) if node is not None else []
    at = next((i for i, s in enumerate(body) if s is node), None)
    if at is None:
        return None
    assign: ast.stmt
    branch: ast.stmt
    if isinstance(node, ast.If) and node.lineno == site.line and branch_if(src, site) is not None and at > 0:
        assign, branch = body[at - 1], node
    elif isinstance(node, ast.Assign) and (site.gb_type.startswith(SCALAR_GB[0]) or site.kind == K.DATA_DEPENDENT) \
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
    scope = scope_of(src.tree, branch)
    reads = sum(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Store) for n in ast.walk(scope))
    shared = any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(scope))
    receiver = call.func.value
    tensor = src.segment(receiver)
    if not isinstance(receiver, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) or "\n" in tensor:
        tensor = f"({tensor})"
    safe = not shared and _reads_take_a_tensor(scope, name, test, assign)
    return Scalar(assign, branch, name, tensor, dead=reads == 1 and not shared, tensor_safe=safe)


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
        if isinstance(up, ast.Call) and n in up.args and shows(up):
            continue  # (print or a logger call: the value is only shown)
        return False
    return True


def branch_site(src: Source, site: Site) -> "tuple[ast.If, Scalar | None] | None":
    """The ``if`` a branch rewrite changes at ``site``, with the dead ``.item()`` scalar it tests (the rewrite
    tests the tensor and drops the assignment, whose ``.item()`` would break the graph still)."""
    scalar = scalar_branch(src, site)
    if scalar is not None and scalar.dead:
        return scalar.branch, scalar
    node = branch_if(src, site)
    return None if node is None else (node, None)


def branch_at(src: Source, site: Site) -> ast.If | None:
    """The ``if`` that the branch rewrites (torch-cond, branchless, compile-guard, tensor-where) change for
    ``site``: the site's own, or the one testing the ``.item()`` scalar assigned on the site's line."""
    got = branch_site(src, site)
    if got is not None:
        return got[0]
    scalar = scalar_branch(src, site)  # (torch-check: the scalar stays)
    return None if scalar is None else scalar.branch


def bound_before(src: Source, node: ast.stmt, name: str) -> bool:
    """``name`` is a parameter of ``node``'s function or assigned above ``node`` in it."""
    scope = scope_of(src.tree, node)
    args = getattr(scope, "args", None)
    if args is not None and name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                     args.vararg, args.kwarg) if a is not None}:
        return True
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) and n.lineno < node.lineno
               for n in ast.walk(scope))


def raise_statement(src: Source, body: list[ast.stmt]) -> "tuple[str, str] | None":
    """``raise E("message")`` as a branch's only statement: (E, the message's literal)."""
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].cause is not None:
        return None
    exc = body[0].exc
    if not (isinstance(exc, ast.Call) and dotted(exc.func) and len(exc.args) == 1 and not exc.keywords
            and isinstance(exc.args[0], ast.Constant) and isinstance(exc.args[0].value, str)):
        return None  # a formatted message cannot be: Dynamo refuses a torch._check message that reads traced values
    return src.segment(exc.func), src.segment(exc.args[0])


def as_tensor(src: Source, test: ast.expr) -> str | None:
    """A data-dependent test written as a tensor expression (for ``torch._assert_async``), or None where its form is
    not one of those known to be a tensor: ``not``/``and``/``or`` of such, ``torch.equal(a, b)``, a comparison, and a
    reduction to one value (``.any()``, ``.all()``, ``torch.any(...)``, ``torch.all(...)``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = as_tensor(src, test.operand)
        return None if inner is None else f"torch.logical_not({inner})"
    if isinstance(test, ast.BoolOp) and len(test.values) == 2:
        a, b = (as_tensor(src, v) for v in test.values)
        fn = "torch.logical_and" if isinstance(test.op, ast.And) else "torch.logical_or"
        return None if a is None or b is None else f"{fn}({a}, {b})"
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        # a scalar read with .item() compares as the 0-dim tensor it came from
        text, start = src.segment(test), src.offset(src.span(test)[0])
        items = [(c, r) for c in ast.walk(test) if isinstance(c, ast.expr) and (r := item_receiver(c)) is not None]
        for call, receiver in sorted(items, key=lambda cr: -src.offset(src.span(cr[0])[0])):
            lo, hi = src.offset(src.span(receiver)[1]) - start, src.offset(src.span(call)[1]) - start
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


def item_receiver(node: ast.AST) -> ast.expr | None:
    """``t`` where ``node`` is ``t.item()``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item" and \
            not node.args and not node.keywords:
        return node.func.value
    return None


def branch_if(src: Source, site: Site, ops: bool = False) -> ast.If | None:
    """The ``if`` at the site, when Dynamo broke on its test: a branch on a tensor, or (``ops``) an op in the test
    that returns a Python value from the data (``torch.equal``: gb_type 'Data dependent operator')."""
    node = src.statement_at(site.line)
    if not isinstance(node, ast.If) or node.lineno != site.line or not src.owns_its_lines(node):
        return None
    if src.lines[node.lineno - 1].lstrip().startswith("elif"):  # an elif is not a statement of its own
        return None
    if not (site.gb_type.startswith(BRANCH_GB) or (site.kind == K.DATA_DEPENDENT and not site.gb_type)
            or (ops and site.gb_type.startswith(DYNAMIC_SHAPE_GB[1]))):
        return None
    return node


def assigned_one(body: list[ast.stmt]) -> "tuple[str, ast.expr] | None":
    """``name = expr`` or ``return expr`` as a branch's only statement: (name or "return", expr)."""
    if len(body) != 1:
        return None
    s = body[0]
    if isinstance(s, ast.Return) and s.value is not None:
        return "return", s.value
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id, s.value
    return None


EXITS = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.Global,
          ast.Nonlocal)


def differ(a: ast.AST, b: ast.AST) -> "list[tuple[ast.expr, ast.expr]] | None":
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
                got = differ(u, v)
                if got is None:
                    return None
                out += got
            elif u != v:
                if isinstance(a, ast.expr) and isinstance(b, ast.expr):  # (b is: a's type)
                    return [(a, b)]  # (a constant's value, a name's id): the expression itself differs
                return None
    if isinstance(a, ast.expr) and isinstance(b, ast.expr) and not isinstance(a, ast.Constant) and \
            any(isinstance(u, ast.Constant) for u, _ in out):
        return [(a, b)]  # two constants are no tensors to select between: the expression that holds them is
    return out


#: calls that change their receiver in place: a torch in-place op (``add_``), or a container's
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "update", "clear", "setdefault", "add", "discard"}


#: conversions that give back the same value (``self.inv_freq = self.inv_freq.to(device)``)
_CONVERSIONS = {"to", "contiguous", "float", "double", "half", "bfloat16", "cpu", "cuda", "detach"}


def harmless(stmts: list[ast.stmt], src: Source, branch: ast.If) -> bool:
    """May ``stmts`` (a side of ``branch``, before its last statement) run for inputs that take the other side too?
    Only where running them there changes nothing the rest can see: a temporary (a name neither bound before the
    ``if`` nor read after it), an attribute filled once (``if not hasattr(obj, "x"): obj.x = ...``, longrope's
    ``long_inv_freq``), or an attribute given its own value converted (``obj.x = obj.x.to(device)``); and no call
    that changes something in place."""
    scope = scope_of(src.tree, branch)
    args = getattr(scope, "args", None)
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} if args is not None else set()
    end = branch.end_lineno or branch.lineno

    def temporary(name: str) -> bool:
        return name not in params and not any(
            isinstance(n, ast.Name) and n.id == name and (
                isinstance(n.ctx, ast.Store) and n.lineno < branch.lineno or
                isinstance(n.ctx, ast.Load) and n.lineno > end) for n in ast.walk(scope))

    def targets(t: ast.expr) -> list[ast.expr]:
        return [x for e in t.elts for x in targets(e)] if isinstance(t, ast.Tuple) else [t]

    def cached(s: ast.If) -> bool:  # if not hasattr(obj, "x"): obj.x[, temporaries] = ...
        test = s.test
        if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
                and isinstance(test.operand.func, ast.Name) and test.operand.func.id == "hasattr"
                and len(test.operand.args) == 2 and isinstance(test.operand.args[1], ast.Constant)
                and isinstance(test.operand.args[1].value, str)) or s.orelse:
            return False
        owner, attr = src.segment(test.operand.args[0]), test.operand.args[1].value
        return all(isinstance(b, ast.Assign) and all(
            (isinstance(t, ast.Attribute) and src.segment(t) == f"{owner}.{attr}") or
            (isinstance(t, ast.Name) and temporary(t.id)) for x in b.targets for t in targets(x)) for b in s.body)

    def converted(s: ast.Assign) -> bool:  # obj.x = obj.x.to(...)
        v = s.value
        return len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute) and isinstance(v, ast.Call) and \
            isinstance(v.func, ast.Attribute) and v.func.attr in _CONVERSIONS and \
            src.segment(v.func.value) == src.segment(s.targets[0])

    for s in stmts:
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _MUTATORS or n.func.attr.endswith("_") and not n.func.attr.endswith("__"))
               for n in ast.walk(s)):
            return False
        if isinstance(s, ast.If) and cached(s):
            continue
        if isinstance(s, ast.Assign) and (converted(s) or all(
                isinstance(t, ast.Name) and temporary(t.id) for x in s.targets for t in targets(x))):
            continue
        return False
    return True


def accesses(nodes: "Sequence[ast.AST]", src: Source, ctx: type) -> set[str]:
    """Names and attribute/subscript expressions (as text) the nodes read (``ast.Load``) or assign (``ast.Store``)."""
    out: set[str] = set()
    for s in nodes:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ctx):
                out.add(n.id)
            elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ctx):
                out.add(src.segment(n))
    return out


@dataclass(frozen=True)
class Changes:
    """What statements change: the names and attributes they assign, and each object an item assignment changes in
    place (``s.buf[0] = 1`` changes ``s.buf``, which every alias of it, and a read of ``s`` before it, sees)."""

    assigned: frozenset[str]
    in_place: frozenset[str]

    @classmethod
    def of(cls, stmts: list[ast.stmt], src: Source) -> "Changes":
        items = {src.segment(n.value) for s in stmts for n in ast.walk(s)
                 if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)}
        return cls(frozenset(accesses(stmts, src, ast.Store)), frozenset(items))

    def seen_by(self, read: "set[str] | frozenset[str]") -> bool:
        """Does one of these reads see a change: the same text or a part of it (``s.buf.data`` of a changed
        ``s.buf``), or what holds an object changed in place (``s`` of ``s.buf``)?"""
        def under(a: str, b: str) -> bool:
            return a.startswith(b + ".") or a.startswith(b + "[")
        return any(r == c or under(r, c) for r in read for c in self.assigned | self.in_place) or \
            any(under(c, r) for r in read for c in self.in_place)


def shows(call: ast.Call) -> bool:
    """``print(...)`` or a logger's call (``logger.info(...)``, ``log.warning(...)``, ``warnings.warn(...)``)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        owner = func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        return name in _LOG_OBJECTS or name.endswith(("logger", "log"))
    return False


def logging_call(src: Source, site: Site) -> ast.Expr | None:
    node = src.statement_at(site.line)
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)) or not src.owns_its_lines(node):
        return None
    return node if shows(node.value) else None


def dotted(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) or (isinstance(node, ast.Attribute) and dotted(node.value))


def local_binding(src: Source, node: ast.stmt, name: str) -> str | None:
    """How ``name`` is bound in the function that holds ``node`` (an assignment's text, a parameter, an import, a
    ``for``/``with`` target), or None when it is not a local there."""
    scope = scope_of(src.tree, node)
    if scope is src.tree:
        return None
    args = getattr(scope, "args", None)
    if args is not None and name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                                                     args.kwarg) if a is not None}:
        return "a parameter"
    for n in ast.walk(scope):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == name
                                                               for a in n.names):
            return f"`{one_line(src.segment(n))}`"
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return None
    for n in ast.walk(scope):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
            stmt = src.statement_at(n.lineno)
            return f"`{one_line(src.segment(stmt))}`" if isinstance(stmt, ast.Assign) else "a loop or `with` target"
    return None
