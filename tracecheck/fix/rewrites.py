"""Source rewrites for graph breaks in model code (``tracecheck fix`` on a ``graph-break`` or ``data-dependent``
finding whose user frame lies in the probe's own file, or a C/pybind11 function called straight from it).

Each rewrite is one that PyTorch documents for its class of break (``Rewrite.doc``), reading the code with
branches.py and writing edits of sourcetext.py's kind. None is trusted:
model_code.py applies a candidate to a copy of the file and keeps it only when the stages say the break is gone,
no new failure came, and eager outputs and gradients held. The registry ``REWRITES`` is the one list; a rewrite
proposes edits for a site or returns None when it does not apply. Pure (ast and text): the parent process never
runs user code (what the ``custom-op`` rewrite needs to know about a C function, c_call.py learns in a stage
process and model_code.py hands over as ``Site.call``).
"""
from __future__ import annotations

import ast
import keyword
import os
import textwrap
from dataclasses import dataclass
from typing import Callable

from ..model.taxonomy import BRANCH_GB, DYNAMIC_SHAPE_GB, LOGGING_GB, MODEL_CODE_KINDS, SCALAR_GB, K
from .call_facts import CallSite, LibraryCall
from .task_results import CustomOpDef
from .branches import (EXITS, Changes, accesses, as_tensor, assigned_one, bound_before, branch_if, branch_site,
                       differ, dotted, harmless, local_binding, logging_call, raise_statement,
                       scalar_branch, scope_of)
from .library import Function, function_at, why_not
from .sourcetext import Edit, Site, Source, inline, one_line, reindent

#: the kinds whose breaks the rewrites answer (a C call only outside an autograd.Function:
#: taxonomy.rewrites_model_code)
KINDS = (*MODEL_CODE_KINDS, K.PYBIND_BUILTIN)

_GUARD = "torch.compiler.is_compiling()"


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


#: what a rewrite proposes for a site: its edits and the line saying what they do; None where it does not apply
Proposal = tuple[tuple[Edit, ...], str] | None
Propose = Callable[[Source, Site, Source], Proposal]


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
    """Why no rewrite applies to ``site`` (``src``: the file it is in), where the code says: a library's line no
    function replacement reaches; a branch whose sides run different code, on a value computed elsewhere or here; an
    op whose output size the data decides."""
    if site.file and why_not(src.tree, src.text, site.line):
        # a code rewrite would apply, but the copy cannot replace the function: that is the reason; else the code's own
        if any(r.library and r.propose(src, site, src) is not None for r in REWRITES.values()):
            return why_not(src.tree, src.text, site.line)
    node = src.statement_at(site.line)
    if isinstance(node, ast.If) and node.lineno == site.line and (site.gb_type.startswith(BRANCH_GB) or
                                                                  site.kind == K.DATA_DEPENDENT and not site.gb_type):
        scope = scope_of(src.tree, node)
        args = getattr(scope, "args", None)
        params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} if args is not None else set()
        test = node.test.operand if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not) \
            else node.test
        # `if is_global_attn:`, a flag its caller read from the data (Longformer's `.item()` one call up)
        elsewhere = f"it tests `{test.id}`, which its caller computed from the data; " \
            if isinstance(test, ast.Name) and test.id in params else ""
        return elsewhere + "its two sides run different code (not one statement differing in one value, one name " \
            "assigned on each side, nor a raise), which no torch.where, torch.cond or graph assert expresses: a real " \
            "data-dependent path"
    if site.gb_type.startswith(DYNAMIC_SHAPE_GB) or ".tolist()" in site.code:
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


_CAPTURE_SCALAR = ("torch._dynamo.config.capture_scalar_outputs = True  # tracecheck fix: .item()/.tolist() stay in "
                   "the graph as unbacked SymInts/SymFloats")


# ---- the rewrites, in the order they are tried for a site -------------------------------------------------------
@rewrite("tensor-where", "a branch on an .item() scalar as torch.where",
         "torch.where (PyTorch docs, Common Graph Breaks, 'Data-dependent operations': keep the value a tensor "
         "instead of reading it with .item() and branching on it)", library=True)
