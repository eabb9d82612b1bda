"""``tracecheck fix`` for a graph break in another file than the probe's (an installed library, a module of the
user's beside it), applied from the user's side: nothing in that file is edited.

Two ways, tried in this order (rewrites.py's registry says which rewrite is which):

* a **setting** of torch's, where the break's gb_type has one (``ignore_logging_functions`` for a library's logger
  call, ``reorderable_logging_functions`` for its ``print``, ``capture_scalar_outputs`` for its ``.item()``): a line
  in the probe's file, which holds for the whole process, as PyTorch's own guidance sets it;
* a **replacement of the one function** that holds the break: the rewrites ``fix`` has for model code (a
  ``torch.where`` select, a graph assert, ``torch.cond``, logging skipped while compiling) applied to a copy of that
  function's text, which the probe's patched copy defines and gives, as its code, to every function object made from
  the original (``_tc_swap_code``): the module's attribute, the names imported from it, a class's method, a
  decorator's wrapped function and a closure's cell all run the new code, and a nested function made later is made
  from it. The same change is also written as a unified diff against the library's file, for a pull request
  upstream.

Pure text and ``ast``/``symtable``: no user code runs here (the parent process).
"""
from __future__ import annotations

import ast
import hashlib
import os
import symtable
from dataclasses import dataclass

from .prelude import source_lines
from .sourcetext import reindent

#: the first line of each upstream diff ``fix`` writes: only such a file is ever overwritten
UPSTREAM_MARK = "# tracecheck fix: the same change for upstream, against"


def label(path: str, probe_dir: str = "") -> str:
    """How the fix names a file outside the probe's: from its top-level package down
    (``transformers/modeling_rope_utils.py``), the form a diff for that package's repository and the check in
    ``_tc_swap_code`` both use; a file in no package, relative to the probe's folder, else its name."""
    full = os.path.realpath(path)
    folder, top = os.path.dirname(full), None
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        top, folder = folder, os.path.dirname(folder)
    if top is not None:
        return os.path.relpath(full, os.path.dirname(top)).replace(os.sep, "/")
    if probe_dir:
        rel = os.path.relpath(full, os.path.realpath(probe_dir))
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return os.path.basename(full)


@dataclass(frozen=True)
class Function:
    """The innermost function of a library file that holds a break: what ``_tc_swap_code`` finds it by, and what
    its replacement must keep (the names its closure provides)."""

    name: str
    #: its ``co_firstlineno``: the first decorator's line, or the ``def`` line
    first: int
    #: the ``def`` line and the last line: the text the replacement is made from
    start: int
    end: int
    #: free variables (``symtable``), which the replacement declares so that its code takes the original's closure
    free: tuple[str, ...]
    qualname: str
    #: SHA-256 prefix of its source lines (``first`` to ``end``), which ``_tc_swap_code`` checks before swapping
    digest: str = ""


def function_at(tree: ast.Module, text: str, line: int) -> Function | None:
    """The innermost ``def`` whose body holds ``line``, where the copy can replace it (``why_not`` says why not)."""
    got = _replaceable(tree, text, line)
    return got if isinstance(got, Function) else None


def why_not(tree: ast.Module, text: str, line: int) -> str:
    """Why no function holding ``line`` can be replaced from the probe's copy ("" when one can)."""
    got = _replaceable(tree, text, line)
    return got if isinstance(got, str) else ""


def _replaceable(tree: ast.Module, text: str, line: int) -> "Function | str":
    best: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    path: list[str] = []
    in_class = False

    def walk(node: ast.AST, names: list[str], classy: bool) -> None:
        nonlocal best, path, in_class
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = names + [child.name]
                if isinstance(child, ast.ClassDef) or not (child.lineno <= line <= (child.end_lineno or 0)):
                    walk(child, inner, classy or isinstance(child, ast.ClassDef))
                    continue
                if child.body[0].lineno <= line:  # a line of its body, not of its signature or decorators
                    best, path, in_class = child, inner, classy
                walk(child, inner, classy)
            else:
                walk(child, names, classy)

    walk(tree, [], False)
    if best is None:
        return "the line is module-level code (or a lambda's, or a signature's): no function holds it to replace"
    if _multiline_literal(best):  # re-indented in the copy, its text would change
        return f"`{best.name}` holds a string literal over several lines, whose value the copy's re-indented text " \
               "would change"
    if in_class and any(isinstance(n, ast.Attribute) and n.attr.startswith("__") and not n.attr.endswith("__")
                        or isinstance(n, ast.Name) and n.id.startswith("__") and not n.id.endswith("__")
                        for n in ast.walk(best)):
        # a private name the class mangles (self.__x is self._C__x there): outside the class it is not
        return f"`{best.name}` reads a class-private name (`__x`), which only its class's own text mangles"
    first = min([best.lineno] + [d.lineno for d in best.decorator_list])
    end = best.end_lineno or best.lineno
    digest = hashlib.sha256("\n".join(source_lines(text)[first - 1:end]).encode()).hexdigest()[:16]
    return Function(best.name, first, best.lineno, end, _free(text, best), ".".join(path), digest)


