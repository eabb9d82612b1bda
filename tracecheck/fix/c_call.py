"""A C/pybind11 function called straight from model code, as a custom op (``tracecheck fix``, worker side).

Dynamo cannot trace into a C function (``pybind-builtin``, gb_type 'Attempted to call function marked as
skipped'); the remedy PyTorch documents is to make the call a ``torch.library.custom_op``, which Dynamo keeps in
the graph as one opaque node. What the op needs is learnt from the call on the site's line while the probe runs
(forward and backward, once for every site), never assumed:

* its schema: the types of the arguments (``autograd_fn.annotation``), one parameter per argument, named after
  the call's own argument names where it has them (rewrites.c_call_at);
* ``mutates_args``: the tensor arguments whose version counter or data moved during the call;
* the fake impl: output shapes, dtypes and devices from runs at the probe's inputs and perturbed ones
  (fix.observe, rendered by ``codegen.fake_lines``);
* autograd: when eager differentiated through the C function (its C++ called differentiable ATen ops), a
  backward op recomputes the call with autograd on and returns its vector-Jacobian product, so the gradients
  stay eager's. A C function whose result carried no gradient gets outputs marked non-differentiable.

Generated locals and parameters of tracecheck's own start with ``_tc_``, so they cannot meet the user's names.
Runs in a stage process (it calls user code); returns the definition as text, or per site why there is none.
model_code.py writes it above the statement that holds the call and replaces the callee with the op.
Reference: the PyTorch custom-ops manual (``custom_op``, ``register_fake``, ``register_autograd``).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..collect import casemaker
from ..stages import _execution as execution
from . import observe
from .autograd_fn import Unfixable, aliases, annotation, ident, snake
from .call_facts import CallAsk
from .codegen import _tuple, fake_lines
from .task_results import CallAnswer, CallsObserved, CustomOpDef

#: custom_op annotations for autograd_fn.annotation's schema types, as code in the user's file
_PY_TYPES = {"Tensor": "torch.Tensor"}


@dataclass
class _Call:
    """One site's call while the probe ran: its arguments cloned before it, and what it did."""

    args: observe.Args
    outputs: list[torch.Tensor] = field(default_factory=list)
    #: it returned a bare Tensor (else a tuple or list of them: the op returns a tuple)
    returns_tensor: bool = True
    #: a pybind11 std::vector<Tensor> comes back as a list; the op returns a tuple (said in the note)
    returns_list: bool = False
    mutated: list[str] = field(default_factory=list)
    aliased: list[int] = field(default_factory=list)
    #: at the recorded call (under the probe's own grad mode): a tensor argument required grad, and some output
    #: carried a gradient back, i.e. eager differentiated through the C function
    inputs_need_grad: bool = False
    differentiable: bool = False
    error: str = ""


def _record(call: _Call, bound: observe.Args, run: Any) -> Any:
    """Run the original (``run()``) and fill ``call`` from what it did; bookkeeping errors go to ``call.error``,
    never into the user's forward."""
    try:
        before = observe.snapshot(bound)
    except Exception as e:  # noqa: BLE001 - a tensor tracecheck cannot copy (sparse, meta): no fix, no crash
        call.error = f"cannot snapshot its arguments ({type(e).__name__}: {e})"
        return run()
    out = run()
    try:
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            call.error = f"it returns {type(out).__name__}, not a Tensor or a tuple of Tensors"
            return out
        call.outputs, call.returns_tensor = outs, isinstance(out, torch.Tensor)
        call.returns_list = isinstance(out, list)
        call.mutated = observe.mutated(before, bound)
        tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
        call.aliased = [i for i, o in enumerate(outs) if any(aliases(o, t) for t in tensors)]
        call.inputs_need_grad = any(t.requires_grad for t in tensors)
        call.differentiable = call.inputs_need_grad and any(o.requires_grad for o in outs)
    except Exception as e:  # noqa: BLE001
        call.error = f"cannot inspect its outputs ({type(e).__name__}: {e})"
    return out


