"""A C/pybind11 function called straight from model code, as a custom op (``tracecheck fix``, worker side).

Dynamo cannot trace into a C function (``pybind-builtin``, gb_type 'Attempted to call function marked as
skipped'); the remedy PyTorch documents is to make the call a ``torch.library.custom_op``, which Dynamo keeps in
the graph as one opaque node. What the op needs is learnt from the probe, never assumed:

* its schema: the types of the arguments at the recorded call (``autograd_fn.annotation``), one parameter per
  argument, named after the call's own argument names where it has them;
* ``mutates_args``: the tensor arguments whose version counter or data moved during the call;
* the fake impl: output shapes, dtypes and devices from runs at the probe's inputs and perturbed ones
  (fix.observe, rendered by ``codegen.fake_lines``);
* autograd: when eager differentiated through the C function (its C++ called differentiable ATen ops), a
  backward op recomputes the call with autograd on and returns its vector-Jacobian product, so the gradients
  stay eager's. A C function whose result carried no gradient gets outputs marked non-differentiable.

Runs in a stage process (it calls user code); returns the definition as text. model_code.py writes it above the
statement that holds the call and replaces the callee with the op.
Reference: the PyTorch custom-ops manual (``custom_op``, ``register_fake``, ``register_autograd``).
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any

import torch

from ..collect import casemaker
from ..stages import _execution as execution
from . import observe
from .autograd_fn import Unfixable, aliases, annotation, snake
from .codegen import fake_lines

#: custom_op annotations for autograd_fn.annotation's schema types, as code in the user's file
_PY_TYPES = {"Tensor": "torch.Tensor", "Optional[Tensor]": "torch.Tensor | None"}


@dataclass
class _Call:
    """The first call of one callee while the probe ran: arguments cloned before it, what it did."""

    args: dict[str, Any]
    outputs: list[torch.Tensor] = field(default_factory=list)
    single: bool = True
    mutated: list[str] = field(default_factory=list)
    aliased: list[int] = field(default_factory=list)
    #: some tensor argument required grad and some output carried a gradient back (eager differentiated it)
    differentiable: bool = False
    inputs_need_grad: bool = False
    #: a pybind11 std::vector<Tensor> comes back as a list; the op returns a tuple (said in the note)
    returns_list: bool = False
    error: str = ""


def _names(site: dict[str, Any]) -> list[str]:
    return list(site["params"])


def _recorder(original: Any, names: list[str], n_positional: int, calls: list[_Call]) -> Any:
    """``original`` that records its first call with these arguments into ``calls``."""

    def recorder(*args: Any, **kwargs: Any) -> Any:
        if calls or len(args) != n_positional or list(kwargs) != names[n_positional:]:
            return original(*args, **kwargs)
        bound = dict(zip(names, [*args, *kwargs.values()]))
        call = _Call({n: observe.clone(v) for n, v in bound.items()})
        before = observe.snapshot(bound)
        out = original(*args, **kwargs)
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if outs is None or not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            call.error = f"it returns {type(out).__name__}, not a Tensor or a tuple of Tensors"
        else:
            call.outputs, call.single = outs, isinstance(out, torch.Tensor)
            call.mutated = observe.mutated(before, bound)
            tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
            call.aliased = [i for i, o in enumerate(outs) if any(aliases(o, t) for t in tensors)]
            call.inputs_need_grad = any(t.requires_grad for t in tensors)
            call.differentiable = call.inputs_need_grad and any(o.requires_grad for o in outs)
            call.returns_list = isinstance(out, list)
        calls.append(call)
        return out

    return recorder


def _resolve(module: Any, callee: str) -> tuple[Any, str]:
    """The object that holds the callee (the module's globals for a bare name) and the attribute name."""
    owner_src, _, attr = callee.rpartition(".")
    if not owner_src:
        return vars(module), attr
    owner: Any = None
    for i, part in enumerate(owner_src.split(".")):
        owner = vars(module)[part] if i == 0 else getattr(owner, part)
    return owner, attr


def observe_calls(task: dict[str, Any]) -> dict[str, Any]:
    """For each site (``line``, ``callee`` a dotted name in the module's globals, ``params`` one name per argument
    in call order, ``positional`` how many are positional): the custom op's definition, or why there is none."""
    module, case = casemaker.load_case(task["file"], task["probe"])
    out: list[dict[str, Any]] = []
    taken = set(vars(module))
    for site in task["sites"]:
        try:
            owner, attr = _resolve(module, site["callee"])
            original = owner[attr] if isinstance(owner, dict) else getattr(owner, attr)
        except (KeyError, AttributeError) as e:
            out.append({"line": site["line"], "error": f"`{site['callee']}` is not a module-level name ({e})"})
            continue
        if not callable(original) or hasattr(original, "__code__"):
            out.append({"line": site["line"], "error": f"`{site['callee']}` is Python code, not a C function"})
            continue
        calls: list[_Call] = []
        recorder = _recorder(original, _names(site), site["positional"], calls)
        try:
            if isinstance(owner, dict):
                owner[attr] = recorder
            else:
                setattr(owner, attr, recorder)
        except (AttributeError, TypeError) as e:
            out.append({"line": site["line"], "error": f"cannot record calls of `{site['callee']}` ({e})"})
            continue
        try:
            run = execution.execute(case.fn, case)
        finally:
            if isinstance(owner, dict):
                owner[attr] = original
            else:
                setattr(owner, attr, original)
        if run.error is not None and not calls:
            out.append({"line": site["line"], "error": f"the probe fails eagerly ({run.error['type']})"})
            continue
        if not calls:
            out.append({"line": site["line"], "error": "the probe's inputs never call it here with these arguments"})
            continue
        try:
            out.append({"line": site["line"], **_render(site, original, calls[0], task["namespace"], taken)})
        except Unfixable as e:
            out.append({"line": site["line"], "error": str(e)})
    return {"sites": out}


def _ident(base: str, taken: set[str]) -> str:
    base = base if base.isidentifier() and not keyword.iskeyword(base) else "c_call"
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}{i}"
    taken.add(name)
    return name


