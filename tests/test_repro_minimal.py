"""``tracecheck repro`` keeps only what the failing call needs, runs the stage that failed first, and says whose bug
it is.

The end-to-end tests run each script here, in a fresh process whose ``import tracecheck`` fails, and check what it
raised against torch's own wording (the exception class, its message), not against tracecheck's report; what the
script must leave out is named by hand from the probe files below.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracecheck.fix import repro_script
from tracecheck.fix.repro import LIBRARY, TORCH, UNPLACED, YOURS, owner
from tracecheck.model.report import Finding

BLOCKED = "import runpy, sys; sys.modules['tracecheck'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"

#: two unrelated models, a NumPy helper, two custom ops (one without a fake impl), a second probe, a script part
MIXED = '''\
"""A model file as users write them: more in it than the one failing call."""
import math

import numpy as np
import torch
from torch import nn

SCALE = 0.5
UNUSED_TABLE = {"a": 1, "b": 2}


@torch.library.custom_op("rpmin::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x.detach() * SCALE


@torch.library.custom_op("rpmin::shifted", mutates_args=())
def shifted(x: torch.Tensor) -> torch.Tensor:
    return x.detach() + 1.0


@shifted.register_fake
def _(x):
    return torch.empty_like(x)


def numpy_stats(a):
    return float(np.mean(a)), float(np.std(a))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) * math.sqrt(2.0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return shifted(self.head(x)).softmax(-1)


def uses_scaled(x):
    return scaled(x) + 1


def probe_missing_fake():
    return uses_scaled, (torch.randn(4, 8),)


def probe_models():
    return nn.Sequential(Encoder(), Classifier()), (torch.randn(2, 8),)


if __name__ == "__main__":
    print(numpy_stats(np.arange(4)))
'''


def repro(target: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracecheck", "repro", target, "-o", str(out), *extra],
                          capture_output=True, text=True, cwd=out.parent.parent, timeout=900,
                          env={**os.environ, "COLUMNS": "200"})


def plain(script: Path) -> subprocess.CompletedProcess:
    """The script alone: plain python, tracecheck unimportable, from another folder."""
    return subprocess.run([sys.executable, "-c", BLOCKED, str(script)], capture_output=True, text=True,
                          cwd=script.parent.parent, timeout=600)


def raised(stderr: str, name: str) -> bool:
    """A traceback's exception line ``name: message`` (the exception and the ones it was chained from)."""
    return any(line.startswith(name + ":") for line in stderr.splitlines())


def write(tmp_path: Path, name: str, text: str) -> Path:
    model = tmp_path / name
    model.write_text(textwrap.dedent(text))
    (tmp_path / "out").mkdir(exist_ok=True)
    return model


