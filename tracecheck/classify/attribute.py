"""Findings attributed across a probe's stages, once all have run: each pass reads the stages and returns the findings
it replaces (``Replacements``, by stage and index), never changing a finding or a stage; ``classify/settle`` applies
them in order. Each is a heuristic that says so in the new finding (``first_seen_at``, ``attributed_from``,
``cause``). Pure: no torch import.
"""
from __future__ import annotations

import dataclasses
import linecache
import os
import re
from dataclasses import replace
from typing import Any, Mapping

from ..model import taxonomy
from ..model.context import Context
from ..model.evidence import ExceptionEvidence, ProcessEvidence, opcheck_test
from ..model.report import CRASH, LOAD_STAGE, PASS, Finding, StageResult, op_name
from ..model.taxonomy import K

Stages = Mapping[str, StageResult]
#: the findings a pass replaces: (the stage's key, the finding's index in its ``findings``) -> the new finding
Replacements = dict[tuple[str, int], Finding]


def _failure_index(s: StageResult) -> int | None:
    """Where the stage's failure sits in its findings (by identity), None where it is not one of them."""
    return next((i for i, f in enumerate(s.findings) if f is s.failure), None)


_FAULT_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in ')
_OP_CALL_FILES = ("torch/_ops.py", "torch/_library/custom_ops.py")


def _crashed_calling(tail: str, op: str) -> bool:
    """Did the faulthandler stack (innermost first) die in an op call made from a user line that names ``op``, or
    made by torch while tracing the probe (the first caller outside torch is tracecheck's own stage code: Dynamo
    executes the user's lines symbolically, so no frame of theirs is on the stack)?"""
    frames = [(m.group("file"), int(m.group("line"))) for m in _FAULT_FRAME.finditer(tail)]
    short = op.split("::")[-1].split(".")[0]
    for i, (file, _) in enumerate(frames):
        if file.endswith(_OP_CALL_FILES):
            j = next((k for k in range(i + 1, len(frames)) if "/torch/" not in frames[k][0]), None)
            if j is None:
                return False
            traced = any("/torch/_dynamo/" in f for f, _ in frames[i:j])
            if traced and "/tracecheck/stages/" in frames[j][0].replace("\\", "/"):
                return True
            return short in linecache.getline(*frames[j])
    return False


def crashes(stages: Stages) -> Replacements:
    """A process that died calling a redefined op died of the redefinition.

    ``custom_op`` leaves the first handle pointing at a destroyed registration (pytorch PR #122344): calling
    it may raise or may segfault, run to run. When the faulthandler stack shows the process dying inside an
    op call made from a line that names the redefined op, the crash is labelled ``op-redefined`` (status stays
    ``crash``, signal and stack kept as evidence). Any other crash keeps the ``crash`` label.
    """
    out: Replacements = {}
    load = stages.get(LOAD_STAGE)
    redefined = [f for f in (load.findings if load else []) if f.kind == K.OP_REDEFINED]
    for name, s in stages.items():
        i = _failure_index(s)
        if s.status != CRASH or s.failure is None or i is None:
            continue
        ev = s.failure.evidence
        tail = ev.stderr_tail if isinstance(ev, ProcessEvidence) else ""
        for r in redefined:
            op = r.context.op or ""
            if op and _crashed_calling(tail, op):
                f = Finding(K.OP_REDEFINED,
                            f"The {s.stage} stage died ({s.failure.context.cause}) calling {op}, which was "
                            "redefined: the earlier handle points at a destroyed registration.",
                            Context(op=op, cause=s.failure.context.cause), s.failure.evidence)
                out[name, i] = f
                break
    return out


def _frame(f: Finding) -> tuple[Any, Any] | None:
    uf = f.user_frame
    return (uf.file, uf.line) if uf else None


