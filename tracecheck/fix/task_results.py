"""What ``tracecheck fix``'s tasks find, typed: the records of ``pipeline.FixOutcome`` that render/fix.py reads, and
what a C call's recording answers (model_code.py). Each task's function (fix/analysis.py, shape_check.py, c_call.py)
makes one of these records in its process; the task's ``run`` writes it with ``to_json`` (it goes back as JSON,
model/tasks.ProcessTask.run) and the parent reads it once through its ``of``, so no reader names its keys. A missing
key is the field's default; a value of the wrong shape reads as missing. Pure: no torch import."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.errors import ErrorRecord
from ..model.evidence import NumericMismatch
from ..model.reportio import Json, integer, number, obj, string, texts


@dataclass(frozen=True)
class TaskError:
    """What the probe raised in a task's eager run (its error record, stages/_execution's ``error``): the exception's
    qualified type, its message, and the phase, "forward" or "backward"."""

    type: str = "?"
    message: str = ""
    phase: str = ""

    @classmethod
    def of(cls, d: Any) -> "TaskError | None":
        """None where the task's probe raised nothing (no record)."""
        if not isinstance(d, dict):
            return None
        return cls(type=str(d.get("type") or "?"), message=str(d.get("message") or ""),
                   phase=str(d.get("phase") or ""))

    @classmethod
    def of_record(cls, e: ErrorRecord) -> "TaskError":
        """The probe's error as the task's eager run caught it (stages/_execution's record)."""
        return cls(type=e.type or "?", message=e.message or "", phase=e.phase or "")

    def to_json(self) -> Json:
        return {"type": self.type, "message": self.message, "phase": self.phase}


