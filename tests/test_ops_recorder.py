"""tracecheck ops's recorder (collect/opsrecord.py): what a test command's Python process writes, and that the
process behaves as without it. Oracles: the values and outputs of the same script run without the recorder, torch
itself, hand-written literals."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import tracecheck.collect.opsrecord as opsrecord
from tracecheck.collect.opsrecord import environment, install, sitecustomize_source

PKG = "tcrec_lib"

LIBRARY = '''
import torch
from torch import Tensor


@torch.library.custom_op("tcrec_lib::scale", mutates_args=())
def scale(x: Tensor, k: float) -> Tensor:
    return x * k


@scale.register_fake
def _(x, k):
    return torch.empty_like(x)


@torch.library.custom_op("tcrec_lib::unused", mutates_args=())
def unused(x: Tensor) -> Tensor:
    return x.clone()


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


@torch.library.custom_op("tcrec_lib::twice", mutates_args=())
def twice(x: Tensor) -> Tensor:
    return x + 1


@torch.library.custom_op("tcrec_lib::twice", mutates_args=())
def twice(x: Tensor, y: Tensor) -> Tensor:
    return x + y
'''

# two eager calls of scale with one signature, one with another; then the same ops in a compiled graph: not calls
SCRIPT = '''
import os
import sys

import torch
import tcrec_lib

x = torch.arange(6.0).reshape(2, 3)
w = torch.ones(3, requires_grad=True)
print(tcrec_lib.scale(x, 2.0).tolist())
print(torch.ops.tcrec_lib.scale(x, 2.0).tolist())
print(tcrec_lib.scale(torch.ones(4), 3.0).tolist())
y = tcrec_lib.Square.apply(w)
y.sum().backward()
print(y.tolist(), w.grad.tolist())
print(tcrec_lib.twice(x, x).tolist())
f = torch.compile(lambda t: tcrec_lib.scale(t, 2.0) + tcrec_lib.Square.apply(t), fullgraph=True, backend=sys.argv[1])
print(f(x).tolist(), f(x + 1).tolist())
print(sorted(m for m in sys.modules if m.startswith("tcrec_lib")))
print(os.getpid(), file=sys.stderr)
'''


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The site folder with the recorder's sitecustomize, the record folder, and a folder holding the library."""
    site, record, lib = tmp_path / "site", tmp_path / "record", tmp_path / "lib"
    site.mkdir()
    lib.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize_source())
    return site, record, lib


def _pythonpath(*dirs: Path) -> str:
    """``dirs``, then this process's PYTHONPATH (where tracecheck may come from)."""
    return os.pathsep.join([*map(str, dirs), *filter(None, [os.environ.get("PYTHONPATH")])])


