"""The ``compiled_autograd`` stage and the compiled-autograd compat shim, on the installed torch.

End-to-end tests run the real CLI (``--stages compiled_autograd``) on small probes written here and compare
with what torch itself does in the compiled autograd tutorial's snippets, measured in a separate process
by ``INDEPENDENT`` (the tutorial's code with its own counters and a handler on the verbose logger), never
with numbers taken from tracecheck. The shared reproducers 24 (recompiles every step), 10 and 22 (warm-up
captures only) pin the steady-state rule.
"""
import ast
import functools
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from tracecheck import compat
from tracecheck.classify import results
from tracecheck.evidence import tracelog
from tracecheck.stages import _compiled_autograd as ca_stage
from tracecheck.model.records import Frame, RecompileRecord

REPO = Path(__file__).resolve().parents[1]
CASES = REPO.parent / "shared" / "cases"
NODE = re.compile(r"new autograd node: (\S+)")
SHAPES_MISS = re.compile(r"^Cache miss due to .*changed")

# ---------------------------------------------------------------------------------------------------------
# Probes (the tutorial's snippets, as tracecheck probes)

PROBES = {
    # Tutorial: "Graph breaks in the forward pass no longer necessarily lead to graph breaks in the backward"
    "tut1_graph_breaks.py": """
        import torch

        def fn(x):
            temp = x + 10
            torch._dynamo.graph_break()
            temp = temp + 10
            torch._dynamo.graph_break()
            return temp.sum()

        def probe():
            return fn, (torch.randn(10, 10, requires_grad=True),)
    """,
    # Tutorial: "Backward hooks can now be captured"
    "tut2_hook.py": """
        import torch

        def fn(x):
            return x.sum()

        def probe():
            x = torch.randn(10, 10, requires_grad=True)
            x.register_hook(lambda grad: grad + 10)
            return fn, (x,)
    """,
    # Tutorial: "Due to changes in the autograd structure of the loss value" (one op per step, eager forward)
    "tut3_op_cycle.py": """
        import torch

        OPS = [torch.add, torch.sub, torch.mul, torch.div]

        class OpCycle:
            def __init__(self):
                self.calls = 0

            @torch.compiler.disable  # eager forward, as in the tutorial: only the backward is compiled
            def __call__(self, x):
                op = OPS[self.calls % len(OPS)]
                self.calls += 1
                return op(x, x).sum()

        def probe():
            return OpCycle(), (torch.randn(10, requires_grad=True),)
    """,
    # Tutorial: "Due to tensors changing shapes" (run with dynamic=True: 10x10, then 100x10, then 10x10)
    "tut4_shapes.py": """
        import torch

        @torch.compiler.disable  # eager forward, as in the tutorial: only the backward is compiled
        def _eager_sum(x):
            return x.sum()

        def fn(x):
            return _eager_sum(x)

        def probe():
            return fn, (torch.randn(10, 10, requires_grad=True),)
    """,
    # The tutorial's note: "It is still possible for the Dynamo to graph break when tracing backward hooks"
    "hook_break.py": """
        import torch

        def hook(grad):
            torch._dynamo.graph_break()
            return grad * 2

        def fn(x):
            return (x * 3).sum()

        def probe():
            x = torch.randn(4, 4, requires_grad=True)
            x.register_hook(hook)
            return fn, (x,)
    """,
    "post_acc_hook.py": """
        import torch

        def fn(x, w):
            return (x * w).sum()

        def halve(p):
            p.grad.mul_(0.5)

        def probe():
            w = torch.randn(4, requires_grad=True)
            w.register_post_accumulate_grad_hook(halve)
            return fn, (torch.randn(3, 4, requires_grad=True), w)
    """,
}

