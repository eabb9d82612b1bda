"""``run``: collect -> run stages in isolation -> classify -> RunReport. The CLI is a thin shell over this."""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

from . import __version__, machine
from .isolate import protocol
from .classify import results, settle
from .evidence import owner
from .collect import cache, locate, sharding
from .model.exitcodes import UsageError
from .model.report import CRASH, IMPORT_PROBE, INTERNAL, LOAD_STAGE, PASS, SKIP, TIMEOUT, ProbeReport, RunReport, StageResult
from .model.records import StageRecord
from .model.reportio import trace_subdir
from .stages import STAGES, StageOptions, target_of
from .stages._run import StageTask
from .stages import get as get_stage
from .collect.survey import Discovery, SurveyTask
from .model.tasks import DEFAULT_TIMEOUT_S
from .stages import order as stage_order
from .isolate.deadline import Deadlines
from .model.tasks import floor_s
from .isolate.runner import Outcome, Runner, Task, Template
from .model.targets import DEFAULT_REQUIRE, Gate
from .model.taxonomy import K
from .model.payloads import StageNotes
from .model.progress import Progress, Relay


@dataclass
class RunOptions:
    """What ``tracecheck run`` was asked to do. ``timeout_s``: the most seconds a (probe, stage) process may run, the
    cap of its deadline (isolate/deadline.py)."""

    paths: list[str]
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    select: str | None = None
    #: only the probe function of exactly this name (``tracecheck fix file.py::name``)
    only: str | None = None
    jobs: int = os.cpu_count() or 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: str = "auto"
    command: list[str] = field(default_factory=list)
    #: (K, N): run only every N-th probe after sorting ids, starting at the K-th (1-based); collect/sharding.py
    shard: tuple[int, int] | None = None
    #: Keep each stage's structured trace (TORCH_TRACE) under ``<trace_dir>/<probe>/<stage>/`` for tlparse.
    trace_dir: str | None = None
    #: compiled_autograd stage: training steps per run (stages.StageOptions.steps)
    steps: int = StageOptions.steps
    #: compiled_autograd stage: also run with a second input shape (stages.StageOptions.dynamic)
    dynamic: bool = StageOptions.dynamic
    #: import each model file afresh in every stage process instead of once per file (isolate/template.py)
    fresh_imports: bool = False
    #: also record torch.utils.collect_env's summary (for --json / --report; runs gcc and pip, ~1 s)
    collect_env: bool = False
    #: advice findings (no-batching-rule, opaque-op) fail their stage as errors do
    strict: bool = False
    #: the targets whose stages gate the verdicts and the exit code (targets.py; compile always)
    require: tuple[str, ...] = DEFAULT_REQUIRE
    #: run on an emulated NPU: PrivateUse1 renamed npu, on host memory (devices/emulated_npu.py); device npu
    emulate_npu: bool = False
    #: keep each file's results here and reuse them while nothing they depend on changed (collect/cache.py); None:
    #: run everything (``--no-cache``; ``tracecheck fix`` and the API's default)
    cache_dir: str | None = None


def validate_stages(stages: list[str]) -> list[str]:
    if not stages:
        raise UsageError(f"--stages selects no stage; choose from {', '.join(STAGES)}")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise UsageError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    return [s for s in STAGES if s in stages]  # run order, deduplicated


