"""The export stage exports what ``torch.export.export(strict=False)`` exports: the probe's callable with its real
outputs, pytree-flattened as torch.export flattens them. Its verdict must agree with torch's own on the same probe:
a non-tensor output torch.export refuses (transformers' ``DynamicCache``, a plain dataclass) fails the stage with
torch's words, and every output torch.export accepts (tuples, dicts, ModelOutput, a registered dataclass, Python
constants) passes.

One ``tracecheck run --stages eager,export --require export`` of PROBES (``--stages export`` alone is refused:
the compile target, always required, needs a stage), and one plain ``torch.export.export`` of each of its probes in a
subprocess (``TORCH_VERDICTS``), compared probe by probe.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tracecheck.model import taxonomy
from tracecheck.model.report import Finding

pytest.importorskip("transformers")

PROBES = '''
import dataclasses
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers

import tracecheck

transformers.logging.set_verbosity_error()


def llama():
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64)).eval().requires_grad_(False)


def ids():
    return torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))


@dataclasses.dataclass
class Plain:
    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class Registered:
    a: torch.Tensor
    b: torch.Tensor


torch.export.register_dataclass(Registered)


@tracecheck.probe
def probe_llama_with_cache():
    """The model output with its cache: CausalLMOutputWithPast holding a DynamicCache."""
    return tracecheck.Case(llama(), (ids(),), {"use_cache": True})


@tracecheck.probe
def probe_llama_without_cache():
    return tracecheck.Case(llama(), (ids(),), {"use_cache": False})


@tracecheck.probe
def probe_dict_of_tensors():
    return tracecheck.Case(lambda x: {"y": x.sin(), "rest": [x.cos(), (x + 1,)]}, (torch.randn(4, 3),))


@tracecheck.probe
def probe_tuple_of_tensors_and_constants():
    return tracecheck.Case(lambda x: (x.sin(), x.cos(), None, 3, x.shape), (torch.randn(4, 3),))


@tracecheck.probe
def probe_registered_dataclass():
    return tracecheck.Case(lambda x: Registered(x.sin(), x.cos()), (torch.randn(4, 3),))


@tracecheck.probe
def probe_plain_dataclass():
    return tracecheck.Case(lambda x: Plain(x.sin(), x.cos()), (torch.randn(4, 3),))
'''

#: each probe of the file at sys.argv[1], exported with plain torch.export.export(strict=False), as JSON
TORCH_VERDICTS = '''
import importlib.util, json, sys
import torch
import tracecheck

spec = importlib.util.spec_from_file_location("probes_under_test", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
verdicts = {}
for name in dir(mod):
    fn = getattr(mod, name)
    if not (name.startswith("probe_") and callable(fn)):
        continue
    case = fn()
    module = case.fn
    if not isinstance(module, torch.nn.Module):
        class Wrap(torch.nn.Module):
            def __init__(self, f):
                super().__init__()
                self.f = f

            def forward(self, *a, **k):
                return self.f(*a, **k)

        module = Wrap(module)
    try:
        torch.export.export(module, case.args, case.kwargs, strict=False)
        verdicts[name] = {"ok": True}
    except Exception as e:
        verdicts[name] = {"ok": False, "type": type(e).__name__, "message": str(e)}
print(json.dumps(verdicts))
'''


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    d = tmp_path_factory.mktemp("export_outputs")
    path = d / "outputs.py"
    path.write_text(textwrap.dedent(PROBES))
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    out = d / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(path), "--stages", "eager,export",
                           "--require", "export", "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=d, env=env)
    assert out.exists(), proc.stdout + proc.stderr
    ours = {p["id"].split("::")[-1]: p["stages"]["export"] for p in json.loads(out.read_text())["probes"]}
    plain = subprocess.run([sys.executable, "-c", TORCH_VERDICTS, str(path)], capture_output=True, text=True,
                           timeout=600, cwd=d, env=env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    theirs = json.loads(plain.stdout.strip().splitlines()[-1])
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    return ours, theirs


def test_the_export_stage_fails_exactly_where_torch_export_fails(verdicts):
    ours, theirs = verdicts
    assert {name: s["status"] for name, s in ours.items()} == \
        {name: "pass" if v["ok"] else "fail" for name, v in theirs.items()}


def test_a_llama_returning_its_cache_fails_with_torchs_own_words(verdicts):
    ours, theirs = verdicts
    torch_error = theirs["probe_llama_with_cache"]
    assert not torch_error["ok"] and "DynamicCache" in torch_error["message"], torch_error
    stage = ours["probe_llama_with_cache"]
    assert stage["status"] == "fail", stage
    f = stage["failure"]
    assert f["kind"] == "non-pytree-output", f
    assert f["context"]["type"] == "transformers.cache_utils.DynamicCache", f
    # torch's exception type and the first line of its message, as torch.export raised them
    assert f["evidence"]["exception_type"].rsplit(".", 1)[-1] == torch_error["type"], f["evidence"]
    assert torch_error["message"].splitlines()[0] in f["evidence"]["message"], (f["evidence"], torch_error)
    assert "DynamicCache" in f["summary"], f
    # the fix for a transformers cache, as the report prints it
    assert "use_cache=False" in taxonomy.fix_text(Finding.from_dict(f))


def test_a_plain_dataclass_output_fails_and_a_registered_one_passes(verdicts):
    ours, _ = verdicts
    assert ours["probe_registered_dataclass"]["status"] == "pass"
    plain = ours["probe_plain_dataclass"]
    assert plain["status"] == "fail" and plain["failure"]["kind"] == "non-pytree-output", plain
    assert plain["failure"]["context"]["type"].endswith(".Plain"), plain["failure"]


def test_outputs_torch_export_accepts_pass_and_are_compared_with_eager(verdicts):
    ours, theirs = verdicts
    for name in ("probe_llama_without_cache", "probe_dict_of_tensors", "probe_tuple_of_tensors_and_constants",
                 "probe_registered_dataclass"):
        assert theirs[name]["ok"], (name, theirs[name])
        assert ours[name]["status"] == "pass" and ours[name]["findings"] == [], (name, ours[name])


#: torch 2.13.0's words (torch/_functorch/_aot_autograd/utils.py), as torch.export raised them on PROBES
_REFUSED = ("Found <class '{}'> in output, which is not a known type. If this type holds tensors, you need to "
            "register a pytree for it. See https://github.com/pytorch/functorch/issues/475 for a brief explanation "
            "why. If you don't need to register a pytree, please leave a comment explaining your use case and "
            "we'll make this more ergonomic to deal with")


@pytest.mark.parametrize("cls, cause", [("transformers.cache_utils.DynamicCache", "cache"),
                                        ("transformers.cache_utils.StaticCache", "cache"),
                                        ("outputs.Plain", None), ("torch.dtype", None)])
def test_torchs_refusal_of_an_output_is_classified_with_the_class_it_names(cls, cause):
    from tracecheck.classify import detect

    f = detect.classify_error("export", {"type": "RuntimeError", "message": _REFUSED.format(cls), "phase": "forward"})
    assert (f.kind, f.context.type, f.context.cause) == ("non-pytree-output", cls, cause)
    assert cls in f.summary and f.evidence.message.startswith("Found <class")
    assert ("use_cache=False" in taxonomy.fix_text(f)) == (cause == "cache")


def test_the_reports_repro_command_for_an_export_finding_runs_and_fails_again(tmp_path):
    """The Markdown report's "reproduce" line for an export finding is a command the CLI accepts (the compile target,
    always required, needs one of its stages beside export) and that fails again: exit 1, not the usage error 2."""
    import re

    model = tmp_path / "m.py"
    model.write_text("import dataclasses\nimport torch\n\n\n@dataclasses.dataclass\nclass Plain:\n    a: torch.Tensor\n\n\n"
                     "def probe_plain():\n    return (lambda x: Plain(x + 1)), (torch.randn(2, 3),)\n")
    env = {**os.environ, "COLUMNS": "200"}
    run = [sys.executable, "-m", "tracecheck", "run"]
    first = subprocess.run(run + [str(model), "--stages", "eager,export", "--require", "export", "--report", "r.md"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    line = re.search(r"^tracecheck run (\S+::probe_plain) (--stages [^\n`]*)$", (tmp_path / "r.md").read_text(), re.M)
    assert line and "export" in line.group(2), (tmp_path / "r.md").read_text()
    again = subprocess.run(run + [line.group(1)] + line.group(2).split(), capture_output=True, text=True, timeout=600,
                           cwd=tmp_path, env=env)
    assert again.returncode == 1, (line.group(0), again.stdout + again.stderr)
