"""What ``tracecheck ops`` learns from an operator library's own tests, and what its report says beside the probes.

The pipeline: the test command runs with tracecheck's recorder in each of its Python processes
(collect/opsrecord.py), which writes one ``ProcessRecord`` per process as JSON (the process boundary); the parent
merges them (collect/opsaudit.py) into the calls to check, one probe each in a generated probe module, and the ops and
``torch.autograd.Function`` classes no test reached; the stages check each probe as ``tracecheck run`` does; the
report carries an ``OpsAudit`` (``RunReport.ops``). Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import frame_wire
from .frame import Frame
from .records import Redefinition
from .reportio import Json, count, integer, items, number, obj, string, text, texts

#: ``RecordedCall.what`` of a custom op called through ``torch.ops`` (or its ``custom_op`` object)
OP = "op"
#: ``RecordedCall.what`` of a ``torch.autograd.Function`` subclass applied (``Fn.apply``)
FUNCTION = "function"
#: the prefix of every probe id ``tracecheck ops`` makes: ``ops::ns::name`` or ``ops::module.Qualname``
ID_PREFIX = "ops::"
#: ``RecordedCall.why_not`` of a signature every call of which raised (the tests of an error path): not a probe
RAISED = "every call the tests made with these inputs raised (a test of an error path?)"


@dataclass(frozen=True)
class RecordedCall:
    """One distinct call the tests made: a target with one input signature, deduplicated by the recorder."""

    #: ``ns::name.overload`` for an op (``.default`` kept), ``module:Qualname`` for an autograd.Function
    target: str
    #: OP or FUNCTION
    what: str
    #: the input signature the calls were deduplicated by: per argument, a tensor's dtype, rank, device and whether
    #: it requires grad, or a plain value itself (``"f32[2d]@cpu+grad, f32[1d]@cpu, 4, True"``)
    signature: str
    #: sizes of the tensor inputs, one tuple per distinct set of sizes seen with this signature (a few, first first)
    shapes: tuple[tuple[tuple[int, ...], ...], ...] = ()
    #: the first such call's inputs, ``torch.save((args, kwargs))``, relative to the record folder; None: not saved
    inputs: str | None = None
    #: why the inputs were not saved (an argument torch.save cannot pickle), when ``inputs`` is None
    why_not: str | None = None
    #: the test that made the first such call (pytest's ``PYTEST_CURRENT_TEST``, its node id), if known
    test: str | None = None
    #: calls with this signature, in all the processes
    calls: int = 1

    def to_json(self) -> Json:
        return {"target": self.target, "what": self.what, "signature": self.signature,
                "shapes": [[list(s) for s in sizes] for sizes in self.shapes], "inputs": self.inputs,
                "why_not": self.why_not, "test": self.test, "calls": self.calls}

    @classmethod
    def of(cls, d: Any) -> "RecordedCall | None":
        """Read back; one without its target, kind or signature is dropped."""
        if isinstance(d, RecordedCall) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        target, what, signature = text(d.get("target")), text(d.get("what")), string(d.get("signature"))
        if target is None or what not in (OP, FUNCTION) or signature is None:
            return None
        shapes = tuple(tuple(tuple(int(n) for n in items(s) if isinstance(n, int)) for s in items(sizes))
                       for sizes in items(d.get("shapes")))
        return cls(target, what, signature, shapes, text(d.get("inputs")), text(d.get("why_not")),
                   text(d.get("test")), count(d.get("calls")) or 1)


@dataclass(frozen=True)
class DefinedOp:
    """A custom op in a namespace the package registers, called by a test or not."""

    #: ``ns::name``
    name: str
    #: its schema, where the recorder saw it defined or the dispatcher gave it
    schema: str | None = None
    #: where ``Library.define`` (``custom_op``, ``torch.library.define``) was called; None for a C++ registration
    frame: Frame | None = None

    def to_json(self) -> Json:
        return {"name": self.name, "schema": self.schema, "frame": frame_wire(self.frame)}

    @classmethod
    def of(cls, d: Any) -> "DefinedOp | None":
        if isinstance(d, DefinedOp) or d is None:
            return d
        if not isinstance(d, dict) or text(d.get("name")) is None:
            return None
        return cls(str(text(d.get("name"))), text(d.get("schema")), Frame.from_dict(d.get("frame")))


@dataclass(frozen=True)
class DefinedFunction:
    """A ``torch.autograd.Function`` subclass defined in the package's modules."""

    #: ``module:Qualname``
    target: str
    #: its ``class`` line
    frame: Frame | None = None

    def to_json(self) -> Json:
        return {"target": self.target, "frame": frame_wire(self.frame)}

    @classmethod
    def of(cls, d: Any) -> "DefinedFunction | None":
        if isinstance(d, DefinedFunction) or d is None:
            return d
        if not isinstance(d, dict) or text(d.get("target")) is None:
            return None
        return cls(str(text(d.get("target"))), Frame.from_dict(d.get("frame")))