def _render(site: dict[str, Any], fn: Any, call: _Call, ns: str, taken: set[str]) -> dict[str, Any]:
    if call.error:
        raise Unfixable(call.error)
    if call.differentiable and call.mutated:
        raise Unfixable(f"it writes to {', '.join(call.mutated)} and eager differentiates through it; a recomputing "
                        "backward would read the written values")
    callee, names, npos = site["callee"], _names(site), site["positional"]
    types = {n: _PY_TYPES.get(annotation(v), annotation(v)) for n, v in call.args.items()}
    base = snake(site["callee"].rpartition(".")[2])
    op = _ident(f"{base}_op", taken)
    qual = f"{ns}::{op}"
    invoke = f"{callee}({', '.join(names[:npos] + [f'{n}={n}' for n in names[npos:]])})"
    nout = len(call.outputs)
    outs = [f"out{i}" for i in range(nout)]
    ret = "torch.Tensor" if call.single else _ret(nout, tuple_=True)
    observed = observe.observe(lambda a: [(a, _as_list(fn(*[a[n] for n in names[:npos]],
                                                          **{n: a[n] for n in names[npos:]})))],
                               call.args)
    ranks = {n: v.dim() for n, v in call.args.items() if isinstance(v, torch.Tensor)}
    fake = fake_lines(outs, observed.groups[0], ranks)
    if any("NotImplementedError" in line for line in fake):
        raise Unfixable("no fake impl fits its outputs' shapes: " + "; ".join(
            t for m in observed.groups[0] for t in m.todo))
    why = "Dynamo cannot trace a C/pybind11 function"
    L = [f"# tracecheck fix: `{callee}` as a custom op ({why}); its fake impl was inferred from "
         f"{observed.runs} eager runs",
         f"@torch.library.custom_op({qual!r}, mutates_args={tuple(call.mutated)!r})",
         f"def {op}({', '.join(f'{n}: {types[n]}' for n in names)}) -> {ret}:"]
    if call.aliased:
        L += [f"    {', '.join(outs)}{',' if call.single is False and nout == 1 else ''} = {invoke}",
              *(f"    {outs[i]} = {outs[i]}.clone()  # it returned (a view of) an input; a custom op may not"
                for i in call.aliased),
              f"    return {', '.join(outs)}{',' if not call.single and nout == 1 else ''}"]
    else:
        L.append(f"    return {invoke}" if call.single else f"    return tuple({invoke})")
    L += ["", "", f"@{op}.register_fake", f"def _({', '.join(names)}):", *fake]
    if call.differentiable:
        L += _autograd(op, qual, callee, names, npos, types, call, taken)
    elif call.inputs_need_grad:  # eager's result carried no gradient: nor does the op's
        L += ["", "", f"def _{op}_setup_context(ctx, inputs, output):",
              "    ctx.mark_non_differentiable(*((output,) if isinstance(output, torch.Tensor) else output))",
              "", "", f"def _{op}_backward(ctx, *grads):",
              f"    return {', '.join(['None'] * len(names))}{',' if len(names) == 1 else ''}", "", "",
              f"{op}.register_autograd(_{op}_backward, setup_context=_{op}_setup_context)"]
    note = f"`{callee}` runs as the custom op {qual}" + (
        " (backward: the call recomputed with autograd on)" if call.differentiable else "") + (
        "; it returns a tuple where the C function returned a list" if call.returns_list else "")
    return {"definition": "\n".join(L) + "\n\n\n", "name": op, "note": note}