def run(opts: RunOptions, progress: Progress | None = None) -> RunReport:
    """Diagnose every selected probe. Raises UsageError for bad input (exit 2)."""
    progress = progress or Progress()
    t0, started = time.monotonic(), time.time()
    stages = _checked_stages(opts)
    paths, named = locate.split_node_ids(opts.paths)  # ``file.py::probe`` names one probe, as in pytest
    files = locate.find_files(paths)
    if not files:
        packages = locate.skipped_packages(paths)
        raise UsageError(f"{' '.join(opts.paths)}: no Python files found" + (
            f" (package folders are not searched: {', '.join(os.path.relpath(p) + '/' for p in packages[:5])}; name a "
            "model file in one, or the package folder itself)" if packages else ""))
    device = machine.resolve_device(opts.device, opts.emulate_npu)
    root = locate.rootdir(paths)
    store = _cache(opts, stages, device, named, root)
    reused = {f: r for f in files for r in [store.lookup(f) if store else None] if r is not None}
    for f, r in reused.items():
        progress.note(f"{os.path.relpath(f)}: results reused from the run of {r.stored_at} (nothing they depend on "
                      "changed; --no-cache re-runs it)")
    to_run = [f for f in files if f not in reused]
    probes = _reuse(reused)
    discovery: dict[str, _Discovered] = {}
    env: machine.MachineRecord | None = None
    if to_run:
        progress.discovered(len(to_run))
        probes, discovery, env = _run_files(opts, to_run, stages, device, root, named, progress, probes,
                                            record=store is not None)
    probes = [p for f in files for p in probes if p.file == f]
    for p in probes:
        if p.reused:
            p.gate = Gate(opts.require, opts.strict)
            continue
        if _setup_failed(p):
            for stage in stages:
                p.stages[stage] = StageResult(
                    stage, SKIP, skip_reason="loading the file or calling the probe function failed (see load)")
        settle.settle(p, opts.strict)
        owner.assign(p, root)  # whose code each finding and break is: once, here, where the stages' environment is
    if env is None and reused:  # nothing ran: the environment the reused results were made in (the same: keyed)
        env = next(iter(reused.values())).environment
    if env is None:  # the environment task died: record what the parent can
        env = machine.MachineRecord(machine.collect(device, opts.emulate_npu))
    if store is not None:
        _keep(store, [f for f in to_run if f in discovery], probes, discovery, env, started)
    return RunReport(probes=probes, environment=env.report_environment, stages=stages,
                     command=opts.command, rootdir=root, tracecheck_version=__version__, seconds=round(time.monotonic() - t0, 2),
                     strict=opts.strict, require=opts.require)


def _checked_stages(opts: RunOptions) -> list[str]:
    """The stages to run, in run order, once the options that choose them are known to make sense."""
    if not math.isfinite(opts.timeout_s) or opts.timeout_s <= 0:
        raise UsageError(f"--timeout {opts.timeout_s}: must be a positive number of seconds")
    stages = validate_stages(opts.stages)
    unchecked = [t for t in opts.require if not any(target_of(s) == t for s in stages)]
    if unchecked:  # a required target none of whose stages runs would pass unchecked
        theirs = [s for s in STAGES if target_of(s) in unchecked]
        raise UsageError(f"--require {','.join(unchecked)}: no stage of {'that target' if len(unchecked) == 1 else 'those targets'} "
                         f"is in --stages (add {', '.join(theirs)})")
    return stages


#: where ``tracecheck ops`` keeps what it records and generates, under the current directory, per package
OPS_WORK_DIR = ".tracecheck-ops"
#: what a work dir of ``tracecheck ops`` is known by (collect/opsaudit.py): another folder is not written into
_OPS_WORK_MARKS = {"command.log", "ops_probes.py"}


