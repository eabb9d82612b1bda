"""Issue 3 end to end: ``tracecheck run probes/`` tells the whole mHC story on the CPU.

Expected verdicts come from the failure mechanisms (issue 3 §4; torch_failure_wording.md §5): the
autograd.Function wrapper that calls pybind11 breaks at Dynamo (explain), the custom op without a fake
impl fails when Dynamo fake-runs it (explain), the custom op without an autograd formula fails at eager
backward, and the fixed registration passes every stage.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

EXPECTED = {
    # (kinds that fail the probe: the compile target; kinds of the targets not required: vmap is func, export is
    # export; the first failing stage)
    # CANN's autograd.Functions take ctx in forward (the old form), which torch.func.grad refuses: the vmap stage
    "probe_autograd_function": (["pybind-builtin"], ["functorch-incompatible"], "explain"),
    # variant (b)'s backward takes *_rest and drops the gradients of outputs 3-7, which it does not mark
    # non-differentiable (probes/mhc/broken.py): a second defect, found by the gradcheck stage; export has no fake either
    "probe_missing_fake": (["missing-fake", "wrong-gradient"], ["missing-fake"], "explain"),
    "probe_missing_autograd": (["missing-autograd"], [], "eager"),
    "probe_model_autograd_function": (["pybind-builtin"], ["functorch-incompatible"], "explain"),
    "probe_model_missing_fake": (["missing-fake", "wrong-gradient"], ["missing-fake"], "explain"),
    "probe_model_missing_autograd": (["missing-autograd"], [], "eager"),
}
FIXED = ("probe_fixed", "probe_model_fixed")


@pytest.fixture(scope="module")
def probes_json(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mhc") / "probes.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "probes/", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the broken registrations fail
    return out


@pytest.fixture(scope="module")
def probes_report(probes_json):
    return {p["name"]: p for p in json.loads(probes_json.read_text())["probes"]}


# --- the report on a real terminal (issue 40): a pty of each width, the screen read back -------------------------

def _screen(args: list[str], width: int) -> list[str]:
    """What ``tracecheck ARGS`` prints on a terminal ``width`` columns wide (a pty: rich measures it, as in a
    user's terminal), escape sequences removed, one string per screen line."""
    import fcntl
    import os
    import pty
    import re
    import struct
    import termios

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"TERM": "xterm-256color"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty, sized before tracecheck starts
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
        os.chdir(REPO)
        os.execvpe(sys.executable, [sys.executable, "-m", "tracecheck", *args], env)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    text = re.sub(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_report_fits_a_terminal_of_any_width_with_every_probe_and_kind_whole(probes_json, width):
    from rich.cells import cell_len

    doc = json.loads(probes_json.read_text())
    screen = _screen(["show", str(probes_json), "--format", "terminal"], width)
    # a next: command is printed whole (soft wrap: the terminal folds it; copied, it is one line); all else fits
    wide = [ln for ln in screen if cell_len(ln) > width and not ln.startswith("    tracecheck ")]
    assert wide == []
    text = "\n".join(screen)
    for p in doc["probes"]:  # every probe named whole in the verdict view
        assert re.search(rf"(?m)^\S?\s*[✓✗!⏱]?\s*{p['name']}\b", text), (width, p["name"])
    found = {f["kind"] for p in doc["probes"] for s in p["stages"].values() for f in s["findings"]}
    assert found >= {"pybind-builtin", "missing-fake", "missing-autograd", "wrong-gradient"}  # hand-written
    for kind in found:
        assert re.search(rf"(?<![\w-]){re.escape(kind)}(?![\w-])", text), (width, kind)
    assert not re.search(r"[\w-]…", text), "nothing cut inside a word"
    # short by default: one block per root cause, not one per probe and stage; -v has everything
    assert text.count("✗ pybind-builtin  probes/mhc/broken.py:53") == 1
    long = _screen(["show", str(probes_json), "--format", "terminal", "-v"], width)
    assert len(screen) * 3 < len(long)


@pytest.mark.slow
def test_every_probe_is_there(probes_report):
    assert set(probes_report) == set(EXPECTED) | set(FIXED)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_registration_kind_and_first_failing_stage(probes_report, name):
    kinds, not_required, stage = EXPECTED[name]
    v = probes_report[name]["verdict"]
    assert v["kinds"] == kinds
    assert v["not_required"] == not_required
    assert v["first_failing_stage"] == stage


@pytest.mark.slow
@pytest.mark.parametrize("name", FIXED)
def test_fixed_registration_passes_every_stage(probes_report, name):
    stages = probes_report[name]["stages"]
    assert probes_report[name]["verdict"]["status"] == "pass"
    assert set(stages) == {"eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck",
                           "compiled_autograd", "gradcheck", "dynamic", "vmap", "export"}
    assert all(s["status"] == "pass" for s in stages.values()), {k: s["status"] for k, s in stages.items()}
    # advice only: Inductor calls the ops as extern kernels; fixed.py's batching rules leave vmap nothing to say
    assert probes_report[name]["verdict"]["advice"] == ["opaque-op"]
    assert {f["kind"] for s in stages.values() for f in s["findings"]} == {"opaque-op"}
    assert stages["vmap"]["extra"]["vmap"]["vmap"] == "matches"
    assert stages["explain"]["graph_break_count"] == 0
    assert set(stages["opcheck"]["extra"]["opcheck"]) >= {"cann_ops_transformer.mhc_pre_sinkhorn.default",
                                                          "cann_ops_transformer.mhc_post.default"}
    # the fixed ops' float32 backward against the central difference, and the batch dimension kept symbolic
    grad = stages["gradcheck"]["extra"]["gradcheck"]
    assert {grad[op]["status"] for op in ("cann_ops_transformer.mhc_pre_sinkhorn.default",
                                           "cann_ops_transformer.mhc_post.default")} == {"SUCCESS"}
    assert "float32" in grad["cann_ops_transformer.mhc_post.default"]["method"]
    assert stages["dynamic"]["extra"]["dynamic"]["symbolic"] is True


@pytest.mark.slow
def test_the_dropped_output_gradients_of_the_broken_backward_are_named(probes_report):
    """broken.py's variant (b) ignores the gradients of mhc_pre_sinkhorn's outputs 3-7; the numerical derivative
    along a direction through output 3 alone is nonzero, the registered backward's is exactly 0."""
    f = probes_report["probe_missing_fake"]["stages"]["gradcheck"]["failure"]
    assert f["kind"] == "wrong-gradient" and f["context"]["op"] == "mhc_broken_nofake::mhc_pre_sinkhorn"
    assert f["evidence"]["output"].startswith("output 3") and f["evidence"]["analytical"] == 0.0
    assert abs(f["evidence"]["numerical"]) > f["evidence"]["tolerance"]


@pytest.mark.slow
def test_pybind_builtin_names_the_mhc_extension_function(probes_report):
    full = probes_report["probe_autograd_function"]["stages"]["fullgraph"]["failure"]
    assert full["context"]["in_autograd_function"] is True
    assert "pybind11_detail_function_record" in full["context"]["builtin"]
    assert full["context"]["builtin"].endswith(".mhc_pre_sinkhorn")


@pytest.mark.slow
def test_missing_ops_are_named(probes_report):
    fake = probes_report["probe_missing_fake"]["stages"]["explain"]["failure"]
    assert "mhc_pre_sinkhorn" in fake["context"]["op"]
    autograd = probes_report["probe_missing_autograd"]["stages"]["eager"]["failure"]
    assert autograd["evidence"]["phase"] == "backward"
    assert "mhc" in autograd["context"]["op"]


# ---- the same probes on the emulated NPU (issue 24): the CANN way, kernels registered for PrivateUse1 ----------


@pytest.fixture(scope="module")
def npu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("mhc_npu") / "probes.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", "probes/", "--emulate-npu", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_emulated_npu_gives_the_cpu_runs_kinds(probes_report, npu_report):
    env = npu_report["environment"]
    assert (env["device"], env["emulated"]) == ("npu", True)
    npu = {p["name"]: p for p in npu_report["probes"]}
    assert set(npu) == set(probes_report)
    for name, cpu_probe in probes_report.items():
        for stage, on_cpu in cpu_probe["stages"].items():
            on_npu = npu[name]["stages"][stage]
            if stage == "inductor":  # Inductor has no code generator for the device: not checked, no finding
                assert on_npu["status"] == "skip" and "no code generator for device npu" in on_npu["skip_reason"]
                continue
            assert (on_npu["status"], sorted(f["kind"] for f in on_npu["findings"])) == \
                (on_cpu["status"], sorted(f["kind"] for f in on_cpu["findings"])), (name, stage)
    for name, (kinds, not_required, stage) in EXPECTED.items():
        assert npu[name]["verdict"]["kinds"] == kinds
        assert npu[name]["verdict"]["first_failing_stage"] == stage
    for name in FIXED:  # every stage the device supports passes
        assert npu[name]["verdict"]["status"] == "pass"
        assert {s: r["status"] for s, r in npu[name]["stages"].items() if s != "inductor"} == \
            {s: "pass" for s in npu[name]["stages"] if s != "inductor"}