def _ret(n: int, tuple_: bool = False) -> str:
    return "torch.Tensor" if n == 1 and not tuple_ else f"tuple[{', '.join(['torch.Tensor'] * n)}]"


def _as_list(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _autograd(op: str, qual: str, callee: str, names: list[str], npos: int, types: dict[str, str], call: _Call,
              taken: set[str]) -> list[str]:
    """A backward op that recomputes the call with autograd on (eager's gradients, whatever the C++ does), its
    fake, and the ``register_autograd`` wiring."""
    tensors = [n for n in names if types[n] == "torch.Tensor"]
    wrt = [n for n in tensors if call.args[n].is_floating_point() or call.args[n].is_complex()]
    grads = [f"grad{i}" for i in range(len(call.outputs))]
    bwd = _ident(f"{op}_backward", taken)
    params = [f"{g}: torch.Tensor" for g in grads] + [f"{n}: {types[n]}" for n in names]
    copies = {n: f"{n}_" if n in wrt else n for n in names}
    invoke = f"{callee}({', '.join([copies[n] for n in names[:npos]] + [f'{n}={copies[n]}' for n in names[npos:]])})"
    result = [f"g_{n}" for n in wrt]
    L = ["", "", f"@torch.library.custom_op({qual + '_backward'!r}, mutates_args=())",
         f"def {bwd}({', '.join(params)}) -> {_ret(len(wrt))}:",
         f'    """The vector-Jacobian product of `{callee}`: the call again with autograd on, as eager ran it."""',
         "    # a custom op's kernel runs below autograd: turn its dispatch keys back on, as eager ran the call",
         "    exclude = torch._C._dispatch_tls_local_exclude_set()",
         "    for key in torch._C.DispatchKey.__members__.values():",
         "        if key.name.startswith(\"Autograd\") or key.name == \"ADInplaceOrView\":",
         "            exclude = exclude.remove(key)",
         "    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude), "
         "torch.enable_grad():",
         *(f"        {n}_ = {n}.detach().requires_grad_()" for n in wrt),
         f"        outs = {invoke}",
         "        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)",
         f"        pairs = [(o, g) for o, g in zip(outs, ({', '.join(grads)},)) if o.requires_grad]",
         f"        got = torch.autograd.grad([o for o, _ in pairs], ({', '.join(f'{n}_' for n in wrt)},), "
         "[g for _, g in pairs], allow_unused=True)",
         f"    {', '.join(result)}, = (torch.zeros_like(t) if g is None else g.contiguous() "
         f"for t, g in zip(({', '.join(wrt)},), got))",
         f"    return {', '.join(result)}",
         "", "", f"@{bwd}.register_fake", f"def _({', '.join(grads + names)}):",
         f"    return {', '.join(f'torch.empty({n}.shape, dtype={n}.dtype, device={n}.device)' for n in wrt)}",
         "", "", f"def _{op}_setup_context(ctx, inputs, output):",
         f"    {', '.join(names)}{',' if len(names) == 1 else ''} = inputs",
         f"    ctx.save_for_backward({', '.join(tensors)}{',' if len(tensors) == 1 else ''})",
         *(f"    ctx.{n} = {n}" for n in names if n not in tensors),
         "", "", f"def _{op}_backward(ctx, {', '.join(grads)}):",
         f"    {', '.join(tensors)}{',' if len(tensors) == 1 else ''} = ctx.saved_tensors",
         f"    {', '.join(result)} = {bwd}({', '.join(grads + [n if n in tensors else f'ctx.{n}' for n in names])})",
         f"    return {', '.join(f'g_{n}' if n in wrt else 'None' for n in names)}{',' if len(names) == 1 else ''}",
         "", "", f"{op}.register_autograd(_{op}_backward, setup_context=_{op}_setup_context)"]
    return L