def run_ops(opts: RunOptions, argv: Sequence[str], package: str, namespaces: Sequence[str] = (),
            work_dir: str | None = None, progress: Progress | None = None) -> RunReport:
    """``tracecheck ops``: run the test command ``argv`` with tracecheck's recorder on (collect/opsaudit.py), then the
    stages on the probe module it wrote (one probe per distinct call of the package's ops and autograd.Functions),
    as ``run`` does (``opts.paths`` is ignored). Each probe's id is its entry's (``ops::ns::name``), its file and name
    the generated module's (``tracecheck fix MODULE::PROBE`` works on it); ``report.ops`` holds the test command's
    own result and what no probe covers. Raises UsageError for bad input (exit 2)."""
    from .collect import opsaudit  # the recorder's machinery: only for ``tracecheck ops``
    from .model.ops import OpsAudit

    progress = progress or Progress()
    opsaudit.check_names(argv, package, namespaces)
    t0 = time.monotonic()
    stages = _checked_stages(opts)  # before the test command runs, which can take long
    work = work_dir or os.path.join(OPS_WORK_DIR, package)
    _check_work_dir(work)
    recorded = opsaudit.record(list(argv), package, tuple(namespaces), work, progress)
    ids = {e.probe: e.probe_id for e in recorded.entries}
    if ids:
        report = run(replace(opts, paths=[recorded.probe_module], only=None), _OpsIds(progress, ids))
    else:  # the tests called nothing of the package: no probe to run; the report lists what went uncovered
        device = machine.resolve_device(opts.device, opts.emulate_npu)
        report = RunReport(probes=[], environment=machine.MachineRecord(
            machine.collect(device, opts.emulate_npu)).report_environment, stages=stages, command=opts.command,
            rootdir=locate.rootdir([work]), tracecheck_version=__version__, strict=opts.strict, require=opts.require)
    report.seconds = round(time.monotonic() - t0, 2)  # the test command's time too
    module = os.path.realpath(recorded.probe_module)
    for p in report.probes:
        if os.path.realpath(p.file) == module and p.name in ids:
            p.id = ids[p.name]
    report.ops = OpsAudit(package, recorded.namespaces, recorded.command, recorded.probe_module, recorded.entries,
                          recorded.not_covered, recorded.processes, recorded.redefinitions, recorded.record_dir)
    return report


def _check_work_dir(path: str) -> None:
    """``tracecheck ops`` clears folders of its work dir (``site``, ``record``): never in a folder of the user's."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--work-dir {path}: exists and is not a folder")
    held = set(os.listdir(path)) if os.path.isdir(path) else set()
    if held and not held & _OPS_WORK_MARKS:
        raise UsageError(f"--work-dir {path}: a folder tracecheck ops did not make (it holds {sorted(held)[0]!r}), "
                         "whose site/ and record-*/ it would clear; give a new or empty folder")


class _OpsIds(Relay):
    """The live lines of ``tracecheck ops`` name each probe by its entry's id (``ops::ns::name@3f2a1c``), as the
    report does: ``ids`` maps the generated module's probe names to them."""

    def __init__(self, inner: Progress, ids: dict[str, str]) -> None:
        super().__init__(inner)
        self.ids = ids

    def _id(self, probe_id: str) -> str:
        return self.ids.get(probe_id.rpartition("::")[2], probe_id)

    def started(self, probe_id: str, stage: str) -> None:
        self.inner.started(self._id(probe_id), stage)

    def finished(self, probe_id: str, result: StageResult) -> None:
        self.inner.finished(self._id(probe_id), result)

    def revised(self, probe_id: str, result: StageResult) -> None:
        self.inner.revised(self._id(probe_id), result)

    def verdict(self, probe: ProbeReport, running: list[str]) -> None:
        self.inner.verdict(replace(probe, id=self._id(probe.id)), running)


def _cache(opts: RunOptions, stages: list[str], device: str, named: dict[str, list[str]],
           root: str) -> cache.Cache | None:
    """The run's cache (collect/cache.py), keyed by the environment and every option that can change a result; None
    when off, and with ``--trace-dir`` (its traces must be written) or ``--shard`` (which probes a shard takes depends
    on every file's probes)."""
    if not opts.cache_dir or opts.trace_dir or opts.shard or os.environ.get(cache.NO_CACHE_ENV):
        return None
    options = {"root": root, "cwd": os.getcwd(), "stages": stages, "select": opts.select, "only": opts.only, "named": sorted(named.items()),
               "timeout_s": opts.timeout_s, "steps": opts.steps, "dynamic": opts.dynamic,
               "fresh_imports": opts.fresh_imports, "collect_env": opts.collect_env, "strict": opts.strict,
               "require": sorted(opts.require), "emulate_npu": opts.emulate_npu,
               # the cores cap -j and set each stage's threads (isolate/runner.py), which a numerics check can feel
               "cores": os.cpu_count()}
    return cache.Cache(opts.cache_dir, {"environment": cache.environment_key(device), "options": options})