@dataclass(frozen=True)
class ProcessRecord:
    """What the recorder saw in one process of the test command, written at its exit."""

    pid: int
    #: the package audited (``--package``)
    package: str
    calls: tuple[RecordedCall, ...] = ()
    #: the ops of the namespaces the package registers, as the dispatcher knew them at the process's exit
    ops: tuple[DefinedOp, ...] = ()
    #: the package's autograd.Function subclasses, as defined at the process's exit
    functions: tuple[DefinedFunction, ...] = ()
    #: the package's modules that were imported (the generated probe module imports them, so the ops exist there)
    modules: tuple[str, ...] = ()
    #: op names defined again with another schema while the process ran (evidence/opwatch's event)
    redefinitions: tuple[Redefinition, ...] = ()
    #: targets called only where the recorder records nothing (while compiling, from compiled code, on fake
    #: tensors): reached by the tests, with no eager inputs to check them on
    compiled_only: tuple[str, ...] = ()
    #: the folders the package was imported from (a src layout's ``src/``, put on sys.path by the tests' config):
    #: the generated probe module imports it from there too
    roots: tuple[str, ...] = ()

    def to_wire(self) -> Json:
        return {"pid": self.pid, "package": self.package, "calls": [c.to_json() for c in self.calls],
                "ops": [o.to_json() for o in self.ops], "functions": [f.to_json() for f in self.functions],
                "modules": list(self.modules), "redefinitions": [r.to_wire() for r in self.redefinitions],
                "compiled_only": list(self.compiled_only), "roots": list(self.roots)}

    @classmethod
    def of(cls, d: Any) -> "ProcessRecord | None":
        if isinstance(d, ProcessRecord) or d is None:
            return d
        if not isinstance(d, dict) or integer(d.get("pid")) is None or text(d.get("package")) is None:
            return None
        return cls(int(d["pid"]), str(text(d.get("package"))),
                   tuple(c for c in map(RecordedCall.of, items(d.get("calls"))) if c is not None),
                   tuple(o for o in map(DefinedOp.of, items(d.get("ops"))) if o is not None),
                   tuple(f for f in map(DefinedFunction.of, items(d.get("functions"))) if f is not None),
                   texts(d.get("modules")),
                   tuple(r for r in map(Redefinition.of, items(d.get("redefinitions"))) if r is not None),
                   texts(d.get("compiled_only")), texts(d.get("roots")))


@dataclass(frozen=True)
class Uncovered:
    """An op or Function of the package that got no probe, and why: no test called it, or its inputs could not be
    saved. Never a pass: the report lists it as not covered."""

    #: ``ns::name`` or ``module:Qualname``
    target: str
    #: OP or FUNCTION
    what: str
    why: str

    def to_json(self) -> Json:
        return {"target": self.target, "what": self.what, "why": self.why}

    @classmethod
    def of(cls, d: Any) -> "Uncovered | None":
        if isinstance(d, Uncovered) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        target, what, why = text(d.get("target")), text(d.get("what")), text(d.get("why"))
        return cls(target, what, why) if target and what and why else None


