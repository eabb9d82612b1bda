"""Analyse the custom ops a probe calls, for the register_fake / mutates_args / register_autograd fixes.

Every custom op the probe calls (forward and backward, recorded with a TorchDispatchMode) is checked
empirically, not from what the registration claims:

* **fake**: called under ``FakeTensorMode``; an op that has none gets one inferred from perturbed eager runs
  (fix.observe). A ``bool`` argument that changes the output shapes (mHC's ``outFlag``) becomes an ``if``;
* **mutates_args**: each tensor argument's version counter and data before and after a real call, against the
  schema's ``(a!)`` annotations;
* **autograd**: an op the diagnosis reported as ``missing-autograd`` gets ``register_autograd``: wired to an
  existing ``<name>_backward`` op when one is registered and its arguments bind by name, else a skeleton.

Reference: PyTorch custom-ops manual (``register_fake``, ``mutates_args``, ``register_autograd``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import compat
from ..classify import detect
from ..evidence import exceptions
from ..model.taxonomy import K
from . import observe


@dataclass
class FakeBranch:
    """Output metadata when ``flag`` (a bool argument) is ``value``; ``flag`` None: no branch."""

    flag: str | None
    value: bool | None
    metas: list[observe.OutputMeta]


@dataclass
class OpPlan:
    qualname: str
    args: list[str]
    outputs: list[str]
    #: the schema returns one Tensor (not a tuple)
    single: bool
    needs_fake: bool = False
    fake: list[FakeBranch] = field(default_factory=list)
    fake_error: str = ""
    declared_mutates: list[str] = field(default_factory=list)
    observed_mutates: list[str] = field(default_factory=list)
    needs_autograd: bool = False
    #: backward op wiring: (qualname, per backward-op argument its source: "grad:<j>", "input:<name>", "output:<j>")
    backward_op: tuple[str, list[str]] | None = None
    backward_note: str = ""
    tensor_inputs: list[str] = field(default_factory=list)
    #: tensor ranks at the probe, per argument (the fake checks them)
    ranks: dict[str, int] = field(default_factory=dict)
    #: file and line of the ``custom_op(...)`` definition, when tracecheck can find it
    defined_at: tuple[str, int] | None = None
    runs: int = 0
    #: fake-mismatch: how the op's own fake disagreed with its kernel, and that fake's source (the fix replaces it)
    fake_disagreement: str = ""
    own_fake_source: str = ""

    @property
    def mutates_mismatch(self) -> bool:
        return sorted(self.declared_mutates) != sorted(self.observed_mutates)

    @property
    def todo(self) -> list[str]:
        return [t for b in self.fake for m in b.metas for t in m.todo] + ([self.fake_error] if self.fake_error else [])


def _outputs(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _has_fake(op: Any, named: observe.Args) -> str | None:
    """None when the op runs under FakeTensorMode, else the classified reason."""
    try:
        with compat.fake_tensor_mode(allow_non_fake_inputs=False) as mode:
            fake = {n: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for n, v in named.items()}
            op(**fake)
    except Exception as e:
        f = detect.classify_error("opcheck", exceptions.error_record(e, "fake"))
        return f.kind if f.kind == K.MISSING_FAKE else None  # another failure is not this fix's business
    return None


def _fake_disagrees(op: Any, named: observe.Args) -> str:
    """How the op's registered fake disagrees with its kernel ("" when shapes and dtypes agree): the fake run under
    FakeTensorMode against a real call, output by output, at the probe's inputs and then at each size changed
    alone where the kernel accepts it (a fake right at the probe's batch size only)."""
    from .shape_check import shape_variants

    tried = 0
    for label, args in [("the probe's inputs", named), *shape_variants(named)]:
        why = _disagreement(op, args)
        if why:
            return why if args is named else f"at {label}: {why}"
        tried += why is not None
        if tried > MAX_FAKE_CHECKS:
            break
    return ""


#: at most this many other shapes the kernel accepts are tried for a fake that may hold at the probe's alone
MAX_FAKE_CHECKS = 8
#: a fake whose output sizes depend on data (get_ctx().new_dynamic_size()) raises these without a ShapeEnv
_DATA_DEPENDENT = ("DynamicOutputShapeException", "DataDependentOutputException", "GuardOnDataDependentSymNode")


def _disagreement(op: Any, named: observe.Args) -> str | None:
    """How the fake disagrees with the kernel at ``named``: "" when they agree, None when the kernel refuses these
    inputs (or the fake's sizes depend on data, which no comparison here can judge)."""
    try:
        with torch.no_grad():
            real = _outputs(op(**{n: observe.clone(v) for n, v in named.items()}))
    except Exception:  # noqa: BLE001 - the kernel itself refuses these inputs: nothing to compare the fake with
        return None
    try:
        with compat.fake_tensor_mode(allow_non_fake_inputs=False) as mode:
            fake = _outputs(op(**{n: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                                  for n, v in named.items()}))
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ in _DATA_DEPENDENT:  # new_dynamic_size() needs a ShapeEnv: a right fake can raise here
            return None
        return f"the fake raises {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    if len(fake) != len(real):
        return f"the fake returns {len(fake)} outputs, the kernel {len(real)}"
    for j, (f, r) in enumerate(zip(fake, real)):
        if tuple(f.shape) != tuple(r.shape) or f.dtype != r.dtype:
            return (f"output {j}: the fake gives {tuple(f.shape)} {str(f.dtype).replace('torch.', '')}, the kernel "
                    f"{tuple(r.shape)} {str(r.dtype).replace('torch.', '')}")
    return ""


def _own_fake_source(qualname: str) -> str:
    fn = compat.custom_op_fake_impl(qualname)
    try:
        return inspect.getsource(fn) if fn else ""
    except (OSError, TypeError):
        return ""


def _mutated(op: Any, named: observe.Args) -> list[str]:
    args = {n: observe.clone(v) for n, v in named.items()}
    before = observe.snapshot(args)
    with torch.no_grad():
        op(**args)
    return observe.mutated(before, args)


def _infer_fake(op: Any, named: observe.Args) -> tuple[list[FakeBranch], int]:
    def call(args: observe.Args) -> list[observe.Group]:
        return [(args, _outputs(op(**args)))]

    base = _outputs(op(**{n: observe.clone(v) for n, v in named.items()}))
    # a bool argument that changes the output shapes becomes an `if` in the fake (first such flag only)
    for flag, value in named.items():
        if type(value) is not bool:
            continue
        try:
            flipped = _outputs(op(**{**{n: observe.clone(v) for n, v in named.items()}, flag: not value}))
        except Exception:  # noqa: S112  (the op rejects the other value: nothing to branch on)
            continue
        if [tuple(t.shape) for t in flipped] != [tuple(t.shape) for t in base]:
            branches, runs = [], 0
            for v in (True, False):
                seen = observe.observe(call, {**named, flag: v})
                branches.append(FakeBranch(flag, v, seen.groups[0]))
                runs += seen.runs
            return branches, runs
    seen = observe.observe(call, named)
    return [FakeBranch(None, None, seen.groups[0])], seen.runs


def _definition(qualname: str) -> tuple[str, int] | None:
    opdef = compat.custom_op_defs().get(qualname)
    fn = getattr(opdef, "_init_fn", None)
    try:
        file = inspect.getsourcefile(fn) if fn is not None else None
        return (file, inspect.getsourcelines(fn)[1]) if fn is not None and file else None
    except (OSError, TypeError):
        return None


def _find_backward(qualname: str, plan: OpPlan) -> None:
    """Wire ``<ns>::<name>_backward`` (or the same name in another namespace) when its arguments bind by name:
    ``grad*`` -> the output grads in order, a forward argument's name -> that argument, and the rest -> the
    forward's remaining outputs in order. Anything else leaves the skeleton."""
    ns, name = qualname.split("::")
    candidates = [f"{ns}::{name}_backward"] + [f"{other}::{name}_backward" for other in _namespaces() if other != ns]
    for cand in candidates:
        o, n = cand.split("::")
        packet = getattr(getattr(torch.ops, o), n, None) if hasattr(torch.ops, o) else None
        if packet is None or not hasattr(packet, "default"):
            continue
        args = compat.op_schema(packet.default).arguments
        grads = [a for a in args if a.name.lower().startswith("grad")]
        rest_outputs = list(range(len(grads), len(plan.outputs)))
        sources: list[str] = []
        lower = {a.lower(): a for a in plan.args}
        ok = True
        for a in args:
            if a in grads:
                sources.append(f"grad:{grads.index(a)}")
            elif a.name.lower() in lower:
                sources.append(f"input:{lower[a.name.lower()]}")
            elif str(a.type) == "Tensor" and rest_outputs:
                sources.append(f"output:{rest_outputs.pop(0)}")
            else:
                ok = False
                break
        returns = compat.op_schema(packet.default).returns
        if ok and len(returns) == len(plan.tensor_inputs) and len(grads) <= len(plan.outputs):
            plan.backward_op = (cand, sources)
            plan.backward_note = (f"found {cand}; its arguments were bound by name (grad* -> output grads, "
                                  f"same-name -> inputs, the rest -> the remaining outputs in order)")
            return
        plan.backward_note = f"found {cand}, but its arguments do not bind to this op's inputs and outputs by name"
    if not plan.backward_note:
        plan.backward_note = f"no {name}_backward op is registered: needs a backward formula"


def _namespaces() -> list[str]:
    seen = {q.split("::")[0] for q in compat.custom_op_defs()}
    seen |= {s.split("::")[0] for s in compat.all_op_names() if "::" in s}
    return sorted(seen)


def _fill_fake(plan: OpPlan, op: Any, named: observe.Args, returns: Any) -> None:
    if any("[]" in str(r.type) for r in returns):
        plan.fake_error = "the op returns a list of tensors; the number of outputs needs a hand-written fake"
    else:
        plan.fake, plan.runs = _infer_fake(op, named)


def analyse_op(op: Any, args: tuple, kwargs: dict, kinds: set[str], autograd_ops: set[str]) -> OpPlan | None:
    """The plan for one recorded custom op, or None when it needs nothing from the kinds found."""
    qualname = op.name()
    schema = compat.op_schema(op)
    named = observe.named_args(op, args, kwargs)
    returns = schema.returns
    plan = OpPlan(qualname, [a.name for a in schema.arguments],
                  ["out"] if len(returns) == 1 else [f"out{j}" for j in range(len(returns))],
                  single=len(returns) == 1,
                  tensor_inputs=[n for n, v in named.items() if isinstance(v, torch.Tensor)],
                  ranks={n: v.dim() for n, v in named.items() if isinstance(v, torch.Tensor)},
                  defined_at=_definition(qualname))
    plan.declared_mutates = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    needed = False
    if K.MISSING_FAKE in kinds and _has_fake(op, named):
        plan.needs_fake = True
        needed = True
        _fill_fake(plan, op, named, returns)
    if K.FAKE_MISMATCH in kinds and not plan.needs_fake:
        plan.fake_disagreement = _fake_disagrees(op, named)
        if plan.fake_disagreement:
            plan.needs_fake = needed = True
            plan.own_fake_source = _own_fake_source(qualname)
            _fill_fake(plan, op, named, returns)
    if K.MUTATES_ARGS_MISMATCH in kinds:
        plan.observed_mutates = _mutated(op, named)
        needed |= plan.mutates_mismatch
    else:
        plan.observed_mutates = list(plan.declared_mutates)
    if K.MISSING_AUTOGRAD in kinds and qualname in autograd_ops:
        plan.needs_autograd = True
        needed = True
        _find_backward(qualname, plan)
    return plan if needed else None