# What torch does with the tutorial's own code (``enable`` renamed ``_enable`` where torch has no ``enable``).
INDEPENDENT = r'''
import json, logging, re, sys
import torch
from torch._dynamo import compiled_autograd as ca
from torch._dynamo.utils import counters

torch.set_num_threads(1)
enable = getattr(ca, "enable", None) or ca._enable
out = {}

class Misses(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.msgs = []
    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Cache miss"):
            self.msgs.append(msg)

misses = Misses()
torch._logging.set_logs(compiled_autograd_verbose=True)
logging.getLogger("torch._dynamo.compiled_autograd").addHandler(misses)

# 1. graph breaks in the forward (tutorial code, counters as the tutorial reads them)
def double_break(x):
    temp = x + 10
    torch._dynamo.graph_break()
    temp = temp + 10
    torch._dynamo.graph_break()
    return temp.sum()

fn = torch.compile(double_break, backend="aot_eager")

x = torch.randn(10, 10, requires_grad=True)
counters.clear()
loss = fn(x)
loss.backward(retain_graph=True)
out["obs1_without"] = counters["stats"]["unique_graphs"]
counters.clear()
with enable(torch.compile(backend="aot_eager")):
    loss.backward()
out["obs1_with"] = counters["stats"]["unique_graphs"]
out["obs1_breaks"] = 2  # the tutorial's two torch._dynamo.graph_break() calls

# 2. backward hooks: the call_hook nodes of the captured graph, read from its code
def hook_types(store):
    def compiler(gm):
        store.extend(re.findall(r"hook_type = '(\w+)'", gm.code))
        return torch.compile(gm, backend="aot_eager")
    return compiler

torch._dynamo.reset()
@torch.compile(backend="aot_eager")
def fn2(x):
    return x.sum()
x = torch.randn(10, 10, requires_grad=True)
x.register_hook(lambda grad: grad + 10)
loss = fn2(x)
seen = []
with enable(hook_types(seen)):
    loss.backward()
out["obs2_hook_types"] = seen
out["obs2_grad_is_11"] = bool((x.grad == 11).all())

torch._dynamo.reset()
def halve(p):
    p.grad.mul_(0.5)
w = torch.randn(4, requires_grad=True)
w.register_post_accumulate_grad_hook(halve)
seen = []
with enable(hook_types(seen)):
    (torch.randn(3, 4) * w).sum().backward()
out["post_acc_hook_types"] = seen

torch._dynamo.reset()
counters.clear()
def breaking_hook(grad):
    torch._dynamo.graph_break()
    return grad * 2
x = torch.randn(4, 4, requires_grad=True)
x.register_hook(breaking_hook)
with enable(torch.compile(backend="aot_eager")):
    (x * 3).sum().backward()
out["hook_break_gb_types"] = [k.splitlines()[0] for k in counters["graph_break"]]

# 3. a new autograd node per op: the tutorial's loop
torch._dynamo.reset()
counters.clear()
misses.msgs.clear()
torch._dynamo.config.compiled_autograd = True
x = torch.randn(10, requires_grad=True)
for op in [torch.add, torch.sub, torch.mul, torch.div]:
    loss = op(x, x).sum()
    torch.compile(lambda: loss.backward(), backend="eager")()
out["obs3_captures"] = counters["compiled_autograd"]["captures"]
out["obs3_misses"] = list(misses.msgs)

# 4. changing shapes: the tutorial's loop
torch._dynamo.reset()
counters.clear()
misses.msgs.clear()
for i in [10, 100, 10]:
    x = torch.randn(i, i, requires_grad=True)
    loss = x.sum()
    torch.compile(lambda: loss.backward(), backend="eager")()
out["obs4_captures"] = counters["compiled_autograd"]["captures"]
out["obs4_misses"] = list(misses.msgs)
torch._dynamo.config.compiled_autograd = False

# 1b. the same forward, three steps with compiled autograd and .grad accumulating (as tracecheck runs it)
torch._dynamo.reset()
counters.clear()
fn_loop = torch.compile(double_break, backend="aot_eager")
x = torch.randn(10, 10, requires_grad=True)
with enable(torch.compile(backend="aot_eager")):
    for _ in range(3):
        fn_loop(x).backward()
out["obs1_loop_captures"] = counters["compiled_autograd"]["captures"]

with open(sys.argv[1], "w") as f:
    json.dump(out, f)
'''