def _reuse(reused: dict[str, cache.Reused]) -> list[ProbeReport]:
    out = []
    for r in reused.values():
        for p in r.probes:
            p.reused = r.stored_at
            out.append(p)
    return out


@dataclass
class _Discovered:
    """What discovery found in one file: the custom ops registered by it, its imports or its probes, and what its
    results depend on (collect/cache.py: path or variable -> fingerprint; None when a probe's recording is missing)."""

    custom_ops: list[str]
    deps: dict[str, str | None] | None


#: statuses whose result may not recur (a busy machine, a flaky crash) or that checked nothing: never stored
_NOT_KEPT = (TIMEOUT, CRASH, INTERNAL)


def _keep(store: cache.Cache, files: list[str], probes: list[ProbeReport], discovery: dict[str, _Discovered],
          env: machine.MachineRecord, started: float) -> None:
    """Store each file's results whose every probe and stage has a key (its recorded deps) and nothing unsure in it,
    none of whose files changed since the run ``started`` (``Cache.store``)."""
    for f in files:
        mine = [p for p in probes if p.file == f]
        found = discovery[f]
        deps = found.deps
        if not mine or deps is None or any(
                p.name == IMPORT_PROBE or _setup_failed(p) or any(s.status in _NOT_KEPT for s in p.stages.values())
                for p in mine):
            continue
        store.store(f, deps, [p.to_dict() for p in mine], {"custom_ops": found.custom_ops}, env.to_json(), started)


def _run_files(opts: RunOptions, files: list[str], stages: list[str], device: str, root: str,
               named: dict[str, list[str]], progress: Progress, reused: list[ProbeReport], record: bool = False
               ) -> tuple[list[ProbeReport], dict[str, _Discovered], machine.MachineRecord | None]:
    """Discover and run the stages of ``files`` (the ones not reused); the probes (``reused``'s first), what discovery
    found per file (its custom ops and the deps of its results, when ``record``: collect/cache.py) and the
    environment record."""
    # more stage processes than cores only adds memory pressure: each holds torch and a compiler
    with Runner(min(opts.jobs, os.cpu_count() or 1), warm_compile=any(get_stage(s).compiles for s in stages)) as runner:
        env_task = Task(_ENVIRONMENT, machine.EnvironmentTask(
            device=device, collect_env=opts.collect_env, npu=machine.npu_status(), emulate_npu=opts.emulate_npu),
            opts.timeout_s)
        probes, templates, discovery, env = _discover(runner, files, opts, root, named, progress, env_task,
                                                      bool(reused), record)
        custom_ops = {f: d.custom_ops for f, d in discovery.items()}
        if opts.shard:
            keep = set(sharding.shard_ids([p.id for p in probes], *opts.shard))
            probes = [p for p in probes if p.id in keep]
        for path in set(templates) - {p.file for p in probes if not _setup_failed(p)}:
            templates.pop(path).close()  # nothing to fork for in this run (shard, setup errors)
        # opcheck has work only where a custom op exists: registered by the file, its imports or its probes
        # (discovery), or lazily during the eager run (then it runs after the others)
        deferred = {p.id for p in probes if "opcheck" in stages and "eager" in stages
                    and not custom_ops.get(p.file)}
        tasks = _stage_tasks(opts, files, probes, stages, device, templates, skip={(i, "opcheck") for i in deferred})
        gate = Gate(opts.require, opts.strict)
        progress.layout(stages, gate)
        progress.planned(len(tasks))
        for p in probes:
            p.gate = gate
        verdicts = _Verdicts(progress, deferred, opts.strict)
        deadlines = Deadlines(opts.timeout_s, {s: get_stage(s).cost for s in stages})
        _run_stage_tasks(runner, tasks, probes, progress, verdicts, deadlines, discovery if record else None)
        # opcheck after all: eager registered a custom op, or eager did not finish (it cannot tell)
        late = [p for p in probes if p.id in deferred and not _setup_failed(p) and _late_opcheck(p)]
        if late:
            progress.planned(len(tasks) + len(late))
            _run_stage_tasks(runner, _stage_tasks(opts, files, late, ["opcheck"], device, {}, skip=set()), probes,
                             progress, verdicts, deadlines, discovery if record else None)
        for p in probes:
            if p.id in deferred and "opcheck" not in p.stages and not _setup_failed(p):
                p.stages["opcheck"] = StageResult("opcheck", SKIP, skip_reason=NO_CUSTOM_OP)
    return reused + probes, discovery, env