def unknowns(stages: Stages) -> Replacements:
    """An ``unknown`` finding that repeats the eager stage's ``eager-error`` (same exception type, first message line
    and raising frame: opcheck or gradcheck running the failing code again) is that eager-error, attributed, with the
    eager finding's context (the op it re-ran is kept as ``evidence.rerun_of``). Otherwise, an ``unknown`` finding
    whose op, else user frame, is that of a root-cause finding of the same probe carries that finding's kind: opcheck's tests often fail with a bare message (``fake not written yet``) that the compile
    stages already explained. By line, a graph break counts as such a cause too (export failing where Dynamo broke
    the graph, at ``x.data_ptr()`` say). A heuristic, so it says so: ``context.first_seen_at`` names the stage (in stage
    order) whose finding it took, and the summary says it. ``stages`` is in stage order."""
    out: Replacements = {}
    causes = [(s.stage, f) for s in stages.values() for f in s.findings
              if f.kind in taxonomy.explaining_ids() and not f.context.warning]  # a warning is no failure's cause
    eager = stages.get("eager")
    eager_error = next((f for f in (eager.findings if eager else []) if f.kind == K.EAGER_ERROR), None)
    # a graph break names no op, but an error at its line (export tracing into data_ptr, say) is that break's cause
    breaks = [(s.stage, f) for s in stages.values() for f in s.findings if f.kind == K.GRAPH_BREAK]
    for name, s in stages.items():
        for i, f in enumerate(s.findings):
            if f.kind != K.UNKNOWN:
                continue
            if eager_error is not None and _same_error(f, eager_error):
                # opcheck re-running the op, gradcheck re-running the Function: the eager failure again
                new = Finding(K.EAGER_ERROR, f"{eager_error.summary} (attributed: the {s.stage} stage ran the same "
                              "code again and hit the same error)", replace(eager_error.context, first_seen_at="eager"),
                              dataclasses.replace(f.evidence, rerun_of=f.context.op)
                              if f.context.op and isinstance(f.evidence, ExceptionEvidence) else f.evidence)
                out[name, i] = new
                continue
            op, frame = f.context.op, _frame(f)
            by_op = next(((st, c) for st, c in causes if op and c.context.op == op), None)
            root = by_op or next(((st, c) for st, c in causes + breaks if frame and _frame(c) == frame), None)
            if root is None:
                continue
            stage, c = root
            where = "while loading the file" if stage == LOAD_STAGE else f"at {stage}"
            new = Finding(c.kind, f"{c.summary} (attributed: the same {'op' if by_op else 'line'} failed {where})",
                          replace(c.context.merged(f.context), first_seen_at=stage), f.evidence)
            out[name, i] = new
    return out


#: torch.func refusals (functorch-incompatible causes) of a construct that stops Dynamo for the same reason: a value
#: or a storage a traced tensor (FakeTensor, BatchedTensor) does not have
_SAME_OBSTACLE = frozenset({"storage", "item", "control_flow", "dynamic_shape"})


def named_by_transform(stages: Stages) -> Replacements:
    """A graph break with only the generic advice (no cause of its own: Dynamo's ``Observed exception`` at
    ``x.data_ptr()``, say) at the line where a torch.func stage's refusal names the construct (a data pointer read, an
    ``.item()``, a branch on a value: ``_SAME_OBSTACLE``) gets that construct and its fix for Dynamo (cause
    ``named_by_transform``): the same line stops both for the same reason, and the transform's words say which."""
    named = [(s.stage, f) for s in stages.values() for f in s.findings
             if f.kind == K.FUNCTORCH_INCOMPATIBLE and f.context.cause in _SAME_OBSTACLE and _frame(f)]
    out: Replacements = {}
    if not named:
        return out
    for name, s in stages.items():
        for i, f in enumerate(s.findings):
            if f.kind != K.GRAPH_BREAK or f.context.cause is not None or _frame(f) is None:
                continue
            found = next(((st, c) for st, c in named if _frame(c) == _frame(f)), None)
            if found is None:
                continue
            stage, c = found
            construct = c.context.cause or ""
            refused = taxonomy.kinds()[K.FUNCTORCH_INCOMPATIBLE].refused_by_cause.get(construct, "")
            # the construct in torch.func's words; the fix in Dynamo's terms (kinds.json, graph-break's construct/*)
            ctx = replace(f.context, cause="named_by_transform", named_by=stage,
                          construct=refused.lstrip(": ").replace("{", "(").replace("}", ")"),
                          dynamo_fix=taxonomy.kinds()[K.GRAPH_BREAK].fix_by_cause[f"construct/{construct}"])
            new = Finding(K.GRAPH_BREAK, taxonomy.summary(K.GRAPH_BREAK, ctx), ctx, f.evidence)
            out[name, i] = new
    return out


#: autograd's words for a gradient whose shape is not its output's (torch/autograd/__init__.py _make_grads; the engine's
#: validate_outputs for a node's returned gradient)
_BACKWARD_SHAPE = (
    re.compile(r"Mismatch in shape: grad_output\[\d+\] has a shape of (?P<grad>torch\.Size\(\[[\d, ]*\]\)) and "
               r"output\[\d+\] has a shape of (?P<out>torch\.Size\(\[[\d, ]*\]\))"),
    re.compile(r"Function (?P<node>\w+) returned an invalid gradient at index \d+ - got (?P<grad>\[[\d, ]*\]) but "
               r"expected shape compatible with (?P<out>\[[\d, ]*\])"),
)


