"""Analyse a ``torch.autograd.Function`` whose body Dynamo cannot trace, for the two-custom-op fix.

The fix (fix.codegen) runs the Function's own ``forward`` and ``backward`` inside two opaque custom ops. To
write their schemas and fake impls, this module runs the Function eagerly with recording ctx objects and
learns:

* what ``forward`` saved (``ctx.save_for_backward`` and tensor ``ctx.<attr>``): an input, an output, or an
  intermediate, which becomes an extra output of the forward op (a *residual*);
* which non-tensor ``ctx.<attr>`` the ``backward`` reads, and which input each one equals (it becomes a schema
  argument of the backward op and is set from ``inputs`` in ``setup_context``);
* which inputs get a gradient, which outputs ``forward`` marked non-differentiable;
* ``mutates_args`` of both ops, from version counters and data before and after (never assumed);
* output shapes, dtypes and devices, from runs at perturbed inputs (fix.observe).

Reference: "Extending torch.func with autograd.Function" and the custom-ops manual's ``register_autograd``
section (PyTorch docs); the shipped hand-written equivalent is probes/mhc/fixed.py.
"""
from __future__ import annotations

import ast
import inspect
import keyword
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import compat
from . import observe

#: Python type -> custom_op annotation, for non-tensor arguments (torch._library.infer_schema accepts these).
_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


class Unfixable(Exception):
    """The code does something a custom-op fix cannot express (the message says what): an autograd.Function here,
    a C call in c_call.py."""


@dataclass
class Arg:
    name: str
    annotation: str  # custom_op type annotation: "Tensor", "float", "Optional[Tensor]", ...
    default: str | None = None  # source of the default in forward's signature


@dataclass
class FunctionPlan:
    """Everything fix.codegen needs for one Function, as plain data (it crosses processes)."""

    qualname: str
    module: str
    module_file: str
    op_base: str
    setup_context_style: bool
    inputs: list[Arg]
    outputs: list[str]
    returns_tuple: bool
    residuals: list[str]
    #: per ctx.saved_tensors entry, where it comes from: ("input", name) | ("output", j) | ("residual", r)
    saved: list[tuple[str, Any]]
    saved_names: list[str]
    #: tensor ctx attributes: attr -> ("input", name) | ("output", j) | ("residual", r)
    tensor_attrs: dict[str, tuple[str, Any]]
    #: non-tensor ctx attributes the backward reads: attr -> (backward-op argument, annotation, source), source
    #: ("input", name), ("expr", code over the forward's inputs) or ("const", repr); see _resolve_scalar_attrs
    scalar_attrs: dict[str, tuple[str, str, tuple[str, str]]]
    grad_names: list[str]
    grads_for: list[str]
    nondiff_outputs: list[int]
    outputs_alias_inputs: list[int]
    residuals_alias_inputs: list[int]
    fwd_mutates: list[str]
    bwd_mutates: list[str]
    #: indices into grads_for of gradients that alias a backward input (returned as is: must be cloned)
    grads_alias_inputs: list[int] = field(default_factory=list)
    #: module-level names bound to the class in the probe's module, besides its defining module
    probe_names: list[str] = field(default_factory=list)
    #: per scalar attr whose source is not certain: ("check" | "todo", why)
    attr_notes: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the key of this Function in the fixed module (its qualname, or module:qualname when two share a name)
    key: str = ""
    #: the drop-in class's name in the fixed module (the Function's name, module-prefixed on a clash)
    dropin: str = ""
    #: (module, name) of other module globals bound to the class: rebound too (model.py -> lib.py -> Fn)
    other_bindings: list[tuple[str, str]] = field(default_factory=list)
    #: forward or backward ran the autograd engine itself (a kernel written with torch.autograd.grad): the ops
    #: must then re-enable autograd dispatch, which custom-op kernels otherwise run below
    uses_autograd: tuple[bool, bool] = (False, False)  # (forward, backward)
    #: tensor ranks at the probe, per op input (the fakes are inferred at these ranks and check them)
    fwd_ranks: dict[str, int] = field(default_factory=dict)
    bwd_ranks: dict[str, int] = field(default_factory=dict)
    fwd_meta: list[observe.OutputMeta] = field(default_factory=list)
    bwd_meta: list[observe.OutputMeta] = field(default_factory=list)
    runs: int = 0
    refused: list[str] = field(default_factory=list)

    @property
    def backward_inputs(self) -> list[str]:
        return [*self.grad_names, *self.saved_names, *(f"ctx_{a}" for a in self.tensor_attrs),
                *(param for param, _, _ in self.scalar_attrs.values())]


