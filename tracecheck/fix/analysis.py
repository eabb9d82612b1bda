"""Worker side of ``tracecheck fix``: runs inside a stage process (user code never runs in the CLI process).

``analyze``   loads the probe, runs it eagerly once while recording every autograd.Function it applies and every
              custom op it calls; asks Dynamo (fullgraph, eager backend) about each Function alone and fixes those
              that fail as pybind-builtin (fix.autograd_fn); checks each custom op for the kinds the diagnosis
              found (fix.custom_op). Returns the generated sources as text.
``eager_dump`` / ``eager_compare``  run the original and the patched probe eagerly and compare outputs and
              gradients, so "verified" also means "computes what the original computed".
"""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from types import ModuleType
from typing import Any, Callable, Iterator

import torch

from .. import compat
from ..classify import detect
from ..collect import casemaker
from ..evidence import exceptions
from ..model.evidence import NumericMismatch
from ..model.exitcodes import UsageError
from ..model.report import Finding
from ..model.taxonomy import K
from ..evidence.oprecorder import OpRecorder
from ..stages import _execution as execution
from . import autograd_fn, codegen, custom_op, observe
from .autograd_fn import FunctionClass
from .task_results import (Analysis, EagerComparison, EagerRun, FunctionFix, GradientCheck, MutatesArgs,
                           TaskError)

# The task records (fix/jobs.py) call these functions with their fields: that module imports this one, so these
# take the fields, not the record.


