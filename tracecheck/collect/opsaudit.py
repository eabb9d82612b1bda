"""The parent side of ``tracecheck ops``: run the library's test command with tracecheck's recorder in its Python
processes (collect/opsrecord.py), merge the records they write, and write the generated probe module, one probe per
distinct call, that ``tracecheck run`` then checks as any model file.

Work folder (``record``'s ``work_dir``)::

    site/sitecustomize.py            the recorder, first on the command's PYTHONPATH
    record-<run>/process-<pid>.json  one ProcessRecord per Python process of the command (a folder per run)
    record-<run>/inputs/<sha1>.pt    the first call's inputs per (target, signature)
    survey/                          the records of one more process that imports all of the package's modules
    command.log                      the command's output, stdout and stderr together
    ops_probes.py                    the generated probe module

No torch import: the generated module imports torch, this module only writes its text.
"""
from __future__ import annotations

import glob
import hashlib
import json
import keyword
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..model.exitcodes import UsageError
from ..model.ops import (FUNCTION, ID_PREFIX, OP, RAISED, AuditEntry, CommandResult, DefinedFunction, DefinedOp,
                         ProcessRecord, RecordedCall, Uncovered)
from ..model.progress import Progress
from .opsprobes import MODULE, split_function, split_op, write_probe_module
from ..model.records import Redefinition

#: lines of the command's output a report shows (CommandResult.tail)
TAIL_LINES = 40
#: distinct input sizes kept per (target, signature), across processes
MAX_SHAPES = 3
SITE, RECORD, INPUTS, LOG = "site", "record", "inputs", "command.log"

NOT_CALLED = "no test calls it"
COMPILED_ONLY = ("the tests call it only under torch.compile (or on fake tensors), so no eager inputs were recorded: "
                 "call it once in eager in a test")
NOT_SAVED = "its inputs could not be saved"
LOCAL_CLASS = "it is defined inside a function: the probe module cannot import it"

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class Merged:
    """The records of all the command's processes as one."""

    #: one per (target, signature), in the order first seen (records in the order given)
    calls: tuple[RecordedCall, ...]
    #: by name
    ops: tuple[DefinedOp, ...]
    #: by target
    functions: tuple[DefinedFunction, ...]
    #: sorted
    modules: tuple[str, ...]
    #: one per (op, first schema, second schema), first seen first
    redefinitions: tuple[Redefinition, ...]
    #: targets the tests reached only while compiling (or on fake tensors): no eager inputs to check them on
    compiled_only: tuple[str, ...] = ()
    #: the folders the package was imported from, first seen first
    roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recorded:
    """What ``record`` learnt from the test command: api.run_ops checks ``probe_module`` and reports the rest."""

    command: CommandResult
    entries: tuple[AuditEntry, ...]
    not_covered: tuple[Uncovered, ...]
    #: the op namespaces audited: those of the package's ops and calls, and those given with --namespace
    namespaces: tuple[str, ...]
    probe_module: str
    #: processes of the command whose recorder wrote a record
    processes: int
    redefinitions: tuple[Redefinition, ...]
    #: this run's record folder (the calls' ``inputs`` are relative to it)
    record_dir: str = ""


# -- the command ------------------------------------------------------------------------------------------------------

