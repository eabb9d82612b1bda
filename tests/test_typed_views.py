"""The typed views renderers read instead of dict keys (issue 39): a report's environment (model/environment.py),
``tracecheck fix``'s task results (fix/task_results.py) and a numeric comparison's record (model/evidence.py).
Oracles: dicts written by hand in the shape their writers give them; a missing key reads as the default and a
value of the wrong shape as missing."""
import dataclasses
import io
import json

from rich.console import Console

from report_factory import small_report
from tracecheck import machine
from tracecheck.fix.outcome import SiteOutcome, Tried
from tracecheck.fix.pipeline import VERIFIED, FixOutcome
from tracecheck.fix.task_results import FunctionFix, GradientCheck, MutatesArgs, OpShapes
from tracecheck.model.environment import Environment
from tracecheck.model.evidence import NumericMismatch, WorstTensor
from tracecheck.model.report import RunReport
from tracecheck.render import fix as fix_render
from tracecheck.render import junit, markdown, terminal

NO_NPU = {"installed": False, "available": False, "error": "torch_npu is not installed"}


# --- Environment -------------------------------------------------------------------------------------------------

def test_every_key_the_environment_writer_writes_is_a_field():
    """machine.collect writes the dict, gate/shards adds the merged keys, api adds collect_env: each is read."""
    written = set(machine.collect("npu", emulated=True, npu=NO_NPU)) | {
        "collect_env", "merged_torch_versions", "merged_rootdirs"}
    assert written == {f.name for f in dataclasses.fields(Environment)} - {"collect_env_error"}


def test_environment_reads_a_cpu_run():
    env = Environment.of({"torch": "2.13.0+cpu", "python": "3.11.7", "platform": "Linux-x", "machine": "x86_64",
                          "device": "cpu", "emulated": False, "cuda_available": False, "cuda": None,
                          "torch_npu": None, "npu_available": False, "cann": None,
                          "npu_note": "torch_npu is not installed",
                          "collect_env": {"torch_version": "2.13.0", "is_cuda_available": False, "os": None}})
    assert (env.torch, env.python, env.device, env.emulated, env.cuda, env.torch_npu, env.npu_available) == \
        ("2.13.0+cpu", "3.11.7", "cpu", False, None, None, False)
    assert env.npu_note == "torch_npu is not installed" and env.device_text == "cpu"
    assert env.collect_env == {"torch_version": "2.13.0", "is_cuda_available": "False"}  # a null field: not there
    assert env.collect_env_error is None and env.merged_torch_versions == ()


def test_environment_missing_keys_read_as_defaults():
    assert Environment.of({}) == Environment()
    assert Environment.of(None) == Environment() and Environment.of(["cpu"]) == Environment()
    assert Environment().device_text == "?"


def test_environment_values_of_the_wrong_shape_read_as_missing():
    env = Environment.of({"torch": ["2.13"], "device": {"x": 1}, "emulated": "yes", "npu_available": "false",
                          "cuda": "", "collect_env": "gcc 12", "merged_torch_versions": "2.13.0",
                          "merged_rootdirs": [1, "/w"]})
    assert (env.torch, env.device, env.emulated, env.npu_available, env.cuda) == (None, None, False, None, None)
    assert env.collect_env == {} and env.merged_torch_versions == ()  # never a string's characters
    assert env.merged_rootdirs == ("1", "/w")


def test_environment_collect_env_error_and_emulated_device():
    env = Environment.of({"device": "npu", "emulated": True, "device_label": machine.EMULATED_NPU,
                          "collect_env": {"error": "torch.utils.collect_env failed: OSError: gcc"}})
    assert env.collect_env == {} and env.collect_env_error == "torch.utils.collect_env failed: OSError: gcc"
    assert env.device_text == "npu: emulated NPU (PrivateUse1 on CPU memory)"
    assert Environment.of({"device": "npu", "emulated": True}).device_text == "npu: emulated"  # never the real one


def test_the_report_keeps_its_environment_dict_and_reads_it_typed():
    r = small_report()
    r.environment["merged_torch_versions"] = ["2.12.0", "2.13.0"]
    assert r.env.torch == "2.13.0+cpu" and r.env.merged_torch_versions == ("2.12.0", "2.13.0")
    before = json.loads(json.dumps(r.environment))
    d = r.to_dict()
    assert d["environment"] == before and "collect_env_error" not in d["environment"]  # the dict, as written
    assert RunReport.from_dict(json.loads(json.dumps(d))).env == r.env


def test_renderers_show_a_hand_edited_environment_without_failing():
    r = small_report()
    r.environment.clear()
    r.environment.update({"torch": None, "device": "cuda:1", "merged_torch_versions": "2.13.0",
                          "torch_npu": "2.6.0", "npu_available": True})
    env = markdown.render(r, home="/home/alice").split("## Verdicts")[0]
    assert "| torch | ? |" in env and "| device | cuda:1 |" in env and "merged from torch" not in env
    assert "| torch_npu | 2.6.0 (NPU available: True) |" in env and "| CANN | unknown |" in env
    assert terminal.environment_line(r).plain == "torch None · Python None · device cuda:1 · torch_npu 2.6.0"
    props = {p.get("name"): p.get("value") for p in junit.to_element(r).iter("property")}
    assert props["device"] == "cuda:1" and "torch" not in props


