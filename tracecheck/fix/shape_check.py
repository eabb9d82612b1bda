"""Worker side of ``tracecheck fix``'s check at shapes the probe never used (runs in a stage process).

A fake inferred from runs at a few sizes can tie two sizes that only happened to be equal, or hold at one rank
only; the stages run the patched probe at its own inputs, where such a fake still looks right. So each op the
fix generated or registered a fake for is run again at other shapes: every size of every input changed on its
own (to a value no other size has, so no two sizes move in step), and each tensor input at another rank.
Where the original eager op accepts those inputs, ``torch.library.opcheck`` compares the fake with the real
kernel (``test_faketensor``) and the op compiled through AOTAutograd with dynamic shapes, forward and backward,
with eager (``test_aot_dispatch_dynamic``). Inputs the eager op refuses say nothing about the fake and are
listed as such.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from .. import compat
from ..compat import pytree
from ..collect import casemaker
from ..evidence.oprecorder import OpRecorder
from ..model.report import op_name
from ..stages import _execution as execution
from . import observe
from .task_results import OpShapes, ShapeCheck, TaskError

#: opcheck's tests that judge a fake impl at new shapes: the fake against the kernel, and AOTAutograd's dynamic-shape
#: compile (forward and backward) against eager
TESTS = ("test_faketensor", "test_aot_dispatch_dynamic")
MULTIPLES = " with their multiples"
#: the words of the rank checks codegen.fake_lines writes (both forms): a fake refusing a rank this way says so
#: on purpose
RANK_CHECK = re.compile(r"this fake impl (was inferred at|holds from) rank \d+")
#: at most this many shapes per op beyond the probe's (each is an AOTAutograd compile): sizes, then other ranks
MAX_SIZES = 6
MAX_RANKS = 3


def _next_size(v: int, taken: set[int]) -> int:
    new = v + 3
    while new in taken:
        new += 1
    return new


def _class_groups(symbols: dict[str, int], ranks: dict[str, int]) -> list[list[str]]:
    """Sizes of equal value that a consistent change may have to move together (a batch size every input
    carries): the whole class, and its tensor dims grouped by position from the start and from the end (S and n
    equal in a probe still sit at different positions)."""
    classes: dict[int, list[str]] = {}
    for sym, v in symbols.items():
        if v >= 2:
            classes.setdefault(v, []).append(sym)
    out: list[list[str]] = []
    for members in classes.values():
        if len(members) < 2:
            continue
        for key in (lambda m: _dim_index(m, ranks), lambda m: _dim_index(m, ranks, from_end=True)):
            by: dict[Any, list[str]] = {}
            for m in members:
                by.setdefault(key(m), []).append(m)
            out += [g for g in by.values() if 1 < len(g) < len(members)]
        out.append(members)
    return out


def _dim_index(sym: str, ranks: dict[str, int], from_end: bool = False) -> Any:
    """``x.size(2)`` -> 2, or counted from the end of x's rank (``ranks``: a symbol names only its index); an int
    argument is its own group."""
    if ".size(" not in sym:
        return sym
    name, index = sym.split(".size(")
    i = int(index.rstrip(")"))
    return i - ranks.get(name, 0) if from_end else i


def shape_variants(named: observe.Args) -> list[tuple[str, observe.Args]]:
    """Each size (tensor dim or int argument) changed alone to a size no other has; then sizes of equal value
    changed together where a consistent change needs that (``_class_groups``), with the sizes that are multiples
    of them (``K = n * C``); then each tensor, and the tensors sharing the first one's leading size, at other
    ranks."""
    symbols = observe.symbols_of(named)
    ranks = {n: v.dim() for n, v in named.items() if isinstance(v, torch.Tensor)}
    taken = set(symbols.values())
    out: list[tuple[str, observe.Args]] = []
    seen: set[frozenset] = set()
    for group in [[s] for s, v in symbols.items() if v >= 1] + _class_groups(symbols, ranks):
        if frozenset(group) in seen:
            continue
        seen.add(frozenset(group))
        v = symbols[group[0]]
        new = _next_size(v, taken)
        change = {m: new for m in group}
        name = "=".join(group) if len(group) <= 3 else f"{'='.join(group[:2])} (and {len(group) - 2} more)"
        out.append((f"{name} {v}->{new}", observe.with_sizes(named, change)))
        if v >= 2:
            multiples = {m: w // v * new for m, w in symbols.items() if w != v and w % v == 0}
            if multiples:
                out.append((f"{name} {v}->{new}{MULTIPLES}",
                            observe.with_sizes(named, {**change, **multiples})))
    for names, shape, args in observe.rank_variants(named):
        names = names if names.count("+") < 3 else f"{names.split('+')[0]} and {names.count('+')} more"
        out.append((f"{names} at rank {len(shape)} {tuple(shape)}", args))
    return out


def _positional(op: Any, named: observe.Args) -> tuple[tuple[object, ...], observe.Args]:
    schema = compat.op_schema(op)
    args = tuple(named[a.name] for a in schema.arguments if a.name in named and not a.kwarg_only)
    kwargs = {a.name: named[a.name] for a in schema.arguments if a.name in named and a.kwarg_only}
    return args, kwargs


def check_op(op: Any, args: tuple, kwargs: dict) -> OpShapes:
    """opcheck's fake and dynamic-shape tests at every variant of the recorded call the eager op accepts."""
    checked: list[str] = []
    failed: list[tuple[str, str, str]] = []
    refused: list[str] = []
    restricted: list[str] = []
    own_refused: list[tuple[str, str]] = []
    done = {"size": 0, "rank": 0}
    for label, named in shape_variants(observe.named_args(op, args, kwargs)):
        what = "rank" if " at rank " in label else "size"
        if done[what] >= (MAX_RANKS if what == "rank" else MAX_SIZES):
            continue
        if label.endswith(MULTIPLES) and label[:-len(MULTIPLES)] in checked + [f[0] for f in failed]:
            continue  # the change alone was taken: its multiples add nothing
        a, k = _positional(op, named)
        try:
            with torch.no_grad():
                op(*[observe.clone(v) for v in a], **{n: observe.clone(v) for n, v in k.items()})
        except Exception:  # noqa: BLE001 - the original kernel refuses these inputs: nothing to judge the fake by
            refused.append(label)
            continue
        done[what] += 1
        out = torch.library.opcheck(op, a, k, test_utils=list(TESTS), raise_exception=False)
        bad = [(test, v) for test, v in out.items() if not (isinstance(v, str) and v in ("SUCCESS", "xfail", "skip"))]
        if bad:
            test, err = bad[0]
            if RANK_CHECK.search(str(err)):
                restricted.append(label)
                continue
            eager = _eager_backward_error(op, a, k)
            if eager is not None:
                # the op's own backward fails here in eager too, which says nothing of the fake: the same tests run
                # on the inputs detached (forward only: the fake against the kernel, and AOTAutograd's dynamic trace)
                own_refused.append((label, eager))
                a0, k0 = pytree.tree_map(_no_grad, (a, k))
                fwd = torch.library.opcheck(op, a0, k0, test_utils=list(TESTS), raise_exception=False)
                bad = [(t, v) for t, v in fwd.items() if not (isinstance(v, str) and v in ("SUCCESS", "xfail", "skip"))]
                if bad:
                    failed.append((label, bad[0][0], _first_line(bad[0][1])))
                continue
            failed.append((label, test, _first_line(err)))
        else:
            checked.append(label)
    return OpShapes(op.name(), tuple(checked), tuple(failed), tuple(refused), tuple(restricted), tuple(own_refused))