def _late_opcheck(p: ProbeReport) -> bool:
    """A probe whose opcheck waited for eager gets one: eager registered a custom op, or did not finish (it cannot tell)."""
    eager = p.stages["eager"]
    return bool(eager.notes.registered_custom_ops) or eager.status in (CRASH, TIMEOUT, INTERNAL)


class _Verdicts:
    """Says each probe's verdict (``Progress.verdict``) once every stage of its required targets has finished: the
    stages of targets not required (vmap, export) and the other probes may still be running. A deferred opcheck
    (``deferred``: it waits for eager) is awaited when eager calls for it."""

    def __init__(self, progress: Progress, deferred: set[str], strict: bool) -> None:
        self.progress, self.deferred, self.strict = progress, deferred, strict
        self.waiting: dict[str, set[str]] = {}
        self.said: set[str] = set()
        #: probe -> its stages shown with a kind pending (``_as_settled``), revised once the others have settled them
        self.pending: dict[str, set[str]] = {}

    def expect(self, tasks: list[Task]) -> None:
        for t in tasks:
            self.waiting.setdefault(t.key[0], set()).add(t.key[1])

    def done(self, p: ProbeReport, stage: str) -> None:
        waiting = self.waiting.get(p.id, set())
        waiting.discard(stage)
        if stage == "eager" and p.id in self.deferred and _late_opcheck(p):
            waiting.add("opcheck")
        if p.id in self.said or any(p.gate.requires(target_of(s)) for s in waiting) \
                or not any(p.gate.requires(target_of(s)) for s in p.stages if s != LOAD_STAGE):
            return
        self.said.add(p.id)
        self.progress.verdict(settle.settled_copy(p, self.strict), sorted(waiting, key=stage_order))


def _run_stage_tasks(runner: Runner, tasks: list[Task], probes: list[ProbeReport], progress: Progress,
                     verdicts: _Verdicts, deadlines: Deadlines,
                     discovery: dict[str, _Discovered] | None = None) -> None:
    """Run the tasks, filling in the probes' stages as they finish. ``discovery``: where the run records what each
    file's results depend on (collect/cache.py), each stage's own imports are added to its file's."""
    by_id = {p.id: p for p in probes}
    verdicts.expect(tasks)
    pending = verdicts.pending
    for outcome in runner.run(tasks, on_start=lambda t: progress.started(*t.key), deadline=deadlines):
        probe_id, stage = outcome.task.key
        _add_stage_modules(outcome, by_id[probe_id].file, discovery)
        by_id[probe_id].stages[stage] = _stage_result(stage, outcome)
        if by_id[probe_id].stages[stage].status == PASS:
            deadlines.passed(probe_id, stage, outcome.seconds)
        shown = _as_settled(by_id[probe_id], stage, verdicts)
        if shown.notes.kind_pending:
            pending.setdefault(probe_id, set()).add(stage)
        progress.finished(probe_id, shown)
        verdicts.done(by_id[probe_id], stage)
        for earlier in sorted(pending.get(probe_id, set()) - {stage}):  # what the stages since have settled
            now = _as_settled(by_id[probe_id], earlier, verdicts)
            if not now.notes.kind_pending:
                pending[probe_id].discard(earlier)
                progress.revised(probe_id, now)


