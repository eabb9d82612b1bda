"""Whose bug by behaviour (issue 52, item 5): code that runs in eager and fails only because compilation changed a
value's type is a compile-side finding, with advice that names what changed; plain torch is the oracle."""
import numpy as np
import pytest
import torch

from plain_load import load
from tracecheck.classify import detect
from tracecheck.fix.repro import TORCH, owner
from tracecheck.model.taxonomy import K

NUMPY_PERCENTILE = '''
import numpy as np
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        hi = np.percentile(h.detach().numpy(), 99)
        return h.clamp(max=float(hi)).sum()


def probe_np():
    return M(), (torch.randn(4, 8),)
'''


def _load(path):
    return load(path, "np_plain").probe_np()


@pytest.mark.slow
def test_numpy_traced_as_torch_is_the_compilers_doing_not_yours(tracecheck, write_probe, tmp_path):
    path = write_probe(NUMPY_PERCENTILE)
    model, (x,) = _load(path)
    model(x)  # eager runs
    torch._dynamo.reset()
    with pytest.raises(TypeError, match="only 0-dimensional arrays"):  # plain torch.compile refuses
        torch.compile(model)(x)
    torch._dynamo.reset()
    res = tracecheck("run", str(path), "--stages", "eager,explain,aot_eager,vmap", "--html", str(tmp_path / "html"))
    st = res.probe("probe_np")["stages"]
    assert st["eager"]["status"] == "pass"
    for stage in ("explain", "aot_eager"):
        kinds = [f["kind"] for f in st[stage]["findings"]]
        assert "compile-semantics" in kinds, (stage, kinds)
        f = next(f for f in st[stage]["findings"] if f["kind"] == "compile-semantics")
        assert (f["context"]["cause"], f["evidence"]["user_frame"]["line"]) == ("numpy", 14)
        assert "unknown" not in kinds
    assert "torch.quantile" in res.stdout and "trace_numpy = False" in res.stdout  # the fix names what changed
    vmap = st["vmap"]["findings"][0]
    assert (vmap["kind"], vmap["context"]["cause"]) == ("functorch-incompatible", "numpy")  # not x.data_ptr()
    # the source view: the compile failure's line red, vmap's (the func target, not required) drawn as gating nothing
    page = next((tmp_path / "html").glob("*.py.html")).read_text()
    assert 'id="L14" class="break"' in page and 'id="L13" class="other"' in page
    assert "○ functorch-incompatible (target not required: gates nothing)" in page


def test_the_advice_works_as_written():
    """The two rewrites the fix text gives run under fullgraph=True compile and equal eager's np.percentile."""
    torch.manual_seed(0)
    h = torch.randn(4, 8)
    want = h.clamp(max=float(np.percentile(h.numpy(), 99)))

    def with_torch(h):
        return h.clamp(max=torch.quantile(h.detach(), 0.99))

    @torch.compiler.disable
    def percentile(h):
        return float(np.percentile(h.detach().numpy(), 99))

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(with_torch, fullgraph=True, backend="aot_eager")(h), want)
    torch.testing.assert_close(torch.compile(lambda h: h.clamp(max=percentile(h)), backend="aot_eager")(h), want)
    torch._dynamo.reset()


def _error(stage):
    return detect.classify_error(stage, {"type": "TypeError", "phase": "forward",
                                         "message": "only 0-dimensional arrays can be converted to Python scalars",
                                         "user_frame": {"file": "/w/m.py", "line": 14, "code": "float(hi)"}})


def test_the_same_words_in_eager_are_the_probes_own_error():
    assert _error("eager").kind == K.EAGER_ERROR
    compiled = _error("aot_eager")
    assert compiled.kind == K.COMPILE_SEMANTICS
    assert owner(compiled, "/w/m.py").party == TORCH  # tracecheck repro: torch's, for upstream