@dataclass(frozen=True)
class CommandResult:
    """The test command's own result, reported beside tracecheck's verdicts and never mixed into them."""

    argv: tuple[str, ...]
    #: its exit status; None when it could not start or was killed by a signal (``signal``)
    exit_code: int | None
    seconds: float
    #: the last lines of its output (stdout and stderr together)
    tail: str = ""
    #: the file holding its whole output
    log: str | None = None
    signal: int | None = None

    def to_json(self) -> Json:
        return {"argv": list(self.argv), "exit_code": self.exit_code, "seconds": self.seconds, "tail": self.tail,
                "log": self.log, "signal": self.signal}

    @classmethod
    def of(cls, d: Any) -> "CommandResult":
        if isinstance(d, CommandResult):
            return d
        d = obj(d)
        return cls(texts(d.get("argv")), integer(d.get("exit_code")), number(d.get("seconds")) or 0.0,
                   string(d.get("tail")) or "", text(d.get("log")), integer(d.get("signal")))


@dataclass(frozen=True)
class AuditEntry:
    """One checked call: the probe made for it in the generated probe module, and the call."""

    #: the report's probe id: ``ops::ns::name@3f2a1c`` (``.default`` dropped; the suffix its signature's digest), or
    #: ``ops::module.Qualname`` for a Function
    probe_id: str
    #: the probe function's name in the generated module (``tracecheck fix MODULE::NAME`` fixes it)
    probe: str
    call: RecordedCall

    def to_json(self) -> Json:
        return {"probe_id": self.probe_id, "probe": self.probe, "call": self.call.to_json()}

    @classmethod
    def of(cls, d: Any) -> "AuditEntry | None":
        if isinstance(d, AuditEntry) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        probe_id, probe, call = text(d.get("probe_id")), text(d.get("probe")), RecordedCall.of(d.get("call"))
        return cls(probe_id, probe, call) if probe_id and probe and call else None


@dataclass(frozen=True)
class OpsAudit:
    """What ``RunReport.ops`` holds for a ``tracecheck ops`` run."""

    package: str
    #: the op namespaces the package registers (found, or given with ``--namespace``)
    namespaces: tuple[str, ...]
    command: CommandResult
    #: the generated probe module (``tracecheck fix`` and ``tracecheck run`` take its probes)
    probe_module: str
    entries: tuple[AuditEntry, ...] = ()
    not_covered: tuple[Uncovered, ...] = ()
    #: processes of the test command whose recorder wrote a record
    processes: int = 0
    redefinitions: tuple[Redefinition, ...] = ()
    #: the folder of this run's records, which each call's ``inputs`` is relative to
    record_dir: str = ""

    def to_json(self) -> Json:
        return {"package": self.package, "namespaces": list(self.namespaces), "command": self.command.to_json(),
                "probe_module": self.probe_module, "entries": [e.to_json() for e in self.entries],
                "not_covered": [u.to_json() for u in self.not_covered], "processes": self.processes,
                "redefinitions": [r.to_wire() for r in self.redefinitions], "record_dir": self.record_dir}

    @classmethod
    def of(cls, d: Any) -> "OpsAudit | None":
        if isinstance(d, OpsAudit) or d is None:
            return d
        if not isinstance(d, dict) or text(d.get("package")) is None:
            return None
        return cls(str(text(d.get("package"))), texts(d.get("namespaces")), CommandResult.of(d.get("command")),
                   text(d.get("probe_module")) or "",
                   tuple(e for e in map(AuditEntry.of, items(d.get("entries"))) if e is not None),
                   tuple(u for u in map(Uncovered.of, items(d.get("not_covered"))) if u is not None),
                   count(d.get("processes")) or 0,
                   tuple(r for r in map(Redefinition.of, items(d.get("redefinitions"))) if r is not None),
                   text(d.get("record_dir")) or "")