def _run(cmd, timeout=900, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"}, **kw)
    return proc


@pytest.fixture(scope="module")
def independent(tmp_path_factory):
    """The tutorial's snippets run by torch alone, in their own process."""
    d = tmp_path_factory.mktemp("independent")
    (d / "tutorial.py").write_text(INDEPENDENT)
    proc = _run([sys.executable, str(d / "tutorial.py"), str(d / "out.json")], cwd=d)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((d / "out.json").read_text())


@pytest.fixture(scope="module")
def probes_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca_probes")
    for name, src in PROBES.items():
        (d / name).write_text(textwrap.dedent(src))
    return d


@pytest.fixture(scope="module")
def tutorial_report(probes_dir):
    """One real CLI run over the tutorial probes (except the shapes one, which needs dynamic=True)."""
    files = [str(probes_dir / n) for n in PROBES if n != "tut4_shapes.py"]
    out = probes_dir / "report.json"
    proc = _run([sys.executable, "-m", "tracecheck", "run", *files, "--stages", "compiled_autograd",
                 "--json", str(out), "-j", "1"], cwd=probes_dir)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    return {Path(p["file"]).name: p["stages"]["compiled_autograd"] for p in report["probes"]}


@pytest.fixture(scope="module")
def cases_report(tmp_path_factory, shared_cases):
    files = [CASES / f"{n}.py" for n in ("10_ca_custom_op_backward_inline", "22_module_setattr_in_forward",
                                         "24_ca_step_counter_new_node")]
    for f in files:
        assert f.is_file(), f"shared reproducer missing: {f}"
    out = tmp_path_factory.mktemp("ca_cases") / "report.json"
    proc = _run([sys.executable, "-m", "tracecheck", "run", *map(str, files), "--stages", "compiled_autograd",
                 "--json", str(out), "-j", "1"], cwd=REPO)
    assert proc.returncode == 1, proc.stderr[-3000:]  # case 24 fails
    report = json.loads(out.read_text())
    return {Path(p["file"]).stem.split("_")[0]: p for p in report["probes"]}


def _kinds(stage):
    return {f["kind"] for f in stage["findings"]}


def _expected(case: str) -> dict:
    path = next(CASES.glob(f"{case}_*.py"))
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXPECTED":
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} has no EXPECTED")


# ---------------------------------------------------------------------------------------------------------
# The tutorial's four observations, end to end


@pytest.mark.slow
def test_graph_breaks_three_forward_graphs_one_backward_graph(tutorial_report, independent):
    s = tutorial_report["tut1_graph_breaks.py"]
    e = s["extra"]
    assert independent["obs1_without"] == 3 and independent["obs1_with"] == 1  # the tutorial's 3 -> 1
    assert e["unique_graphs_without_ca"] == independent["obs1_without"]
    assert e["graph_breaks_without_ca"] == independent["obs1_breaks"]
    # every captured backward compiles to one graph; 3 steps with .grad accumulating capture twice
    assert e["captures"] == independent["obs1_loop_captures"]
    assert e["backward_graphs_per_capture"] == [independent["obs1_with"]] * e["captures"]
    assert e["unique_graphs_with_ca"] == independent["obs1_with"] * e["captures"]
    assert e["backward_graph_breaks"] == 0
    assert "recompile" not in _kinds(s)  # the second capture is warm-up
    assert not any(f["kind"] == "numeric-mismatch" for f in s["findings"])


