"""A model file is imported once per run, in its template process, and each (probe, stage) process is forked
from it (tracecheck/isolate/template.py); where that is unsafe or unwanted, each stage process imports it afresh.
Observed from outside: every import of the model file appends a line to a file the test reads."""
import json
import os
import subprocess
import sys

import pytest
import torch

COUNTED = '''
import os, torch
with open(os.environ["IMPORT_LOG"], "a") as f:
    f.write(f"{os.getpid()}\\n")
{extra}

def _f(x):
    return torch.sin(x) * 2

def probe_a():
    return _f, (torch.randn(4, requires_grad=True),)

def probe_b():
    return _f, (torch.randn(3),)
'''


def _run(tmp_path, extra="", *args):
    model = tmp_path / "counted.py"
    model.write_text(COUNTED.replace("{extra}", extra))
    log = tmp_path / "imports.log"
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(model), "--stages", "eager,explain",
                           "--json", str(out), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**__import__("os").environ, "IMPORT_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    verdicts = {(p["name"], s): r["status"] for p in report["probes"] for s, r in p["stages"].items()}
    return log.read_text().split(), verdicts, proc.stderr


def test_the_file_is_imported_once_for_all_its_stages(tmp_path):
    imports, verdicts, _ = _run(tmp_path)
    assert len(imports) == 1  # discovery, in the template; the 4 stage processes are forks of it
    assert set(verdicts.values()) == {"pass"} and len(verdicts) == 4


def test_fresh_imports_imports_the_file_in_every_stage_process(tmp_path):
    imports, verdicts, _ = _run(tmp_path, "", "--fresh-imports")
    assert len(imports) == 1 + 4 and len(set(imports)) == 5  # discovery + 2 probes x 2 stages, each its own pid
    assert set(verdicts.values()) == {"pass"}


def test_a_file_that_initialises_a_device_is_never_forked_after(tmp_path):
    # a CPU machine cannot initialise CUDA; the file makes torch say it did, which is what the template checks
    imports, verdicts, stderr = _run(tmp_path, "torch.cuda.is_initialized = lambda: True")
    assert len(imports) == 1 + 4
    assert "counted.py: each stage process imports it afresh (the file initialised CUDA" in stderr
    assert set(verdicts.values()) == {"pass"}


LAZY = '''
import torch

def _f(x):
    if not hasattr(torch.ops.tc_lazy, "double"):   # an extension that registers its op on first call
        @torch.library.custom_op("tc_lazy::double", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2
    return torch.ops.tc_lazy.double(x)

def probe_lazy():
    return _f, (torch.randn(4),)
'''

PLAIN = '''
import torch

def probe_plain():
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)
'''


@pytest.mark.parametrize("source, opcheck", [
    (PLAIN, ("skip", "no custom op is registered")),
    # registered only during the eager run: opcheck runs after the others, and finds what opcheck finds on a
    # custom_op without register_fake (its test_faketensor fails)
    (LAZY, ("fail", None)),
])
def test_opcheck_runs_only_where_a_custom_op_exists(tmp_path, source, opcheck):
    (tmp_path / "m.py").write_text(source)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "m.py"), "--stages",
                           "eager,opcheck", "--json", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == (0 if opcheck[0] == "skip" else 1), proc.stderr
    (probe,) = json.loads(out.read_text())["probes"]
    result = probe["stages"]["opcheck"]
    assert result["status"] == opcheck[0]
    if opcheck[1]:
        assert result["skip_reason"].startswith(opcheck[1])
    else:
        assert result["extra"]["opcheck"]["tc_lazy.double.default"]["test_faketensor"] == "FAIL"
        assert result["failure"]["kind"] == "missing-fake"


OPENMP = '''
import torch

# a parallel region at import (large enough for OpenMP): libgomp's pool, left in a process that then forks,
# hangs the child's first parallel region
MODEL = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.LayerNorm(512)).bfloat16()

def _f(x):
    return MODEL(x.bfloat16()).float()

def probe():
    return _f, (torch.randn(256, 512),)
'''