@pytest.mark.slow
def test_a_one_op_failure_gets_a_one_screen_script_without_the_unrelated_code(tmp_path):
    model = write(tmp_path, "mixed.py", MIXED)
    out = tmp_path / "out" / "repro.py"
    proc = repro(f"{model}::probe_missing_fake", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    text = out.read_text()
    for unrelated in ("Encoder", "Classifier", "import numpy", "np.", "numpy_stats", "shifted", "rpmin::shifted",
                      "UNUSED_TABLE", "probe_models", "math", "__main__"):
        assert unrelated not in text, unrelated
    assert "rpmin::scaled" in text and "def uses_scaled" in text and "SCALE = 0.5" in text
    assert len(text.splitlines()) <= 60, text
    assert len(MIXED.splitlines()) > 60  # (the file alone would not fit)
    run = plain(out)
    assert run.returncode == 1
    assert raised(run.stderr, "torch._dynamo.exc.TorchRuntimeError"), run.stderr[-3000:]
    assert "There was no fake impl registered for" in run.stderr
    # the missing fake is the user's registration: the script is not offered for upstream
    assert "whose bug: yours" in proc.stdout and "for upstream" not in proc.stdout + text


#: explain breaks the graph at print() and goes on, then dies at the op without a fake impl; fullgraph=True stops at
#: the print with another error (Unsupported)
CRASH_AFTER_A_BREAK = '''\
import torch


@torch.library.custom_op("rpmin::nofake", mutates_args=())
def nofake(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


def f(x):
    print("step")
    return nofake(x) + 1


def probe():
    return f, (torch.randn(3),)
'''


@pytest.mark.slow
def test_an_error_first_seen_at_explain_is_reproduced_by_explain(tmp_path):
    model = write(tmp_path, "crash.py", CRASH_AFTER_A_BREAK)
    out = tmp_path / "out" / "repro.py"
    proc = repro(str(model), out)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "runs the explain stage (the first failing stage)" in proc.stdout
    text = out.read_text()
    assert "stage explain" in text and "torch._dynamo.explain(_repro_fn)" in text and "fullgraph=True" not in text
    run = plain(out)
    assert run.returncode == 1
    assert "step" in run.stdout  # explain ran the print as a break and went on
    assert raised(run.stderr, "torch._dynamo.exc.TorchRuntimeError"), run.stderr[-3000:]
    assert not raised(run.stderr, "torch._dynamo.exc.Unsupported")
    assert "There was no fake impl registered for" in run.stderr


WRONG_FAKE = '''\
import torch


@torch.library.custom_op("rpmin::dispatch", mutates_args=())
def dispatch(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.repeat(n, 1)


@dispatch.register_fake
def _(x, n):
    return x.new_empty(x.shape)  # wrong: the kernel returns n times the rows


def pool(x):
    return dispatch(x, 4).sum(dim=0)


def probe():
    return pool, (torch.randn(3, 8),)
'''


@pytest.mark.slow
def test_a_wrong_fake_of_the_users_is_not_for_upstream(tmp_path):
    model = write(tmp_path, "wrongfake.py", WRONG_FAKE)
    out = tmp_path / "out" / "repro.py"
    proc = repro(str(model), out)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    fake_line = WRONG_FAKE.splitlines().index("@dispatch.register_fake") + 1
    assert f"whose bug: yours, not torch's: fix it at {model.name}:{fake_line}" in proc.stdout, proc.stdout
    assert "for upstream" not in proc.stdout + out.read_text()
    run = plain(out)  # aot_eager runs the kernel and passes; inductor trusts the fake's shape and asserts it
    assert run.returncode == 1
    assert "incorrect fake (aka meta) kernel for a custom op" in run.stderr, run.stderr[-3000:]


LOOKED_UP_BY_NAME = '''\
import sys

import torch


def helper(x):
    raise ValueError("the helper is reached only by its name as a string")


def probe():
    return getattr(sys.modules[__name__], "helper"), (torch.randn(2),)
'''


@pytest.mark.slow
def test_a_cut_script_that_fails_differently_falls_back_to_the_whole_file(tmp_path):
    model = write(tmp_path, "byname.py", LOOKED_UP_BY_NAME)
    out = tmp_path / "out" / "repro.py"
    proc = repro(str(model), out, "--stage", "eager")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "written with the whole of byname.py instead" in proc.stdout
    assert "def helper" in out.read_text()
    run = plain(out)
    assert raised(run.stderr, "ValueError"), run.stderr[-3000:]
    assert "the helper is reached only by its name" in run.stderr


def test_what_the_call_needs_is_read_from_the_source(tmp_path):
    model = write(tmp_path, "lib.py", '''\
        import json
        import os
        import torch
        import some_vendor_ops  # registers its ops on import; nothing reads the name

        os.environ.setdefault("SOME_SETTING", "1")
        torch._dynamo.config.capture_scalar_outputs = True
        lib = torch.library.Library("rpminlib", "DEF")
        lib.define("twice(Tensor x) -> Tensor")
        lib.define("thrice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        lib.impl("thrice", lambda x: x * 3, "CPU")


        @torch.library.register_fake("rpminlib::twice")
        def _(x):
            return torch.empty_like(x)


        @torch.no_grad()
        def unrelated(x):
            return json.dumps(x)


        def probe():
            return torch.ops.rpminlib.twice, (torch.randn(2),)
        ''')
    cut = repro_script.needed_code(str(model), "probe")
    for kept in ("import os", "import torch", "import some_vendor_ops", "SOME_SETTING", "capture_scalar_outputs",
                 'lib.define("twice', 'lib.impl("twice', 'register_fake("rpminlib::twice")', "def probe"):
        assert kept in cut.text, kept
    for left_out in ("json", "thrice", "unrelated", "no_grad"):
        assert left_out not in cut.text, left_out
    looks_up = write(tmp_path, "dyn.py", "import torch\n\ndef f(x):\n    return x\n\n"
                                         "def probe():\n    return globals()['f'], (torch.randn(2),)\n")
    assert repro_script.needed_code(str(looks_up), "probe") is None  # the whole file, then


def test_imports_are_cut_to_the_names_read(tmp_path):
    model = write(tmp_path, "imp.py", "import torch\nfrom torch import nn, optim\n\n"
                                      "def train(m):\n    return optim.SGD(m.parameters(), lr=0.1)\n\n"
                                      "def probe():\n    return nn.Identity(), (torch.randn(2),)\n")
    assert repro_script.needed_code(str(model), "probe").text.splitlines()[:2] == \
        ["import torch", "from torch import nn"]


def _finding(kind, frame=None, **evidence):
    context = evidence.pop("context", {})
    return Finding(kind, "", context, {**evidence, **({"user_frame": frame} if frame else {})})


def test_whose_bug_follows_the_evidence(tmp_path):
    import torch

    model = write(tmp_path, "wrongfake.py", WRONG_FAKE)
    nofake = write(tmp_path, "crash.py", CRASH_AFTER_A_BREAK)
    in_torch = {"file": os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py"), "line": 3}
    mine = {"file": str(model), "line": 15, "code": "return dispatch(x, 4).sum(dim=0)"}
    vendor = {"file": "/usr/lib/python3/site-packages/flash_attn/interface.py", "line": 7}
    cases = [
        (_finding("backend-error", exception_type="torch._dynamo.exc.BackendCompilerFailed"), TORCH, ""),
        (_finding("graph-break", mine, message="...\n  Hint: This is likely to be a Dynamo bug. Please report an "
                                                "issue to PyTorch.\n"), TORCH, ""),
        (_finding("unknown", exception_type="torch._dynamo.exc.InternalTorchDynamoError"), TORCH, ""),
        (_finding("graph-break", in_torch), TORCH, ""),
        (_finding("numeric-mismatch", context={"cause": "backend"}), TORCH, ""),
        # a stock hint that names PyTorch is not torch's word that the bug is its own
        (_finding("graph-break", mine, message="Hint: Please report an issue to PyTorch."), YOURS, f"{model}:15"),
        (_finding("fake-mismatch", context={"op": "rpmin::dispatch"},
                  exception_type="torch._subclasses.fake_tensor.MetadataMismatchError"), YOURS, f"{model}:9"),
        # an op of the probe file: its registration, wherever torch stopped; an op defined elsewhere: its library
        (_finding("missing-fake", mine, context={"op": "rpmin.nofake.default"}), YOURS, f"{nofake}:4"),
        (_finding("missing-fake", mine, context={"op": "pytest::op"}), LIBRARY, "pytest"),
        (_finding("pybind-builtin", vendor), LIBRARY, "flash_attn"),
        (_finding("eager-error", mine), YOURS, f"{model}:15"),
        (_finding("unknown"), UNPLACED, ""),
    ]
    for f, party, where in cases:
        o = owner(f, str(nofake if (f.context.op or "").startswith("rpmin.nofake") else model))
        assert (o.party, o.where if where else "") == (party, where), (f.kind, f.evidence, o)
        assert ("for upstream" in o.line()) == (party == TORCH), o.line()


def test_whose_bug_reads_what_the_classifier_wrote_in_the_context(tmp_path):
    """The context's suspects, the Function named, torch's frame and its exception (Finding.context) go into the line."""
    model = str(write(tmp_path, "m.py", "import torch\n"))
    suspect = owner(_finding("backend-error", context={"cause": "suspect_code", "suspect": "missing-fake of ns::op"}),
                    model)
    assert (suspect.party, suspect.why) == (UNPLACED, "backend-error, with other findings of the probe that can make "
                                                      "a backend fail (missing-fake of ns::op): fix those first, then "
                                                      "rerun")
    raised = owner(_finding("torch-internal-error", context={"torch_frame": "torch/_ops.py:12 in __call__",
                                                             "exception": "AssertionError: boom"}), model)
    assert (raised.party, raised.where, raised.why) == (TORCH, "torch/_ops.py:12 in __call__",
                                                        "torch-internal-error: AssertionError: boom")
    vendor = {"file": "/usr/lib/python3/site-packages/flash_attn/interface.py", "line": 7}
    classmethod_ = owner(_finding("torch-internal-error", vendor, context={"cause": "classmethod", "function": "Fn"}),
                         model)
    assert (classmethod_.party, classmethod_.where) == (LIBRARY, "flash_attn")
    assert classmethod_.why.startswith("torch-internal-error: Fn is written with classmethods")
    # not written: what it falls back to
    bare = owner(_finding("torch-internal-error", context={"torch_frame": ""}), model)
    assert (bare.where, bare.why) == ("", "torch-internal-error: torch raised")