def _multiline_literal(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Does the function hold a string literal over several lines other than its docstring? The block re-indents
    the function's text, which would change such a string's value."""
    doc = fn.body[0] if fn.body and isinstance(fn.body[0], ast.Expr) and \
        isinstance(getattr(fn.body[0], "value", None), ast.Constant) else None
    return any(isinstance(n, (ast.Constant, ast.JoinedStr)) and (n.end_lineno or n.lineno) > n.lineno
               and isinstance(getattr(n, "value", ""), (str, bytes, type(None))) and
               (doc is None or n is not doc.value) for n in ast.walk(fn))


def _free(text: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The function's free variables, as the compiler sees them (symtable of the whole file)."""
    try:
        table = symtable.symtable(text, "<library>", "exec")
    except SyntaxError:
        return ()
    found: list[tuple[str, ...]] = []

    def walk(t: symtable.SymbolTable) -> None:
        for child in t.get_children():
            if child.get_type() == "function" and child.get_name() == node.name and child.get_lineno() in (
                    node.lineno, *[d.lineno for d in node.decorator_list]):
                found.append(tuple(sorted(getattr(child, "get_frees", tuple)())))
            walk(child)

    walk(table)
    return found[0] if found else ()


#: the helper every block calls; defined once in the patched copy
SWAP_HELPER = '''
def _tc_swap_code(new, where, first_line, name, length, digest):
    """Give every function made from the code of `name` at `where`:`first_line` (its `length` lines of source as
    tracecheck read them: SHA-256 prefix `digest`) the code of `new` (tracecheck fix):
    the module's attribute, names imported from it, a class's method, a decorator's wrapped function and a closure's
    cell keep their object and run the new code; a function that makes it (a nested def) makes the new one from now
    on. The library's file is not edited. Its module is imported first when nothing of it is loaded yet (a lazy
    package); raises when the function is not found even then (the library changed: regenerate the fix). A function
    of another file that ends the same way, or of this file changed since, has other source: it is left alone.
    Running it again (the block pasted twice, a module reloaded) swaps again: the codes it installed are kept in a
    module of its own, `sys.modules["_tc_swapped"]`."""
    import gc
    import hashlib
    import importlib
    import importlib.util
    import linecache
    import os
    import sys
    import types

    swapped = sys.modules.setdefault("_tc_swapped", types.ModuleType("_tc_swapped"))
    ours = swapped.__dict__.setdefault((where, first_line, name), [])

    def made_there(code):
        if any(code is c for c in ours):
            return True
        if code.co_name != name or code.co_firstlineno != first_line or \\
                not os.path.realpath(code.co_filename).replace(os.sep, "/").endswith("/" + where):
            return False
        linecache.checkcache(code.co_filename)
        lines = linecache.getlines(code.co_filename)[first_line - 1:first_line - 1 + length]
        text = "\\n".join(line.rstrip("\\r\\n") for line in lines)  # (line ends as tracecheck hashed them)
        return hashlib.sha256(text.encode()).hexdigest()[:16] == digest

    def same_cells(code):
        if code.co_freevars != new.__code__.co_freevars:
            raise RuntimeError(f"tracecheck fix: {name} of {where} has other free variables than its rewrite")
        return new.__code__

    def rebuilt(code):  # the code with the new one in place of the old, at any depth of its nested code; or None
        def one(c):
            if not isinstance(c, types.CodeType):
                return c
            return same_cells(c) if made_there(c) else rebuilt(c) or c

        consts = tuple(one(c) for c in code.co_consts)
        changed = any(a is not b for a, b in zip(consts, code.co_consts))
        return code.replace(co_consts=consts) if changed else None

    def swap():
        done = 0
        for f in gc.get_objects():
            if type(f) is not types.FunctionType:  # (not isinstance: a dead weak proxy raises on its __class__)
                continue
            if made_there(f.__code__):
                f.__code__ = same_cells(f.__code__)
            elif (maker := rebuilt(f.__code__)) is not None:
                f.__code__ = maker
            else:
                continue
            f.__globals__.setdefault("torch", torch)  # (the rewrite calls torch.where, torch.cond, ...)
            done += 1
        return done

    if not swap():  # not imported yet: the module whose file this is, under the shortest name that finds it
        parts = where.removesuffix(".py").removesuffix("/__init__").split("/")
        for i in range(len(parts) - 1, -1, -1):
            try:
                spec = importlib.util.find_spec(".".join(parts[i:]))
            except (ImportError, ValueError):
                continue
            if spec is not None and spec.origin and os.path.realpath(spec.origin).replace(os.sep, "/").endswith(
                    "/" + where):
                importlib.import_module(".".join(parts[i:]))
                break
        if not swap():
            raise RuntimeError(f"tracecheck fix: no function {name} of {where}:{first_line} is loaded; the library "
                               "changed since the fix was made: regenerate it")
    ours.append(new.__code__)
'''.strip("\n")


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The ``def`` line of the replacement: the same parameters, without annotations, and ``None`` for each default.
    The block defines the function in the probe's module, where the library's names (``Optional``, a default's
    constant) do not exist; only its code is swapped in, so the original keeps its own defaults and annotations."""
    args = node.args
    stub = ast.arguments(
        posonlyargs=[ast.arg(a.arg) for a in args.posonlyargs], args=[ast.arg(a.arg) for a in args.args],
        vararg=ast.arg(args.vararg.arg) if args.vararg else None,
        kwonlyargs=[ast.arg(a.arg) for a in args.kwonlyargs],
        kw_defaults=[None if d is None else ast.Constant(None) for d in args.kw_defaults],
        kwarg=ast.arg(args.kwarg.arg) if args.kwarg else None, defaults=[ast.Constant(None) for _ in args.defaults])
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{prefix} {node.name}({ast.unparse(stub)}):"


def block(fn: Function, rewritten: str, at: int, where: str, what: str, upstream: str) -> tuple[str, int]:
    """The probe copy's block that defines ``fn`` as rewritten (``rewritten``: the library's whole text with the
    kept rewrites, where ``fn`` starts at line ``at``) and swaps its code in, and the block's line (1-based) that
    holds the ``def``: the function's lines follow it one for one. ``what``: the rewrites, for the header;
    ``upstream``: the diff's file name."""
    tree = ast.parse(rewritten)
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == fn.name and min([n.lineno] + [d.lineno for d in n.decorator_list]) == at), None)
    if node is None:
        raise ValueError(f"{fn.name} is not in the rewritten text at line {at}")
    lines = source_lines(rewritten, keepends=True)[node.lineno - 1:node.end_lineno]
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
    if node.body[0].lineno > node.lineno:  # the signature, evaluated in the probe's module: see _signature
        gap = node.body[0].lineno - node.lineno  # (its lines, and comments before the body: blank, so that the
        lines = [indent + _signature(node) + "\n"] + ["\n"] * (gap - 1) + lines[gap:]  # lines keep their numbers)
    body = reindent(lines, indent, "    ").rstrip("\n")
    maker = f"_tc_rewritten_{fn.name}_{fn.first}"
    head = [f"# ---- tracecheck fix: `{fn.qualname}` of {where} (line {fn.first}), rewritten: {what}. The library's "
            f"file is not edited: its functions get this code (the same change as a patch: {upstream}) ----",
            f"def {maker}():"]
    if fn.free:  # its closure's names, so that the code takes the original's cells
        head.append(f"    {' = '.join(fn.free)} = None  # (bound by the original's closure)")
    text = "\n".join(head + [body, f"    return {fn.name}", "",
                             f"_tc_swap_code({maker}(), {where!r}, {fn.first}, {fn.name!r}, {fn.end - fn.first + 1}, "
                             f"{fn.digest!r})", f"# ---- end of the block for `{fn.qualname}` ----", ""])
    return text, len(head) + 1

