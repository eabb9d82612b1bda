"""Graph breaks in model code, one probe per rewrite class of ``tracecheck fix`` (tracecheck/fix/rewrites.py).

Plain probes (``def probe_<name>()`` returning ``(fn, args)``): the file needs no tracecheck import, as a user's
would. Used by tests/test_fix_model_code.py, which checks each patched copy with plain torch.compile.
"""
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


class ScaleByMax(nn.Module):
    """.item() into Python: 'Unsupported Tensor.item() call with capture_scalar_outputs=False'."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        peak = x.abs().max().item()
        return self.lin(x) / peak


class PositiveSum(nn.Module):
    """A boolean mask: 'Dynamic shape operator' (the output's size depends on the data)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y[y > 0].sum()


class SignSwitch(nn.Module):
    """A branch on a tensor's value with a tensor on both sides: torch.cond."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            z = y.sin()
        else:
            z = y.cos()
        return z * 2


class CleanNans(nn.Module):
    """`if tensor_cond: x = transform(x)`, a transform that is the identity where the condition is false."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if torch.isnan(y).any():
            y = torch.nan_to_num(y)
        return y.relu()


class ClampsOutliers(nn.Module):
    """A branch on a scalar read with .item() (a tiny LM's outlier clamp in training), and a print: torch.where."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        peak = y.abs().max().item()
        if peak > 0.5:
            y = y.clamp(-0.5, 0.5)
        print(y)
        return y.tanh()


class UnitScaleFastPath(nn.Module):
    """A fast path for a value the probe's inputs never have: skipping it while compiling cannot be compared."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale):
        if (scale == 1).all():
            return self.lin(x)
        return self.lin(x) * scale


class PrintsActivations(nn.Module):
    """print() of a tensor: reorderable by Dynamo."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print(y)
        return y.tanh()


class LogsStats(nn.Module):
    """logger.info with a tensor's value formatted in."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        log.info("mean activation %s", float(y.mean()))
        return y.tanh()


class KeepsHistory(nn.Module):
    """A Python copy of float activations (.tolist() of a float tensor): no rewrite of tracecheck's applies."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.history = []

    def forward(self, x):
        y = self.lin(x)
        self.history.append(y.detach().tolist())
        return y.tanh()


def threshold(x):
    """A value branch in a function without parameters, inputs that need no grad: torch.cond."""
    if x.mean() > 0:
        z = x.sin()
    else:
        z = x.cos()
    return z * 2


def _x():
    torch.manual_seed(0)
    return torch.randn(3, 4, requires_grad=True)


def probe_item():
    torch.manual_seed(0)
    return ScaleByMax(), (_x(),)


def probe_mask():
    torch.manual_seed(0)
    return PositiveSum(), (_x(),)


def probe_value_branch():
    torch.manual_seed(0)
    return SignSwitch(), (_x(),)


def probe_nan_guard():
    torch.manual_seed(0)
    return CleanNans(), (_x(),)


def probe_item_branch():
    torch.manual_seed(0)
    return ClampsOutliers(), (_x(),)


def probe_untaken_fast_path():
    torch.manual_seed(0)
    return UnitScaleFastPath(), (_x(), torch.full((3, 1), 2.0))


def probe_print():
    torch.manual_seed(0)
    return PrintsActivations(), (_x(),)


def probe_logging():
    torch.manual_seed(0)
    return LogsStats(), (_x(),)


def probe_history():
    torch.manual_seed(0)
    return KeepsHistory(), (_x(),)


def probe_cond():
    torch.manual_seed(0)
    return threshold, (torch.randn(3, 4),)


class TinyLM(nn.Module):
    """A new user's tiny LM (issue 51): an outlier guard on a scalar read with `.item()`, then a print of it. Three
    breaks on one name; the `.item()` kept a tensor makes the `if` a torch.where and the print reorderable."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.head = nn.Linear(32, 64)
        with torch.no_grad():
            self.emb.weight.mul_(scale)

    def forward(self, ids):
        x = self.emb(ids)
        amax = x.abs().max().item()
        if amax > 100.0:
            x = x / amax
        print("activations ok, amax", amax)
        return self.head(x)


def probe_tiny_lm():
    """Its embedding scaled so that activations pass 100: the guard is taken at the probe's inputs."""
    torch.manual_seed(0)
    return TinyLM(scale=1000.0), (torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0)),)


def count_then_switch(x):
    """An int scalar read for a branch and again as a Python number (`float(n)`): no tensor form; capturing it
    (capture_scalar_outputs) moves the break to the `if`, which torch.cond on the captured value then takes."""
    n = (x > 0).sum().item()
    if n > 6:
        y = x.sin()
    else:
        y = x.cos()
    return y * float(n)


def probe_captured_cond():
    torch.manual_seed(0)
    return count_then_switch, (torch.randn(3, 4),)