@pytest.mark.slow
def test_tensor_pre_hook_is_captured_into_the_graph(tutorial_report, independent):
    s = tutorial_report["tut2_hook.py"]
    e = s["extra"]
    assert independent["obs2_grad_is_11"]  # the hook ran: grad of sum is 1, plus 10
    expected_types = {t: independent["obs2_hook_types"].count(t) for t in set(independent["obs2_hook_types"])}
    assert expected_types == {"tensor_pre_hook": 1}
    assert e["hooks"]["in_graph"] == expected_types
    assert e["hooks"]["registered"]["register_hook"] == 1
    assert e["hooks_captured"] == 1
    assert s["status"] == "pass", s["findings"]  # gradients (hook included) equal eager's


@pytest.mark.slow
def test_post_accumulate_grad_hook_is_captured(tutorial_report, independent):
    s = tutorial_report["post_acc_hook.py"]
    expected_types = {t: independent["post_acc_hook_types"].count(t) for t in set(independent["post_acc_hook_types"])}
    assert expected_types == {"post_acc_grad_hook": 1}
    assert s["extra"]["hooks"]["in_graph"] == expected_types
    assert s["extra"]["hooks"]["registered"]["register_post_accumulate_grad_hook"] == 1
    assert s["status"] == "pass", s["findings"]


@pytest.mark.slow
def test_hook_can_still_break_the_backward_graph(tutorial_report, independent):
    s = tutorial_report["hook_break.py"]
    assert independent["hook_break_gb_types"], "torch itself no longer breaks on graph_break() in a hook"
    assert s["extra"]["hooks_captured"] == 1
    assert s["extra"]["backward_graph_breaks"] >= 1
    assert {b["gb_type"] for b in s["breaks"]} == set(independent["hook_break_gb_types"])
    assert "graph-break" in _kinds(s)
    assert max(s["extra"]["backward_graphs_per_capture"]) > 1  # the break splits the backward


@pytest.mark.slow
def test_new_autograd_node_per_step_recompiles(tutorial_report, independent):
    s = tutorial_report["tut3_op_cycle.py"]
    e = s["extra"]
    # torch: one capture per op (4), each later one "new autograd node: <op>Backward0"
    assert independent["obs3_captures"] == 4
    expected_nodes = [NODE.search(m).group(1) for m in independent["obs3_misses"][1:]]
    assert expected_nodes == ["SubBackward0", "MulBackward0", "DivBackward0"]
    # tracecheck: 3 steps, then 2 confirmation steps because step 3 still recompiled; a capture every step
    assert e["steps"] == 3 + ca_stage.CONFIRM_STEPS
    assert e["captures"] == e["steps"] and e["captures_per_step"] == [1] * e["steps"]
    got = [r for r in e["recompiles"] if r["source"] == "compiled_autograd"]
    assert [NODE.search(r["reason"]).group(1) for r in got][:3] == expected_nodes
    assert [r["step"] for r in got] == [2, 3, 4, 5]
    recompile = [f for f in s["findings"] if f["kind"] == "recompile"]
    assert len(recompile) == 1, s["findings"]  # one cause: a new node every step
    assert recompile[0]["context"]["source"] == "compiled_autograd"
    assert recompile[0]["evidence"]["steps"] == [3, 4, 5]
    assert "MulBackward0" in recompile[0]["context"]["reason"]


def _stage_via_cli(probe_file: Path, *options: str) -> dict:
    """The compiled_autograd stage entry of one real CLI run on ``probe_file``."""
    out = probe_file.with_suffix(".stage.json")
    proc = _run([sys.executable, "-m", "tracecheck", "run", str(probe_file), "--stages", "compiled_autograd",
                 "-j", "1", "--json", str(out), *options], cwd=probe_file.parent)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads(out.read_text())["probes"][0]["stages"]["compiled_autograd"]


