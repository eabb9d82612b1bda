"""tracecheck ops, the parent side (collect/opsaudit.py): the test command run, the per-process records merged, and
the generated probe module, whose probes must make the very calls the tests made.

Oracles: the ops and the autograd.Function of a small package written here, called directly on the inputs the test
saved itself (``torch.equal``); hand-written ids, names, counts; plain ``torch.library.opcheck`` for the op without a
fake.
"""
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from tracecheck.collect import loadfile, opsaudit
from tracecheck.model.exitcodes import UsageError
from tracecheck.model.ops import FUNCTION, OP, DefinedFunction, DefinedOp, ProcessRecord, RecordedCall, Uncovered
from tracecheck.model.progress import Progress
from tracecheck.model.records import Redefinition

PACKAGE = {
    "__init__.py": '''
        import torch

        @torch.library.custom_op("tcaudit::scale", mutates_args=())
        def scale(x: torch.Tensor, s: float) -> torch.Tensor:
            return x * s

        @scale.register_fake
        def _(x, s):
            return torch.empty_like(x)

        @torch.library.custom_op("tcaudit::nofake", mutates_args=())
        def nofake(x: torch.Tensor) -> torch.Tensor:
            return x.sin() + 1

        @torch.library.custom_op("tcaudit::unused", mutates_args=())
        def unused(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @torch.library.custom_op("tcaudit::opaque", mutates_args=())
        def opaque(x: torch.Tensor) -> torch.Tensor:
            return x.clone()
        ''',
    "fns.py": '''
        import torch

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, bias=0.0):
                ctx.save_for_backward(x)
                return x * x + bias

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return 2 * x * g, None

        class Never(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x
        ''',
}