@dataclass(frozen=True)
class EagerRun:
    """The original probe run eagerly, its outputs and gradients saved for a comparison (fix.analysis.eager_dump):
    what it raised, or the lines of the watched file that ran."""

    error: TaskError | None = None
    lines: tuple[int, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "EagerRun":
        d = obj(d)
        lines = d.get("lines")
        return cls(error=TaskError.of(d.get("error")),
                   lines=tuple(n for n in lines if isinstance(n, int)) if isinstance(lines, list) else ())

    def to_json(self) -> Json:
        return {"error": self.error.to_json()} if self.error is not None else {"lines": list(self.lines)}


@dataclass(frozen=True)
class EagerComparison:
    """The patched probe run eagerly against the original's saved run (fix.analysis.eager_compare): what it raised,
    or one record per phase whose outputs or gradients differ (none: they are equal)."""

    error: TaskError | None = None
    mismatches: tuple[NumericMismatch, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "EagerComparison":
        d = obj(d)
        found = d.get("mismatches")
        return cls(error=TaskError.of(d.get("error")),
                   mismatches=tuple(NumericMismatch.of(m) for m in found) if isinstance(found, list) else ())

    def to_json(self) -> Json:
        if self.error is not None:
            return {"error": self.error.to_json()}
        return {"mismatches": [{"phase": m.phase, "compared": m.compared, "disagreeing": m.disagreeing,
                                "worst": m.worst.to_json(), "disagreeing_tensors": list(m.disagreeing_tensors)}
                               for m in self.mismatches]}


@dataclass(frozen=True)
class Analysis:
    """The fix planned and rendered in a task process (fix.analysis.analyze): each Function and custom op looked at,
    and, where anything was generated, the fixed-ops module, the patched probe and the ops whose fakes tracecheck
    wrote (checked at other shapes: fix.shape_check)."""

    functions: tuple["FunctionFix", ...] = ()
    #: the fixed-ops module's text; None where nothing was generated
    fixed_module: str | None = None
    patched_probe: str = ""
    shape_ops: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "Analysis":
        d = obj(d)
        found = d.get("functions")
        return cls(functions=tuple(FunctionFix.of(f) for f in found) if isinstance(found, list) else (),
                   fixed_module=string(d.get("fixed_module")), patched_probe=string(d.get("patched_probe")) or "",
                   shape_ops=texts(d.get("shape_ops")))

    def to_json(self) -> Json:
        out: Json = {"functions": [f.to_json() for f in self.functions]}
        if self.fixed_module is not None:
            out.update(fixed_module=self.fixed_module, patched_probe=self.patched_probe,
                       shape_ops=list(self.shape_ops))
        return out


@dataclass(frozen=True)
class ShapeCheck:
    """The generated fakes checked at shapes the probe never used (fix.shape_check.run): what the patched probe
    raised, or per op found what it was checked at, and the ops the probe never called."""

    error: TaskError | None = None
    ops: tuple["OpShapes", ...] = ()
    missing: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "ShapeCheck":
        d = obj(d)
        ops = d.get("ops")
        return cls(error=TaskError.of(d.get("error")),
                   ops=tuple(OpShapes.of(o) for o in ops) if isinstance(ops, list) else (),
                   missing=texts(d.get("missing")))

    def to_json(self) -> Json:
        if self.error is not None:
            return {"error": self.error.to_json()}
        return {"ops": [o.to_json() for o in self.ops], "missing": list(self.missing)}


@dataclass(frozen=True)
class MutatesArgs:
    """The arguments an autograd.Function's forward and backward were seen to mutate (the generated ops'
    ``mutates_args``)."""

    forward: tuple[str, ...] = ()
    backward: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.forward or self.backward)


@dataclass(frozen=True)
class FunctionFix:
    """One autograd.Function or custom op the analysis looked at (fix.analysis.analyze's ``functions``): what was
    done with it, and what is left to the user."""

    #: its qualname, and its module (``custom op`` for a custom op)
    function: str
    module: str = ""
    action: str = ""
    #: what the generated code leaves to finish (it is not verified while any is left)
    todo: tuple[str, ...] = ()
    #: what the generated code assumes and the user should review
    check: tuple[str, ...] = ()
    #: an autograd.Function's observed mutations; None for a custom op or a Function left alone
    mutates_args: MutatesArgs | None = None
    #: eager runs the inference took, and the perturbed inputs the op refused
    runs: int | None = None
    refused: tuple[str, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "FunctionFix":
        d = obj(d)
        mutates = d.get("mutates_args")
        return cls(function=str(d.get("function") or "?"), module=str(d.get("module") or ""),
                   action=str(d.get("action") or ""), todo=texts(d.get("todo")), check=texts(d.get("check")),
                   mutates_args=MutatesArgs(texts(mutates.get("forward")), texts(mutates.get("backward")))
                   if isinstance(mutates, dict) else None,
                   runs=integer(d.get("runs")),
                   refused=texts(d.get("refused")))

    def to_json(self) -> Json:
        out: Json = {"function": self.function, "module": self.module, "action": self.action,
                     "todo": list(self.todo), "check": list(self.check), "refused": list(self.refused)}
        if self.mutates_args is not None:
            out["mutates_args"] = {"forward": list(self.mutates_args.forward),
                                   "backward": list(self.mutates_args.backward)}
        if self.runs is not None:
            out["runs"] = self.runs
        return out


@dataclass(frozen=True)
class OpShapes:
    """What one op's generated fake was checked at, beyond the probe's shapes (fix.shape_check.check_op):
    ``checked`` (labels of shapes that passed), ``failed`` (label, test, first line of torch's error), ``refused``
    (shapes the eager op itself refuses)."""

    op: str
    checked: tuple[str, ...] = ()
    failed: tuple[tuple[str, str, str], ...] = ()
    refused: tuple[str, ...] = ()
    #: shapes the eager op accepts and the fake refuses on purpose: a rank check tracecheck wrote (a restriction
    #: the fake states, not a wrong shape)
    restricted: tuple[str, ...] = ()
    #: shapes the eager op accepts but its own backward (the autograd formula registered for it) refuses in eager:
    #: (label, the first line of its error). Not the fake's failure, and not checked
    own_refused: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, d: Any) -> "OpShapes":
        d = obj(d)
        failed = d.get("failed") if isinstance(d.get("failed"), (list, tuple)) else ()
        own = d.get("own_refused") if isinstance(d.get("own_refused"), (list, tuple)) else ()
        return cls(op=str(d.get("op") or "?"), checked=texts(d.get("checked")),
                   failed=tuple((str(f[0]), str(f[1]), str(f[2])) for f in failed
                                if isinstance(f, (list, tuple)) and len(f) == 3),
                   refused=texts(d.get("refused")), restricted=texts(d.get("restricted")),
                   own_refused=tuple((str(f[0]), str(f[1])) for f in own if isinstance(f, (list, tuple)) and len(f) == 2))

    def to_json(self) -> Json:
        return {"op": self.op, "checked": list(self.checked), "failed": [list(f) for f in self.failed],
                "refused": list(self.refused), "restricted": list(self.restricted),
                "own_refused": [list(f) for f in self.own_refused]}


@dataclass(frozen=True)
class GradientCheck:
    """The patched probe's gradients against a central finite difference along a random direction v
    (fix.analysis.directional_check), where the original has no working backward to compare with."""

    #: ``<grad, v>`` and the finite difference; None where the check did not run
    analytic: float | None = None
    numeric: float | None = None
    ok: bool = False
    #: why no check was possible
    skip: str | None = None
    #: what the patched probe raised (no check then)
    error: TaskError | None = None

    @classmethod
    def of(cls, d: Any) -> "GradientCheck":
        d = obj(d)
        skip = d.get("skip")
        return cls(analytic=number(d.get("analytic")), numeric=number(d.get("numeric")), ok=d.get("ok") is True,
                   skip=str(skip) if skip else None, error=TaskError.of(d.get("error")))

    def to_json(self) -> Json:
        if self.error is not None:
            return {"error": self.error.to_json()}
        if self.skip is not None:
            return {"skip": self.skip}
        return {"analytic": self.analytic, "numeric": self.numeric, "ok": self.ok}

    @property
    def ran(self) -> bool:
        return self.analytic is not None and self.numeric is not None


@dataclass(frozen=True)
class CustomOpDef:
    """The custom op written for one C call (fix.c_call): its definition as code, its name and a note for the
    user; for a call in a library's file, the module the probe's file installs it in."""

    definition: str
    name: str
    note: str = ""
    module: str | None = None


@dataclass(frozen=True)
class CallAnswer:
    """What recording one C call site gave (fix.c_call.observe_calls): the custom op, or why there is none."""

    #: the site's line (its key: a C call's op is named by its line)
    line: int
    op: CustomOpDef | None = None
    error: str | None = None

    @classmethod
    def of(cls, d: Any) -> "CallAnswer | None":
        """None for an answer without a line (no site to give it to)."""
        d = obj(d)
        line, definition, name = integer(d.get("line")), string(d.get("definition")), string(d.get("name"))
        if line is None:
            return None
        op = CustomOpDef(definition, name, string(d.get("note")) or "", string(d.get("module"))) \
            if definition is not None and name is not None else None
        return cls(line, op, string(d.get("error")))

    def to_json(self) -> Json:
        """One site's answer on the wire: ``line``, then ``error`` or the op's ``definition``, ``name``, ``note``
        (and ``module``, for a library's call)."""
        out: Json = {"line": self.line}
        if self.op is not None:
            out.update(definition=self.op.definition, name=self.op.name, note=self.op.note)
            if self.op.module is not None:
                out["module"] = self.op.module
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class CallsObserved:
    """One answer per C call site asked (fix.jobs.ObserveCallsTask), in the order asked."""

    sites: tuple[CallAnswer, ...] = ()

    @classmethod
    def of(cls, d: Any) -> "CallsObserved":
        found = obj(d).get("sites")
        answers = (CallAnswer.of(a) for a in found) if isinstance(found, list) else ()
        return cls(tuple(a for a in answers if a is not None))

    def to_json(self) -> Json:
        return {"sites": [a.to_json() for a in self.sites]}