#: a fake-mismatch whose evidence is about shapes (opcheck's test_faketensor: ``Shapes torch.Size([..]) and
#: torch.Size([..]) are not equal``; real-tensor propagation's ``output size mismatch``): only such a fake can make a
#: backward's gradient and output shapes disagree. A dtype, stride or value mismatch, or a fake that raises, cannot.
_SHAPE_EVIDENCE = re.compile(r"Shapes torch\.Size\(\[[\d, ]*\]\) and torch\.Size\(\[[\d, ]*\]\) are not equal|"
                             r"output size mismatch|\bshape mismatch\b|mismatch(?:ed)? (?:in )?(?:shapes?|sizes?)\b", re.I)


def _about_shape(f: Finding) -> bool:
    """A fake-mismatch finding whose own evidence says the fake's output shape is not the kernel's (at the probe's
    own sizes: the dynamic stage's other batch size, cause ``size``, says nothing of the probe's)."""
    if f.context.cause in ("raises", "aot_outputs", "size", "backward_shape") or f.context.attributed_from is not None:
        return False
    return bool(_SHAPE_EVIDENCE.search(f.evidence.message))


def _found_by(stage: str, f: Finding) -> str:
    """Who found a fake-mismatch, in words: opcheck's test, else the stage that did."""
    test = opcheck_test(f.evidence)
    return f"opcheck's {test}" if test else f"the {stage} stage"


def _custom_ops_recorded(stages: Stages) -> set[str]:
    """Every custom op the probe is known to call or register: opcheck's (the ops it checked), the eager stage's
    registrations, and the ops findings name."""
    ops: set[str] = set()
    for s in stages.values():
        notes = s.notes
        ops.update(op_name(op) for op in (notes.opcheck or {}))
        ops.update(op_name(op) for op in (notes.registered_custom_ops or []))
    return ops


def _shape_fakes(stages: Stages) -> tuple[list[tuple[str, Finding]], set[str]]:
    """The fake-mismatch findings about a shape (``_about_shape``) with their stage, and every custom op the probe is
    recorded to call."""
    fakes = [(s.stage, f) for s in stages.values() for f in s.findings
             if f.kind == K.FAKE_MISMATCH and f.context.op and _about_shape(f)]
    return fakes, _custom_ops_recorded(stages) | {op_name(c.context.op or "") for _, c in fakes}


def backward_shapes(stages: Stages) -> Replacements:
    """A compiled run that fails on a backward shape mismatch (a ``backend-error`` or ``unknown``: autograd's
    ``Mismatch in shape: grad_output[0] ... output[0] ...``, or a node's ``invalid gradient``) in a probe where a custom
    op's fake impl was found returning the wrong shape (a ``fake-mismatch`` whose evidence is a shape mismatch,
    ``_about_shape``) is that fake-mismatch: the traced graph's shapes come from the fake. The op must be the one the
    autograd node is named after (``GeneratedBackwardFor_<ns>_<op>_<overload>Backward``), or the only custom op the
    probe is recorded to call; else nothing is linked. The finding names the op, the two shapes and who found the fake's
    mismatch (cause ``backward_shape``)."""
    out: Replacements = {}
    fakes, recorded = _shape_fakes(stages)
    if not fakes:
        return out
    for name, s in stages.items():
        for i, f in enumerate(s.findings):
            if f.kind not in (K.UNKNOWN, K.BACKEND_ERROR):
                continue
            message = f.evidence.message
            m = next((m for rx in _BACKWARD_SHAPE if (m := rx.search(message))), None)
            if m is None:
                continue
            node = m.groupdict().get("node") or ""
            named = [(st, c) for st, c in fakes
                     if node and f"For_{re.sub(r'[^A-Za-z0-9]+', '_', c.context.op or '')}_" in node]
            only = [(st, c) for st, c in fakes if len(recorded) == 1 and op_name(c.context.op or "") in recorded]
            found = named[0] if named else only[0] if only and not node else None
            if found is None:
                continue
            stage, cause = found
            ctx = Context(op=cause.context.op, cause="backward_shape", attributed_from=f.kind,
                          mismatch=f"gradient {m.group('grad')}, output {m.group('out')}",
                          found_by=_found_by(stage, cause), first_seen_at=stage)
            new = Finding(K.FAKE_MISMATCH, taxonomy.summary(K.FAKE_MISMATCH, ctx), ctx, f.evidence)
            out[name, i] = new
    return out


