"""The dynamic stage's made-up batch sizes are no valid input for an op whose dim 0 is no batch (bitsandbytes'
``dequantize_blockwise`` reads past what the repeated rows define, and returns other numbers on every run): a
compiled run that differs from such an eager run is no numeric-mismatch. Oracle: plain eager calls of the op in this
test, twice at each size."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import torch

PROBE = textwrap.dedent('''
    import numpy as np
    import torch

    @torch.library.custom_op("tc_unset_rows::noisy", mutates_args=())
    def noisy(x: torch.Tensor) -> torch.Tensor:
        # at its own batch size the op is exact; at another it returns what memory it never set holds (here: fresh
        # noise from an unseeded generator, a different draw on every call)
        if x.shape[0] == 2:
            return x * 2
        return x * 2 + torch.from_numpy(np.random.default_rng().random(tuple(x.shape))).to(x.dtype)

    @noisy.register_fake
    def _(x):
        return torch.empty_like(x)

    def probe_noisy():
        return noisy, (torch.arange(6.0).reshape(2, 3),)
''')


def _oracle_op():
    @torch.library.custom_op("tc_unset_rows_oracle::noisy", mutates_args=())
    def noisy(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 2:
            return x * 2
        return x * 2 + torch.from_numpy(np.random.default_rng().random(tuple(x.shape))).to(x.dtype)

    return noisy


def test_a_size_eager_cannot_reproduce_is_no_numeric_mismatch(tmp_path):
    op = _oracle_op()
    own, other = torch.arange(6.0).reshape(2, 3), torch.arange(9.0).reshape(3, 3)
    assert torch.equal(op(own), op(own))  # plain eager: reproducible at the probe's own size ...
    assert not torch.equal(op(other), op(other))  # ... and not at another one

    path = tmp_path / "noisy_probe.py"
    path.write_text(PROBE)
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "tracecheck", "run", str(path), "--stages", "eager,dynamic",
                           "--no-cache", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dynamic = json.loads(out.read_text())["probes"][0]["stages"]["dynamic"]
    assert dynamic["status"] == "pass" and not dynamic.get("findings")
    said = dynamic["extra"]["dynamic"]["every_dimension"]
    assert "gives other outputs on each run" in said and "not a batch dimension" in said