def run_command(argv: Sequence[str], env: Mapping[str, str], log_path: str,
                progress: Progress | None = None) -> CommandResult:
    """Run the test command to its end with ``env``, its output (stdout and stderr) in ``log_path``. Its failure is a
    result (``exit_code``), never an error here. Raises UsageError when it cannot start; on KeyboardInterrupt (Ctrl-C,
    or SIGTERM as the CLI turns it) kills the command's process group (pytest-xdist workers included) and re-raises."""
    if not argv:
        raise UsageError("tracecheck ops: no test command: give it after --, e.g. -- python -m pytest -q tests/")
    progress = progress or Progress()
    shown = shlex.join(argv)
    progress.note(f"running the test command: {shown}")
    start = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            # a session of its own: Ctrl-C reaches tracecheck alone, which kills the whole group (pgid == pid)
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=dict(env), start_new_session=True)
        except FileNotFoundError:
            raise UsageError(f"{argv[0]}: not found") from None
        except OSError as e:
            raise UsageError(f"{argv[0]}: cannot be run: {e.strerror or e}") from None
        try:
            code = proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        _kill_group(proc)  # what the command left running (a daemon, a pool's worker) must not write records later
    seconds = time.monotonic() - start
    result = CommandResult(tuple(argv), code if code >= 0 else None, seconds, _tail(log_path), log_path,
                           -code if code < 0 else None)
    ended = f"exited {code}" if code >= 0 else f"was killed by signal {-code}"
    progress.note(f"the test command {ended} in {seconds:.1f} s")
    return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # ended already
        pass
    proc.wait()