def _write_package(root: Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir()
    for file, source in files.items():
        (root / name / file).write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """The package, importable in this process (its ops registered once per process)."""
    root = tmp_path_factory.mktemp("pkgroot")
    _write_package(root, "tcaudit_pkg", PACKAGE)
    sys.path.insert(0, str(root))
    import tcaudit_pkg
    import tcaudit_pkg.fns

    yield root
    sys.path.remove(str(root))


def _inputs(record_dir: Path) -> dict[str, tuple[tuple, dict]]:
    """Saved as the recorder saves them: ``torch.save((args, kwargs))``."""
    torch.manual_seed(0)
    saved = {
        "scale1.pt": ((torch.randn(3), 2.0), {}),
        "scale1b.pt": ((torch.randn(5), 2.0), {}),
        "scale2.pt": ((torch.randn(4, dtype=torch.float64),), {"s": 3.0}),
        "nofake.pt": ((torch.randn(2, 3),), {}),
        "square.pt": ((torch.randn(4, requires_grad=True),), {"bias": 0.5}),
    }
    (record_dir / "inputs").mkdir(parents=True)
    for name, value in saved.items():
        torch.save(value, record_dir / "inputs" / name)
    return saved


REDEFINED = Redefinition("tcaudit::twice", "twice(Tensor x) -> Tensor", "twice(Tensor x, int n) -> Tensor")

RECORDS = (
    ProcessRecord(11, "tcaudit_pkg", calls=(
        RecordedCall("tcaudit::scale.default", OP, "f32[1d]@cpu, 2.0", (((3,),),), "inputs/scale1.pt", None,
                     "tests/test_a.py::test_scale", 2),
        RecordedCall("tcaudit::nofake.default", OP, "f32[2d]@cpu", (((2, 3),),), "inputs/nofake.pt"),
        RecordedCall("tcaudit_pkg.fns:Square", FUNCTION, "f32[1d]@cpu+grad, 0.5", (((4,),),), "inputs/square.pt"),
    ), ops=(DefinedOp("tcaudit::scale"), DefinedOp("tcaudit::nofake"), DefinedOp("tcaudit::unused")),
        functions=(DefinedFunction("tcaudit_pkg.fns:Square"),), modules=("tcaudit_pkg",), redefinitions=(REDEFINED,)),
    ProcessRecord(12, "tcaudit_pkg", calls=(
        RecordedCall("tcaudit::opaque.default", OP, "Gen", (), None, "PicklingError: cannot pickle 'generator'"),
        RecordedCall("tcaudit::scale.default", OP, "f32[1d]@cpu, 2.0", (((5,),),), "inputs/scale1b.pt", None,
                     "tests/test_b.py::test_scale", 3),
        RecordedCall("tcaudit::scale.default", OP, "f64[1d]@cpu, 3.0", (((4,),),), "inputs/scale2.pt"),
    ), ops=(DefinedOp("tcaudit::scale", "scale(Tensor x, float s) -> Tensor"), DefinedOp("tcaudit::opaque")),
        functions=(DefinedFunction("tcaudit_pkg.fns:Square"), DefinedFunction("tcaudit_pkg.fns:Never")),
        modules=("tcaudit_pkg", "tcaudit_pkg.fns"), redefinitions=(REDEFINED,)),
)

def _digest(signature: str) -> str:
    """The id suffix of a recorded call, as docs/usage.md says: its signature's sha1, 6 digits."""
    return hashlib.sha1(signature.encode()).hexdigest()[:6]


F32, F64 = _digest("f32[1d]@cpu, 2.0"), _digest("f64[1d]@cpu, 3.0")
NOFAKE, SQUARE = _digest("f32[2d]@cpu"), _digest("f32[1d]@cpu+grad, 0.5")
IDS = [f"ops::tcaudit::nofake@{NOFAKE}", f"ops::tcaudit::scale@{F32}", f"ops::tcaudit::scale@{F64}",
       f"ops::tcaudit_pkg.fns.Square@{SQUARE}"]
NAMES = [f"probe_tcaudit__nofake_{NOFAKE}", f"probe_tcaudit__scale_{F32}", f"probe_tcaudit__scale_{F64}",
         f"probe_tcaudit_pkg_fns__Square_{SQUARE}"]


def test_merge_sums_counts_keeps_the_first_inputs_and_unites_the_rest():
    merged = opsaudit.merge(RECORDS)
    scale = [c for c in merged.calls if c.target == "tcaudit::scale.default" and c.signature.startswith("f32")]
    assert len(scale) == 1
    assert (scale[0].calls, scale[0].inputs, scale[0].test) == (5, "inputs/scale1.pt", "tests/test_a.py::test_scale")
    assert scale[0].shapes == (((3,),), ((5,),))
    assert len(merged.calls) == 5
    assert [o.name for o in merged.ops] == ["tcaudit::nofake", "tcaudit::opaque", "tcaudit::scale", "tcaudit::unused"]
    assert [o.schema for o in merged.ops if o.name == "tcaudit::scale"] == ["scale(Tensor x, float s) -> Tensor"]
    assert [f.target for f in merged.functions] == ["tcaudit_pkg.fns:Never", "tcaudit_pkg.fns:Square"]
    assert merged.modules == ("tcaudit_pkg", "tcaudit_pkg.fns")
    assert merged.redefinitions == (REDEFINED,)


def test_merge_keeps_at_most_three_sizes_and_a_later_process_inputs_when_the_first_had_none():
    def call(n: int, inputs: str | None) -> RecordedCall:
        return RecordedCall("ns::f.default", OP, "f32[1d]@cpu", (((n,),),), inputs, None if inputs else "E: x")

    (merged,) = opsaudit.merge([ProcessRecord(i, "p", calls=(call(n, inp),)) for i, (n, inp) in
                                enumerate([(1, None), (2, "inputs/b.pt"), (3, "inputs/c.pt"), (4, None)])]).calls
    assert (merged.calls, merged.inputs, merged.why_not) == (4, "inputs/b.pt", None)
    assert merged.shapes == (((1,),), ((2,),), ((3,),))


def test_entries_and_not_covered():
    merged = opsaudit.merge(RECORDS)
    entries = opsaudit.entries(merged.calls)
    assert [e.probe_id for e in entries] == IDS
    assert [e.probe for e in entries] == NAMES
    assert opsaudit.not_covered(merged, entries) == (
        Uncovered("tcaudit::opaque", "op", "its inputs could not be saved: PicklingError: cannot pickle 'generator'"),
        Uncovered("tcaudit::unused", "op", "no test calls it"),
        Uncovered("tcaudit_pkg.fns:Never", "function", "no test calls it"),
    )


def test_ids_do_not_depend_on_the_order_the_tests_made_the_calls():
    merged = opsaudit.merge(RECORDS)
    forward, backward = opsaudit.entries(merged.calls), opsaudit.entries(tuple(reversed(merged.calls)))
    assert [(e.probe_id, e.probe, e.call.signature) for e in forward] == \
        [(e.probe_id, e.probe, e.call.signature) for e in backward]
    # xdist's workers in the other order: the same ids for the same calls
    swapped = opsaudit.entries(opsaudit.merge(tuple(reversed(RECORDS))).calls)
    assert {e.probe_id: e.call.signature for e in swapped} == {e.probe_id: e.call.signature for e in forward}


def test_an_op_reached_only_under_torch_compile_is_not_covered_for_that_reason():
    merged = opsaudit.merge([ProcessRecord(1, "p", ops=(DefinedOp("ns::f"), DefinedOp("ns::g")),
                                           functions=(DefinedFunction("p.m:Fn"),),
                                           compiled_only=("ns::f.default", "p.m:Fn"))])
    assert opsaudit.not_covered(merged, ()) == (
        Uncovered("ns::f", "op", "the tests call it only under torch.compile (or on fake tensors), so no eager inputs "
                                 "were recorded: call it once in eager in a test"),
        Uncovered("ns::g", "op", "no test calls it"),
        Uncovered("p.m:Fn", "function", "the tests call it only under torch.compile (or on fake tensors), so no eager "
                                        "inputs were recorded: call it once in eager in a test"),
    )


def test_an_op_is_covered_by_any_overload_and_other_overloads_keep_their_name():
    calls = (RecordedCall("ns::f.out", OP, "f32[1d]@cpu", inputs="inputs/a.pt"),
             RecordedCall("ns::f.default", OP, "f32[1d]@cpu", inputs=None, why_not="E: no"),
             RecordedCall("pkg.m:outer.<locals>.Fn", FUNCTION, "f32[1d]@cpu", inputs="inputs/b.pt"))
    merged = opsaudit.Merged(calls, (DefinedOp("ns::f"),), (), (), ())
    entries = opsaudit.entries(calls)
    d = _digest("f32[1d]@cpu")
    assert [(e.probe_id, e.probe) for e in entries] == [(f"ops::ns::f.out@{d}", f"probe_ns__f__out_{d}")]
    assert opsaudit.not_covered(merged, entries) == (
        Uncovered("pkg.m:outer.<locals>.Fn", "function",
                  "it is defined inside a function: the probe module cannot import it"),)


def _generate(tmp_path: Path, pkg: Path, keep=None) -> tuple[Path, dict]:
    record_dir = tmp_path / "work" / "record"
    saved = _inputs(record_dir)
    merged = opsaudit.merge(RECORDS)
    entries = [e for e in opsaudit.entries(merged.calls) if keep is None or e.probe in keep]
    path = opsaudit.write_probe_module(str(tmp_path / "work"), entries, merged.modules, str(record_dir),
                                       argv=["python", "-m", "pytest", "-q", "tests/"], package="tcaudit_pkg",
                                       command_dir=str(pkg))
    return Path(path), saved


def test_the_generated_module_makes_the_calls_the_tests_made(tmp_path, pkg):
    import tcaudit_pkg
    from tcaudit_pkg.fns import Square

    path, saved = _generate(tmp_path, pkg)
    text = path.read_text()
    assert text.startswith("# Generated by `tracecheck ops --package tcaudit_pkg` from the test command:\n"
                           "#     python -m pytest -q tests/\n")
    # the inputs relative to the module; its folder written once, absolute, for a copy of it made elsewhere
    assert "record/inputs/scale1.pt" in text
    assert [line for line in text.splitlines() if str(tmp_path) in line] == \
        [f"_WRITTEN_IN = {os.path.abspath(tmp_path / 'work')!r}"]
    probes = dict(loadfile.find_probes(loadfile.load_module(str(path))))
    assert list(probes) == NAMES
    direct = {
        f"probe_tcaudit__nofake_{NOFAKE}": (tcaudit_pkg.nofake, "nofake.pt"),
        f"probe_tcaudit__scale_{F32}": (tcaudit_pkg.scale, "scale1.pt"),
        f"probe_tcaudit__scale_{F64}": (tcaudit_pkg.scale, "scale2.pt"),
        f"probe_tcaudit_pkg_fns__Square_{SQUARE}": (Square.apply, "square.pt"),
    }
    for name, (fn, file) in direct.items():
        case = probes[name]()
        args, kwargs = saved[file]
        got = case.fn(*case.args, **case.kwargs)
        assert torch.equal(got, fn(*args, **kwargs)), name
        assert [a.requires_grad for a in case.args if isinstance(a, torch.Tensor)] == \
            [a.requires_grad for a in args if isinstance(a, torch.Tensor)]
    # a call whose arguments are all tensors is the op itself; a plain value is bound, as a model passes it
    assert probes[f"probe_tcaudit__nofake_{NOFAKE}"]().fn is torch.ops.tcaudit.nofake.default
    bound = probes[f"probe_tcaudit__scale_{F32}"]()
    assert [type(a) for a in bound.args] == [torch.Tensor] and bound.kwargs == {}
    assert probes[f"probe_tcaudit__scale_{F64}"]().kwargs == {}  # its s=3.0 bound too
    # the Function's probe backpropagates through the Function itself
    case = probes[f"probe_tcaudit_pkg_fns__Square_{SQUARE}"]()
    case.fn(*case.args, **case.kwargs).sum().backward()
    assert torch.equal(case.args[0].grad, 2 * case.args[0].detach())


def test_the_generated_module_says_which_module_failed_to_import(tmp_path):
    (tmp_path / "inputs").mkdir()
    path = opsaudit.write_probe_module(str(tmp_path), [], ["tcaudit_missing_pkg"], str(tmp_path),
                                       command_dir=str(tmp_path))
    with pytest.raises(UsageError, match="imports tcaudit_missing_pkg as the test command did, and it failed: "
                                         "ModuleNotFoundError"):
        loadfile.load_module(path)


@pytest.mark.slow
def test_tracecheck_run_on_the_generated_module_finds_the_missing_fake_opcheck_finds(tmp_path, pkg):
    path, saved = _generate(tmp_path, pkg, keep={f"probe_tcaudit__nofake_{NOFAKE}"})
    args, kwargs = saved["nofake.pt"]
    plain = torch.library.opcheck(torch.ops.tcaudit.nofake.default, args, kwargs, raise_exception=False)
    assert plain["test_faketensor"] != "SUCCESS", plain
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(path), "--stages", "eager,opcheck",
                           "--no-cache", "--json", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (probe,) = json.loads(out.read_text())["probes"]
    assert probe["id"].endswith(f"::probe_tcaudit__nofake_{NOFAKE}")
    assert probe["stages"]["eager"]["status"] == "pass"
    assert "missing-fake" in [f["kind"] for f in probe["stages"]["opcheck"]["findings"]]


class _Notes(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


def test_run_command_keeps_the_tail_and_the_exit_code(tmp_path):
    notes = _Notes()
    argv = [sys.executable, "-c", "import sys\nfor i in range(50): print('line', i, file=sys.stderr if i % 2 else "
                                  "sys.stdout, flush=True)\nsys.exit(3)"]
    res = opsaudit.run_command(argv, dict(os.environ), str(tmp_path / "command.log"), notes)
    assert (res.exit_code, res.signal, res.log) == (3, None, str(tmp_path / "command.log"))
    assert res.tail.splitlines() == [f"line {i}" for i in range(10, 50)]
    assert len((tmp_path / "command.log").read_text().splitlines()) == 50
    assert notes.lines[0] == "running the test command: " + shlex.join(argv)
    assert notes.lines[1].startswith("the test command exited 3 in ")


def test_a_command_not_found_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="^no-such-command-tc56: not found$"):
        opsaudit.run_command(["no-such-command-tc56", "-q"], dict(os.environ), str(tmp_path / "log"))


@pytest.mark.parametrize("package, namespaces, message", [
    ("my-lib", (), "--package 'my-lib': not a module name"),
    ("mylib..ops", (), "--package 'mylib..ops': not a module name"),
    ("mylib", ("a,b",), "--namespace 'a,b': not an op namespace"),
])
def test_bad_names_are_usage_errors(package, namespaces, message):
    with pytest.raises(UsageError, match="^" + message.replace(".", r"\.")):
        opsaudit.check_names(["python"], package, namespaces)
    with pytest.raises(UsageError, match="no test command"):
        opsaudit.check_names([], "mylib", ())


def _state(pid: int) -> str:
    """A process's state letter, or "gone"; "Z": dead, not reaped yet (its parent was killed)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone"
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for the processes' states")
def test_ctrl_c_kills_the_command_and_its_children(tmp_path):
    pids = tmp_path / "pids"
    script = ("import os, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              "time.sleep(60)\n")
    main = threading.main_thread()

    def interrupt() -> None:
        while not pids.exists() or " " not in pids.read_text():
            time.sleep(0.05)
        signal.pthread_kill(main.ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        opsaudit.run_command([sys.executable, "-c", script], dict(os.environ), str(tmp_path / "log"))
    assert time.monotonic() - start < 30
    parent, child = map(int, pids.read_text().split())
    time.sleep(0.5)
    assert _state(parent) == "gone"  # reaped by run_command
    assert _state(child) in ("gone", "Z")


# -- end to end: the recorder in a real pytest run (collect/opsrecord.py) ---------------------------------------------

TESTS = '''
    import dataclasses
    import pytest
    import torch
    import tcrec_pkg
    from tcrec_pkg.fns import Cube

    def test_double():
        assert torch.equal(tcrec_pkg.double(torch.ones(3)), torch.full((3,), 2.0))
        tcrec_pkg.double(torch.ones(5))

    def test_double_f64():
        tcrec_pkg.double(torch.ones(2, 2, dtype=torch.float64))

    def test_cube():
        x = torch.arange(4.0, requires_grad=True)
        Cube.apply(x).sum().backward()
        assert torch.equal(x.grad, 3 * x.detach() ** 2)

    @dataclasses.dataclass
    class Cfg:
        k: float

    def test_scale_with_a_config_of_the_tests():
        from tcrec_pkg.fns import Scale
        assert torch.equal(Scale.apply(torch.ones(2), Cfg(3.0)), torch.full((2,), 3.0))

    def test_checked_refuses_negative_input():
        with pytest.raises(ValueError, match="negative"):
            tcrec_pkg.checked(-torch.ones(3))
    '''

REC_PACKAGE = {
    "__init__.py": '''
        import torch

        @torch.library.custom_op("tcrec::double", mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @double.register_fake
        def _(x):
            return torch.empty_like(x)

        @torch.library.custom_op("tcrec::untested", mutates_args=())
        def untested(x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @torch.library.custom_op("tcrec::checked", mutates_args=())
        def checked(x: torch.Tensor) -> torch.Tensor:
            if (x < 0).any():
                raise ValueError("negative input")
            return x.clone()
        ''',
    "fns.py": '''
        import torch

        class Cube(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 3

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return 3 * x ** 2 * g

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, cfg):
                ctx.k = cfg.k
                return x * cfg.k

            @staticmethod
            def backward(ctx, g):
                return g * ctx.k, None
        ''',
    "unimported.py": '''
        import torch

        class Hidden(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x + 1

            @staticmethod
            def backward(ctx, g):
                return g

        @torch.library.custom_op("tcrec::hidden", mutates_args=())
        def hidden(x: torch.Tensor) -> torch.Tensor:
            return x + 1
        ''',
}


@pytest.mark.slow
def test_record_runs_the_tests_with_the_recorder_and_writes_their_probes(tmp_path, monkeypatch):
    # a src layout: the tests find the package through their pytest config (pythonpath), not the cwd
    (tmp_path / "src").mkdir()
    _write_package(tmp_path / "src", "tcrec_pkg", REC_PACKAGE)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = src\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.py").write_text(textwrap.dedent(TESTS))
    monkeypatch.chdir(tmp_path)
    notes = _Notes()
    rec = opsaudit.record([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], "tcrec_pkg",
                          (), str(tmp_path / "work"), notes)
    assert rec.command.exit_code == 0, rec.command.tail
    d32, d64 = _digest("f32[1d]@cpu"), _digest("f64[2d]@cpu")  # the two signatures TESTS calls double with
    cube = _digest("f32[1d]@cpu+grad")
    assert [e.probe_id for e in rec.entries] == [f"ops::tcrec::double@{d32}", f"ops::tcrec::double@{d64}",
                                                 f"ops::tcrec_pkg.fns.Cube@{cube}"]
    assert [e.call.calls for e in rec.entries] == [2, 1, 1]
    # the op no test calls, and the module no test imports (its Function and its op): not covered, never missing
    # the op no test calls, and the module no test imports (its Function and its op): not covered, never missing;
    # a Function given a test module's own type: its inputs load only in the tests' process; an error-path call
    assert rec.not_covered == (
        Uncovered("tcrec::checked", "op", "every call the tests made with these inputs raised (a test of an error "
                                          "path?): ValueError: negative input"),
        Uncovered("tcrec::hidden", "op", "no test calls it"),
        Uncovered("tcrec::untested", "op", "no test calls it"),
        Uncovered("tcrec_pkg.fns:Scale", "function", "its inputs could not be saved: they load only in the tests' "
                                                     "process: ModuleNotFoundError: No module named 'test_ops'"),
        Uncovered("tcrec_pkg.unimported:Hidden", "function", "no test calls it"))
    assert rec.namespaces == ("tcrec",)
    assert rec.processes >= 1
    assert notes.lines[0].startswith("running the test command: ")
    # the probes, in a fresh process, make the tests' calls (the package imported from the command's folder)
    check = ("import sys, torch\nfrom tracecheck.collect import loadfile\n"
             f"m = loadfile.load_module({rec.probe_module!r})\n"
             "import tcrec_pkg\nfrom tcrec_pkg.fns import Cube\n"
             "p = dict(loadfile.find_probes(m))\nprint(sorted(p))\n"
             f"c = p['probe_tcrec__double_{d32}']()\nassert torch.equal(c.fn(*c.args), tcrec_pkg.double(*c.args))\n"
             f"c = p['probe_tcrec_pkg_fns__Cube_{cube}']()\nassert torch.equal(c.fn(*c.args), Cube.apply(*c.args))\n"
             "assert c.args[0].requires_grad\n")
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path / "work")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == f"['probe_tcrec__double_{d32}', 'probe_tcrec__double_{d64}', 'probe_tcrec_pkg_fns__Cube_{cube}']"


@pytest.mark.slow
def test_a_command_that_runs_no_python_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="ran no Python process with tracecheck's recorder"):
        opsaudit.record(["true"], "tcrec_pkg", (), str(tmp_path / "work"))