def _tensor_where(src: Source, site: Site, probe: Source) -> Proposal:
    scalar = scalar_branch(src, site)
    if scalar is None or not (scalar.dead or scalar.tensor_safe):
        return None
    node = scalar.branch
    then = assigned_one(node.body)
    if then is None or then[0] in ("return", scalar.name):
        return None
    target = then[0]
    if node.orelse:  # `else: <the same name> = B`
        other = assigned_one(node.orelse)
        if other is None or other[0] != target:
            return None
        otherwise = src.segment(other[1])
    elif bound_before(src, node, target):  # no else: the name's value before the `if`
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
        f"`{one_line(src.segment(then[1]))}` " + (f"and `{one_line(otherwise)}` have one shape and dtype)"
                                                     if node.orelse else f"keeps {target}'s shape and dtype)")


@rewrite("torch-check", "a guard that raises on an .item() scalar as torch._check",
         "torch._check_with on the captured scalar (PyTorch docs: torch._check for data-dependent values; "
         "torch._dynamo.config.capture_scalar_outputs)", library=True)
def _torch_check(src: Source, site: Site, probe: Source) -> Proposal:
    scalar = scalar_branch(src, site)
    if scalar is None or scalar.branch.orelse:
        return None
    node = scalar.branch
    raised = raise_statement(src, node.body)
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


@rewrite("graph-assert", "a validation guard that raises as an assert the graph keeps",
         "torch._assert_async (a check that stays in the compiled graph) under torch.compiler.is_compiling(); "
         "the gb_type 'Data-dependent branching' hint: keep the condition a tensor", library=True)
def _graph_assert(src: Source, site: Site, probe: Source) -> Proposal:
    stmt = src.statement_at(site.line)
    if isinstance(stmt, ast.Assert) and stmt.lineno == site.line and src.owns_its_lines(stmt):
        return _assert_statement(src, stmt)
    node = branch_if(src, site, ops=True)
    if node is None or node.orelse or len(node.body) != 1 or not isinstance(node.body[0], ast.Raise):
        return None
    exc = node.body[0].exc
    message = "assertion failed"
    if isinstance(exc, ast.Call) and exc.args and isinstance(exc.args[0], ast.Constant) and \
            isinstance(exc.args[0].value, str):
        message = exc.args[0].value
    ok = as_tensor(src, node.test.operand) if isinstance(node.test, ast.UnaryOp) and \
        isinstance(node.test.op, ast.Not) else None
    if ok is None:
        bad = as_tensor(src, node.test)
        ok = None if bad is None else f"torch.logical_not({bad})"
    if ok is None:
        return None
    head, ind, _ = _compiled_assert(src, node, ok, message)
    text = head + f"{ind}elif {inline(src.segment(node.test))}:\n" + \
        "".join(src.lines[node.body[0].lineno - 1:node.end_lineno])
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the guard at line {node.lineno} raises as before in eager; compiled, it is a torch._assert_async in the " \
        "graph (a RuntimeError with the same message when it fails)"


def _compiled_assert(src: Source, node: ast.stmt, ok: str, message: str) -> tuple[str, str, str]:
    """The lines that keep a check as a graph assert while compiling (the eager check follows them as an ``elif`` or
    ``else``), and the statement's indentation and one level of it."""
    ind = src.indent(node)
    unit = "\t" if "\t" in ind else "    "
    return (f"{ind}if {_GUARD}:  # tracecheck fix: the check stays in the graph as an assert\n"
            f"{ind}{unit}torch._assert_async({ok}, {message!r})\n"), ind, unit