def _tail(path: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log that may be large: read from its last 64 KiB."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 65536))
        data = f.read()
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


# -- the records ------------------------------------------------------------------------------------------------------

def read_records(record_dir: str, package: str) -> tuple[ProcessRecord, ...]:
    """The ``process-<pid>.json`` records of ``package`` in ``record_dir``, by pid. One that cannot be read is left
    out: a record is written whole (atomically) or not at all."""
    found: list[ProcessRecord] = []
    for name in os.listdir(record_dir) if os.path.isdir(record_dir) else ():
        if not (name.startswith("process-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(record_dir, name), encoding="utf-8") as f:
                rec = ProcessRecord.of(json.load(f))
        except (OSError, ValueError):
            continue
        if rec is not None and rec.package == package:
            found.append(rec)
    return tuple(sorted(found, key=lambda r: r.pid))


def merge(records: Iterable[ProcessRecord]) -> Merged:
    """The processes' records as one: a (target, signature) seen in several processes counts all their calls, keeps
    the first inputs saved (and that call's test), and up to MAX_SHAPES distinct sizes; ops, Functions and modules
    united, a redefinition said once."""
    calls: dict[tuple[str, str], RecordedCall] = {}
    ops: dict[str, DefinedOp] = {}
    functions: dict[str, DefinedFunction] = {}
    modules: set[str] = set()
    redefinitions: dict[tuple[str, str, str], Redefinition] = {}
    compiled_only: set[str] = set()
    roots: dict[str, None] = {}
    for rec in records:
        compiled_only.update(rec.compiled_only)
        roots.update(dict.fromkeys(rec.roots))
        for call in rec.calls:
            key = (call.target, call.signature)
            had_call = calls.get(key)
            calls[key] = _merge_call(had_call, call) if had_call else replace(call, shapes=call.shapes[:MAX_SHAPES])
        for op in rec.ops:
            had = ops.get(op.name)
            ops[op.name] = replace(had, schema=had.schema or op.schema, frame=had.frame or op.frame) if had else op
        for fn in rec.functions:
            was = functions.get(fn.target)
            functions[fn.target] = replace(was, frame=was.frame or fn.frame) if was else fn
        modules.update(rec.modules)
        for r in rec.redefinitions:
            redefinitions.setdefault((r.op, r.first_schema, r.second_schema), r)
    return Merged(tuple(calls.values()), tuple(ops[k] for k in sorted(ops)),
                  tuple(functions[k] for k in sorted(functions)), tuple(sorted(modules)),
                  tuple(redefinitions.values()), tuple(sorted(compiled_only)), tuple(roots))


def _merge_call(first: RecordedCall, later: RecordedCall) -> RecordedCall:
    shapes = first.shapes + tuple(s for s in later.shapes if s not in first.shapes)
    took = first.inputs is None and later.inputs is not None  # the first process could not save them, a later did
    source = later if took else first
    return replace(first, shapes=shapes[:MAX_SHAPES], calls=first.calls + later.calls, inputs=source.inputs,
                   why_not=source.why_not, test=source.test if took else first.test or later.test)


# -- entries and what is not covered ----------------------------------------------------------------------------------

def _unreachable(call: RecordedCall) -> str | None:
    """Why the probe module cannot make this call, or None."""
    if call.inputs is None:
        if call.why_not and call.why_not.startswith(RAISED):
            return call.why_not
        return f"{NOT_SAVED}: {call.why_not}" if call.why_not else NOT_SAVED
    if call.what == FUNCTION and "<locals>" in split_function(call.target)[1]:
        return LOCAL_CLASS
    return None


def _base_names(call: RecordedCall) -> tuple[str, str]:
    """(probe id, probe function name) of a target's first signature."""
    if call.what == OP:
        ns, name, overload = split_op(call.target)
        op = f"{ns}::{name}" if overload == "default" else f"{ns}::{name}.{overload}"
        fn = f"probe_{ns}__{name}" if overload == "default" else f"probe_{ns}__{name}__{overload}"
        return ID_PREFIX + op, re.sub(r"\W", "_", fn)
    module, qualname = split_function(call.target)
    return f"{ID_PREFIX}{module}.{qualname}", re.sub(r"\W", "_", f"probe_{module}__{qualname}")


def entries(calls: Sequence[RecordedCall]) -> tuple[AuditEntry, ...]:
    """One entry per call the probe module can make (its inputs saved), sorted by target and signature, each id
    suffixed by its signature's digest (``ops::ns::name@3f2a1c`` / ``probe_ns__name_3f2a1c``): an id names the same
    call whatever order the tests (or pytest-xdist's workers) made them in, and whatever other signatures a new test
    adds, so that a baseline compares like with like (no bracket: rich would read ``[3f2a1c]`` as markup)."""
    out: list[AuditEntry] = []
    reachable = sorted((c for c in calls if _unreachable(c) is None), key=lambda c: (c.target, c.signature))
    used: set[str] = set()
    for call in reachable:
        probe_id, name = _base_names(call)
        digest = hashlib.sha1(call.signature.encode()).hexdigest()[:6]
        probe_id, name = f"{probe_id}@{digest}", f"{name}_{digest}"
        while name in used:  # two targets that read alike once made names (a.b::c and a_b::c)
            name += "_"
        used.add(name)
        out.append(AuditEntry(probe_id, name, call))
    return tuple(out)


def not_covered(merged: Merged, checked: Sequence[AuditEntry]) -> tuple[Uncovered, ...]:
    """The ops (``ns::name``: covered when any overload is checked) and Functions with no entry in ``checked``, and
    why, by target: called but not reproducible (inputs not saved, a class local to a function), or never called."""
    covered = {_op_or_function(e.call.target) for e in checked}
    out: dict[str, Uncovered] = {}
    for call in merged.calls:
        target = _op_or_function(call.target)
        why = _unreachable(call)
        if target not in covered and target not in out and why is not None:
            out[target] = Uncovered(target, call.what, why)
    compiled = {_op_or_function(t) for t in merged.compiled_only}
    for op in merged.ops:
        if op.name not in covered and op.name not in out:
            out[op.name] = Uncovered(op.name, OP, COMPILED_ONLY if op.name in compiled else NOT_CALLED)
    for fn in merged.functions:
        if fn.target not in covered and fn.target not in out:
            out[fn.target] = Uncovered(fn.target, FUNCTION, COMPILED_ONLY if fn.target in compiled else NOT_CALLED)
    return tuple(out[k] for k in sorted(out))


def _op_or_function(target: str) -> str:
    """An op's ``ns::name`` (any overload covers it), a Function's ``module:Qualname`` as it is."""
    if "::" in target:
        ns, name, _ = split_op(target)
        return f"{ns}::{name}"
    return target


# -- the package's modules no test imported ---------------------------------------------------------------------------

#: loads each recorded call's inputs as the probe module will (the package's folders on sys.path, not the tests'),
#: printing those that fail; then imports the package and every submodule outside its tests, each in a try: what the
#: recorder then finds defined
_SURVEY = """
import importlib, json, pkgutil, sys
name, inputs = sys.argv[1], json.load(open(sys.argv[2]))
import torch
for path in inputs:
    try:
        torch.load(path, weights_only=False)
    except BaseException as e:
        print(json.dumps({"inputs": path, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}), flush=True)
package = importlib.import_module(name)
for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + ".", onerror=lambda n: None):
    if not {"tests", "test", "testing", "conftest"} & set(info.name.split(".")):
        try:
            importlib.import_module(info.name)
        except BaseException:
            pass
"""


@dataclass(frozen=True)
class _Survey:
    """What the survey process found: the ops and Functions all of the package's modules define, and the inputs
    files that do not load outside the tests' process (by absolute path, with the error)."""

    defined: Merged | None
    unloadable: Mapping[str, str]
#: the most seconds the survey may take (a module that waits for a device or the network at import)
SURVEY_TIMEOUT_S = 120.0


def _survey(package: str, env: Mapping[str, str], work_dir: str, roots: Sequence[str], inputs: Sequence[str],
            progress: Progress | None) -> _Survey | None:
    """One more process with the recorder, as the stage processes will run the probe module (the package's import
    roots on sys.path, not the tests' folders): which ``inputs`` files do not load there, and the package's ops and
    Functions as importing all its modules defines them (its own record folder: these imports are not the tests',
    so the probe module does not repeat them). None when it could not run."""
    from . import opsrecord

    folder = os.path.join(work_dir, "survey")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    listing = os.path.abspath(os.path.join(folder, "inputs.json"))  # the process runs in the work dir
    with open(listing, "w", encoding="utf-8") as f:
        json.dump([os.path.abspath(p) for p in inputs], f)
    path = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).strip(os.pathsep)
    survey_env = {**env, opsrecord.OUT: os.path.abspath(folder), "PYTHONPATH": path}
    try:
        proc = subprocess.run([sys.executable, "-c", _SURVEY, package, listing], env=survey_env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SURVEY_TIMEOUT_S,
                              start_new_session=True, cwd=work_dir)
    except (OSError, subprocess.TimeoutExpired):
        if progress is not None:
            progress.note(f"importing all of {package}'s modules did not finish: the ops and Functions of the "
                          "modules no test imported are not listed")
        return None
    unloadable: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        try:
            said = json.loads(line)
        except ValueError:
            continue  # the package's own output at import
        if isinstance(said, dict) and isinstance(said.get("inputs"), str):
            unloadable[said["inputs"]] = str(said.get("error"))
    records = read_records(folder, package)
    return _Survey(merge(records) if records else None, unloadable)


def _with_unimported(merged: Merged, survey: Merged | None) -> Merged:
    """``merged`` with the ops and Functions only the survey found (defined in modules no test imported): they are
    not covered, never silently missing."""
    if survey is None:
        return merged
    ops = {o.name: o for o in survey.ops} | {o.name: o for o in merged.ops}
    functions = {f.target: f for f in survey.functions} | {f.target: f for f in merged.functions}
    return replace(merged, ops=tuple(ops[k] for k in sorted(ops)),
                   functions=tuple(functions[k] for k in sorted(functions)))


# -- the whole step ---------------------------------------------------------------------------------------------------

def check_names(argv: Sequence[str], package: str, namespaces: Sequence[str]) -> None:
    """UsageError for a command, package or namespace that cannot be audited."""
    if not argv:
        raise UsageError("tracecheck ops: no test command: give it after --, e.g. -- python -m pytest -q tests/")
    if not _DOTTED.match(package) or any(keyword.iskeyword(p) for p in package.split(".")):
        raise UsageError(f"--package {package!r}: not a module name (dotted Python names, e.g. mylib or mylib.ops)")
    if package.partition(".")[0] in ("torch", "tracecheck"):
        raise UsageError(f"--package {package}: torch's (or tracecheck's) own: name the library that registers the "
                         "custom ops to audit")
    for ns in namespaces:
        if not ns.isidentifier():
            raise UsageError(f"--namespace {ns!r}: not an op namespace (a Python identifier, e.g. mylib)")


def record(argv: Sequence[str], package: str, namespaces: Sequence[str], work_dir: str,
           progress: Progress | None = None) -> Recorded:
    """Run ``argv`` (the library's tests) with the recorder, and write the probe module for what they called.
    Clears ``work_dir``'s site/, record-*/ and probe module first. Raises UsageError for bad names, a command that cannot start or
    in which no process ran the recorder or imported the package."""
    from . import opsrecord  # the recorder's side, imported only when a command is recorded

    check_names(argv, package, namespaces)
    # a folder of this run's own: a process the last run's tests left behind (a daemon in a session of its own)
    # writes into its own run's folder, never into this one
    site, record_dir = os.path.join(work_dir, SITE), os.path.join(work_dir, f"{RECORD}-{uuid.uuid4().hex[:8]}")
    try:
        for folder in (site, *glob.glob(os.path.join(glob.escape(work_dir), RECORD + "*"))):
            shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(os.path.join(work_dir, MODULE)):  # no stale probes if this run writes none
            os.remove(os.path.join(work_dir, MODULE))
        os.makedirs(site)
        os.makedirs(os.path.join(record_dir, INPUTS))
        with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as f:
            f.write(opsrecord.sitecustomize_source())
    except OSError as e:
        raise UsageError(f"{work_dir}: cannot write tracecheck ops' work folder: {e.strerror or e}") from None
    env = opsrecord.environment(os.path.abspath(record_dir), package, tuple(namespaces), os.path.abspath(site),
                                dict(os.environ))
    command = run_command(argv, env, os.path.join(work_dir, LOG), progress)
    records = read_records(record_dir, package)
    if not records:
        raise UsageError(f"{shlex.join(argv)} ran no Python process with tracecheck's recorder: is it this "
                         f"environment's python? (its output: {command.log})")
    merged = merge(records)
    if not merged.modules and not merged.calls:  # an audit that checked nothing must not read as a pass
        raise UsageError(f"{shlex.join(argv)} never imported {package} in its {len(records)} Python process(es) with "
                         f"tracecheck's recorder (it exited {command.exit_code}): nothing to audit; is {package} "
                         f"importable there, and do the tests import it? (its output: {command.log})")
    survey = _survey(package, env, work_dir, merged.roots, [os.path.join(record_dir, c.inputs) for c in merged.calls
                                                             if c.inputs], progress)
    if survey is not None:  # inputs that load only in the tests' process (a type defined in a test module)
        merged = replace(merged, calls=tuple(_loadable(c, record_dir, survey.unloadable) for c in merged.calls))
    checked = entries(merged.calls)
    module = write_probe_module(work_dir, checked, merged.modules, record_dir, argv=argv, package=package,
                                roots=merged.roots)
    merged = _with_unimported(merged, survey.defined if survey is not None else None)
    found = {o.name.partition("::")[0] for o in merged.ops}
    found |= {split_op(c.target)[0] for c in merged.calls if c.what == OP}
    return Recorded(command, checked, not_covered(merged, checked), tuple(sorted(found | set(namespaces))), module,
                    len(records), merged.redefinitions, record_dir)


def _loadable(call: RecordedCall, record_dir: str, unloadable: Mapping[str, str]) -> RecordedCall:
    """``call``, or without its inputs (and why) when they do not load outside the tests' process."""
    why = unloadable.get(os.path.abspath(os.path.join(record_dir, call.inputs))) if call.inputs else None
    return replace(call, inputs=None, why_not=f"they load only in the tests' process: {why}") if why else call
