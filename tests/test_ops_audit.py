"""Issue 56 end to end: ``tracecheck ops`` on an operator library audited from its own tests.

Two libraries, each driven by a test command that calls its ops in eager mode and passes:

* tcopslib (tests/opslib), installed as a real package (``pip install --target``), run by its own pytest suite: a
  pybind11 kernel behind an autograd.Function, a custom op without a fake, one without autograd, one whose
  ``mutates_args`` is wrong, a correct one, and one no test calls;
* the mHC ops of probes/ (``--package mhc``), run by tests/mhc/test_mhc_ops_calls.py.

Every verdict is checked in the same test against plain torch on the inputs the recorder saved (the report's
``ops.entries[].call.inputs``, relative to the record folder): ``torch.library.opcheck`` (which of its tests fail),
eager forward and backward, and ``torch.compile(fullgraph=True)`` forward and backward with backend ``aot_eager``
(what tracecheck's fullgraph stage uses: Dynamo, fake tensors and AOTAutograd, without inductor's C++ builds). For the
mHC ops, also against ``tracecheck run probes/mhc_probes.py``: the hand-written probe of the same op.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch.utils import _pytree as pytree

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
OPSLIB = REPO / "tests" / "opslib"
PROBES = REPO / "probes"
MHC_CALLS = REPO / "tests" / "mhc" / "test_mhc_ops_calls.py"
FIX_ORACLE = REPO / "tests" / "fix_oracle.py"


def _env(*paths: Path) -> dict[str, str]:
    pythonpath = [str(p) for p in paths] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(pythonpath)}


def _pytest(target: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target)]


@dataclass(frozen=True)
class Audit:
    """One ``tracecheck ops`` run: its exit code and output, its --json report, the folder it ran in."""

    returncode: int
    output: str
    report: dict
    cwd: Path

    @property
    def ops(self) -> dict:
        return self.report["ops"]

    @property
    def record(self) -> Path:
        """The record folder: ``<work>/record``, beside the generated probe module."""
        return self.cwd / self.ops["record_dir"]

    def entries(self, target: str) -> list[dict]:
        return [e for e in self.ops["entries"] if e["call"]["target"] == target]

    def kinds(self, entry: dict) -> list[str]:
        (probe,) = [p for p in self.report["probes"] if p["id"] == entry["probe_id"]]
        return sorted(probe["verdict"]["kinds"])

    def inputs(self, entry: dict) -> tuple[tuple, dict]:
        args, kwargs = torch.load(self.record / entry["call"]["inputs"], weights_only=False)
        return tuple(args), dict(kwargs)


def _audit(cwd: Path, package: str, command: list[str], env: dict[str, str]) -> Audit:
    cwd.mkdir(parents=True, exist_ok=True)
    out = cwd / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "ops", "--package", package, "--json", str(out), "--",
                           *command], capture_output=True, text=True, cwd=cwd, env=env, timeout=1500)
    assert out.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return Audit(proc.returncode, proc.stdout + proc.stderr, json.loads(out.read_text()), cwd)


# ---- the plain-torch oracle ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plain:
    """What plain torch says of one recorded call."""

    #: opcheck's failing tests and their errors (an op; empty for an autograd.Function, which opcheck does not take)
    opcheck: dict[str, str]
    #: the error of an eager forward and backward (sum of the outputs that require grad), None: it ran
    eager: str | None
    #: the same under torch.compile(fullgraph=True, backend="aot_eager")
    fullgraph: str | None

    def kinds(self) -> set[str]:
        """The kind each failure is, by torch's own wording (documented messages of torch.library and Dynamo)."""
        kinds = set()
        if "not defined as mutable but was mutated" in self.opcheck.get("test_schema", ""):
            kinds.add("mutates-args-mismatch")
        if "no fake impl" in self.opcheck.get("test_faketensor", ""):
            kinds.add("missing-fake")
        if any("no autograd formula was registered" in (e or "") for e in (*self.opcheck.values(), self.eager)):
            kinds.add("missing-autograd")
        if "marked as skipped" in (self.fullgraph or "") and "pybind11" in (self.fullgraph or ""):
            kinds.add("pybind-builtin")
        return kinds