def _recorder(original: Any, sites: list[CallAsk], calls: dict[int, _Call], probe_file: str) -> Any:
    """``original``, recording the first call made from each site's lines of the probe file."""
    here = os.path.realpath(probe_file)

    def recorder(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        site = next((s for s in sites if s.call.first <= caller.f_lineno <= s.call.last and s.line not in calls
                     and os.path.realpath(caller.f_code.co_filename) == here), None)
        names = list(site.call.params) if site else []
        if site is None or len(args) != site.call.positional or list(kwargs) != names[site.call.positional:]:
            return original(*args, **kwargs)
        bound = dict(zip(names, [*args, *kwargs.values()]))
        try:
            call = calls[site.line] = _Call({n: observe.clone(v) for n, v in bound.items()})
        except Exception as e:  # noqa: BLE001
            calls[site.line] = _Call({}, error=f"cannot copy its arguments ({type(e).__name__}: {e})")
            return original(*args, **kwargs)
        return _record(call, bound, lambda: original(*args, **kwargs))

    return recorder


def module_of(path: str) -> Any:
    """The imported module whose file is ``path`` (a library's module the probe reached), or None."""
    here = os.path.realpath(path)
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and os.path.realpath(f) == here:
            return m
    return None


def _resolve(module: Any, callee: str) -> tuple[Any, str]:
    """The object that holds the callee (the module's globals for a bare name) and the attribute name."""
    owner_src, _, attr = callee.rpartition(".")
    if not owner_src:
        return vars(module), attr
    owner: Any = None
    for i, part in enumerate(owner_src.split(".")):
        owner = vars(module)[part] if i == 0 else getattr(owner, part)
    return owner, attr


def _get(owner: Any, attr: str) -> Any:
    return owner[attr] if isinstance(owner, dict) else getattr(owner, attr)


def _set(owner: Any, attr: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[attr] = value
    else:
        setattr(owner, attr, value)


def observe_calls(file: str, probe: str, namespace: str, sites: tuple[CallAsk, ...]) -> CallsObserved:
    """For each site (its call: ``callee``, a dotted name in the module's globals, and its lines), the custom op's
    definition, or why there is none. One eager run (forward and backward) records them all. The arguments are
    fix.jobs.ObserveCallsTask's fields (that module imports this one)."""
    module, case = casemaker.load_case(file, probe)
    errors: dict[int, str] = {}
    by_callee: dict[tuple[str, str], list[CallAsk]] = {}
    for site in sites:
        by_callee.setdefault((_file(site, file), site.call.callee), []).append(site)
    calls: dict[int, _Call] = {}
    installed: list[tuple[Any, str, Any]] = []
    originals: dict[tuple[str, str], Any] = {}
    homes: dict[str, str] = {}  # a library file -> the name of its module (the patched probe imports it)
    try:
        for (where, callee), asks in by_callee.items():
            why = ""
            try:
                home = module if where == file else module_of(where)
                if home is None:
                    raise LookupError(f"no imported module is {where}")
                homes[where] = home.__name__
                owner, attr = _resolve(home, callee)
                original = _get(owner, attr)
                if not callable(original) or hasattr(original, "__code__"):
                    why = f"`{callee}` is Python code, not a C function"
                else:
                    _set(owner, attr, _recorder(original, asks, calls, where))
                    installed.append((owner, attr, original))
                    originals[(where, callee)] = original
            except Exception as e:  # noqa: BLE001 - a name that does not resolve, an object that refuses setattr
                why = f"cannot record calls of `{callee}` ({type(e).__name__}: {e})"
            for s in asks if why else ():
                errors[s.line] = why
        run = execution.execute(case.fn, case) if originals else None
    finally:
        for owner, attr, original in reversed(installed):
            _set(owner, attr, original)
    out: list[CallAnswer] = []
    taken = set(vars(module))
    for site in sites:
        line = site.line
        if line in errors:
            out.append(CallAnswer(line, error=errors[line]))
        elif line not in calls:
            failed = run.error if run is not None else None
            out.append(CallAnswer(line, error=f"the probe fails eagerly ({failed.type})" if failed else
                                  "the probe's inputs never call it on this line with these arguments"))
        else:
            where = _file(site, file)
            try:
                op = _render(site, originals[(where, site.call.callee)], calls[line], namespace, taken)
                out.append(CallAnswer(line, replace(op, module=homes[where]) if where != file else op))
            except Unfixable as e:
                out.append(CallAnswer(line, error=str(e)))
            except Exception as e:  # noqa: BLE001 - the C function refused a rerun: no fix, said why
                out.append(CallAnswer(line, error=f"running it again failed ({type(e).__name__}: "
                                                  f"{str(e).splitlines()[0][:200] if str(e) else ''})"))
    return CallsObserved(tuple(out))


def _file(site: CallAsk, probe_file: str) -> str:
    """The file the site's call is in: a library's, else the probe's."""
    return site.library.file if site.library is not None else probe_file


def _invoke(callee: str, names: list[str], npos: int, value: Any = None) -> str:
    value = value or (lambda n: n)
    return f"{callee}({', '.join([value(n) for n in names[:npos]] + [f'{n}={value(n)}' for n in names[npos:]])})"


def _ret(n: int, tuple_: bool) -> str:
    return "torch.Tensor" if n == 1 and not tuple_ else f"tuple[{', '.join(['torch.Tensor'] * n)}]"


def _render(site: CallAsk, fn: Any, call: _Call, ns: str, taken: set[str]) -> CustomOpDef:
    if call.error:
        raise Unfixable(call.error)
    if any(v is None for v in call.args.values()):
        raise Unfixable("an argument is None at the probe's call: an optional tensor and an optional number "
                        "cannot be told apart from it")
    if call.differentiable and call.mutated:
        raise Unfixable(f"it writes to {', '.join(call.mutated)} and eager differentiates through it; a recomputing "
                        "backward would read the written values")
    callee, names, npos = site.call.callee, list(site.call.params), site.call.positional
    # a call in a library's file: the op calls the original through the name the patched probe keeps it under
    call_as = site.library.call_as if site.library is not None and site.library.call_as else callee
    types = {n: _PY_TYPES.get(annotation(v), annotation(v)) for n, v in call.args.items()}
    op = ident(f"{snake(callee.rpartition('.')[2])}_op", taken)
    nout = len(call.outputs)
    outs = [f"_tc_out{i}" for i in range(nout)]
    observed = observe.observe(lambda a: [(a, _as_list(fn(*[a[n] for n in names[:npos]],
                                                          **{n: a[n] for n in names[npos:]})))], call.args)
    metas = observed.groups[0]
    if any(m.todo for m in metas):
        raise Unfixable("no fake impl fits its outputs' shapes: " + "; ".join(t for m in metas for t in m.todo))
    ranks = {n: v.dim() for n, v in call.args.items() if isinstance(v, torch.Tensor)}
    fake = fake_lines(outs, metas, ranks)
    if not call.returns_tensor:  # the schema says tuple: a one-element tuple too
        fake[-1] = f"    return {_tuple(outs)}"
    L = [f"# tracecheck fix: `{callee}` as a custom op (Dynamo cannot trace a C/pybind11 function); its fake impl "
         f"was inferred from {observed.runs} eager runs",
         f"@torch.library.custom_op({f'{ns}::{op}'!r}, mutates_args={tuple(call.mutated)!r})",
         f"def {op}({', '.join(f'{n}: {types[n]}' for n in names)}) -> {_ret(nout, not call.returns_tensor)}:"]
    if call.aliased:
        L += [f"    {_tuple(outs) if not call.returns_tensor else outs[0]} = {_invoke(call_as, names, npos)}",
              *(f"    {outs[i]} = {outs[i]}.clone()  # it returned (a view of) an input; a custom op may not"
                for i in call.aliased),
              f"    return {_tuple(outs) if not call.returns_tensor else outs[0]}"]
    else:
        L.append(f"    return {'' if call.returns_tensor else 'tuple'}({_invoke(call_as, names, npos)})")
    L += ["", "", f"@{op}.register_fake", f"def _({', '.join(names)}):", *fake]
    if call.differentiable:
        L += _autograd(op, ns, callee, names, npos, types, call, taken, call_as)
    elif call.inputs_need_grad:  # eager's result carried no gradient: nor does the op's
        L += ["", "", f"def _{op}_setup_context(ctx, inputs, output):",
              "    ctx.mark_non_differentiable(*((output,) if isinstance(output, torch.Tensor) else output))",
              "", "", f"def _{op}_backward(ctx, *_tc_grads):",
              f"    return {_tuple(['None'] * len(names))}", "", "",
              f"{op}.register_autograd(_{op}_backward, setup_context=_{op}_setup_context)"]
    checks = [f"{o} {u}" for o, m in zip(outs, metas) for u in m.unconfirmed]
    note = f"`{callee}` runs as the custom op {ns}::{op}" + (
        " (backward: the call recomputed with autograd on)" if call.differentiable else
        " (no backward: nothing required grad at the probe's call)" if not call.inputs_need_grad else "") + (
        "; it returns a tuple where the C function returned a list" if call.returns_list else "") + (
        "; CHECK the fake: " + "; ".join(checks) if checks else "")
    return CustomOpDef("\n".join(L) + "\n\n\n", op, note)


def _as_list(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _autograd(op: str, ns: str, callee: str, names: list[str], npos: int, types: dict[str, str], call: _Call,
              taken: set[str], call_as: str) -> list[str]:
    """A backward op that recomputes the call with autograd on (eager's gradients, whatever the C++ does), its
    fake, and the ``register_autograd`` wiring."""
    tensors = [n for n in names if types[n] == "torch.Tensor"]
    wrt = [n for n in tensors if observe.tensor(call.args, n).is_floating_point()
           or observe.tensor(call.args, n).is_complex()]
    grads = [f"_tc_grad{i}" for i in range(len(call.outputs))]
    bwd = ident(f"{op}_backward", taken)
    result = [f"_tc_g_{n}" for n in wrt]
    copy = (lambda n: f"_tc_in_{n}" if n in wrt else n)
    # (a user name could be a ctx attribute's: they are stored as _tc_<name>)
    saved = (lambda n: f"_tc_saved[{tensors.index(n)}]" if n in tensors else f"ctx._tc_{n}")
    return [
        "", "", f"@torch.library.custom_op({f'{ns}::{bwd}'!r}, mutates_args=())",
        f"def {bwd}({', '.join([f'{g}: torch.Tensor' for g in grads] + [f'{n}: {types[n]}' for n in names])})"
        f" -> {_ret(len(wrt), False)}:",
        f'    """The vector-Jacobian product of `{callee}`: the call again with autograd on, as eager ran it."""',
        "    # a custom op's kernel runs below autograd: turn its dispatch keys back on, as eager ran the call",
        "    _tc_exclude = torch._C._dispatch_tls_local_exclude_set()",
        "    for _tc_key in torch._C.DispatchKey.__members__.values():",
        "        if _tc_key.name.startswith(\"Autograd\") or _tc_key.name == \"ADInplaceOrView\":",
        "            _tc_exclude = _tc_exclude.remove(_tc_key)",
        "    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), _tc_exclude), "
        "torch.enable_grad():",
        *(f"        {copy(n)} = {n}.detach().requires_grad_()" for n in wrt),
        f"        _tc_outs = {_invoke(call_as, names, npos, copy)}",
        "        _tc_outs = (_tc_outs,) if isinstance(_tc_outs, torch.Tensor) else tuple(_tc_outs)",
        f"        _tc_pairs = [(o, g) for o, g in zip(_tc_outs, {_tuple(grads)}) if o.requires_grad]",
        f"        _tc_got = torch.autograd.grad([o for o, _ in _tc_pairs], {_tuple([copy(n) for n in wrt])}, "
        "[g for _, g in _tc_pairs], allow_unused=True)",
        # a fresh tensor each: a gradient autograd passed straight through is the incoming grad (an op may not
        # return its input)
        f"    {_tuple(result)} = tuple(torch.zeros_like(t) if g is None else g.clone(memory_format=torch.contiguous_format)"
        f" for t, g in zip({_tuple(wrt)}, _tc_got))",
        f"    return {', '.join(result)}",
        "", "", f"@{bwd}.register_fake", f"def _({', '.join(grads + names)}):",
        f"    return {', '.join(f'torch.empty({n}.shape, dtype={n}.dtype, device={n}.device)' for n in wrt)}",
        # setup_context is called with ctx=, inputs=, output=; user names never become its locals
        "", "", f"def _{op}_setup_context(ctx, inputs, output):",
        f"    ctx.save_for_backward({', '.join(f'inputs[{names.index(n)}]' for n in tensors)})",
        *(f"    ctx._tc_{n} = inputs[{i}]" for i, n in enumerate(names) if n not in tensors),
        "", "", f"def _{op}_backward(ctx, {', '.join(grads)}):",
        "    _tc_saved = ctx.saved_tensors",
        f"    {', '.join(result)} = {bwd}({', '.join(grads + [saved(n) for n in names])})",
        f"    return {_tuple([f'_tc_g_{n}' if n in wrt else 'None' for n in names])}",
        "", "", f"{op}.register_autograd(_{op}_backward, setup_context=_{op}_setup_context)"]