#: a compiled run's error about sizes in the code that consumes an op's output (a matmul, a broadcast, a view, a
#: size check), where a fake that made up a shape shows: ``a and b must have same reduction dim, but got [4, 32] X
#: [16, 32]``, ``mat1 and mat2 shapes cannot be multiplied``, ``The size of tensor a (32) must match ...``
_SHAPE_ERROR = re.compile(r"must have same reduction dim|shapes cannot be multiplied|size mismatch|"
                          r"The size of tensor a \(.{1,40}?\) must match the size of tensor b|"
                          r"shape '\[.*?\]' is invalid for input of size|Sizes of tensors must match|"
                          r"expected size \S+==\S+|Expected size .{1,40} but got size", re.I)
#: opcheck's words for the kernel's and the fake's shape: torch compares ``compare_tensor_meta(real_out, fake_out)``
#: (torch/_subclasses/fake_utils.py ``_check_fake_real_tensors``, 2.13 and 2.14), so the real one comes first
_FAKE_SHAPES = re.compile(r"Shapes (?P<real>torch\.Size\(\[[^\]]*\]\)) and (?P<fake>torch\.Size\(\[[^\]]*\]\)) "
                          r"are not equal")


def _dims(size: str) -> list[str]:
    """``torch.Size([4, 32])`` -> ``["4", "32"]``."""
    return [d.strip() for d in size[size.index("[") + 1:size.rindex("]")].split(",") if d.strip()]


#: the shapes a size error names: ``[4, 32] X [16, 32]``, ``torch.Size([s77, 32])``, ``(4x32 and 16x32)``
_SHAPES_SAID = re.compile(r"\[([\w ,]+)\]|\((\w+(?:x\w+)+) and (\w+(?:x\w+)+)\)")


def _names_shape(message: str, fake: list[str]) -> bool:
    """Does the error name the fake's shape (a symbolic size, ``s77``, standing for any): the made-up shape reached
    the code that failed."""
    said: list[list[str]] = []
    for m in _SHAPES_SAID.finditer(message):
        if m.group(1):
            said.append([d.strip() for d in m.group(1).split(",") if d.strip()])
        else:
            said += [m.group(2).split("x"), m.group(3).split("x")]
    return any(len(dims) == len(fake) and all(d == e or re.fullmatch(r"[su]\d+", d) for d, e in zip(dims, fake))
               for dims in said)


def downstream_shapes(stages: Stages) -> Replacements:
    """A traced stage that fails on a size error in the code after a custom op (a ``backend-error`` or ``unknown``),
    in a probe whose eager run passes and whose one recorded custom op has a fake found returning the wrong shape,
    fails because of that fake: the graph was traced with the fake's shape, the real kernel never ran. It is that
    ``fake-mismatch``, at the fake's definition (where the fix goes), naming the op, the fake's and the kernel's
    shapes, and the line that tripped on the made-up shape (``tripped_at``: evidence, not the location; that code is
    right). The error must name the fake's shape (``_names_shape``): a size error elsewhere is not the fake's. With
    two ops whose fakes are wrong, or an eager run that fails too, nothing is linked."""
    from ..stages import REGISTRY

    out: Replacements = {}
    fakes, recorded = _shape_fakes(stages)
    eager = stages.get("eager")
    only = [(st, c) for st, c in fakes if len(recorded) == 1 and op_name(c.context.op or "") in recorded]
    if not only or eager is None or eager.status != PASS:
        return out
    stage, cause = only[0]
    shapes = _FAKE_SHAPES.search(cause.evidence.message)
    if shapes is None:  # the fake's shape unknown: nothing ties a size error to it
        return out
    fake_dims = _dims(shapes.group("fake"))
    mismatch = f"the fake returns {shapes.group('fake')}, the kernel {shapes.group('real')}"
    for name, s in stages.items():
        # a stage whose graph is traced with the ops' fakes (Dynamo's, AOTAutograd's); eager's never is
        if s.stage not in REGISTRY or not REGISTRY[s.stage].compiles or s.stage == "opcheck":
            continue
        for i, f in enumerate(s.findings):
            message = f.evidence.message
            if f.kind not in (K.UNKNOWN, K.BACKEND_ERROR) or not _SHAPE_ERROR.search(message) \
                    or not _names_shape(message, fake_dims):
                continue  # another size error (a hard-coded view at another batch size): not the fake's
            frame = f.user_frame
            tripped = (f"{os.path.relpath(frame.file) if os.path.isabs(frame.file) else frame.file}:{frame.line}"
                       if frame is not None else "the traced graph")
            ctx = Context(op=cause.context.op, cause="downstream_shape", attributed_from=f.kind,
                          mismatch=mismatch, tripped_at=tripped, found_by=_found_by(stage, cause),
                          first_seen_at=stage)
            # at the fake's def; a fake with no Python def (a C++ Meta kernel) places nothing: the finding is the op's,
            # never at the line that tripped (that code is right)
            evidence = dataclasses.replace(f.evidence, user_frame=cause.evidence.user_frame)
            new = Finding(K.FAKE_MISMATCH, taxonomy.summary(K.FAKE_MISMATCH, ctx), ctx, evidence)
            out[name, i] = new
    return out