def _run(script: Path, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def _records(record: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in record.glob("process-*.json")}


def test_environment_literal() -> None:
    env = environment("/w/record", "pkg", ["a", "b"], "/w/site", {"PYTHONPATH": "/x:/y", "HOME": "/h"})
    assert env == {"PYTHONPATH": f"/w/site{os.pathsep}/x:/y", "HOME": "/h", "TRACECHECK_OPS_OUT": "/w/record",
                   "TRACECHECK_OPS_PACKAGE": "pkg", "TRACECHECK_OPS_NAMESPACES": "a,b"}
    assert environment("/r", "pkg", [], "/s", {})["PYTHONPATH"] == "/s"
    assert environment("/r", "pkg", [], "/s", {})["TRACECHECK_OPS_NAMESPACES"] == ""


# Inductor's compiled graph calls the op from its own output code, aot_eager's from an FX graph: neither is a call
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_library_calls_recorded_and_outputs_unchanged(tmp_path: Path, backend: str) -> None:
    site, record, lib = _setup(tmp_path)
    (lib / PKG).mkdir()
    (lib / PKG / "__init__.py").write_text(LIBRARY)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACECHECK_OPS_")}
    base.update(PYTHONPATH=_pythonpath(lib), PYTEST_CURRENT_TEST="tests/test_lib.py::test_scale (call)")

    plain = _run(script, base, tmp_path, backend)
    assert plain.returncode == 0, plain.stderr
    recorded = _run(script, environment(str(record), PKG, [], str(site), base), tmp_path, backend)
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == plain.stdout  # the same results, compiled ones included
    assert "tracecheck ops" not in recorded.stderr

    rec = _records(record)[int(recorded.stderr.strip().splitlines()[-1])]
    assert rec["package"] == PKG and rec["modules"] == [PKG]
    assert rec["compiled_only"] == []  # the compiled graph's scale was called eagerly too
    calls = {(c["target"], c["signature"]): c for c in rec["calls"]}
    assert set(calls) == {("tcrec_lib::scale.default", "f32[2d]@cpu, 2.0"),
                          ("tcrec_lib::scale.default", "f32[1d]@cpu, 3.0"),
                          ("tcrec_lib:Square", "f32[1d]@cpu+grad"),
                          ("tcrec_lib::twice.default", "f32[2d]@cpu, f32[2d]@cpu")}
    scale = calls[("tcrec_lib::scale.default", "f32[2d]@cpu, 2.0")]
    # the two eager calls (the custom_op object's and the packet's); the compiled graph's two are not counted
    assert (scale["what"], scale["calls"], scale["shapes"]) == ("op", 2, [[[2, 3]]])
    assert scale["test"] == "tests/test_lib.py::test_scale" and scale["why_not"] is None
    args, kwargs = torch.load(record / scale["inputs"], weights_only=False)
    assert torch.equal(args[0], torch.arange(6.0).reshape(2, 3)) and args[1] == 2.0 and kwargs == {}

    square = calls[("tcrec_lib:Square", "f32[1d]@cpu+grad")]
    assert (square["what"], square["calls"], square["shapes"]) == ("function", 1, [[[3]]])
    (w,), _ = torch.load(record / square["inputs"], weights_only=False)
    assert torch.equal(w, torch.ones(3)) and w.requires_grad and w.grad is None  # as the script passed it

    ops = {o["name"]: o for o in rec["ops"]}
    assert set(ops) == {"tcrec_lib::scale", "tcrec_lib::unused", "tcrec_lib::twice"}
    assert ops["tcrec_lib::unused"]["schema"] == "tcrec_lib::unused(Tensor x) -> Tensor"
    assert ops["tcrec_lib::unused"]["frame"]["line"] == 16  # the decorator's line in LIBRARY
    assert [(f["target"], f["frame"]["line"], f["frame"]["code"]) for f in rec["functions"]] == \
        [("tcrec_lib:Square", 21, "class Square(torch.autograd.Function):")]
    [redefined] = rec["redefinitions"]
    assert (redefined["op"], redefined["first_schema"], redefined["second_schema"]) == \
        ("tcrec_lib::twice", "tcrec_lib::twice(Tensor x) -> Tensor", "tcrec_lib::twice(Tensor x, Tensor y) -> Tensor")
    assert (redefined["first_frame"]["line"], redefined["second_frame"]["line"]) == (33, 38)


def _recorded(tmp_path: Path, source: str) -> tuple[dict, Path]:
    """Run ``source`` with LIBRARY importable and the recorder on; its record (the pid it prints last on stderr) and
    the record folder."""
    site, record, lib = _setup(tmp_path)
    (lib / PKG).mkdir()
    (lib / PKG / "__init__.py").write_text(LIBRARY)
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source) + "\nimport os, sys\nprint(os.getpid(), file=sys.stderr)\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACECHECK_OPS_")}
    base["PYTHONPATH"] = _pythonpath(lib)
    done = _run(script, environment(str(record), PKG, [], str(site), base), tmp_path)
    assert done.returncode == 0 and "tracecheck ops" not in done.stderr, done.stderr
    return _records(record)[int(done.stderr.strip().splitlines()[-1])], record


def test_find_spec_before_import_still_records(tmp_path: Path) -> None:
    # transformers' is_torch_available asks find_spec before anything imports torch
    rec, _ = _recorded(tmp_path, """
        import importlib.util
        assert importlib.util.find_spec("torch") is not None and importlib.util.find_spec("torch") is not None
        import torch
        import tcrec_lib
        tcrec_lib.scale(torch.ones(2), 2.0)
    """)
    assert [(c["target"], c["signature"], c["calls"]) for c in rec["calls"]] == \
        [("tcrec_lib::scale.default", "f32[1d]@cpu, 2.0", 1)]


def test_op_called_only_compiled_is_compiled_only(tmp_path: Path) -> None:
    rec, record = _recorded(tmp_path, """
        import torch
        import tcrec_lib
        f = torch.compile(lambda t: tcrec_lib.scale(t, 2.0) + 1, backend="aot_eager")
        assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    """)
    assert (rec["calls"], rec["compiled_only"]) == ([], ["tcrec_lib::scale.default"])
    assert not (record / "inputs").exists()


def test_other_namespace_not_counted_nor_saved(tmp_path: Path) -> None:
    # tcrec_other is not the package's: its op runs, and leaves neither a call nor a saved input
    rec, record = _recorded(tmp_path, """
        import torch
        import tcrec_lib

        @torch.library.custom_op("tcrec_other::add", mutates_args=())
        def add(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        assert add(torch.zeros(2)).tolist() == [1.0, 1.0]
        assert torch.ops.tcrec_other.add(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]
        tcrec_lib.scale(torch.ones(2), 2.0)
    """)
    assert [c["target"] for c in rec["calls"]] == ["tcrec_lib::scale.default"]
    assert len(list((record / "inputs").iterdir())) == 1  # the package's one call


