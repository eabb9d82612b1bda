"""Results reused when nothing they depend on changed (collect/cache.py, issue 55): an unchanged file is not re-run;
a change in an imported module, in a data file the probe reads, in an option, in a TORCH_* variable or in torch's
version (simulated) re-runs it; a deleted ``register_autograd`` in the shipped mHC registration after a cached pass
gives the failure, never the pass. The CLI in subprocesses (its cache on: tests/conftest.py turns it off for every
other test), and ``api.run`` in this process where torch's version is simulated."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracecheck.collect import cache

REPO = Path(__file__).resolve().parents[1]
STAGES = "eager,explain"

MODEL = textwrap.dedent("""\
    import torch

    from helper import act, scale


    def probe_act():
        s = scale()  # a data file read when the probe is called
        return (lambda x: act(x) * s), (torch.randn(4, 8),)
    """)
HELPER = textwrap.dedent("""\
    import os


    def scale():
        with open(os.path.join(os.path.dirname(__file__), "scale.txt")) as f:
            return float(f.read())


    def act(x):
        return x.relu()
    """)


def cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != cache.NO_CACHE_ENV}
    environ.update(COLUMNS="200", **env)
    return subprocess.run([sys.executable, "-m", "tracecheck", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=environ)


def reused(r: subprocess.CompletedProcess) -> bool:
    """The run says its results were reused (the summary line) and did not start a stage process."""
    said = " reused from the run of " in r.stdout
    assert said == ("starting the stage processes" not in r.stderr), r.stdout + r.stderr
    return said


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "scale.txt").write_text("2.0")
    return tmp_path


@pytest.mark.slow
def test_an_unchanged_file_is_reused_and_any_change_it_depends_on_reruns_it(project):
    first = cli(project, "model.py", "--stages", STAGES)
    assert first.returncode == 0 and not reused(first), first.stdout + first.stderr
    again = cli(project, "model.py", "--stages", STAGES)
    assert again.returncode == 0 and reused(again), again.stdout + again.stderr
    assert "1 probe (1 reused from the run of " in again.stdout

    # an imported module (not the probe's file) changes: a print in it breaks the graph
    changed = HELPER.replace("    return x.relu()", "    print('act')\n    return x.relu()")
    assert changed != HELPER
    (project / "helper.py").write_text(changed)
    broken = cli(project, "model.py", "--stages", STAGES)
    assert broken.returncode == 1 and not reused(broken) and "graph-break" in broken.stdout, broken.stdout
    cached = cli(project, "model.py", "--stages", STAGES)
    assert cached.returncode == 1 and reused(cached) and "graph-break" in cached.stdout  # a failure is kept too

    # a data file the probe reads, an option, a variable torch reads, --no-cache: each runs it again
    (project / "scale.txt").write_text("3.0")
    assert not reused(cli(project, "model.py", "--stages", STAGES))
    assert reused(cli(project, "model.py", "--stages", STAGES))
    assert not reused(cli(project, "model.py", "--stages", STAGES, "--timeout", "250"))
    assert not reused(cli(project, "model.py", "--stages", STAGES, TORCH_SHOW_CPP_STACKTRACES="0"))
    assert not reused(cli(project, "model.py", "--stages", STAGES, "--no-cache"))
    assert not reused(cli(project, "model.py", "--stages", STAGES, TRACECHECK_NO_CACHE="1"))
    assert reused(cli(project, "model.py", "--stages", STAGES))


@pytest.mark.slow
def test_a_new_torch_version_reruns(project, monkeypatch):
    from tracecheck import api

    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    monkeypatch.chdir(project)

    def run():
        opts = api.RunOptions(paths=["model.py"], stages=STAGES.split(","), jobs=2, cache_dir=cache.DEFAULT_DIR)
        (probe,) = api.run(opts).probes
        return probe

    assert run().reused is None  # (this process's own runs: its environment is the key's, whatever other tests set)
    assert run().reused
    monkeypatch.setattr(cache, "torch_version", lambda: "__version__ = '2.99.0+cpu'")
    probe = run()
    assert probe.reused is None and probe.verdict.status == "pass"


@pytest.mark.slow
def test_a_deleted_register_autograd_after_a_cached_pass_fails(tmp_path):
    shutil.copytree(REPO / "probes", tmp_path / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text("")
    args = ("probes/mhc_probes.py::probe_fixed", "--stages", "eager,aot_eager")
    assert cli(tmp_path, *args).returncode == 0
    assert reused(cli(tmp_path, *args))
    fixed = tmp_path / "probes" / "mhc" / "fixed.py"
    line = "    torch.library.register_autograd(_POST, _post_backward, setup_context=_post_setup_context)\n"
    assert line in fixed.read_text()
    fixed.write_text(fixed.read_text().replace(line, ""))
    r = cli(tmp_path, *args)
    assert r.returncode == 1 and not reused(r) and "missing-autograd" in r.stdout, r.stdout


def test_the_recorder_sees_modules_libraries_and_files_read_not_written(tmp_path, monkeypatch):
    (tmp_path / "mymod_cache_probe.py").write_text("VALUE = 1\n")
    (tmp_path / "data.txt").write_text("x")
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = cache.Recorder.start()
    try:
        import mymod_cache_probe  # noqa: F401

        with open(tmp_path / "data.txt") as f:
            f.read()
        with open(tmp_path / "out.txt", "w") as f:
            f.write("y")
        deps = rec.deps()
    finally:
        cache._ACTIVE = None
        sys.modules.pop("mymod_cache_probe", None)
    assert deps is not None
    assert {os.path.basename(p) for p in deps} >= {"mymod_cache_probe.py", "data.txt"}
    assert "out.txt" not in {os.path.basename(p) for p in deps}
    assert not any("/torch/" in p for p in deps)  # torch's own files: keyed by its version
    assert deps[str((tmp_path / "data.txt").resolve())] == cache.fingerprint(str(tmp_path / "data.txt"))


LAZY_MODEL = textwrap.dedent("""\
    import torch


    def f(x):
        from lazyhelper import act  # imported when the forward first runs, never at the file's import
        return act(x) * 2


    def probe_lazy():
        return f, (torch.randn(4, 8),)
    """)


@pytest.mark.slow
def test_a_module_imported_inside_the_forward_keys_the_result(project):
    """The reviewer's stale result: a helper the forward imports lazily, edited after a cached pass. Each stage
    process returns what it imported, so the edit re-runs the file (and its graph break is found)."""
    (project / "model.py").write_text(LAZY_MODEL)
    (project / "lazyhelper.py").write_text("def act(x):\n    return x.relu()\n")
    assert cli(project, "model.py", "--stages", STAGES).returncode == 0
    assert reused(cli(project, "model.py", "--stages", STAGES))
    (project / "lazyhelper.py").write_text("def act(x):\n    print('act')\n    return x.relu()\n")
    r = cli(project, "model.py", "--stages", STAGES)
    assert not reused(r) and r.returncode == 1 and "graph-break" in r.stdout, r.stdout


def test_an_installed_packages_files_are_keyed_in_a_venv(tmp_path, monkeypatch):
    """A venv's ``platstdlib`` (``<venv>/lib/python3.X``) holds ``site-packages``: an installed package's file is
    fingerprinted (a package reinstalled from a checkout keeps its version), the standard library's is not."""
    import sysconfig

    venv = tmp_path / "venv" / "lib" / "python3.11"
    paths = {"stdlib": str(tmp_path / "base" / "lib" / "python3.11"), "platstdlib": str(venv),
             "purelib": str(venv / "site-packages"), "platlib": str(venv / "site-packages")}
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    assert not cache._keyed_elsewhere(str(venv / "site-packages" / "mylib" / "ops.py"))
    assert cache._keyed_elsewhere(str(venv / "json" / "__init__.py"))
    assert cache._keyed_elsewhere(str(tmp_path / "base" / "lib" / "python3.11" / "os.py"))
    import torch

    assert cache._keyed_elsewhere(os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py"))


def test_an_entry_is_reused_only_while_every_file_it_read_is_the_same(tmp_path):
    model, dep = tmp_path / "m.py", tmp_path / "d.py"
    model.write_text("a = 1\n")
    dep.write_text("b = 1\n")
    store = cache.Cache(str(tmp_path / "c"), {"torch": "2.13.0"})
    deps = {str(p): cache.fingerprint(str(p)) for p in (model.resolve(), dep.resolve())}
    # a file changed after the run started (edited while it ran): its fingerprint may be of code that never ran
    assert not store.store(str(model), deps, [], {}, {"environment": {}}, started=os.stat(dep).st_mtime)
    assert store.lookup(str(model)) is None
    assert store.store(str(model), deps, [], {}, {"environment": {}}, started=os.stat(dep).st_mtime + 1)
    assert store.lookup(str(model)) is not None
    assert cache.Cache(str(tmp_path / "c"), {"torch": "2.14.1"}).lookup(str(model)) is None  # another key
    dep.write_text("b = 2\n")
    assert store.lookup(str(model)) is None
    dep.write_text("b = 1\n")
    assert store.lookup(str(model)) is not None  # content, not mtime
    dep.unlink()
    assert store.lookup(str(model)) is None  # a file gone is a change


ENV_MODEL = textwrap.dedent("""\
    import glob
    import os

    import torch

    HERE = os.path.dirname(os.path.abspath(__file__))


    def f(x):
        return x.sin()


    def g(x):
        print("plugin")  # a graph break
        return x.sin()


    def probe_env():
        # a variable outside torch's prefixes, and a folder of plugins: each decides what the probe compiles
        broken = os.environ.get("MYMODEL_BREAK") == "1" or glob.glob(os.path.join(HERE, "plugins", "*.txt"))
        return (g if broken else f), (torch.randn(4),)
    """)


@pytest.mark.slow
def test_a_variable_the_probe_reads_a_folder_it_lists_and_a_symlink_key_the_result(project):
    """The bad-input tester's stale results: a variable outside the prefixes torch reads (MYMODEL_BREAK), a file added
    to a folder the probe globs, and a symlink to the model file run after the file (it reported 0 probes)."""
    (project / "model.py").write_text(ENV_MODEL)
    (project / "plugins").mkdir()
    args = ("model.py", "--stages", STAGES)
    assert cli(project, *args).returncode == 0 and reused(cli(project, *args))
    r = cli(project, *args, MYMODEL_BREAK="1")
    assert r.returncode == 1 and not reused(r), r.stdout
    r = cli(project, *args)  # unset again: the entry holds the last run's value, so it runs, and passes
    assert r.returncode == 0 and not reused(r)
    assert reused(cli(project, *args))
    (project / "plugins" / "a.txt").write_text("")
    r = cli(project, *args)
    assert r.returncode == 1 and not reused(r), r.stdout
    (project / "link.py").symlink_to(project / "model.py")
    r = cli(project, "link.py", "--stages", STAGES)
    assert r.returncode == 1 and "link.py::probe_env" in r.stdout + r.stderr and not reused(r), r.stdout
    r = cli(project, "link.py", "--stages", STAGES)
    assert r.returncode == 1 and reused(r) and "1 probe (1 reused" in r.stdout, r.stdout


def test_a_damaged_entry_is_a_miss_never_a_crash(tmp_path):
    import json

    model = tmp_path / "m.py"
    model.write_text("a = 1\n")
    store = cache.Cache(str(tmp_path / "c"), {"torch": "2.13.0"})
    deps = {str(model): cache.fingerprint(str(model))}
    good = {"id": "m.py::p", "file": str(model), "name": "p", "stages": {}}
    assert store.store(str(model), deps, [good], {}, {"environment": {}}, started=os.stat(model).st_mtime + 1)
    assert store.lookup(str(model)) is not None
    entry = json.loads(open(store._path(str(model))).read())
    for probes in ("xx", [{"id": 3}], [{**good, "stages": {"eager": {"status": "bogus"}}}]):
        with open(store._path(str(model)), "w") as f:
            json.dump({**entry, "probes": probes}, f)
        assert store.lookup(str(model)) is None, probes