@contextlib.contextmanager
def record_function_calls(calls: dict[FunctionClass, tuple[Any, ...]]) -> Iterator[None]:
    """Record the first ``apply`` args of every autograd.Function subclass (cloned before the call)."""
    def hook(cls: FunctionClass, apply: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if cls not in calls and not kwargs:
            calls[cls] = tuple(observe.clone(a) for a in args)
        return apply(*args, **kwargs)

    with compat.intercept_function_apply(hook):
        yield


def dynamo_verdict(cls: FunctionClass, args: tuple[Any, ...]) -> Finding | None:
    """None when Dynamo traces ``cls.apply`` alone under fullgraph; else the classified finding."""
    compat.dynamo_reset()
    fn = torch.compile(lambda *a: cls.apply(*a), backend="eager", fullgraph=True)
    try:
        fn(*[observe.clone(a) for a in args])
    except Exception as e:
        return detect.classify_error("fullgraph", exceptions.error_record(e, "fullgraph"))
    finally:
        compat.dynamo_reset()
    return None


def analyze(file: str, probe: str, *, namespace: str, kinds: tuple[str, ...], autograd_ops: tuple[str, ...],
            module_name: str, target: str, patched_path: str, fixed_path: str,
            versions: dict[str, str]) -> Analysis:
    """Plan and render the fix for the kinds the diagnosis found; sources come back as text. The arguments are
    fix.jobs.AnalyzeTask's fields."""
    module, case = casemaker.load_case(file, probe)
    if module_name in sys.modules:  # the patched probe would import that module instead of the fix
        # (the worker answers a UsageError as one: the parent exits 2; a result of that name would read as none)
        raise UsageError(f"-o {fixed_path}: the module name {module_name!r} is already taken by a module the probe "
                         "imports; choose another file name")
    found_kinds = set(kinds)
    calls: dict[FunctionClass, tuple[Any, ...]] = {}
    recorder = OpRecorder()
    with record_function_calls(calls), recorder:
        execution.execute(case.fn, case)  # forward and backward: backward ops are recorded too
    found: list[FunctionFix] = []
    plans = _function_plans(module, calls, found) if K.PYBIND_BUILTIN in found_kinds else []
    op_plans: list[custom_op.OpPlan] = []
    for op, (args, kwargs) in recorder.calls.items():
        if op.namespace == namespace:
            continue
        plan = custom_op.analyse_op(op, args, kwargs, found_kinds, set(autograd_ops))
        if plan is None:
            continue
        op_plans.append(plan)
        found.append(_op_entry(plan, file))
    if not plans and not op_plans:
        return Analysis(tuple(found))
    # the ops whose fakes tracecheck wrote: checked again at shapes the probe never used (fix.shape_check)
    shape_ops = [f"{namespace}::{p.op_base}_forward" for p in plans] + \
        [p.qualname for p in op_plans if p.needs_fake and not p.todo]
    fixed_module = codegen.fixed_module(plans, op_plans, namespace, module_name, target, versions)
    rebinds: list[tuple[str | None, str]] = []
    for p in plans:
        if os.path.abspath(p.module_file) == os.path.abspath(file):
            rebinds.append((None, p.qualname))
        else:
            rebinds.append((p.module, p.qualname))
            rebinds += [(None, n) for n in p.probe_names]  # `from mod import Fn` in the probe file
        rebinds += [b for b in p.other_bindings if b[0] != p.module]
    mutates = {p.qualname: p.observed_mutates for p in op_plans if p.mutates_mismatch and p.defined_at
               and os.path.abspath(p.defined_at[0]) == os.path.abspath(file)}
    with open(file, encoding="utf-8") as f:
        source = f.read()
    patched_probe = codegen.patched_probe(source, file, patched_path, fixed_path, rebinds, mutates)
    return Analysis(tuple(found), fixed_module, patched_probe, tuple(shape_ops))


def _function_plans(module: ModuleType, calls: dict[FunctionClass, tuple[Any, ...]],
                    found: list[FunctionFix]) -> list[autograd_fn.FunctionPlan]:
    """A plan per autograd.Function the probe applied that this fix converts; what was done with each goes to
    ``found``, in the order they were applied."""
    plans: list[autograd_fn.FunctionPlan] = []
    for cls, args in calls.items():
        fix, plan = _function_plan(module, cls, args)
        found.append(fix)
        if plan is not None:
            plans.append(plan)
    _disambiguate(plans)
    return plans


def _function_plan(module: ModuleType, cls: FunctionClass,
                   args: tuple[Any, ...]) -> tuple[FunctionFix, autograd_fn.FunctionPlan | None]:
    """What is done with one Function: left alone (the action says why), or converted (its plan)."""
    fix = FunctionFix(cls.__qualname__, _where(cls, module))
    verdict = dynamo_verdict(cls, args)
    if verdict is None:
        return replace(fix, action="left alone: Dynamo traces it under fullgraph"), None
    if verdict.kind != K.PYBIND_BUILTIN:
        return replace(fix, action=f"left alone: Dynamo fails on it with {verdict.kind}, which this fix does not "
                                   "cover"), None
    home = sys.modules.get(cls.__module__)
    if home is None or getattr(home, cls.__qualname__, None) is not cls:
        return replace(fix, action="no code generated: the class is not defined at module level, so it cannot be "
                                   "rebound"), None
    try:
        plan = autograd_fn.analyse(cls, args)
    except autograd_fn.Unfixable as e:
        return replace(fix, action=f"no code generated: {e}"), None
    plan.probe_names = [n for n, v in vars(module).items() if v is cls]
    plan.other_bindings = _bindings(cls, skip=(home, module))
    names = [*plan.outputs, *plan.residuals]
    todo = [f"{o}: {t}" for o, m in zip(names, plan.fwd_meta) for t in m.todo]
    todo += [f"grad_{n}: {t}" for n, m in zip(plan.grads_for, plan.bwd_meta) for t in m.todo]
    check = [f"{o} {u}" for o, m in zip(names, plan.fwd_meta) for u in m.unconfirmed]
    check += [f"grad_{n} {u}" for n, m in zip(plan.grads_for, plan.bwd_meta) for u in m.unconfirmed]
    check += [why for kind, why in plan.attr_notes.values() if kind == "check"]
    todo += [why for kind, why in plan.attr_notes.values() if kind == "todo"]
    return replace(fix, action="forward and backward custom ops generated", todo=tuple(todo), check=tuple(check),
                   mutates_args=MutatesArgs(tuple(plan.fwd_mutates), tuple(plan.bwd_mutates)), runs=plan.runs,
                   refused=tuple(plan.refused)), plan


def _where(cls: type, probe_module: ModuleType) -> str:
    """The module as the user knows it: the probe file's path (tracecheck names that module itself), else the
    dotted name."""
    path = getattr(probe_module, "__file__", None)
    if sys.modules.get(cls.__module__) is probe_module and path:
        return os.path.relpath(path)
    return cls.__module__


def _bindings(cls: type, skip: tuple[Any, ...]) -> list[tuple[str, str]]:
    """Other modules' globals bound to ``cls`` (``from kern import Fn`` in model_lib.py): they are rebound too."""
    out = []
    for name, mod in list(sys.modules.items()):
        if mod is None or any(mod is m for m in skip) or name.split(".")[0] in ("tracecheck", "torch", "__main__"):
            continue
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            if value is cls:
                out.append((name, attr))
    return out


def _disambiguate(plans: list[autograd_fn.FunctionPlan]) -> None:
    """Two Functions of the same name from different modules get module-prefixed ops, keys and drop-ins."""
    counts: dict[str, int] = {}
    for p in plans:
        counts[p.qualname] = counts.get(p.qualname, 0) + 1
    for p in plans:
        if counts[p.qualname] > 1:
            prefix = autograd_fn.snake(p.module.split(".")[-1])
            p.key = f"{p.module}:{p.qualname}"
            p.op_base = f"{prefix}_{p.op_base}"
            p.dropin = f"{prefix}_{p.qualname.split('.')[-1]}"


def _op_entry(plan: custom_op.OpPlan, probe_file: str) -> FunctionFix:
    done: list[str] = []
    todo, check = list(plan.todo), []
    if plan.needs_fake:
        done.append(f"register_fake regenerated: its own fake disagrees with its kernel ({plan.fake_disagreement}); "
                    "the diff is in the fixed module" if plan.fake_disagreement else "register_fake generated")
        check += [f"{o} {u}" for b in plan.fake for o, m in zip(plan.outputs, b.metas) for u in m.unconfirmed]
    if plan.mutates_mismatch:
        done.append(f"mutates_args={tuple(plan.observed_mutates)!r} (declared {tuple(plan.declared_mutates)!r})")
        here = plan.defined_at and os.path.abspath(plan.defined_at[0]) == os.path.abspath(probe_file)
        if not here:
            where = f"{plan.defined_at[0]}:{plan.defined_at[1]}" if plan.defined_at else "where it is defined"
            todo.append(f"the op is not defined in the probe file: change its mutates_args at {where}")
    if plan.needs_autograd:
        if plan.backward_op:
            done.append(f"register_autograd wired to {plan.backward_op[0]}")
            check.append(plan.backward_note)
        else:
            done.append("register_autograd skeleton")
            todo.append(plan.backward_note)
    return FunctionFix(plan.qualname, "custom op", "; ".join(done), tuple(todo), tuple(check), runs=plan.runs)


def eager_dump(file: str, probe: str, dump: str, lines_of: str | None) -> EagerRun:
    """Run the original probe eagerly (forward + backward) and save outputs and gradients to ``dump``.
    With ``lines_of`` (a file), also say which of its lines ran (``lines``): whether the probe's inputs
    take a branch a model-code rewrite changes (model_code.py)."""
    _, case = casemaker.load_case(file, probe)
    watch = os.path.realpath(lines_of) if lines_of else None
    ran_lines: set[int] = set()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if os.path.realpath(frame.f_code.co_filename) != watch:
            return None  # no line events for frames of other files
        if event == "line":
            ran_lines.add(frame.f_lineno)
        return tracer

    previous = sys.gettrace()
    if watch:
        sys.settrace(tracer)
    try:
        ran = execution.execute(case.fn, case)
    finally:
        if watch:
            sys.settrace(previous)
    if ran.error:
        return EagerRun(error=TaskError.of_record(ran.error))
    torch.save({"outputs": ran.outputs, "grads": ran.grads, "ran_backward": ran.ran_backward}, dump)
    return EagerRun(lines=tuple(sorted(ran_lines)))


def eager_compare(file: str, probe: str, dump: str) -> EagerComparison:
    """Run the patched probe eagerly and compare with the original's dump: mismatches (empty when equal)."""
    _, case = casemaker.load_case(file, probe)
    ran = execution.execute(case.fn, case)
    if ran.error:
        return EagerComparison(error=TaskError.of_record(ran.error))
    ref = torch.load(dump, weights_only=False)
    found = execution.compare(execution.Execution(ref["outputs"], ref["grads"], None, ref["ran_backward"]), ran)
    return EagerComparison(mismatches=tuple(NumericMismatch(m.phase, m.compared, m.disagreeing, m.worst,
                                                            m.disagreeing_tensors) for m in found))


def directional_check(file: str, probe: str) -> GradientCheck:
    """Gradients of the patched probe against a central finite difference along a random direction.

    The reference when the original probe has no working backward (missing-autograd): ``<grad, v>`` must match
    ``(L(p + eps v) - L(p - eps v)) / (2 eps)`` over every leaf that gets a gradient, in float64 accumulation;
    ``eps`` = 1e-3 times each leaf's RMS. Tolerance: 2e-2 relative (float32 kernels), see ``gradcheck``'s docs
    for why finite differences need loose tolerances below float64.
    """
    _, case = casemaker.load_case(file, probe)
    ran = execution.execute(case.fn, case)
    if ran.error:
        return GradientCheck(error=TaskError.of_record(ran.error))
    grads = {k: g for k, g in ran.grads.items() if g is not None}
    targets = {k: t for k, t in execution.grad_targets(case).items() if k in grads}
    if not targets:
        return GradientCheck(skip="no gradient reached a leaf")
    gen = torch.Generator().manual_seed(1)
    steps = {}
    for k, t in targets.items():
        scale = float(t.detach().double().pow(2).mean().sqrt()) or 1.0
        steps[k] = torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype) * (1e-3 * scale)
    analytic = sum((float((grads[k].double() * steps[k].double()).sum()) for k in targets), 0.0)

    def loss_at(sign: float) -> float:
        with torch.no_grad():
            for k, t in targets.items():
                t.add_(steps[k], alpha=sign)
        try:
            torch.manual_seed(0)  # grad mode on: loss_of picks the outputs that require grad, as execute did
            loss = execution.loss_of(case, case.fn(*case.args, **case.kwargs))
            if loss is None:  # (the base run's gradients came from a loss: a probe that now has none is broken)
                raise ValueError("no differentiable loss")
        finally:
            with torch.no_grad():
                for k, t in targets.items():
                    t.sub_(steps[k], alpha=sign)
        return float(loss.detach().double())

    numeric = (loss_at(1.0) - loss_at(-1.0)) / 2.0
    tol = 2e-2 * max(abs(analytic), abs(numeric)) + 1e-6
    return GradientCheck(analytic, numeric, abs(analytic - numeric) <= tol)