def _add_stage_modules(outcome: Outcome, file: str, discovery: dict[str, _Discovered] | None) -> None:
    """Take the modules a stage process imported (``cache.LOADED_KEY``, beside its record) off its message, into
    its file's deps; a stage that returned none (it died, or recorded nothing) leaves the file with no key."""
    msg = outcome.message
    loaded = msg.value.pop(cache.LOADED_KEY, None) if isinstance(msg, protocol.Result) else None
    if discovery is None or file not in discovery:
        return
    deps = discovery[file].deps
    discovery[file].deps = None if deps is None or not isinstance(loaded, dict) else {**deps, **loaded}


#: kinds the final report may still re-attribute once the probe's other stages end (classify/attribute.unknowns)
_PENDING_KINDS = (K.UNKNOWN, K.BACKEND_ERROR)


def _as_settled(p: ProbeReport, stage: str, verdicts: "_Verdicts") -> StageResult:
    """What the live line says of a finished stage: its result as the final report will say it, as far as the stages
    finished so far tell (``settle.settled_copy``: the report's own rule, --strict included); an ``unknown`` or
    ``backend-error`` that a stage still running may yet explain is marked ``notes.kind_pending``, so that no live line
    states a kind the final verdict contradicts."""
    shown = settle.settled_copy(p, verdicts.strict).stages[stage]
    others = verdicts.waiting.get(p.id, set()) - {stage}
    late = p.id in verdicts.deferred and "opcheck" not in p.stages
    if shown.failure is not None and shown.failure.kind in _PENDING_KINDS and (others or late):
        shown.extra.update(StageNotes(kind_pending=True).to_extra())
    return shown


#: opcheck's skip reason when the runner starts no opcheck process
NO_CUSTOM_OP = ("no custom op is registered (not by the file, its imports or its probes, nor during the eager "
                "run); no opcheck process was started")


def _stage_tasks(opts: RunOptions, files: list[str], probes: list[ProbeReport], stages: list[str], device: str,
                 templates: dict[str, Template], skip: set[tuple[str, str]]) -> list[Task]:
    """One task per (probe, stage): a file's tasks together (its template can stop after them); within it the
    stages of the required targets first, so that each probe's verdict is known early (``_Verdicts``), then the
    others; the costliest first within each (a long stage started last would leave a core idle at the end)."""
    gate = Gate(opts.require)
    by_cost = sorted(stages, key=lambda s: (not gate.requires(target_of(s)), -get_stage(s).cost))
    return [Task((p.id, stage), StageTask(file=p.file, probe=p.name, stage=stage, device=device,
                                          trace_dir=_trace_dir(opts, p, stage), options=_options(opts, stage),
                                          emulate_npu=opts.emulate_npu), opts.timeout_s,
                 template=templates.get(p.file), probe=_probe_template(templates.get(p.file), p))
            for f in files for stage in by_cost for p in probes
            if p.file == f and not _setup_failed(p) and (p.id, stage) not in skip]


def _probe_template(template: Template | None, p: ProbeReport) -> str | None:
    """Fork the probe's stages from its own template, the child of the file's template that called it, when it has
    one (isolate/template.py)."""
    return p.name if template is not None and p.name in template.probes else None


def _trace_dir(opts: RunOptions, p: ProbeReport, stage: str) -> str | None:
    return os.path.join(os.path.abspath(opts.trace_dir), trace_subdir(p.id, stage)) if opts.trace_dir else None