def _assert_statement(src: Source, node: ast.Assert) -> Proposal:
    """``assert TEST[, "message"]`` on tensor data (XLM's ``assert lengths.max().item() <= slen``): the same check as
    a graph assert while compiling, the statement itself in eager."""
    ok = as_tensor(src, node.test)
    if ok is None:
        return None
    if node.msg is None:
        message = f"assertion failed: {one_line(src.segment(node.test))}"
    elif isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str):
        message = node.msg.value
    else:
        return None
    head, ind, unit = _compiled_assert(src, node, ok, message)
    text = head + f"{ind}else:\n{ind}{unit}" + "".join(src.lines[node.lineno - 1:node.end_lineno]).lstrip()
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the assert at line {node.lineno} runs as before in eager; compiled, it is a torch._assert_async in the graph"


@rewrite("capture-scalar-outputs", "capture .item()/.tolist() as graph values",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_scalar_outputs", setting=True)
def _capture_scalar(src: Source, site: Site, probe: Source) -> Proposal:
    if "non-integer" in site.gb_type:  # 'Tensor.tolist() with non-integer tensor': the flag does not cover it
        return None
    if not (site.gb_type.startswith(SCALAR_GB) or
            (site.kind == K.DATA_DEPENDENT and (".item()" in site.code or ".tolist()" in site.code)
             and not site.gb_type.startswith(BRANCH_GB))):
        return None
    return (probe.module_setting(_CAPTURE_SCALAR),
            "torch._dynamo.config.capture_scalar_outputs = True: Dynamo keeps the scalar in the graph")


@rewrite("capture-dynamic-output-shape-ops", "capture ops whose output shape depends on the data",
         "PyTorch docs, Common Graph Breaks (compile/programming_model.common_graph_breaks), 'Data-dependent operations': "
         "torch._dynamo.config.capture_dynamic_output_shape_ops", setting=True)
def _capture_dynamic(src: Source, site: Site, probe: Source) -> Proposal:
    if not site.gb_type.startswith(DYNAMIC_SHAPE_GB):
        return None
    return (probe.module_setting("torch._dynamo.config.capture_dynamic_output_shape_ops = True  # tracecheck fix: "
                               "nonzero/boolean masks stay in the graph with unbacked sizes"),
            "torch._dynamo.config.capture_dynamic_output_shape_ops = True: nonzero and boolean-mask indexing "
            "stay in the graph")


@rewrite("torch-cond", "a value branch as torch.cond",
         "torch.cond (PyTorch docs, Control Flow - Cond; Common Graph Breaks, 'Data-dependent operations')",
         library=True)
def _torch_cond(src: Source, site: Site, probe: Source) -> Proposal:
    got = branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    then = assigned_one(node.body)
    if then is None:
        return None
    if node.orelse:
        other = assigned_one(node.orelse)
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


@rewrite("select", "both branches run, the last statement takes torch.where",
         "torch.where (PyTorch docs, Common Graph Breaks, 'Data-dependent operations': compute both sides and "
         "select with a tensor condition)", library=True)
def _select(src: Source, site: Site, probe: Source) -> Proposal:
    node = branch_if(src, site)
    if scalar_branch(src, site) is not None:  # a test on an .item() scalar: tensor-where keeps it a tensor
        return None
    if node is None or not node.orelse or not node.body or (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
        return None
    if any(isinstance(n, EXITS) for n in ast.walk(node)):
        return None
    last_a, last_b = node.body[-1], node.orelse[-1]
    pairs = differ(last_a, last_b)
    if not pairs or len(pairs) != 1 or isinstance(last_a, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
        return None
    a, b = pairs[0]
    pre_a, pre_b = node.body[:-1], node.orelse[:-1]
    if not (harmless(pre_a, src, node) and harmless(pre_b, src, node)):
        return None  # they would now run for the other side's inputs too, where something could see them
    # the then-branch's statements run first, then the else-branch's, then the last one: what the first changes must
    # not be read after it by the other side, nor what the second changes by the then-side's value, and nothing may
    # be changed on both sides (the second would win whatever the test says)
    written_a, written_b = Changes.of(pre_a, src), Changes.of(pre_b, src)
    if written_a.seen_by(accesses([*pre_b, b], src, ast.Load)) or written_b.seen_by(accesses([a], src, ast.Load)) \
            or written_a.seen_by(written_b.assigned | written_b.in_place):
        return None
    if not all(src.owns_its_lines(s) for s in (*node.body, *node.orelse)):
        return None
    ind = src.indent(node)
    last = src.segment(last_a)
    start = src.offset(src.span(last_a)[0])
    e0, e1 = src.span(a)
    lo, hi = src.offset(e0) - start, src.offset(e1) - start
    last = last[:lo] + "torch.where(_tc_pred, _tc_then, _tc_else)" + last[hi:]
    prefix = "".join(reindent(src.lines[s.lineno - 1:s.end_lineno], src.indent(s), ind) for s in (*pre_a, *pre_b))
    text = (f"{ind}_tc_pred = {inline(src.segment(node.test))}  # tracecheck fix: both branches run, torch.where picks "
            f"(was `if {one_line(src.segment(node.test))}:`)\n" + prefix +
            f"{ind}_tc_then, _tc_else = {inline(src.segment(a))}, {inline(src.segment(b))}\n"
            # torch.where would broadcast or promote two values of another shape or dtype: never silently
            f"{ind}torch._check(_tc_then.shape == _tc_else.shape and _tc_then.dtype == _tc_else.dtype, "
            f"lambda: 'tracecheck fix: the two sides of the if at line {node.lineno} differ in shape or dtype')\n" +
            ind + last)
    both = sorted(w for w in written_a.assigned | written_b.assigned if not w.isidentifier())  # (not temporaries)
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the `if` at line {node.lineno}: both branches' statements run, and their last one takes " \
        f"torch.where(test, `{one_line(src.segment(a))}`, `{one_line(src.segment(b))}`), checked to have one shape " \
        "and dtype" + (f"; {', '.join(f'`{w}`' for w in both)} now set for every input (filled once, or given its own "
                       "value converted)" if both else "")


@rewrite("branchless", "apply the transform unconditionally",
         "the hint of gb_type 'Data-dependent branching': make `if tensor_cond: x = transform(x)` branchless")
def _branchless(src: Source, site: Site, probe: Source) -> Proposal:
    got = branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    if node.orelse or any(isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for s in ast.walk(node)):
        return None
    body = "".join(src.lines[node.body[0].lineno - 1:node.end_lineno])
    text = textwrap.indent(textwrap.dedent(body), src.indent(node)).rstrip("\n")
    note = f"the branch at line {node.lineno} always runs (its transform must leave other inputs unchanged)"
    was = f"if {one_line(src.segment(node.test))}:"
    if scalar:  # the scalar is read by the test alone: its .item() goes with it
        was += f"` on `{one_line(src.segment(scalar.assign))}"
        note += f"; the .item() at line {scalar.assign.lineno} is removed"
    edit = src.whole_lines(node, src.indent(node) + f"# tracecheck fix: branchless (was `{was}`)\n" + text)
    return (scalar.replace(src, edit) if scalar else edit,), note


@rewrite("compile-guard", "skip a host-side fast path or check while compiling",
         "torch.compiler.is_compiling() (PyTorch docs: code to skip under torch.compile)")
def _compile_guard(src: Source, site: Site, probe: Source) -> Proposal:
    got = branch_site(src, site)
    if got is None:
        return None
    node, scalar = got
    start, end = src.span(node.test)
    edit = Edit(start, end, f"not {_GUARD} and ({scalar.test(src) if scalar else src.segment(node.test)})")
    takes = "else branch" if node.orelse else "code after it"
    return (scalar.replace(src, edit) if scalar else edit,) + src.needs_torch_import(), \
        f"while compiling, the `if` at line {node.lineno} is skipped and its {takes} runs; eager is unchanged" + \
        (f" (it tests the tensor: the .item() at line {scalar.assign.lineno} is removed)" if scalar else "")


#: the Logger methods that only emit a record (and return None): what ignore_logging_functions may make a no-op
_EMITS = {"debug", "info", "warning", "warn", "error", "critical", "fatal", "exception", "log"}


@rewrite("ignore-logging", "a library's logger calls as no-ops while compiling",
         "torch._dynamo.config.ignore_logging_functions (the hint of gb_type 'logging.Logger method not supported "
         "for non-export cases')", setting=True, library_only=True)
def _ignore_logging(src: Source, site: Site, probe: Source) -> Proposal:
    if not site.gb_type.startswith(LOGGING_GB):
        return None
    node = src.statement_at(site.line)
    methods = [c.func.attr for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
               and c.lineno <= site.line <= (c.end_lineno or c.lineno)] if node is not None else []
    if len(methods) != 1 or not (methods[0] in _EMITS or methods[0].endswith("_once")):
        return None  # (isEnabledFor, getEffectiveLevel: a no-op would return None where the code reads a value)
    method = methods[0]
    name = "logging" if not probe.binds("logging") else "_tc_logging"
    lines = [f"import logging{'' if name == 'logging' else ' as _tc_logging'}  # noqa: E402  (tracecheck fix)",
             f"torch._dynamo.config.ignore_logging_functions.add({name}.Logger.{method})  # tracecheck fix: "
             f"`.{method}(...)` of a logging.Logger is a no-op while compiling (it logs in eager)"]
    return probe.end_setting(lines), \
        f"logging.Logger.{method} is ignored while compiling, for every logger of the process " \
        "(torch._dynamo.config.ignore_logging_functions): compiled code does not log it, eager does"


@rewrite("reorderable-logging", "print after the graph runs",
         "torch._dynamo.config.reorderable_logging_functions (the hint of gb_type 'Failed to trace builtin "
         "operator' for print)", setting=True)
def _reorderable(src: Source, site: Site, probe: Source) -> Proposal:
    node = logging_call(src, site)
    call = node.value if node is not None else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"):
        return None
    # Dynamo reorders a print of graph values only; an f-string or str() of a tensor still breaks the graph
    if call.keywords or not all(isinstance(a, (ast.Name, ast.Attribute, ast.Constant)) for a in call.args):
        return None
    return probe.module_setting("torch._dynamo.config.reorderable_logging_functions.add(print)  # tracecheck fix: "
                              "prints run after the graph"), \
        "print is reorderable: Dynamo runs it after the graph, with the graph's values"


@rewrite("compile-guard-logging", "skip logging while compiling",
         "torch.compiler.is_compiling() (PyTorch docs: code to skip under torch.compile)", library=True)
def _guard_logging(src: Source, site: Site, probe: Source) -> Proposal:
    node = logging_call(src, site)
    if node is None:
        return None
    ind = src.indent(node)
    body = "".join(src.lines[node.lineno - 1:node.end_lineno])
    unit = "\t" if "\t" in ind else "    "  # a tab-indented file stays tab-indented
    text = f"{ind}if not {_GUARD}:  # tracecheck fix: logs in eager only\n" + textwrap.indent(body, unit)
    return (src.whole_lines(node, text),) + src.needs_torch_import(), \
        f"the logging call at line {site.line} runs in eager only (skipped while compiling)"


def c_call_at(src: Source, line: int, builtin: str) -> CallSite | str:
    """The call of the C function ``builtin`` (the finding's context) on ``line`` (``CallSite``: its callee, a
    parameter name per argument, ...). A string says why there is none to rewrite."""
    node = src.statement_at(line)
    if node is None:
        return "no statement on that line"
    name = builtin[:-len(".__call__")] if builtin.endswith(".__call__") else builtin
    last = name.rpartition(".")[2]
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and c.lineno <= line <= (c.end_lineno or c.lineno)
             and dotted(c.func) and src.segment(c.func).rpartition(".")[2] == last]
    if len(calls) != 1:
        return f"{len(calls) or 'no'} calls of `{last}` on line {line} (a C function called under another name " \
               "is not followed)"
    call = calls[0]
    root = src.segment(call.func).split(".")[0]
    if root in ("torch", "self"):
        return f"`{src.segment(call.func)}` is not a module-level name of the file"
    binding = local_binding(src, node, root)
    if binding is not None:  # an OpBuilder's loader (`op_module = builder.load()`): no name the copy can rebind
        return f"`{src.segment(call.func)}` is called through `{root}`, a local of its function ({binding}), " \
               "which no module-level name holds for a custom op to replace; where the same call sits in an " \
               "autograd.Function (the wrapper's training path), fix converts that Function"
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return "the call unpacks *args/**kwargs; a custom op needs one parameter per argument"
    # the op's parameters may not hide the names its body reads (torch, the callee's module) nor tracecheck's own
    reserved = {"torch", root}
    params: list[str] = []
    for i, a in enumerate(call.args):
        if isinstance(a, ast.Name) and not keyword.iskeyword(a.id) and a.id not in reserved \
                and not a.id.startswith("_tc_") and a.id not in params:
            params.append(a.id)
        else:
            params.append(f"arg{i}")
    for k in call.keywords:
        if k.arg in reserved or (k.arg or "").startswith("_tc_"):
            return f"the keyword argument {k.arg}= would hide a name the custom op reads"
        params.append(k.arg or "")
    if len(set(params)) != len(params):
        return "two arguments would share a parameter name"
    f = call.func
    return CallSite(src.segment(f), tuple(params), len(call.args), call.lineno, call.end_lineno or call.lineno,
                    (src.position(f.lineno, f.col_offset), src.position(f.end_lineno or f.lineno, f.end_col_offset or 0)))


@rewrite("custom-op", "a C function called from model code as a custom op",
         "torch.library.custom_op with register_fake and register_autograd (PyTorch custom-ops manual); the "
         "remedy for gb_type 'Attempted to call function marked as skipped' on a C/pybind11 function", setting=True)
def _custom_op(src: Source, site: Site, probe: Source) -> Proposal:
    c = site.call
    if site.kind != K.PYBIND_BUILTIN or c is None or c.op is None or c.found is None:
        return None
    if site.file:
        return _library_custom_op(probe, site, c.op, c.found, c.library)
    top = next(n for n in src.tree.body if n.lineno <= site.line <= (n.end_lineno or n.lineno))
    at = min([top.lineno] + [d.lineno for d in getattr(top, "decorator_list", [])])
    start, end = c.found.span
    return (Edit((at, 0), (at, 0), c.op.definition), Edit(start, end, c.op.name)) + src.needs_torch_import(), \
        c.op.note


def _library_custom_op(src: Source, site: Site, op: CustomOpDef, found: CallSite,
                       library: LibraryCall | None) -> Proposal:
    """A C call in a library's file: the probe's file, at its end, imports that module, keeps the C function under
    ``call_as``, defines the custom op (which calls it through that name) and rebinds the callee there, so the
    library's own line calls the op. The library's files are not edited."""
    if library is None or op.module is None:  # (c_call answers a library's call with its module; model_code asks so)
        return None
    alias, callee, module = library.module_alias, found.callee, op.module
    where = f"{library.file_label or os.path.basename(site.file)}:{site.line}"
    block = ("" if src.text.endswith("\n") or not src.text else "\n") + "\n\n" + "\n".join([
        f"# ---- tracecheck fix: `{callee}`, called at {where} ({module}), as a custom op: Dynamo cannot trace a "
        "C/pybind11 function ----",
        "import importlib as _tc_importlib  # noqa: E402",
        f"{alias} = _tc_importlib.import_module({module!r})",
        f"{library.call_as} = {alias}.{callee}",
        "", "", op.definition.rstrip("\n"), "", "",
        f"{alias}.{callee} = {op.name}  # the library's call now goes through the custom op", ""])
    end = (len(src.lines) + 1, 0)
    return (Edit(end, end, block),) + src.needs_torch_import(), \
        op.note + f" (installed in {module} by the probe's file: the library is not edited)"