# --- tracecheck fix's records ------------------------------------------------------------------------------------

def _wire(record):
    """A record as it comes back from a task process: its dict through JSON."""
    return json.loads(json.dumps(dataclasses.asdict(record)))


def test_fix_records_read_back_what_a_task_returns():
    fn = FunctionFix("Swish", "m", "forward and backward custom ops generated", ("out: a TODO",), ("out 2*x",),
                     MutatesArgs(("x",), ()), 3, ("x at rank 3",))
    ops = OpShapes("ns::op", ("x.size(0) 4->7",), (("x at rank 3", "test_faketensor", "RuntimeError: no"),),
                   ("x.size(1) 16->19",), ("x at rank 4",))
    assert FunctionFix.of(_wire(fn)) == fn and OpShapes.of(_wire(ops)) == ops
    # a custom op's entry (fix.analysis._op_entry): no mutates_args, no refused
    op = FunctionFix.of({"function": "ns::op", "module": "custom op", "action": "register_fake generated",
                         "todo": [], "check": ["out0 size(0) = x.size(0)"], "runs": 4})
    assert op.mutates_args is None and op.refused == () and op.check == ("out0 size(0) = x.size(0)",)


def test_fix_records_missing_and_wrong_shaped_values():
    assert FunctionFix.of({}) == FunctionFix("?") and OpShapes.of(None) == OpShapes("?")
    fn = FunctionFix.of({"function": "F", "todo": "finish it", "mutates_args": ["x"], "runs": True})
    assert fn.todo == () and fn.mutates_args is None and fn.runs is None
    assert not MutatesArgs() and MutatesArgs(backward=("g0",))
    ops = OpShapes.of({"op": "ns::op", "failed": [["only", "two"], ["a", "t", "m"]], "checked": "x.size(0)"})
    assert ops.failed == (("a", "t", "m"),) and ops.checked == ()


def test_gradient_check_reads_a_check_a_skip_and_an_error():
    g = GradientCheck.of({"analytic": 1.5, "numeric": 1.5000001, "ok": True})
    assert g.ran and g.ok and g.analytic == 1.5
    assert not GradientCheck.of({"skip": "no float input"}).ran
    assert GradientCheck.of({"skip": "no float input"}).skip == "no float input"
    failed = GradientCheck.of({"error": {"phase": "backward", "type": "RuntimeError", "message": "x"}})
    assert not failed.ran and not failed.ok
    assert GradientCheck.of({"analytic": "1.5", "numeric": None, "ok": "yes"}) == GradientCheck()


def test_numeric_mismatch_reads_a_judge_record():
    m = NumericMismatch.of({"phase": "backward", "disagreeing": 1, "compared": 3, "fp64_reference": True,
                            "worst": {"what": "grad x", "max_abs_diff": 0.5, "tol": 1e-5},
                            "disagreeing_tensors": ["grad x"]})
    assert (m.phase, m.disagreeing, m.compared, m.disagreeing_tensors) == ("backward", 1, 3, ("grad x",))
    assert m.worst == WorstTensor(what="grad x", max_abs_diff=0.5, tol=1e-5)
    assert NumericMismatch.of({"compared": "3", "disagreeing": True, "worst": "big"}) == NumericMismatch()


def test_fix_output_reads_the_typed_records():
    o = FixOutcome(VERIFIED, "m.py::probe", ["pybind-builtin"],
                   functions=[FunctionFix("Swish", "m", "forward and backward custom ops generated",
                                          check=("out0 size(0) = x.size(0)",), mutates_args=MutatesArgs(("x",)),
                                          refused=("x at rank 5",))],
                   eager_mismatches=[NumericMismatch("forward", 2, 1, WorstTensor(what="out 0", max_abs_diff=0.5,
                                                                                  tol=1e-5))],
                   shapes=[OpShapes("ns::op", ("x.size(0) 4->7", "x at rank 3"), refused=("x.size(1) 16->19",),
                                    restricted=("x at rank 4",))],
                   gradient_check=GradientCheck(2.0, 2.0, True))
    o.sites.append(SiteOutcome(7, "graph-break", "Data-dependent branching", "if x.sum() > 0:",
                               tried=[Tried("torch-cond", "a stage fails that passed"), Tried("branchless", "kept")]))
    console = Console(file=io.StringIO(), width=200, color_system=None)
    fix_render.render(o, console, verbose=True)
    text = console.file.getvalue()
    for line in ("  Swish (m): forward and backward custom ops generated",
                 "    mutates_args observed: forward ['x'], backward []", "    CHECK: out0 size(0) = x.size(0)",
                 "    perturbation refused by the op: x at rank 5",
                 "    tried torch-cond: a stage fails that passed",
                 "gradient check (the original has no backward to compare with): <grad, v> = 2, finite difference = "
                 "2 along a random direction v: agree",
                 "  forward: 1 of 2 differ; worst out 0: max abs diff 0.5 (tol 1e-05)",
                 "  passed at: x.size(0) 4->7; x at rank 3",
                 "  refused by the fake's rank check (the eager op accepts them): x at rank 4",
                 "  the eager op refuses: x.size(1) 16->19"):
        assert line in text.splitlines(), (line, text)
    assert "tried branchless" not in text
    assert "the fakes also at 2 other shapes (listed above), and 1 the eager op takes are refused" in text
    assert "review the 1 CHECK line above" in text