@pytest.mark.slow
def test_changing_shapes_recompile_with_reasons(probes_dir, independent):
    s = _stage_via_cli(probes_dir / "tut4_shapes.py", "--dynamic", "--steps", "3")
    e = s["extra"]
    assert e["schedule"] == ["A", "A", "A", "B", "A"]
    assert e["shapes"] == {"A": [[10, 10]], "B": [[100, 10]]}
    # torch, in the tutorial's loop: a capture on the first shape change, reported as changed shapes
    assert independent["obs4_captures"] == 2
    assert any(SHAPES_MISS.search(m) for m in independent["obs4_misses"]), independent["obs4_misses"]
    at_b = [r for r in e["recompiles"] if r["step"] == 4]
    assert any(r["source"] == "compiled_autograd" and SHAPES_MISS.search(r["reason"]) for r in at_b), at_b
    assert all(r["reason"] for r in e["recompiles"])
    assert "recompile" not in _kinds(s)  # a shape change is not a steady-state recompile


@pytest.mark.slow
def test_static_run_has_no_shape_phase(probes_dir):
    s = _stage_via_cli(probes_dir / "tut4_shapes.py")
    assert s["extra"]["steps"] == 3 and "schedule" not in s["extra"]
    assert not any(SHAPES_MISS.search(r["reason"]) for r in s["extra"]["recompiles"])


# ---------------------------------------------------------------------------------------------------------
# Shared reproducers: steady state vs warm-up