#: kinds whose code can make a compiler backend fail on a probe that runs eagerly: a custom op's fake or registration
#: that lies to the tracer, a backward that is wrong, the probe's own eager failure
_BACKEND_SUSPECTS = frozenset({K.FAKE_MISMATCH, K.MISSING_FAKE, K.MUTATES_ARGS_MISMATCH, K.MISSING_AUTOGRAD,
                               K.WRONG_GRADIENT, K.EAGER_ERROR, K.OP_REDEFINED})
#: never a suspect: a graph break is only where tracing stopped (most models have one); torch's own error is torch's;
#: an unplaced or dead stage says nothing of the code
_NEVER_SUSPECT = frozenset({K.GRAPH_BREAK, K.TORCH_INTERNAL_ERROR, K.BACKEND_ERROR, K.UNKNOWN, K.TIMEOUT, K.CRASH})


def _suspect_of(b: Finding, c: Finding) -> bool:
    """Can finding ``c`` be why the backend raised ``b``: its kind is one that makes backends fail, or it sits at the
    backend error's own user frame or names its op. Never a graph break, advice or torch's own error."""
    if c is b or c.kind in _NEVER_SUSPECT or c.kind not in taxonomy.kinds() \
            or taxonomy.kinds()[c.kind].severity != taxonomy.ERROR:
        return False
    if c.kind in _BACKEND_SUSPECTS:
        return True
    same_frame = _frame(b) is not None and _frame(c) == _frame(b)
    op = b.context.op
    return same_frame or bool(op and c.context.op == op)


def _suspect_where(c: Finding) -> str:
    """Where a suspect finding points: its frame, else the op it names, else its kind."""
    if c.user_frame is not None and c.user_frame.file:
        return c.user_frame.location
    return f"{c.kind} of {c.context.op}" if c.context.op else c.kind


def upstream_advice(stages: Stages) -> Replacements:
    """``backend-error``'s fix says "report upstream" only when no other finding of the probe can be why the backend
    failed (``_suspect_of``: a fake impl or registration that lies to the tracer, a wrong backward, an eager failure, or
    a finding at the backend error's own frame or op; never a graph break, advice or torch's own error): otherwise
    that code is the first suspect, and the fix says to fix it first (a new finding with cause ``suspect_code``, the
    suspects named)."""
    out: Replacements = {}
    every = [f for s in stages.values() for f in s.findings]
    for name, s in stages.items():
        for i, f in enumerate(s.findings):
            if f.kind != K.BACKEND_ERROR or f.context.cause is not None:
                continue
            where = ", ".join(dict.fromkeys(_suspect_where(c) for c in every if _suspect_of(f, c)))[:300]
            if not where:
                continue
            new = Finding(f.kind, f.summary, replace(f.context, cause="suspect_code", suspect=where), f.evidence)
            out[name, i] = new
    return out


#: an unplaced rerun is matched by its words alone only when they say something: at least this many characters and
#: words (never ``RuntimeError:`` or an empty first line)
_SPECIFIC = (24, 3)


def _same_error(f: Finding, other: Finding) -> bool:
    """The same exception: its type, the first line of its message and the frame that raised it. A re-raise with no
    frame of the user's under it (gradcheck re-running an autograd.Function whose forward raised inside torch's C
    code: save_for_backward given a float) is the same error when type and words agree and the words are specific
    (``_SPECIFIC``), or when both name the same op."""
    def line(x: Finding) -> str:
        lines = x.evidence.message.strip().splitlines()
        return lines[0].strip() if lines else ""

    def key(x: Finding, frame: bool = True) -> tuple[Any, ...]:
        return x.evidence.exception_type, line(x), _frame(x) if frame else None

    if not f.evidence.exception_type:
        return False
    placed = _frame(f) is not None
    if not placed:
        words = line(f)
        same_op = bool(f.context.op) and f.context.op == other.context.op
        specific = len(words) >= _SPECIFIC[0] and len(re.findall(r"[A-Za-z]{2,}", words)) >= _SPECIFIC[1]
        if not (specific or same_op):
            return False
    return key(f, placed) == key(other, placed)