def test_a_file_that_runs_openmp_while_loading_does_not_hang_its_forks(tmp_path):
    # -j 1 on a multi-core machine: each process may use every core (the case where the pool has threads)
    (tmp_path / "omp.py").write_text(OPENMP)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "omp.py"), "--stages",
                           "eager,aot_eager", "-j", "1", "--timeout", "60", "--json", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (p,) = json.loads(out.read_text())["probes"]
    assert {s: r["status"] for s, r in p["stages"].items()} == {"eager": "pass", "aot_eager": "pass"}
    # and the file was still imported once: its loading ran single-threaded, so no OpenMP pool (a thread the
    # template would refuse to fork after) was left behind
    assert "imports it afresh" not in proc.stderr


KILLER = '''
import os, signal, torch

def _kill_template(x):
    marker = os.environ["KILLED_MARK"]
    if not os.path.exists(marker):         # once: the stage process's parent is the file's template
        open(marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
    return x * 2

def _ok(x):
    return torch.sin(x)

def probe_a_killer():
    return _kill_template, (torch.randn(4),)

def probe_b_ok():
    return _ok, (torch.randn(4),)
'''


def test_a_template_that_dies_costs_no_other_result(tmp_path):
    (tmp_path / "k.py").write_text(KILLER)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "k.py"), "--stages",
                           "eager,explain", "-j", "1", "--json", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**__import__("os").environ,
                                                          "KILLED_MARK": str(tmp_path / "killed")})
    assert (tmp_path / "killed").exists()
    assert proc.returncode == 1, proc.stderr  # the killer's own stage is a crash finding
    report = json.loads(out.read_text())
    # explain runs first (costlier) and kills the template; the stage that did it is lost with it and says
    # so; the stages after it are started from the fork server instead, and pass
    stages = {(p["name"], s): r for p in report["probes"] for s, r in p["stages"].items()}
    assert {k: r["status"] for k, r in stages.items()} == {
        ("probe_a_killer", "explain"): "crash", ("probe_a_killer", "eager"): "pass",
        ("probe_b_ok", "explain"): "pass", ("probe_b_ok", "eager"): "pass"}
    assert "lost with its template process" in stages[("probe_a_killer", "explain")]["failure"]["summary"]


def test_the_fork_servers_preload_leaves_nothing_a_fork_cannot_copy():
    """preload.py asks Inductor's CPU questions (subprocesses) before any fork: no thread may be left behind."""
    probe_state = ("import os, sys, threading, traceback, torch{extra}\n"
                   "print(len(os.listdir('/proc/self/task')), torch.get_num_threads())\n"
                   "for t in threading.enumerate():  # what a failure shows: the Python threads and where they are\n"
                   "    print(t.name, ''.join(traceback.format_stack(sys._current_frames().get(t.ident))), "
                   "file=sys.stderr)")

    def state(extra):
        done = subprocess.run([sys.executable, "-c", probe_state.format(extra=extra)], capture_output=True,
                              text=True, timeout=300, check=True)
        return done.stdout.split("\n")[-2], done.stderr

    (preloaded, threads), (plain, _) = state("\nimport tracecheck.isolate.preload"), state("")
    assert preloaded == plain, threads  # native threads, torch threads