def _setup_failed(p: ProbeReport) -> bool:
    load = p.stages.get(LOAD_STAGE)
    return bool(load and any(f.evidence.phase == "setup" for f in load.findings))


#: model files kept imported at once (isolate/template.py), each holding its imports' memory until its stages are done;
#: the files after them import afresh in every stage process
MAX_TEMPLATES = 8
#: probes' templates kept up to fork their stage processes (``SurveyTask.probe_templates``), in all and per file: each
#: holds what its probe's first call imported until its stages are done (a tiny transformers model's, about 150 MB of
#: its own; at most template.MAX_GROWTH)
MAX_PROBE_TEMPLATES, MAX_PROBE_TEMPLATES_PER_FILE = 8, 4

#: the key of the task that records the environment, run beside the discovery tasks
_ENVIRONMENT = ("environment",)


def _discover(runner: Runner, files: list[str], opts: RunOptions, root: str, named: dict[str, list[str]],
              progress: Progress, env_task: Task, others: bool = False, record: bool = False
              ) -> tuple[list[ProbeReport], dict[str, Template], dict[str, _Discovered], machine.MachineRecord | None]:
    """Load each file once (in parallel) and list its probes; unless ``fresh_imports``, each loading process
    stays up as the template its stage processes fork from. ``env_task`` runs beside them. Per file loaded, what it
    found: ``custom_ops`` (registered by the file, its imports or its probes) and ``deps`` (what its import and its
    probes' calls loaded: collect/cache.py; None when a probe's recording is missing). ``others``: probes reused
    from the cache exist, so finding none here is no usage error."""
    timeout = opts.timeout_s  # loading may build a C++ extension (~25-30 s cold): within the 300 s default
    # every file's discovery runs in a template process, which calls each probe in a forked child of its own (so no
    # probe's factory runs where another's did); only the first MAX_TEMPLATES stay up to fork stage processes
    staying = 0 if opts.fresh_imports else min(len(files), MAX_TEMPLATES)
    per_file = min(MAX_PROBE_TEMPLATES_PER_FILE, MAX_PROBE_TEMPLATES // max(1, staying))
    tasks = [Task(f, SurveyTask(file=f, select=opts.select, root=root, emulate_npu=opts.emulate_npu, record_deps=record,
                                only=(opts.only,) if opts.only else tuple(named[f]) if named.get(f) else None,
                                stay=i < staying, probe_templates=per_file), timeout, serve=True)
             for i, f in enumerate(files)]
    found: dict[str, list[ProbeReport]] = {}
    empty: list[str] = []  # files with no probe function: helpers beside the model files
    templates: dict[str, Template] = {}
    discovery: dict[str, _Discovered] = {}
    total_candidates = 0
    env: machine.MachineRecord | None = None

    def loading(t: Task) -> None:
        if t.key != _ENVIRONMENT:
            progress.loading(t.key)

    for outcome in runner.run([*tasks, env_task], on_start=loading):
        if outcome.task.key == _ENVIRONMENT:
            env = _machine_record(outcome.message)
            continue
        path = outcome.task.key
        if outcome.message is None:  # the loading process hung or died (a probe function that never returns, say)
            report = ProbeReport(id=locate.probe_id(path, IMPORT_PROBE, root), file=path, name=IMPORT_PROBE)
            load = results.died_result(LOAD_STAGE, f"loading the file {outcome.died}", outcome.timed_out,
                                       outcome.log_tail, round(outcome.seconds, 2))
            if load.failure is not None:  # (died_result always makes one)
                # nothing of the file ran: no stage for it
                load.failure.evidence = dataclasses.replace(load.failure.evidence, phase="setup")
            report.stages[LOAD_STAGE] = load
            found[path] = [report]
            continue
        res = Discovery.from_json(outcome.checked(f"{os.path.relpath(path)}: loading the file"))
        if outcome.template is not None:
            templates[path] = outcome.template
        elif outcome.why_not_template and isinstance(outcome.task.work, SurveyTask) and outcome.task.work.stay:
            progress.note(f"{os.path.relpath(path)}: each stage process imports it afresh "
                          f"({outcome.why_not_template})")
        total_candidates += res.n_candidates
        deps: dict[str, str | None] | None = {}
        for entry in res.probes:
            deps = None if deps is None or not isinstance(entry.deps, dict) else {**deps, **entry.deps}
        discovery[path] = _Discovered(res.custom_ops, deps)
        reports = []
        for entry in res.probes:
            if entry.bad_shape:
                raise UsageError(entry.bad_shape)
            report = ProbeReport(id=locate.probe_id(path, entry.name, root), file=path, name=entry.name)
            loaded = results.load_result(entry)
            if loaded:
                report.stages[LOAD_STAGE] = loaded
            reports.append(report)
        found[path] = reports
        if not reports and not res.n_candidates:  # a helper module beside the probes: imported, nothing to run
            empty.append(path)
        missing = [n for n in named.get(path, []) if n not in {r.name for r in reports}]
        imported = not any(r.name == IMPORT_PROBE for r in reports)  # else its probes could not be listed
        if missing and imported and not opts.select:  # ``file.py::name`` asked for a probe the file lacks
            have = ", ".join(res.names) or "none"
            raise UsageError(f"{locate.probe_id(path, missing[0], root)}: no such probe in the file "
                             f"(its probes: {have})")
    probes = [p for f in files for p in found.get(f, [])]
    for path in empty if probes else ():  # with no probe at all, the usage error below says it once
        progress.note(f"{os.path.relpath(path)}: no probes (no probe() / probe_<name>() functions or "
                      "@tracecheck.probe); imported only")
    if not probes and not others:
        what = f"matching -k {opts.select!r}" if opts.select and total_candidates else \
            f"named {opts.only!r}" if opts.only and total_candidates else \
            "(no probe() / probe_<name>() functions or @tracecheck.probe)"
        raise UsageError(f"{' '.join(opts.paths)}: no probes found {what}")
    return probes, templates, discovery, env


def _machine_record(msg: protocol.Message | None) -> machine.MachineRecord | None:
    """What the environment task sent; None when it sent none (it died), or nothing it writes."""
    try:
        return machine.MachineRecord.from_json(msg.value) if isinstance(msg, protocol.Result) else None
    except ValueError:
        return None


def _options(opts: RunOptions, stage: str) -> StageOptions:
    """The run's values of the options the stage declares it reads (``StageSpec.options``); defaults for the rest."""
    declared = get_stage(stage).options
    values = {name: getattr(opts, name) for name in declared if name != "assured_s"}  # RunOptions' of that name
    if "assured_s" in declared:  # what the stage is sure to get, its deadline may come down to that (deadline.py)
        values["assured_s"] = floor_s(opts.timeout_s)
    return replace(StageOptions(), **values)


def _stage_result(stage: str, outcome: Outcome) -> StageResult:
    seconds = round(outcome.seconds, 2)
    msg = outcome.message
    if msg is None:
        return results.died_result(stage, outcome.died or "died", outcome.timed_out, outcome.log_tail, seconds)
    if isinstance(msg, protocol.InternalErrorMessage):
        # tracecheck's own bug inside the stage: no finding about the probe; the run goes on and exits 3
        return StageResult(stage, INTERNAL, seconds=seconds, internal_error=msg.traceback)
    if isinstance(msg, protocol.UsageErrorMessage):
        raise UsageError(msg.message, msg.detail)
    try:
        return results.build_stage_result(stage, StageRecord.from_wire(msg.value), seconds)
    except ValueError as e:  # a record the classifier cannot read (records.StageRecord): this stage only
        return StageResult(stage, INTERNAL, seconds=seconds, internal_error=f"ValueError: {e}")