@pytest.mark.slow
def test_case24_recompiles_every_step(cases_report):
    assert _expected("24")["kind"] == "recompile"
    s = cases_report["24"]["stages"]["compiled_autograd"]
    assert "recompile" in _kinds(s)
    assert _kinds(s) <= {"recompile"}
    # EXPECTED notes: "3 captures in 3 steps (8 in 8)": one per step; step 3 recompiled, so 2 more ran
    assert s["extra"]["steps"] == 3 + ca_stage.CONFIRM_STEPS
    assert s["extra"]["captures"] == s["extra"]["steps"]
    line = next(i for i, text in enumerate((CASES / "24_ca_step_counter_new_node.py").read_text().splitlines(), 1)
                if text.strip() == "self.step += 1")
    dynamo = [f for f in s["findings"] if f["kind"] == "recompile" and f["context"]["source"] == "dynamo"]
    assert dynamo and dynamo[0]["evidence"]["user_frame"]["line"] == line
    assert dynamo[0]["evidence"]["user_frame"]["file"].endswith("24_ca_step_counter_new_node.py")
    assert "self.step" in dynamo[0]["context"]["reason"]
    assert dynamo[0]["evidence"]["steps"] == [3, 4, 5]
    steady_ca = [r for r in s["extra"]["recompiles"] if r["source"] == "compiled_autograd" and r["step"] == 3]
    assert steady_ca and "new autograd node" in steady_ca[0]["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["10", "22"])
def test_warmup_captures_are_not_a_recompile_finding(cases_report, case):
    exp = _expected(case)
    s = cases_report[case]["stages"]["compiled_autograd"]
    assert "recompile" not in _kinds(s)
    assert _kinds(s) <= {k for k in (exp["kind"], *exp["also"]) if k != "pass"}
    assert s["extra"]["captures"] == 2  # EXPECTED notes: 2 captures in 3 steps
    assert all(r["step"] <= ca_stage.WARMUP_STEPS for r in s["extra"]["recompiles"])
    if exp["kind"] == "pass":
        assert s["status"] == "pass", s["findings"]


@pytest.mark.slow
def test_json_stage_entry_counts_what_plain_torch_counts(cases_report, tmp_path):
    e = cases_report["24"]["stages"]["compiled_autograd"]["extra"]
    # the oracle: case 24's own probe, the same number of steps, counted by torch alone in a fresh process
    script = tmp_path / "plain24.py"
    script.write_text(f"""
import importlib.util, json, sys
import torch
from torch._dynamo import compiled_autograd as ca
from torch._dynamo.utils import counters
spec = importlib.util.spec_from_file_location("case24", {str(CASES / "24_ca_step_counter_new_node.py")!r})
case = importlib.util.module_from_spec(spec); spec.loader.exec_module(case)
enable = getattr(ca, "enable", None) or ca._enable
steps = {e["steps"]}
fn, args = case.probe()
compiled = torch.compile(fn, backend="aot_eager")
counters.clear()
for _ in range(steps):
    compiled(*args).sum().backward()
without = counters["stats"]["unique_graphs"]
torch._dynamo.reset(); counters.clear()
fn, args = case.probe()
compiled = torch.compile(fn, backend="aot_eager")
with enable(torch.compile(backend="aot_eager")):
    for _ in range(steps):
        compiled(*args).sum().backward()
print(json.dumps({{"without": without, "captures": counters["compiled_autograd"]["captures"]}}))
""")
    proc = _run([sys.executable, str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain = json.loads(proc.stdout.strip().splitlines()[-1])
    assert e["unique_graphs_without_ca"] == plain["without"]
    assert e["captures"] == plain["captures"] == e["steps"]  # a new autograd node on every step
    assert e["recompile_count"] == len(e["recompiles"]) and all(r["reason"] for r in e["recompiles"])


# ---------------------------------------------------------------------------------------------------------
# The shim, on the installed torch


def test_shim_path_on_installed_torch():
    from torch._dynamo import compiled_autograd as ca

    # documented in compat.compiled_autograd: 2.13 and 2.14 (the versions CI runs) have only the private name
    assert hasattr(ca, "_enable") and not hasattr(ca, "enable")


@pytest.mark.slow
def test_shim_turns_compiled_autograd_on_only_inside(monkeypatch):
    from torch._dynamo import compiled_autograd as ca
    from torch._dynamo.utils import counters

    name = "_enable" if hasattr(ca, "_enable") else "enable"
    calls = []
    real = getattr(ca, name)

    @functools.wraps(real)  # keeps the signature the shim inspects
    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ca, name, spy)
    graphs = []

    def compiler(gm):
        graphs.append(gm)
        return torch.compile(gm, backend="eager")

    try:
        torch._dynamo.reset()
        before = counters["compiled_autograd"]["captures"]
        x = torch.randn(4, requires_grad=True)
        with compat.compiled_autograd(compiler):
            (x * 2).sum().backward()
        assert counters["compiled_autograd"]["captures"] == before + 1
        assert len(graphs) == 1 and isinstance(graphs[0], torch.fx.GraphModule)
        assert torch.equal(x.grad, torch.full((4,), 2.0))
        (x * 2).sum().backward()  # outside: plain autograd
        assert counters["compiled_autograd"]["captures"] == before + 1
        if name == "_enable":
            assert calls == [{"dynamic": False}]  # static start, as the config flag with torch.compile
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
def test_config_flag_path_needs_backward_inside_the_compiled_function():
    from torch._dynamo.utils import counters

    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)

    def train():
        lin(x).sum().backward()

    try:
        torch._dynamo.reset()
        counters.clear()
        with torch._dynamo.config.patch(compiled_autograd=True):
            torch.compile(train, backend="eager")()
        assert counters["compiled_autograd"]["captures"] == 1
        # the doc's claim, on 2.13 and 2.14: backward() is a graph break (GB0123)
        assert any(k.startswith("Unsupported Tensor.backward() call") for k in counters["graph_break"])
    finally:
        torch._dynamo.reset()


def test_log_artifacts_enabled_restores_state():
    from torch._logging._internal import log_state

    assert not log_state.is_artifact_enabled("compiled_autograd_verbose")
    with compat.log_artifacts_enabled("compiled_autograd_verbose"):
        assert log_state.is_artifact_enabled("compiled_autograd_verbose")
    assert not log_state.is_artifact_enabled("compiled_autograd_verbose")


# ---------------------------------------------------------------------------------------------------------
# Pure parts: reasons, steady state, findings (recorded 2.13 payloads)

DYNAMO_2_13 = (
    "0/1: self.step == 1                                           # self.step += 1  # shared/cases/24_ca_step_"
    "counter_new_node.py:25 in forward (HINT: torch.compile considers integer attributes of the nn.Module to be "
    "static.)\nUser stack trace:\n  File \"/work/shared/cases/24_ca_step_counter_new_node.py\", line 25, in "
    "forward\n    self.step += 1")
CA_2_13 = ("!2: Cache miss due to new autograd node: CompiledFunctionBackward (NodeCall 3) with key size 142, "
           "previous key sizes=[142,142]")


def test_reason_parsing():
    assert tracelog._payload_list(DYNAMO_2_13) == [DYNAMO_2_13]  # a single reason comes unencoded
    assert tracelog._payload_list(json.dumps([CA_2_13, "x"])) == [CA_2_13, "x"]
    assert tracelog._clean(CA_2_13).startswith("Cache miss due to new autograd node: CompiledFunctionBackward")
    assert tracelog._clean(DYNAMO_2_13).startswith("self.step == 1  # self.step += 1")
    frame = tracelog._guard_user_frame(DYNAMO_2_13).to_dict()
    assert frame == {"file": "/work/shared/cases/24_ca_step_counter_new_node.py", "line": 25,
                     "function": "forward", "code": "self.step += 1"}
    older = DYNAMO_2_13.split("\nUser stack trace:")[0]  # no user stack: the guard's own comment
    assert tracelog._guard_user_frame(older).line == 25


def _rec(step, source="compiled_autograd", reason=None, user_frame=None):
    return RecompileRecord(reason or f"Cache miss due to new autograd node: X with key size {step}", step, source,
                           user_frame=Frame.from_dict(user_frame))


def test_steady_state_needs_a_recompile_on_every_step_after_warmup():
    assert ca_stage.WARMUP_STEPS == 2
    assert ca_stage.steady_state([_rec(1), _rec(2)], 3) == []  # warm-up only (cases 10, 22)
    assert ca_stage.steady_state([_rec(2), _rec(3)], 3) == [_rec(3)]  # case 24
    assert ca_stage.steady_state([_rec(3)], 4) == []  # step 4 ran clean: it settled
    assert ca_stage.steady_state([_rec(3), _rec(4, "dynamo", "x == 4")], 4) == [_rec(3), _rec(4, "dynamo", "x == 4")]
    assert ca_stage.steady_state([_rec(2)], 2) == []


def test_recompile_findings_group_one_cause_over_steps():
    frame = {"file": "m.py", "line": 7, "function": "forward", "code": "self.step += 1"}
    recs = [_rec(3), _rec(4), _rec(3, "dynamo", "self.step == 1", user_frame=frame),
            _rec(4, "dynamo", "self.step == 2", user_frame=frame)]
    found = results.recompile_findings(recs)
    assert [f.context.source for f in found] == ["dynamo", "compiled_autograd"]  # the user's line first
    ev = found[0].evidence.to_json()  # the report's JSON of it, against the literal
    assert (ev["what"], ev["user_frame"], ev["reason"], ev["steps"], ev["reasons"]) == (
        "recompile", frame, "self.step == 1", [3, 4], ["self.step == 1", "self.step == 2"])
    assert found[1].evidence.steps == (3, 4)
    other_node = [_rec(3), _rec(4, reason="Cache miss due to new autograd node: Y with key size 9")]
    assert len(results.recompile_findings(other_node)) == 1  # a new node every step is one cause
    shapes = [_rec(3), _rec(4, reason="Cache miss due to 2 changed tensor shapes (total of 2): sizes[0]")]
    assert len(results.recompile_findings(shapes)) == 2
    assert all(f.kind == "recompile" and f.context.reason in f.summary for f in found)


def test_build_stage_result_turns_steady_state_into_findings_and_keeps_extra():
    raw = {"error": None, "breaks": [], "warnings": [], "mismatches": [], "graph_count": 2,
           "steady_state_recompiles": [_rec(3)],
           "extra": {"captures": 3, "unique_graphs_with_ca": 3, "recompiles": [_rec(2).to_wire(), _rec(3).to_wire()]}}
    r = results.build_stage_result("compiled_autograd", raw, 1.0)
    assert r.status == "fail" and [f.kind for f in r.findings] == ["recompile"]
    assert r.extra["captures"] == 3 and len(r.extra["recompiles"]) == 2
    clean = results.build_stage_result("compiled_autograd", {**raw, "steady_state_recompiles": []}, 1.0)
    assert clean.status == "pass"
    assert asdict(clean)["extra"]["unique_graphs_with_ca"] == 3


# ---------------------------------------------------------------------------------------------------------
# The backend: named, and a failure checked with the other one before it is called the model's (issue 27)


def _refuses_backward_graphs(gm, example_inputs):
    """A backend that compiles forward graphs as aot_eager does and raises on compiled autograd's backward graphs
    (Dynamo's graph of a captured backward takes compiled autograd's ``inputs`` list): a backend bug of one
    backend, the case plain torch shows as "fails with aot_eager, passes with inductor"."""
    from torch._dynamo.backends.registry import lookup_backend

    if any(n.op == "placeholder" and "inputs" in n.name for n in gm.graph.nodes):
        raise RuntimeError("tc test backend: cannot compile this backward graph")
    return lookup_backend("aot_eager")(gm, example_inputs)


def _linear_case():
    from tracecheck.model.probe import Case

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    return Case(lin, (torch.randn(2, 8, requires_grad=True),))


@pytest.fixture
def refusing_backend():
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    names = ("tc_refuses_backward", "tc_refuses_backward_too")
    for name in names:
        register_backend(functools.partial(_refuses_backward_graphs), name=name)
    yield names[0]
    for name in names:
        _COMPILER_FNS.pop(name, None)
        _BACKENDS.pop(name, None)


def test_a_failure_of_one_backend_only_is_that_backends(refusing_backend):
    # the oracle, plain torch: the refusing backend fails under compiled autograd, aot_eager passes
    for backend, fails in ((refusing_backend, True), ("aot_eager", False)):
        torch._dynamo.reset()
        case = _linear_case()
        try:
            with compat.compiled_autograd(lambda gm, b=backend: torch.compile(gm, backend=b)):
                torch.compile(case.fn, backend=backend)(*case.args).sum().backward()
            raised = False
        except Exception as e:
            raised = "cannot compile this backward graph" in str(e)
        assert raised == fails, backend
    torch._dynamo.reset()

    raw = ca_stage.stage_compiled_autograd(_linear_case, backends=(refusing_backend, "aot_eager"))
    assert raw.extra["backend"] == refusing_backend
    assert raw.extra["other_backend"] == {"backend": "aot_eager", "error": None}
    s = results.build_stage_result("compiled_autograd", raw, 1.0)
    f = s.findings[0]
    assert (f.kind, f.context.cause) == ("backend-error", "backend_only")
    assert "fails with backend tc_refuses_backward and passes with aot_eager" in f.summary
    assert f.evidence.backends["aot_eager"] == "passes"
    assert "cannot compile this backward graph" in f.evidence.backends[refusing_backend]


def test_a_failure_of_both_backends_stays_unclassified_and_says_so(refusing_backend):
    other = refusing_backend + "_too"
    raw = ca_stage.stage_compiled_autograd(_linear_case, backends=(refusing_backend, other))
    assert raw.extra["other_backend"]["error"]["type"] == "torch._dynamo.exc.BackendCompilerFailed"
    f = results.build_stage_result("compiled_autograd", raw, 1.0).findings[0]
    assert f.context.cause != "backend_only"
    assert "cannot compile this backward graph" in f.evidence.backends[refusing_backend]
    assert f.evidence.backends[other] == "the same"


def test_the_default_backend_is_named_in_the_record():
    raw = ca_stage.stage_compiled_autograd(_linear_case)
    assert raw.extra["backend"] == "aot_eager" and "other_backend" not in raw.extra
