"""Synthetic RunReports for renderer and baseline tests (no torch, no subprocess).

Values are written by hand here, never taken from tracecheck's own output.
"""
from __future__ import annotations

from tracecheck.model.report import CRASH, FAIL, PASS, SKIP, TIMEOUT, Finding, GraphBreak, ProbeReport, RunReport, StageResult

HOME = "/home/alice"
ROOT = f"{HOME}/proj"


def break_finding(file: str, line: int, gb_type: str = "Failed to trace builtin operator", gb_code: str = "GB0059",
                  traceback: str = "", code: str = 'print("hi")') -> tuple[Finding, GraphBreak]:
    b = GraphBreak("graph-break", gb_type, gb_code, file, line,
                   reason=f"{gb_type}\n  Explanation: Dynamo does not know how to trace builtin operator `print`",
                   doc=f"https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{gb_code[2:]}.html",
                   context={"code": code})
    f = Finding("graph-break", f"Graph break: {gb_type}.", {"gb_type": gb_type, "code": code},
                {"gb_type": gb_type, "gb_code": gb_code, "doc": b.doc,
                 "user_frame": {"file": file, "line": line, "code": code},
                 "message": b.reason, "traceback": traceback})
    return f, b


def missing_fake(file: str, line: int, traceback: str = "") -> Finding:
    return Finding("missing-fake", "Custom op mylib::bucketize has no fake impl, so Dynamo cannot run it on "
                   "FakeTensors.", {"op": "mylib::bucketize"},
                   {"exception_type": "torch._subclasses.fake_tensor.UnsupportedOperatorException",
                    "exception_chain": ["torch._subclasses.fake_tensor.UnsupportedOperatorException"],
                    "user_frame": {"file": file, "line": line, "function": "forward",
                                   "code": "return torch.ops.mylib.bucketize(x)"},
                    "message": "There was no fake impl registered for <CustomOpDef(mylib::bucketize)>.",
                    "traceback": traceback or f'Traceback (most recent call last):\n  File "{file}", line {line}, '
                                              "in forward\nUnsupportedOperatorException: mylib::bucketize"})


def probe(pid_file: str, name: str, abs_file: str, stages: dict[str, StageResult]) -> ProbeReport:
    return ProbeReport(f"{pid_file}::{name}", abs_file, name, stages)


def small_report(root: str = ROOT, with_ca: bool = True) -> RunReport:
    """Two probes in ``<root>/model.py``: ``probe_ok`` passes; ``probe_bad`` has a print graph break
    (explain and aot_eager) and a missing fake impl (fullgraph); optionally a compiled_autograd stage."""
    model = f"{root}/model.py"
    tb = (f'Traceback (most recent call last):\n  File "{root}/model.py", line 5, in f\n    print("hi")\n'
          f'  File "/opt/venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 9, in _fn\n'
          "torch._dynamo.exc.Unsupported: Failed to trace builtin operator")
    gf, gb = break_finding(model, 5, traceback=tb)
    mf = missing_fake(model, 9)
    stages_ok = {"eager": StageResult("eager", PASS), "explain": StageResult("explain", PASS, graph_count=1,
                                                                              graph_break_count=0, graph_break_sites=0),
                 "aot_eager": StageResult("aot_eager", PASS, graph_count=1, graph_break_count=0, graph_break_sites=0),
                 "fullgraph": StageResult("fullgraph", PASS)}
    stages_bad = {
        "eager": StageResult("eager", PASS),
        "explain": StageResult("explain", FAIL, failure=gf, findings=[gf], graph_count=2, graph_break_count=1, graph_break_sites=1,
                               breaks=[gb], extra={"explain_reasons": ["Failed to trace builtin operator\n  "
                                                                       "Explanation: print"]}),
        "aot_eager": StageResult("aot_eager", FAIL, failure=gf, findings=[gf], graph_count=2, graph_break_count=1, graph_break_sites=1,
                                 breaks=[gb]),
        "fullgraph": StageResult("fullgraph", FAIL, failure=mf, findings=[mf]),
    }
    stage_names = ["eager", "explain", "aot_eager", "fullgraph"]
    if with_ca:
        # the keys the compiled_autograd stage writes (compiled_autograd._measure), values by hand
        ca = {"steps": 3, "unique_graphs_without_ca": 3, "unique_graphs_with_ca": 1, "captures": 2,
              "recompiles": [], "hooks_captured": 1}
        stages_ok["compiled_autograd"] = StageResult("compiled_autograd", PASS, extra=dict(ca))
        stages_bad["compiled_autograd"] = StageResult("compiled_autograd", PASS, extra=dict(ca))
        stage_names.append("compiled_autograd")
    env = {"torch": "2.13.0+cpu", "python": "3.11.7", "platform": "Linux-x86_64", "device": "cpu",
           "torch_npu": None, "npu_note": "torch_npu is not installed",
           "collect_env": {"torch_version": "2.13.0+cpu", "python_version": "3.11.7 (64-bit runtime)",
                           "os": "Debian GNU/Linux 12 (bookworm) (x86_64)", "gcc_version": "12.2.0",
                           "is_cuda_available": "False"}}
    return RunReport(
        probes=[probe("model.py", "probe_ok", model, stages_ok), probe("model.py", "probe_bad", model, stages_bad)],
        environment=env, stages=stage_names,
        command=["tracecheck", "run", f"{root}/model.py", "--json", f"{root}/out/r.json"],
        tracecheck_version="0.1.0", seconds=12.5)


def mixed_status_report() -> RunReport:
    """One probe whose stages pass, fail, skip, time out and crash."""
    gf, gb = break_finding("/w/m.py", 3)
    t = Finding("timeout", "The inductor stage killed after the 5 s timeout.", {},
                {"stderr_tail": "compiling...\x1b[31m red \x1b[0m", "cause": "killed"})
    c = Finding("crash", "The fullgraph stage process killed by SIGSEGV.", {}, {"stderr_tail": "Segmentation fault"})
    stages = {
        "eager": StageResult("eager", PASS, seconds=0.5),
        "explain": StageResult("explain", FAIL, failure=gf, findings=[gf], graph_count=2, graph_break_count=1, graph_break_sites=1,
                               breaks=[gb], seconds=1.25),
        "aot_eager": StageResult("aot_eager", SKIP, skip_reason="the probe function raised"),
        "inductor": StageResult("inductor", TIMEOUT, failure=t, findings=[t], seconds=5.0),
        "fullgraph": StageResult("fullgraph", CRASH, failure=c, findings=[c], seconds=0.25),
    }
    p2 = {"eager": StageResult("eager", PASS, seconds=0.1)}
    return RunReport(
        probes=[probe("sub/m.py", "probe", "/w/sub/m.py", stages), probe("n.py", "probe_two", "/w/n.py", p2)],
        environment={"torch": "2.13.0+cpu", "python": "3.11.7", "device": "cpu"},
        stages=["eager", "explain", "aot_eager", "inductor", "fullgraph"], tracecheck_version="0.1.0")