def _first_line(err: object) -> str:
    """An exception's (or opcheck's message's) first line, after its type's name."""
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0] if msg else ''}"[:300]


def _eager_backward_error(op: Any, args: tuple, kwargs: dict) -> str | None:
    """The error the op's own backward (the autograd formula registered for it, run eagerly) raises at these
    inputs, or None. opcheck's ``test_aot_dispatch_dynamic`` differentiates the op: where the user's backward itself
    refuses the inputs (``g.t()`` on a 3-D gradient), the compiled run fails for a reason that is no part of the
    fake, and eager fails the same way."""
    a, k = pytree.tree_map(observe.clone, (args, kwargs))
    leaves = [t for t in pytree.tree_leaves((a, k)) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not leaves:
        return None
    try:
        with torch.enable_grad():
            outs = [o for o in pytree.tree_leaves(op(*a, **k))
                    if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
            if outs:
                g = torch.Generator(device="cpu").manual_seed(0)
                grads = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
                torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    except Exception as e:  # noqa: BLE001 - the user's backward raised: that is the answer
        return _first_line(e)
    return None


def _no_grad(v: Any) -> Any:
    return v.detach() if isinstance(v, torch.Tensor) else v


def run(file: str, probe: str, ops: tuple[str, ...]) -> ShapeCheck:
    """Task (fix.jobs.ShapeCheckTask's fields): load the patched probe, record ``ops`` in one eager run, check
    each at new shapes."""
    _, case = casemaker.load_case(file, probe)
    recorder = OpRecorder()
    with recorder:
        ran = execution.execute(case.fn, case)
    if ran.error and not recorder.calls:
        return ShapeCheck(error=TaskError.of_record(ran.error))
    wanted = set(ops)
    found = []
    for op, (a, k) in recorder.calls.items():
        if op.name() not in wanted:
            continue
        # an op autograd never reaches (a backward op, called by the engine or with grad mode off) is checked
        # without gradients: its own backward is no part of this fix
        if op_name(str(op)) not in recorder.differentiated:
            a, k = pytree.tree_map(_no_grad, (a, k))
        found.append(check_op(op, a, k))
    return ShapeCheck(ops=tuple(found), missing=tuple(sorted(wanted - {r.op for r in found})))