def _fresh(tree: Any) -> Any:
    """A copy of recorded inputs, so that one check's in-place writes or gradients reach no other."""
    return pytree.tree_map(lambda t: t.detach().clone().requires_grad_(t.requires_grad)
                           if isinstance(t, torch.Tensor) else t, tree)


def _fwd_bwd(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str | None:
    try:
        out = fn(*args, **kwargs)
        grads = [t.sum() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        if grads:
            torch.stack(grads).sum().backward()
    except Exception as e:  # noqa: BLE001 - the oracle reports what plain torch raised
        return f"{type(e).__name__}: {e}"
    return None


def _callable(call: dict) -> Callable[..., Any]:
    """``ns::name.overload`` -> the OpOverload; ``module:Qualname`` -> the Function's ``apply``."""
    if call["what"] == "op":
        qualified, overload = call["target"].rsplit(".", 1)
        ns, name = qualified.split("::")
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    module, qualname = call["target"].split(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found.apply


def plain(call: dict, args: tuple, kwargs: dict) -> Plain:
    fn = _callable(call)
    failed: dict[str, str] = {}
    if call["what"] == "op":
        result = torch.library.opcheck(fn, *_fresh((args, kwargs)), raise_exception=False)
        failed = {test: f"{type(e).__name__}: {e}" for test, e in result.items() if e != "SUCCESS"}
    eager = _fwd_bwd(fn, *_fresh((args, kwargs)))
    torch._dynamo.reset()
    try:
        fullgraph = _fwd_bwd(torch.compile(fn, backend="aot_eager", fullgraph=True), *_fresh((args, kwargs)))
    finally:
        torch._dynamo.reset()
    return Plain(failed, eager, fullgraph)


def _summary(text: str) -> str:
    """pytest's closing count (``9 passed``, ``1 failed, 8 passed``), without the seconds."""
    return re.findall(r"^(\d+ (?:passed|failed).*?) in [\d.]+s", text, re.M)[-1]


# ---- tcopslib, installed, audited from its own suite ---------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    site: Path  #: the --target folder the package was installed into
    tests: Path  #: its own test suite (a copy of tests/opslib/tests, beside the copied source)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("opslib")
    # pip builds in the source folder (build/, *.egg-info): build a copy, so that the clone stays clean
    src = root / "tcopslib-src"
    shutil.copytree(OPSLIB, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(src)], check=True, capture_output=True, timeout=600)
    # the suite must import the installed package, not the copied source: src/ is never on its path
    assert (site / "tcopslib" / "ops.py").exists() and not (src / "tcopslib").exists()
    return Installed(site, src / "tests")


@pytest.fixture(scope="module")
def opslib_audit(installed, tmp_path_factory) -> Audit:
    return _audit(tmp_path_factory.mktemp("opslib_audit"), "tcopslib", _pytest(installed.tests),
                  _env(installed.site))


@pytest.fixture(scope="module")
def tcopslib(installed):
    """The installed package imported here too, so that plain torch can call its ops on the recorded inputs."""
    sys.path.insert(0, str(installed.site))
    try:
        return importlib.import_module("tcopslib")
    finally:
        sys.path.remove(str(installed.site))


def test_the_suites_own_result_is_reported_beside(opslib_audit, installed, tmp_path):
    own = subprocess.run(_pytest(installed.tests), capture_output=True, text=True, cwd=tmp_path,
                         env=_env(installed.site), timeout=600)
    command = opslib_audit.ops["command"]
    assert own.returncode == 0, own.stdout[-3000:]  # tcopslib's suite passes: its ops work in eager
    assert command["exit_code"] == own.returncode
    assert _summary(command["tail"]) == _summary(own.stdout)
    assert _summary(own.stdout).startswith("9 passed")  # the suite's 9 tests (tests/opslib/tests)
    assert "exited 0" in opslib_audit.output
    assert opslib_audit.returncode == 1  # tracecheck's own verdict: the broken registrations fail
    assert opslib_audit.ops["processes"] == 1 and opslib_audit.ops["namespaces"] == ["tcopslib"]


def test_calls_are_deduplicated_by_signature_with_their_first_inputs(opslib_audit):
    a = opslib_audit
    # the suite (tests/opslib/tests/test_tcopslib.py) calls bias_gelu with grad at two sizes, and once without
    by_signature = {e["call"]["signature"]: e for e in a.entries("tcopslib::bias_gelu.default")}
    grad = by_signature["f32[2d]@cpu+grad, f32[1d]@cpu+grad"]
    no_grad = by_signature["f32[2d]@cpu, f32[1d]@cpu"]
    # each id suffixed by its signature's sha1 (docs/usage.md), whatever order the tests ran in
    assert (grad["probe_id"], no_grad["probe_id"]) == (
        "ops::tcopslib::bias_gelu@" + hashlib.sha1(b"f32[2d]@cpu+grad, f32[1d]@cpu+grad").hexdigest()[:6],
        "ops::tcopslib::bias_gelu@" + hashlib.sha1(b"f32[2d]@cpu, f32[1d]@cpu").hexdigest()[:6])
    assert grad["call"]["calls"] == 2
    assert grad["call"]["shapes"] == [[[4, 8], [8]], [[3, 16], [16]]]
    assert no_grad["call"]["signature"] == "f32[2d]@cpu, f32[1d]@cpu"
    # ScaledAdd at ranks 2 and 3: two signatures
    assert sorted(e["call"]["signature"] for e in a.entries("tcopslib.scaled:ScaledAdd")) == [
        "f32[2d]@cpu+grad, f32[2d]@cpu+grad, 0.5", "f32[3d]@cpu+grad, f32[3d]@cpu+grad, 0.5"]
    # the inputs are the test's own (seeded), saved before the kernel wrote into them, requires_grad kept
    (l2,) = a.entries("tcopslib::l2_normalize.default")
    (x,), _ = a.inputs(l2)
    assert torch.equal(x, torch.randn(4, 8, generator=torch.Generator().manual_seed(0)))
    (swiglu,) = a.entries("tcopslib::swiglu.default")
    args, _ = a.inputs(swiglu)
    assert [t.requires_grad for t in args] == [True, True]
    assert swiglu["call"]["test"].endswith("test_tcopslib.py::test_swiglu")


#: each target of tcopslib -> the kinds of its entries (a hand-written probe of the op gives these)
OPSLIB_EXPECTED = {
    "tcopslib.scaled:ScaledAdd": ["pybind-builtin"],
    "tcopslib::swiglu.default": ["missing-fake"],
    "tcopslib::rms_norm.default": ["missing-autograd"],
    "tcopslib::l2_normalize.default": ["mutates-args-mismatch"],
    "tcopslib::bias_gelu.default": [],
}


def test_every_called_target_is_checked(opslib_audit):
    assert {e["call"]["target"] for e in opslib_audit.ops["entries"]} == set(OPSLIB_EXPECTED)


@pytest.mark.parametrize("target", sorted(OPSLIB_EXPECTED))
def test_each_verdict_agrees_with_plain_torch(opslib_audit, tcopslib, target):
    entries = opslib_audit.entries(target)
    assert entries
    for entry in entries:
        said = plain(entry["call"], *opslib_audit.inputs(entry))
        assert opslib_audit.kinds(entry) == OPSLIB_EXPECTED[target], (entry["probe_id"], said)
        assert sorted(said.kinds()) == OPSLIB_EXPECTED[target], (entry["probe_id"], said)
        if not OPSLIB_EXPECTED[target]:  # the correct op: every opcheck test passes, and it compiles whole
            assert said == Plain({}, None, None)
        if target == "tcopslib.scaled:ScaledAdd":
            assert said.eager is None and said.fullgraph.startswith("Unsupported")  # eager works, compile cannot


def test_the_op_no_test_calls_is_not_covered(opslib_audit, installed, tcopslib):
    assert "rope_rotate" not in (installed.tests / "test_tcopslib.py").read_text()  # no test names it
    x, cos, sin = torch.randn(2, 8), torch.randn(2, 4), torch.randn(2, 4)  # the library defines it, and it works
    torch.testing.assert_close(torch.ops.tcopslib.rope_rotate(x, cos, sin),
                               torch.cat((x[:, :4] * cos - x[:, 4:] * sin, x[:, :4] * sin + x[:, 4:] * cos), -1))
    assert opslib_audit.ops["not_covered"] == [{"target": "tcopslib::rope_rotate", "what": "op",
                                                 "why": "no test calls it"}]
    assert not opslib_audit.entries("tcopslib::rope_rotate.default")
    assert "not covered: tcopslib::rope_rotate (op): no test calls it" in opslib_audit.output


_FIXED_OPCHECK = """
import importlib.util, json, sys, torch
import tcopslib
spec = importlib.util.spec_from_file_location("fixed", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
args, kwargs = torch.load(sys.argv[2], weights_only=False)
result = torch.library.opcheck(torch.ops.tcopslib.swiglu.default, args, kwargs, raise_exception=False)
print(json.dumps({test: "SUCCESS" if e == "SUCCESS" else f"{type(e).__name__}: {e}" for test, e in result.items()}))
"""


def test_fix_of_the_nofake_entry_as_the_report_suggests(opslib_audit, installed):
    """The command the report's "next:" block gives for the op without a fake, run as printed."""
    (line,) = [ln.strip() for ln in opslib_audit.output.splitlines()
               if ln.strip().startswith("tracecheck fix ") and "probe_tcopslib__swiglu_" in ln]
    argv = shlex.split(line)
    proc = subprocess.run([sys.executable, "-m", "tracecheck", *argv[1:]], capture_output=True, text=True,
                          cwd=opslib_audit.cwd, env=_env(installed.site), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fixed = opslib_audit.cwd / argv[argv.index("-o") + 1]
    patched = opslib_audit.cwd / argv[argv.index("--patched") + 1]
    # plain opcheck on the fixed registration, at the recorded inputs: every test passes now
    (entry,) = opslib_audit.entries("tcopslib::swiglu.default")
    check = subprocess.run([sys.executable, "-c", _FIXED_OPCHECK, str(fixed),
                            str(opslib_audit.record / entry["call"]["inputs"])],
                           capture_output=True, text=True, env=_env(installed.site), timeout=600)
    assert check.returncode == 0, check.stderr[-3000:]
    assert set(json.loads(check.stdout.splitlines()[-1]).values()) == {"SUCCESS"}, check.stdout
    # and the patched probe compiles whole, with the original's eager outputs and gradients (tests/fix_oracle.py)
    oracle = subprocess.run([sys.executable, str(FIX_ORACLE), str(opslib_audit.cwd / opslib_audit.ops["probe_module"]),
                             str(patched), entry["probe"]], capture_output=True, text=True,
                            env=_env(installed.site), timeout=600)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    assert json.loads(oracle.stdout.splitlines()[-1]) == {"fullgraph": "ok", "outputs_equal": True,
                                                          "grads_equal": True, "grads": 2}


# ---- the mHC ops of probes/, audited from tests/mhc/test_mhc_ops_calls.py --------------------------------------


@pytest.fixture(scope="module")
def mhc_audit(tmp_path_factory) -> Audit:
    # the test file imports probes/mhc as `mhc` (tests/mhc/conftest.py puts probes/ on sys.path); the generated
    # probe module imports it by that name too, so probes/ goes on PYTHONPATH
    return _audit(tmp_path_factory.mktemp("mhc_audit"), "mhc", _pytest(MHC_CALLS), _env(PROBES))


@pytest.fixture(scope="module")
def mhc_hand(tmp_path_factory) -> dict[str, list[str]]:
    """``tracecheck run`` on the hand-written op-level probes of probes/mhc_probes.py: probe name -> kinds."""
    out = tmp_path_factory.mktemp("mhc_hand") / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(PROBES / "mhc_probes.py"), "-k", "not model",
                           "--json", str(out)], capture_output=True, text=True, cwd=out.parent, timeout=1200)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {p["name"]: sorted(p["verdict"]["kinds"]) for p in json.loads(out.read_text())["probes"]}


@pytest.fixture(scope="module")
def mhc():
    if str(PROBES) not in sys.path:  # as tests/mhc/conftest.py does: one `mhc` module, whoever imports it first
        sys.path.insert(0, str(PROBES))
    return importlib.import_module("mhc.broken")  # mhc registers the fixed ops, mhc.broken the broken ones


#: each mHC target -> (the hand-written probe of probes/mhc_probes.py that calls it, or None; the kinds of its
#: entries). The *_backward ops have no probe of their own: test_mhc_ops_calls.py calls them (directly, and from the
#: forward ops' backward); plain torch alone is their oracle.
MHC_EXPECTED: dict[str, tuple[str | None, list[str]]] = {
    "cann_ops_transformer::mhc_pre_sinkhorn.default": ("probe_fixed", []),
    "cann_ops_transformer::mhc_post.default": ("probe_fixed", []),
    "cann_ops_transformer::mhc_pre_sinkhorn_backward.default": (None, []),
    "cann_ops_transformer::mhc_post_backward.default": (None, []),
    "mhc_broken_nofake::mhc_pre_sinkhorn.default": ("probe_missing_fake", ["missing-fake", "wrong-gradient"]),
    "mhc_broken_nofake::mhc_post.default": ("probe_missing_fake", ["missing-fake"]),
    # called by the forward ops' autograd formulas during the backward pass, where grad mode is off (no double
    # backward): recorded as calls that cannot differentiate, so no autograd formula is asked of them
    "mhc_broken_nofake::mhc_pre_sinkhorn_backward.default": (None, ["missing-fake"]),
    "mhc_broken_nofake::mhc_post_backward.default": (None, ["missing-fake"]),
    "mhc_broken_noautograd::mhc_pre_sinkhorn.default": ("probe_missing_autograd", ["missing-autograd"]),
    "mhc_broken_noautograd::mhc_post.default": ("probe_missing_autograd", ["missing-autograd"]),
    "mhc.broken:MhcPreSinkhornFunction": ("probe_autograd_function", ["pybind-builtin"]),
    "mhc.broken:MhcPostFunction": ("probe_autograd_function", ["pybind-builtin"]),
}


def test_mhc_every_op_and_function_is_checked(mhc_audit, tmp_path):
    ops = mhc_audit.ops
    assert {e["call"]["target"] for e in ops["entries"]} == set(MHC_EXPECTED)
    assert ops["not_covered"] == []
    assert ops["namespaces"] == ["cann_ops_transformer", "mhc_broken_noautograd", "mhc_broken_nofake"]
    own = subprocess.run(_pytest(MHC_CALLS), capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert ops["command"]["exit_code"] == own.returncode == 0
    assert _summary(ops["command"]["tail"]) == _summary(own.stdout)


@pytest.mark.parametrize("target", sorted(MHC_EXPECTED))
def test_mhc_verdicts_agree_with_the_hand_written_probe_and_plain_torch(mhc_audit, mhc_hand, mhc, target):
    hand, expected = MHC_EXPECTED[target]
    entries = mhc_audit.entries(target)
    assert entries
    for entry in entries:
        said = plain(entry["call"], *mhc_audit.inputs(entry))
        assert mhc_audit.kinds(entry) == expected, (entry["probe_id"], said)
        # what plain opcheck and compile see, tracecheck names; the rest (the wrong gradient of outputs 3-7 of the
        # no-fake pre op) the hand-written probe of the same op found too
        assert said.kinds() <= set(expected), (entry["probe_id"], said)
        assert set(expected) - said.kinds() <= set(mhc_hand.get(hand or "", [])), (entry["probe_id"], said)
        if hand is not None:
            assert set(expected) <= set(mhc_hand[hand])
            assert bool(expected) == bool(mhc_hand[hand])  # a probe that passes, an entry that passes