def test_the_preloads_remembered_vector_isa_is_the_one_inductor_finds_itself(tmp_path):
    """preload.py keeps Inductor's CPU vector-ISA verdict beside Inductor's cache and, on the next start, trusts it
    only when it matches what the CPU flags allow; a verdict that does not match is probed again. Oracle: Inductor's
    own check in a process that never imported tracecheck."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    show = ("from torch._inductor import config, cpu_vec_isa\n"
            "print([str(i) for i in cpu_vec_isa.valid_vec_isa_list()], config.cpp.vec_isa_ok)")

    def isas(pre=""):
        out = subprocess.run([sys.executable, "-c", pre + show], capture_output=True, text=True, timeout=300,
                             env=env, check=True).stdout
        return out.strip().splitlines()[-1]

    plain = isas()
    assert plain.endswith(" None")
    assert isas("import tracecheck.isolate.preload\n") == plain  # first start: probed, verdict written
    memo = tmp_path / "tracecheck_vec_isa.json"
    (key, passed), = json.loads(memo.read_text()).items()
    assert str(passed) in plain
    assert isas("import tracecheck.isolate.preload\n") == plain  # second start: from the verdict
    if len(passed) > 1:  # a stale verdict (fewer ISAs than the flags allow) is not trusted
        memo.write_text(json.dumps({key: passed[-1:]}))
        assert isas("import tracecheck.isolate.preload\n") == plain


@pytest.mark.parametrize("stages", ["eager", "eager,explain"])
def test_stage_processes_see_the_users_environment_not_the_fork_servers(tmp_path, stages):
    """The fork server gets PYTHONSAFEPATH, and TRACECHECK_WARM_COMPILE=0 when no stage compiles (--stages eager):
    tracecheck's, so the probe's process must not see them; a variable the user set stays. Whether the fork server
    compiled shows in Dynamo's device registry, filled at a process's first compile."""
    model = tmp_path / "envdump.py"
    model.write_text(
        "import json, os, torch\n"
        "def _f(x):  # run eagerly in each stage process (eager's run, explain's eager op count): it writes there\n"
        "    if not torch.compiler.is_compiling():\n"
        "        with open(os.environ['ENV_DUMP'], 'a') as f:\n"
        "            f.write(json.dumps(sorted(k for k in os.environ if 'SAFEPATH' in k or k.startswith('TRACECHECK')))"
        " + ' ' + str(torch._dynamo.device_interface._device_initialized) + ' ' + str(os.getpid()) + '\\n')\n"
        "    return x * 2\n"
        "def probe():\n"
        "    return _f, (torch.randn(3),)\n")
    dump = tmp_path / "env.jsonl"
    env = {k: v for k, v in os.environ.items() if "SAFEPATH" not in k and not k.startswith("TRACECHECK")}
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(model), "--stages", stages],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**env, "ENV_DUMP": str(dump), "TRACECHECK_USERS_OWN": "1"})
    assert proc.returncode == 0, proc.stderr
    seen = [line.rsplit(" ", 1) for line in dump.read_text().splitlines()]
    warmed = stages != "eager" and sys.platform == "linux" and not (torch.version.cuda or torch.version.hip)
    assert len({pid for _, pid in seen}) == len(stages.split(","))  # each stage process wrote
    assert {env for env, _ in seen} == {f'["TRACECHECK_USERS_OWN"] {warmed}'}


# the probe's first call imports a module (as a probe that does ``from transformers import LlamaForCausalLM``
# builds transformers' lazy modules): each import and each call append a line ``import|call PROBE PID PPID``
SPLIT = '''
import os, signal, sys, threading, time, torch
sys.path.insert(0, os.path.dirname(__file__))

def _log(*words):
    with open(os.environ["CALL_LOG"], "a") as f:
        f.write(" ".join(map(str, words)) + "\\n")

def _make(name):
    _log("call", name, os.getpid(), os.getppid())
    return lambda x: torch.sin(x) * 2

def probe_a():
    import heavy_a
    {unsafe}
    return _make("a"), (torch.randn(4, requires_grad=True),)

def probe_b():
    import heavy_b
    return _make("b"), (torch.randn(4, requires_grad=True),)
'''

HEAVY = '''
import os
with open(os.environ["CALL_LOG"], "a") as f:
    f.write("import {name} " + str(os.getpid()) + " " + str(os.getppid()) + "\\n")
'''


def _split_run(tmp_path, *args, unsafe="pass", stages=("eager", "explain", "aot_eager")):
    (tmp_path / "split.py").write_text(SPLIT.replace("{unsafe}", unsafe))
    for name in "ab":
        (tmp_path / f"heavy_{name}.py").write_text(HEAVY.replace("{name}", name))
    log = tmp_path / "calls.log"
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "split.py"), "--stages",
                           ",".join(stages), "--json", str(out), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "CALL_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert {(p["name"], s): r["status"] for p in report["probes"] for s, r in p["stages"].items()} == {
        (f"probe_{n}", s): "pass" for n in "ab" for s in stages}
    lines = [line.split() for line in log.read_text().splitlines()]
    imports = {n: [int(pid) for kind, probe, pid, _ in lines if kind == "import" and probe == n] for n in "ab"}
    # the parents of the processes that called the probe but never imported for it: stage processes whose first
    # case came from the process they were forked from (each stage calls the probe again for later runs)
    parents = {n: {int(ppid) for kind, probe, pid, ppid in lines if kind == "call" and probe == n
                   and int(pid) not in imports[n]} for n in "ab"}
    return imports, parents


def test_a_probes_stages_fork_from_the_process_that_called_it_once(tmp_path):
    imports, parents = _split_run(tmp_path)
    for name in "ab":
        # discovery's call, each probe in a child of the template of its own; the three stages fork from it: they
        # import nothing
        assert len(imports[name]) == 1, imports
        assert parents[name] == set(imports[name]), (imports, parents)
    assert not set(imports["a"]) & set(imports["b"])  # no process called both probes


# the case holds an open file, read as the forward runs: each stage process must have its own (a value built once and
# shared by the forks would share the file's offset, and the second stage would read nothing)
OWN_FILE = '''
import os, torch
PATH = os.path.join(os.path.dirname(__file__), "scale.txt")

def probe():
    f = open(PATH)

    @torch.compiler.disable
    def scale():
        return float(f.readline())

    return (lambda x: x * scale()), (torch.randn(2, 4, requires_grad=True),)
'''


def test_each_stage_process_builds_its_own_cases(tmp_path):
    (tmp_path / "scale.txt").write_text("3.0\n")
    (tmp_path / "own.py").write_text(OWN_FILE)

    def statuses(*args):
        out = tmp_path / "r.json"
        subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "own.py"), "--stages",
                        "eager,aot_eager", "-j", "1", "--json", str(out), *args], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
        (p,) = json.loads(out.read_text())["probes"]
        return {s: (r["status"], sorted(f["kind"] for f in r["findings"])) for s, r in p["stages"].items()}

    forked = statuses()
    assert forked["eager"] == ("pass", [])  # its own file: it reads 3.0 (a shared offset would read "")
    assert forked == statuses("--fresh-imports")  # each stage process importing the file and calling the probe


def test_fresh_imports_call_each_probe_in_each_stage_process(tmp_path):
    imports, _ = _split_run(tmp_path, "--fresh-imports")
    for name in "ab":  # discovery, then each of the three stage processes imports afresh
        assert len(imports[name]) == 1 + 3, imports


@pytest.mark.parametrize("unsafe", [
    "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()",  # a fork would not copy it
    "signal.signal(signal.SIGCHLD, signal.SIG_IGN)",  # the forks' parent could not wait for them
    "signal.alarm(600)",  # it would go off in the probe's template: a fork does not inherit it
], ids=["thread", "sigchld", "alarm"])
def test_a_probe_whose_call_makes_forking_unsafe_has_its_stages_forked_from_the_file(tmp_path, unsafe):
    imports, parents = _split_run(tmp_path, unsafe=unsafe)
    assert len(imports["a"]) == 1 + 3, imports  # discovery, then each stage process calls the probe itself
    assert parents["a"] == set()
    assert len(imports["b"]) == 1 and parents["b"] == set(imports["b"])  # the other probe is not affected


# what the probe's first call warns and registers is the eager stage's (tracecheck/stages/eager.py), wherever the
# call was made
FIRST_CALL = '''
import warnings, torch

def probe():
    # the C++ autograd fallback's words (a warm-up backward through an op without an autograd kernel says them once)
    warnings.warn("tc_first::twice: an autograd kernel was not registered to the Autograd key(s) but we are "
                  "trying to backprop through it.")
    @torch.library.custom_op("tc_first::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2
    @twice.register_fake
    def _(x):
        return torch.empty_like(x)
    return (lambda x: twice(x) + 1), (torch.randn(4),)
'''


@pytest.mark.parametrize("args", [(), ("--fresh-imports",)], ids=["forked", "fresh-imports"])
def test_the_eager_stage_reports_what_the_first_call_warned_and_registered(tmp_path, args):
    (tmp_path / "first.py").write_text(FIRST_CALL)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "first.py"), "--stages", "eager",
                           "--json", str(out), *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the warning is a finding
    (p,) = json.loads(out.read_text())["probes"]
    eager = p["stages"]["eager"]
    assert [(f["kind"], f["context"].get("op")) for f in eager["findings"]] == [("missing-autograd", "tc_first::twice")]
    assert eager["extra"]["registered_custom_ops"] == ["tc_first::twice"]


def test_a_file_that_ignores_sigchld_at_import_calls_its_probes_in_the_template(tmp_path):
    # the forked processes' ends could not be waited for: the template calls the probes itself and stops serving
    (tmp_path / "sig.py").write_text("import signal, torch\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
                                     "def probe():\n    return (lambda x: x * 2), (torch.randn(3),)\n")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "sig.py"), "--stages",
                           "eager,explain", "--json", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sig.py: each stage process imports it afresh (the file changed how SIGCHLD is handled" in proc.stderr
    (p,) = json.loads(out.read_text())["probes"]
    assert {s: r["status"] for s, r in p["stages"].items()} == {"eager": "pass", "explain": "pass"}


def test_a_probe_that_closes_every_descriptor_still_reports_its_discovery(tmp_path):
    # its connection to the file's template is gone: the entry goes through a file, and the probe's stages fork
    # from the file's template
    (tmp_path / "closer.py").write_text("import os, torch\n"
                                        "def probe_a():\n    os.closerange(3, 1024)\n"
                                        "    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n"
                                        "def probe_b():\n    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "closer.py"), "--stages",
                           "eager", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert {(p["name"], s): r["status"] for p in report["probes"] for s, r in p["stages"].items()} == {
        ("probe_a", "eager"): "pass", ("probe_b", "eager"): "pass"}



# The fork server freezes what it built (gc.freeze: torch's and tracecheck's objects, no user code has run there), so
# a stage process's collections never scan them; what the user's code built (the file's import, the probe's calls)
# is collected as in any Python process, wherever the stage was forked from: a cycle dropped in the stage dies, its
# finalizer runs. gc.get_objects() lists what the collector scans (never the frozen). Each eager run writes
# ``PID enabled torch_scanned import_scanned first_call_scanned own_cycle_finalized import_cycle_finalized``.
COLLECTED = '''
import gc, os, threading, time, torch
AT_IMPORT = [object()]
BUILT = []
FINALIZED = set()

class Cycle:
    def __init__(self, name):
        self.me, self.name = self, name
    def __del__(self):
        FINALIZED.add(self.name)

DROPPED = Cycle("import")

def _f(x):
    global DROPPED
    if not torch.compiler.is_compiling():
        DROPPED = None
        Cycle("own")
        gc.collect()
        scanned = {id(o) for o in gc.get_objects()}
        with open(os.environ["GC_LOG"], "a") as f:
            f.write(f"{os.getpid()} {gc.isenabled()} {id(vars(torch)) in scanned} {id(AT_IMPORT) in scanned} "
                    f"{any(id(b) in scanned for b in BUILT[:1])} {'own' in FINALIZED} {'import' in FINALIZED}\\n")
    return x * 2

def probe():
    if not BUILT:
        BUILT.append([object()])  # the first call's: in the probe's template, when it has one
    {unsafe}
    return _f, (torch.randn(3),)
'''


@pytest.mark.parametrize("args, unsafe", [
    ((), ""),  # forked from the probe's template
    ((), "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()"),  # from the file's template
    (("--fresh-imports",), "")], ids=["probe-template", "file-template", "fresh-imports"])
def test_stage_processes_collect_what_the_users_code_built_and_skip_torchs(tmp_path, args, unsafe):
    (tmp_path / "collected.py").write_text(COLLECTED.replace("{unsafe}", unsafe))
    log = tmp_path / "gc.log"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(tmp_path / "collected.py"), "--stages",
                           "eager", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "GC_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    runs = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    assert runs and set(runs) == {"True False True True True True"}, runs