@dataclass
class _Told:
    """What ``forward`` told its ctx: the saved tensors, other attributes, the outputs marked non-differentiable
    and the inputs marked dirty."""

    saved: tuple[Any, ...] = ()
    #: ``ctx.<attr> = value``: the user's values, of any type
    attrs: dict[str, object] = field(default_factory=dict)
    nondiff: list[Any] = field(default_factory=list)
    dirty: list[Any] = field(default_factory=list)


class _ForwardCtx:
    """Stands in for the autograd ctx in ``forward``: records what it is told instead of doing it."""

    # set through object.__setattr__: this class's own __setattr__ records the forward's ctx.<attr> = ...
    _state: _Told
    needs_input_grad: tuple[bool, ...]

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        object.__setattr__(self, "_state", _Told())
        object.__setattr__(self, "needs_input_grad", needs_input_grad)

    def save_for_backward(self, *tensors: Any) -> None:
        self._state.saved = tensors

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self._state.nondiff.extend(tensors)

    def mark_dirty(self, *tensors: Any) -> None:
        self._state.dirty.extend(tensors)

    def set_materialize_grads(self, value: bool) -> None:
        pass  # custom-op autograd always materializes grads: the backward gets zeros, never None

    def save_for_forward(self, *tensors: Any) -> None:
        raise Unfixable("forward calls ctx.save_for_forward (forward-mode AD), which the fix does not carry over")

    def __setattr__(self, name: str, value: Any) -> None:
        self._state.attrs[name] = value


class _BackwardCtx:
    """Stands in for the ctx in ``backward``: ``saved_tensors`` and attributes, recording which are read."""

    # set through object.__setattr__, as _ForwardCtx's
    _saved: tuple[Any, ...]
    _attrs: dict[str, object]
    reads: list[str]
    needs_input_grad: tuple[bool, ...]

    def __init__(self, saved: tuple, attrs: dict[str, object], needs_input_grad: tuple[bool, ...]) -> None:
        object.__setattr__(self, "_saved", saved)
        object.__setattr__(self, "_attrs", attrs)
        object.__setattr__(self, "reads", [])
        object.__setattr__(self, "needs_input_grad", needs_input_grad)

    @property
    def saved_tensors(self) -> tuple:
        return self._saved

    def __getattr__(self, name: str) -> Any:
        if name in self._attrs:
            if name not in self.reads:
                self.reads.append(name)
            return self._attrs[name]
        raise AttributeError(f"ctx has no attribute {name!r}")


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return re.sub(r"\W+", "_", s).strip("_") or "fn"