def test_no_torch_process_writes_empty_record(tmp_path: Path) -> None:
    site, record, _ = _setup(tmp_path)
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint('torch' in sys.modules)\n")
    done = _run(script, environment(str(record), PKG, ["other_ns"], str(site), dict(os.environ)), tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "False\n", "")
    [rec] = _records(record).values()
    assert rec == {"pid": rec["pid"], "package": PKG, "calls": [], "ops": [], "functions": [], "modules": [],
                   "redefinitions": [], "compiled_only": [], "roots": []}


def test_next_sitecustomize_still_runs(tmp_path: Path) -> None:
    site, record, _ = _setup(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('the user sitecustomize ran', __name__)\n")
    script = tmp_path / "plain.py"
    script.write_text("print('script')\n")
    env = environment(str(record), PKG, [], str(site), {**os.environ, "PYTHONPATH": _pythonpath(other)})
    done = _run(script, env, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "the user sitecustomize ran sitecustomize\nscript\n", "")
    assert len(_records(record)) == 1  # and the recorder ran too
    # without the recorder's environment, nothing but the user's sitecustomize
    plain = _run(script, {**os.environ, "PYTHONPATH": _pythonpath(site, other)}, tmp_path)
    assert plain.stdout == done.stdout and len(_records(record)) == 1


# -- in this process --------------------------------------------------------------------------------------------

INPROC = "tcrec_inproc"


@torch.library.custom_op("tcrec_inproc::mul", mutates_args=())
def _mul(x: torch.Tensor, k: float) -> torch.Tensor:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return x * k


@_mul.register_fake
def _(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.empty_like(x)


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _under_mode(x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    with _Seen() as seen:
        out = _mul(x, 2.0)
    return out, seen.ops


def _error(fn) -> tuple[type, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as e:
        fn()
    return e.type, str(e.value)


@pytest.fixture
def recorder(tmp_path: Path):  # type: ignore[no-untyped-def]
    originals = (torch._ops.OpOverload.__call__, torch._ops.OpOverloadPacket.__call__,
                 torch.autograd.Function.__dict__["apply"], torch.library.Library.define)
    rec = install(str(tmp_path / "record"), INPROC, [])
    try:
        yield rec
    finally:
        rec.uninstall()
    assert (torch._ops.OpOverload.__call__, torch._ops.OpOverloadPacket.__call__,
            torch.autograd.Function.__dict__["apply"], torch.library.Library.define) == originals


def test_in_process_transparent(recorder: opsrecord.Recorder) -> None:
    # the oracles: the same calls without the recorder
    recorder.uninstall()
    x = torch.randn(3, 4)
    plain_out, plain_ops = _under_mode(x.clone())
    plain_error = _error(lambda: _mul(x, -1.0))
    recorder.install()

    out, ops = _under_mode(x.clone())
    assert torch.equal(out, plain_out)
    assert ops == plain_ops  # the user's own mode does not see the recorder's copies
    assert _error(lambda: _mul(x, -1.0)) == plain_error
    with FakeTensorMode() as mode:  # torch's tracing: not a call
        _mul(mode.from_tensor(x), 2.0)
    calls = {(c.target, c.signature): c.calls for c in recorder.record().calls}
    assert calls == {("tcrec_inproc::mul.default", "f32[2d]@cpu, 2.0"): 1,
                     ("tcrec_inproc::mul.default", "f32[2d]@cpu, -1.0"): 1}
    [first] = [c for c in recorder.record().calls if c.signature.endswith("2.0")]
    assert first.test == f"tests/test_ops_recorder.py::{test_in_process_transparent.__name__}"
    path = recorder.write()
    assert path == os.path.join(recorder.record_dir, f"process-{os.getpid()}.json")
    assert json.loads(Path(path).read_text())["calls"][0]["target"] == "tcrec_inproc::mul.default"


torch.library.define("tcrec_inproc::pair", "(Tensor x) -> Tensor")
torch.library.define("tcrec_inproc::pair.two", "(Tensor x, int n) -> Tensor")
torch.library.impl("tcrec_inproc::pair", "CompositeExplicitAutograd", func=lambda x: x + 1)
torch.library.impl("tcrec_inproc::pair.two", "CompositeExplicitAutograd", func=lambda x, n: x + n)


def test_packet_call_records_the_overload_it_runs(recorder: opsrecord.Recorder) -> None:
    x = torch.zeros(2, dtype=torch.int64)
    assert torch.ops.tcrec_inproc.pair(x, 3).tolist() == [3, 3]  # the .two overload ran
    assert torch.ops.tcrec_inproc.pair(x).tolist() == [1, 1]
    assert torch.ops.tcrec_inproc.pair.two(x, n=4).tolist() == [4, 4]
    assert {(c.target, c.signature) for c in recorder.record().calls} == {
        ("tcrec_inproc::pair.two", "i64[1d]@cpu, 3"), ("tcrec_inproc::pair.default", "i64[1d]@cpu"),
        ("tcrec_inproc::pair.two", "i64[1d]@cpu, n=4")}
    assert [o.name for o in recorder.record().ops if o.name.endswith("pair")] == ["tcrec_inproc::pair"]
    [pair] = [o for o in recorder.record().ops if o.name.endswith("pair")]
    assert pair.schema == "tcrec_inproc::pair(Tensor x) -> Tensor"  # the default overload's


def test_recorder_failure_leaves_the_call_alone(recorder: opsrecord.Recorder, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.arange(4.0)
    plain = x * 3.0

    def broken(*a: object) -> None:
        raise RuntimeError("recorder bug\nsecond line")

    monkeypatch.setattr(opsrecord, "describe", broken)
    assert torch.equal(_mul(x, 3.0), plain)
    assert torch.equal(torch.ops.tcrec_inproc.mul(x, 3.0), plain)
    assert _error(lambda: _mul(x, -1.0)) == (ValueError, "k must be >= 0, got -1.0")
    err = capsys.readouterr().err
    assert err == "tracecheck ops: the recorder failed and goes on (RuntimeError: recorder bug)\n"  # once
    monkeypatch.undo()

    def unsaveable(*a: object, **k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", unsaveable)
    assert torch.equal(_mul(x, 3.0), plain)
    [call] = recorder.record().calls
    assert (call.calls, call.inputs, call.why_not) == (1, None, "OSError: disk full")


def test_a_call_with_grad_mode_off_is_recorded_as_it_could_differentiate(recorder: opsrecord.Recorder) -> None:
    """Inside an autograd.Function's forward (grad mode off) an op cannot differentiate, whatever its inputs'
    requires_grad says: its recorded signature and saved inputs say so too, or its probe would ask for a backward no
    user's call takes (optimum-quanto's qbytes_mm inside WeightQBytesLinearFunction)."""
    x = torch.randn(2, 3, requires_grad=True)
    with torch.no_grad():
        _mul(x, 2.0)
    _mul(x, 3.0)
    calls = {c.signature: c for c in recorder.record().calls}
    assert set(calls) == {"f32[2d]@cpu, 2.0", "f32[2d]@cpu+grad, 3.0"}
    (saved_no_grad, _), _ = torch.load(os.path.join(recorder.record_dir, str(calls["f32[2d]@cpu, 2.0"].inputs)),
                                     weights_only=False)
    (saved_grad, _), _ = torch.load(os.path.join(recorder.record_dir, str(calls["f32[2d]@cpu+grad, 3.0"].inputs)),
                                    weights_only=False)
    assert (saved_no_grad.requires_grad, saved_grad.requires_grad) == (False, True)
    assert torch.equal(saved_no_grad, x.detach())


def test_a_tensor_subclass_input_is_saved_as_its_own_type(recorder: opsrecord.Recorder) -> None:
    """A traceable wrapper subclass (optimum-quanto's packed weights) whose ``clone`` would give a plain tensor is
    saved as itself: torch's TwoTensor, the subclass PyTorch's own tests use, is the oracle's type."""
    from torch.testing._internal.two_tensor import TwoTensor

    t = TwoTensor(torch.ones(2, 3), torch.full((2, 3), 2.0))
    _mul(t, 2.0)
    [call] = recorder.record().calls
    (saved, _), _ = torch.load(os.path.join(recorder.record_dir, str(call.inputs)), weights_only=False)
    assert type(saved) is TwoTensor
    assert torch.equal(saved.a, torch.ones(2, 3)) and torch.equal(saved.b, torch.full((2, 3), 2.0))


@torch.library.custom_op("tcrec_inproc::positive", mutates_args=())
def _positive(x: torch.Tensor) -> torch.Tensor:
    if (x < 0).any():
        raise ValueError("negative input")
    return x.sqrt()


def test_an_error_path_call_leaves_no_inputs_and_the_next_call_records_its_own(recorder: opsrecord.Recorder) -> None:
    """A test of an error path (the op raised) is no probe: its inputs are dropped, and the next call with the same
    signature saves its own; a signature whose every call raised says so."""
    with pytest.raises(ValueError):
        _positive(-torch.ones(3))
    [call] = recorder.record().calls
    assert (call.inputs, call.why_not) == (None, "every call the tests made with these inputs raised (a test of an "
                                                 "error path?): ValueError: negative input")
    assert os.listdir(os.path.join(recorder.record_dir, "inputs")) == []
    good = torch.full((3,), 4.0)
    _positive(good)
    [call] = recorder.record().calls
    assert call.why_not is None and call.calls == 2
    (saved,), _ = torch.load(os.path.join(recorder.record_dir, str(call.inputs)), weights_only=False)
    assert torch.equal(saved, good)