def ident(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "arg"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = f"{base}_"
    out, i = base, 1
    while out in taken:
        i += 1
        out = f"{base}{i}"
    taken.add(out)
    return out


def annotation(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if value is None:
        return "Optional[Tensor]"
    for t, ann in _SCALAR_TYPES.items():
        if type(value) is t:
            return ann
    if isinstance(value, (list, tuple)) and value and all(type(v) is int for v in value):
        return "list[int]"
    if isinstance(value, (list, tuple)) and value and all(type(v) is float for v in value):
        return "list[float]"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        raise Unfixable("an argument is a list of tensors; pass them as separate arguments first")
    raise Unfixable(f"an argument of type {type(value).__name__} has no custom-op schema type")


#: an autograd.Function subclass (its forward, setup_context and backward are static methods)
FunctionClass = type[torch.autograd.Function]


def _forward_params(cls: FunctionClass) -> list[inspect.Parameter]:
    params = list(inspect.signature(cls.forward).parameters.values())
    if not compat.defines_setup_context(cls):
        params = params[1:]  # ctx
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise Unfixable("forward takes *args/**kwargs; the custom op needs named arguments")
    return params


def _source_tree(fn: Any) -> ast.AST | None:
    """``fn``'s parsed source, or None when it has none (a builtin, a lambda in a REPL)."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _source_names(fn: Any, pattern: str) -> list[str] | None:
    """Names bound by the first ``a, b = <pattern>`` (or returned by ``return a, b``) in ``fn``'s source."""
    tree = _source_tree(fn)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if pattern == "return" and isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        elif pattern != "return" and isinstance(node, ast.Assign) and ast.unparse(node.value) == pattern:
            target = node.targets[0]
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
        else:
            continue
        names = [e.id for e in elts if isinstance(e, ast.Name)]
        return names if len(names) == len(elts) else None
    return None


def _saved_arg_names(fn: Any) -> list[str] | None:
    """The names passed to ``ctx.save_for_backward(a, b, ...)`` in ``fn``'s source, when all are plain names."""
    tree = _source_tree(fn)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(".save_for_backward"):
            names = [a.id for a in node.args if isinstance(a, ast.Name)]
            return names if len(names) == len(node.args) else None
    return None


def _ctx_assignments(fn: Any) -> dict[str, str | None]:
    """``ctx.<attr> = <name>`` in ``fn``'s source: attr -> the name, or None when assigned something else."""
    tree = _source_tree(fn)
    if tree is None:
        return {}
    out: dict[str, str | None] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "ctx":
                out[target.attr] = node.value.id if isinstance(node.value, ast.Name) else None
            elif isinstance(target, ast.Tuple):
                for t in target.elts:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "ctx":
                        out[t.attr] = None
    return out


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a is b


def aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.numel() > 0
    except RuntimeError:
        return False


def _run_forward(cls: FunctionClass, args: observe.Args,
                 needs: tuple[bool, ...]) -> tuple[_ForwardCtx, list[Any], bool]:
    ctx = _ForwardCtx(needs)
    values = list(args.values())
    if compat.defines_setup_context(cls):
        out = cls.forward(*values)
        cls.setup_context(ctx, tuple(values), out)
    else:
        out = cls.forward(ctx, *values)
    return ctx, list(out) if isinstance(out, tuple) else [out], isinstance(out, tuple)


def _locate(t: Any, args: observe.Args, outs: list[Any], residuals: list[Any]) -> tuple[str, Any]:
    for name, v in args.items():
        if _same(t, v):
            return ("input", name)
    for j, o in enumerate(outs):
        if _same(t, o):
            return ("output", j)
    for r, o in enumerate(residuals):
        if _same(t, o):
            return ("residual", r)
    residuals.append(t)
    return ("residual", len(residuals) - 1)


def analyse(cls: FunctionClass, example: tuple[Any, ...]) -> FunctionPlan:
    """Plan the two-op fix of ``cls`` from one eager call with ``example`` args (as passed to ``apply``).

    Raises Unfixable when the Function does something the fix cannot express.
    """
    params = _forward_params(cls)
    if len(example) > len(params):
        raise Unfixable("apply() got more arguments than forward declares")
    taken: set[str] = set()
    args: observe.Args = {}
    inputs: list[Arg] = []
    for i, p in enumerate(params):
        value = example[i] if i < len(example) else p.default
        name = ident(p.name, taken)
        default = None if p.default is p.empty else repr(p.default)
        inputs.append(Arg(name, annotation(value), default))
        args[name] = value
    needs = tuple(isinstance(v, torch.Tensor) and v.is_floating_point() for v in args.values())

    # ---- the base run: structure --------------------------------------------------------------
    base = {n: observe.clone(v) for n, v in args.items()}
    before = observe.snapshot(base)
    engine_runs: list[int] = []  # forward's, then backward's below
    with torch.no_grad(), compat.engine_runs_counted(engine_runs):
        fctx, outs, returns_tuple = _run_forward(cls, base, needs)
    if fctx._state.dirty:
        raise Unfixable("forward calls ctx.mark_dirty (an in-place Function); write it as a custom op with "
                        "mutates_args by hand")
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise Unfixable("forward returns a non-tensor; a custom op returns tensors only")
    fwd_mutates = observe.mutated(before, base)
    residuals: list[Any] = []
    saved = [_locate(t, base, outs, residuals) for t in fctx._state.saved if isinstance(t, torch.Tensor)]
    if len(saved) != len(fctx._state.saved):
        raise Unfixable("save_for_backward got a non-tensor (None?); save tensors only")
    attrs = fctx._state.attrs
    tensor_attrs = {a: _locate(v, base, outs, residuals) for a, v in attrs.items() if isinstance(v, torch.Tensor)}
    nondiff = [j for j, o in enumerate(outs) if any(o is t for t in fctx._state.nondiff)]

    grads = [torch.randn_like(o) if o.is_floating_point() else torch.zeros_like(o) for o in outs]
    saved_values = tuple(_value(ref, base, outs, residuals) for ref in saved)
    bctx = _BackwardCtx(saved_values, {**attrs}, needs)
    bw_before = observe.snapshot({f"g{j}": g for j, g in enumerate(grads)})
    fwd_engine, engine_runs = bool(engine_runs), []
    with torch.no_grad(), compat.engine_runs_counted(engine_runs):
        gin = cls.backward(bctx, *grads)
    gin = list(gin) if isinstance(gin, tuple) else [gin]
    if len(gin) != len(args):
        raise Unfixable(f"backward returned {len(gin)} gradients for {len(args)} forward inputs")
    grads_for = [n for (n, v), g in zip(args.items(), gin) if isinstance(g, torch.Tensor)]
    bw_values = [*grads, *saved_values]
    grads_alias = [i for i, g in enumerate(g for g in gin if isinstance(g, torch.Tensor))
                   if any(aliases(g, v) for v in bw_values)]
    scalar_reads = [a for a in bctx.reads if not isinstance(attrs[a], torch.Tensor)]

    # ---- names --------------------------------------------------------------------------------
    names = set(args)
    out_src = _source_names(cls.forward, "return")
    outputs = [ident(n, names) for n in (out_src if out_src and len(out_src) == len(outs) else
                                          [f"out{j}" if len(outs) > 1 else "out" for j in range(len(outs))])]
    # names for saved tensors: the backward's `a, b = ctx.saved_tensors`, else the forward's save_for_backward(a, b)
    saved_src = next((n for n in (_source_names(cls.backward, "ctx.saved_tensors"),
                                  _saved_arg_names(cls.setup_context if compat.defines_setup_context(cls)
                                                   else cls.forward)) if n and len(n) == len(saved)), None)
    res_names: list[str] = [""] * len(residuals)
    for i, ref in enumerate(saved):
        if ref[0] == "residual" and not res_names[ref[1]]:
            res_names[ref[1]] = saved_src[i] if saved_src else f"saved{i}"
    for a, ref in tensor_attrs.items():
        if ref[0] == "residual" and not res_names[ref[1]]:
            res_names[ref[1]] = a
    res_names = [ident(n, names) for n in res_names]
    bw_taken: set[str] = set()
    grad_params = list(inspect.signature(cls.backward).parameters)[1:]
    grad_names = [ident(grad_params[j] if j < len(grad_params) and not grad_params[j].startswith("*")
                         else f"grad_{outputs[j]}", bw_taken) for j in range(len(outs))]
    saved_names = []
    for ref in saved:
        want = ref[1] if ref[0] == "input" else outputs[ref[1]] if ref[0] == "output" else res_names[ref[1]]
        saved_names.append(ident(want, bw_taken))
    assigned = _ctx_assignments(cls.setup_context if compat.defines_setup_context(cls) else cls.forward)
    scalar_attrs: dict[str, tuple[str, str, tuple[str, str]]] = {}
    for a in scalar_reads:
        v = attrs[a]
        given = assigned.get(a)
        src = ("input", given) if given is not None and given in args else ("const", repr(v))  # settled after the runs
        scalar_attrs[a] = (ident(a, bw_taken), annotation(v), src)

    plan = FunctionPlan(
        qualname=cls.__qualname__, module=cls.__module__, module_file=inspect.getsourcefile(cls.forward) or "",
        op_base=snake(cls.__name__), key=cls.__qualname__, dropin=cls.__name__, setup_context_style=compat.defines_setup_context(cls),
        inputs=inputs, outputs=outputs, returns_tuple=returns_tuple, residuals=res_names, saved=saved,
        saved_names=saved_names, tensor_attrs=tensor_attrs, scalar_attrs=scalar_attrs, grad_names=grad_names,
        grads_for=grads_for, nondiff_outputs=nondiff,
        outputs_alias_inputs=[j for j, o in enumerate(outs) if any(aliases(o, v) for v in base.values()
                                                                  if isinstance(v, torch.Tensor))],
        residuals_alias_inputs=[r for r, t in enumerate(residuals) if any(aliases(t, v) for v in base.values()
                                                                         if isinstance(v, torch.Tensor))],
        fwd_mutates=fwd_mutates,
        grads_alias_inputs=grads_alias, uses_autograd=(fwd_engine, bool(engine_runs)),
        bwd_mutates=[grad_names[int(n[1:])] for n in observe.mutated(bw_before, {f"g{j}": g for j, g in enumerate(grads)})],
    )
    plan.fwd_ranks = {n: v.dim() for n, v in args.items() if isinstance(v, torch.Tensor)}
    plan.bwd_ranks = {n: t.dim() for n, t in zip([*plan.grad_names, *plan.saved_names], [*grads, *saved_values])}
    _observe(cls, plan, args, needs)
    return plan


def _value(ref: tuple[str, Any], args: observe.Args, outs: list[Any], residuals: list[Any]) -> Any:
    kind, key = ref
    return args[key] if kind == "input" else outs[key] if kind == "output" else residuals[key]


def _observe(cls: FunctionClass, plan: FunctionPlan, args: observe.Args, needs: tuple[bool, ...]) -> None:
    """Fill the plan's fake metadata: run forward+backward at perturbed inputs, in the base run's structure."""

    attr_runs: list[tuple[observe.Args, dict[str, object]]] = []

    def call(run_args: observe.Args) -> list[observe.Group]:
        fctx, outs, _ = _run_forward(cls, run_args, needs)
        residuals: list[Any] = []
        saved = [_locate(t, run_args, outs, residuals) for t in fctx._state.saved]
        attrs = fctx._state.attrs
        for v in attrs.values():
            if isinstance(v, torch.Tensor):
                _locate(v, run_args, outs, residuals)
        if saved != plan.saved or len(residuals) != len(plan.residuals) or len(outs) != len(plan.outputs):
            raise Unfixable("forward saved different things at these inputs")
        grads = [torch.randn_like(o) if o.is_floating_point() else torch.zeros_like(o) for o in outs]
        saved_values = tuple(_value(ref, run_args, outs, residuals) for ref in saved)
        gin = cls.backward(_BackwardCtx(saved_values, dict(attrs), needs), *grads)
        gin = list(gin) if isinstance(gin, tuple) else [gin]
        # saved inputs first: a gradient's shape is then read off its input (grad_x like x), not off a grad
        bw_inputs = dict(zip(plan.saved_names, saved_values))
        bw_inputs.update(zip(plan.grad_names, grads))
        bw_inputs.update({f"ctx_{a}": _value(ref, run_args, outs, residuals) for a, ref in plan.tensor_attrs.items()})
        bw_inputs.update({param: attrs[a] for a, (param, _, _) in plan.scalar_attrs.items()})
        grads_out = [g for (n, _), g in zip(run_args.items(), gin) if n in plan.grads_for]
        if not all(isinstance(g, torch.Tensor) for g in grads_out):
            raise Unfixable("backward returned None for an input it gave a gradient before")
        attr_runs.append((run_args, {a: attrs[a] for a in plan.scalar_attrs}))
        return [(run_args, [*outs, *residuals]), (bw_inputs, grads_out)]

    seen = observe.observe(call, args)
    plan.fwd_meta, plan.bwd_meta = seen.groups
    plan.runs, plan.refused = seen.runs, seen.refused
    _resolve_scalar_attrs(plan, attr_runs)


def _resolve_scalar_attrs(plan: FunctionPlan, runs: list[tuple[observe.Args, dict[str, object]]]) -> None:
    """Where each non-tensor ctx attribute comes from, checked against every run, never by one value alone.

    An input the forward assigns by name (``ctx.a = a``) and that matches in every run is certain. Otherwise: the
    one input equal to it in every run (certain only if that input changed between runs), an int expression of
    the input sizes (``ctx.n = x.shape[0]``), or a constant; anything else is a TODO (``ctx.inv_n = 1 / n``).
    """
    from . import shapes

    for a, (param, ann, src) in list(plan.scalar_attrs.items()):
        values = [attrs[a] for _, attrs in runs]
        if src[0] == "input" and all(v == r[src[1]] for v, (r, _) in zip(values, runs)):
            continue
        same = [n for n in runs[0][0] if all(type(r[n]) is type(v) and r[n] == v for v, (r, _) in zip(values, runs))]
        same.sort(key=lambda n: n != a)  # the input of the same name first
        if same:
            varied = len({repr(r[same[0]]) for r, _ in runs}) > 1
            plan.scalar_attrs[a] = (param, ann, ("input", same[0]))
            if not varied or len(same) > 1:
                plan.attr_notes[a] = ("check", f"ctx.{a} equals input {same[0]} in every run"
                                               + (f" (so do {', '.join(same[1:])})" if len(same) > 1 else "")
                                               + ("" if varied else f", but {same[0]} never changed"))
            continue
        ints = [v for v in values if type(v) is int]
        if len(ints) == len(values):  # an int in every run (a bool is no size)
            dim_runs = shapes.Runs()
            for n, (r, _) in zip(ints, runs):
                dim_runs.add(observe.symbols_of(r), n)
            expr = shapes.infer_dim(list(observe.symbols_of(runs[0][0])), dim_runs)
            if expr.code is not None and (expr.confirmed or len(set(values)) > 1):
                plan.scalar_attrs[a] = (param, ann, ("expr", expr.code))
                if not expr.confirmed:
                    plan.attr_notes[a] = ("check", f"ctx.{a} = {expr.code}: {expr.reason}")
                continue
        if len({repr(v) for v in values}) == 1:
            plan.scalar_attrs[a] = (param, ann, ("const", repr(values[0])))
            plan.attr_notes[a] = ("check", f"ctx.{a} was {values[0]!r} in every run and equals no input")
            continue
        plan.scalar_attrs[a] = (param, ann, ("const", repr(values[0])))
        plan.attr_notes[a] = ("todo", f"ctx.{a} changes with the inputs ({values[0]!r} at the probe's, "
                                      f"{next(v for v in values if repr(v) != repr(values[0]))!r} in another run) in "
                                      "a way tracecheck cannot express: compute it in setup_context from inputs")
