"""Shape expressions from observation: which input dims and integer arguments an output dim is made of.

Pure (no torch): ``fix.observe`` runs the real op at the probe's shapes and at perturbed shapes and hands
over, per run, the value of every *symbol* (``"x.size(2)"``, ``"num_iters"``) and of every output dim.
``infer_dim`` finds the simplest small expression that reproduces the dim in every run:

* a symbol ``s``, ``k*s``, ``s // k``, ``s + c``, ``a*s + c``;
* ``s1 + s2``, ``s1 - s2``, ``s1 * s2``, ``s1 // s2`` (exact), ``s * s`` (``n*n`` for a flattened ``n x n`` matrix);
* a constant.

An expression is *confirmed* when some symbol in it changed between runs and the dim followed it. A dim that
never changed fits a constant and every expression of symbols that never changed either; the choice is then
a preference (a symbol of the same value over a constant, except for 0 and 1, which are nearly always
literal: keepdim, a broadcast axis), reported as unconfirmed with the alternatives. When the dim changed
between two runs with the same symbol values, it depends on the data (``data_dependent``), and when nothing
fits it has no expression: both are the TODO path, never a guess.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable
from fractions import Fraction
from itertools import combinations

#: |coefficient| and |offset| bounds for ``a*s + c``: beyond them a fit is more likely a coincidence.
MAX_COEFF = 16
MAX_OFFSET = 64


@dataclass(frozen=True)
class DimExpr:
    """The inferred expression for one output dim. ``code`` is None on the TODO path (see ``reason``)."""

    code: str | None
    confirmed: bool = False
    #: other expressions that fit the runs equally well (only for unconfirmed picks)
    alternatives: tuple[str, ...] = ()
    reason: str = ""
    data_dependent: bool = False


@dataclass
class Runs:
    """Per run: symbol values, and the observed value of the dim being inferred."""

    symbols: list[dict[str, int]] = field(default_factory=list)
    values: list[int] = field(default_factory=list)

    def add(self, symbols: dict[str, int], value: int) -> None:
        self.symbols.append(dict(symbols))
        self.values.append(int(value))


def _square(n: str, s: dict[str, int]) -> int:
    return s[n] * s[n]


def _fits(f: Callable[[Any], Any], runs: Runs) -> bool:
    try:
        return all(f(s) == v for s, v in zip(runs.symbols, runs.values))
    except (KeyError, ZeroDivisionError):
        return False


def _varied(name: str, runs: Runs) -> bool:
    return len({s.get(name) for s in runs.symbols}) > 1


def _linear(name: str, runs: Runs) -> str | None:
    """``a*name + c`` through every run's point, with integer a, c (a may be 1/k: ``name // k``); None if none."""
    pts = sorted({(s[name], v) for s, v in zip(runs.symbols, runs.values)})
    xs = {x for x, _ in pts}
    if len(xs) < 2:
        return None
    (x0, y0), (x1, y1) = pts[0], next(p for p in pts if p[0] != pts[0][0])
    a = Fraction(y1 - y0, x1 - x0)
    c = y0 - a * x0
    # floor division for a = 1/k: the point must be exact at every run, so x // k == x / k there
    if not all(a * x + c == y for x, y in pts) or c.denominator != 1 or a == 0:
        return None
    offset = int(c)
    if abs(offset) > MAX_OFFSET or abs(a) > MAX_COEFF or (a.denominator != 1 and (a.numerator != 1 or offset != 0)):
        return None
    if a.denominator != 1:
        return f"{name} // {a.denominator}"
    coeff = int(a)
    term = name if coeff == 1 else f"-{name}" if coeff == -1 else f"{coeff} * {name}"
    return term if offset == 0 else f"{term} + {offset}" if offset > 0 else f"{term} - {-offset}"


def infer_dim(names: list[str], runs: Runs) -> DimExpr:
    """The expression for one dim over ``names`` (symbols in preference order: tensor dims, then ints).

    Raises ValueError when ``runs`` is empty.
    """
    if not runs.values:
        raise ValueError("infer_dim needs at least one run")
    # Same symbol values, different dim: the dim depends on the data, no expression can be right.
    seen: dict[tuple, int] = {}
    for s, v in zip(runs.symbols, runs.values):
        key = tuple(sorted(s.items()))
        if seen.setdefault(key, v) != v:
            return DimExpr(None, reason=f"depends on the input values (sizes {seen[key]} and {v} at the same input "
                                        f"shapes)", data_dependent=True)
    if len(set(runs.values)) > 1:
        return _confirmed(names, runs)
    return _unconfirmed(names, runs)


def _confirmed(names: list[str], runs: Runs) -> DimExpr:
    varied = [n for n in names if _varied(n, runs)]
    linear = {n: _linear(n, runs) for n in varied}
    # simplest first: s, then k*s or s // k, then two symbols, then a*s + c, then s*s
    for want in (lambda code, n: code == n, lambda code, n: " + " not in code and " - " not in code):
        for n in varied:
            if linear[n] and want(linear[n], n):
                return DimExpr(linear[n], confirmed=True)
    for a, b in combinations(names, 2):
        if a not in varied and b not in varied:
            continue
        for code, f in ((f"{a} + {b}", lambda s, a=a, b=b: s[a] + s[b]),
                        (f"{a} * {b}", lambda s, a=a, b=b: s[a] * s[b]),
                        (f"{a} - {b}", lambda s, a=a, b=b: s[a] - s[b]),
                        (f"{b} - {a}", lambda s, a=a, b=b: s[b] - s[a]),
                        (f"{a} // {b}", lambda s, a=a, b=b: s[a] // s[b] if s[b] and s[a] % s[b] == 0 else None),
                        (f"{b} // {a}", lambda s, a=a, b=b: s[b] // s[a] if s[a] and s[b] % s[a] == 0 else None)):
            if _fits(f, runs):
                return DimExpr(code, confirmed=True)
    for n in varied:
        if _fits(functools.partial(_square, n), runs):
            return DimExpr(f"{n} * {n}", confirmed=True)
    for n in varied:
        if linear[n]:
            # a line through two sizes fits any curve there: only a third size confirms it
            points = len({s[n] for s in runs.symbols})
            return DimExpr(linear[n], confirmed=points > 2,
                           reason="" if points > 2 else f"fitted through {n} at two sizes only")
    return DimExpr(None, reason=f"no expression of the input dims and integer arguments fits the observed sizes "
                                f"{_observed(runs)}")


def _unconfirmed(names: list[str], runs: Runs) -> DimExpr:
    value = runs.values[0]
    # Only symbols that never changed can explain a dim that never changed.
    fixed = [n for n in names if not _varied(n, runs) and n in runs.symbols[0]]
    first = runs.symbols[0]
    fits = [n for n in fixed if first[n] == value]
    fits += [f"{a} * {b}" for a, b in combinations(fixed, 2) if first[a] * first[b] == value]
    fits += [f"{n} * {n}" for n in fixed if first[n] * first[n] == value]
    if value in (0, 1):
        # a size-0/1 *dim* equal to it is nearly always a coincidence (keepdim, broadcast axis): literal. An int
        # argument equal to it that the op never let change (repeat(n) at n=1) is a real alternative.
        ints = [f for f in fits if ".size(" not in f and " * " not in f]
        if not ints:
            return DimExpr(str(value), confirmed=True)
        return DimExpr(str(value), confirmed=False, alternatives=tuple(ints[:3]),
                       reason=f"constant {value}, or {', '.join(ints[:3])}, which never changed between runs")
    if not fits:
        return DimExpr(str(value), confirmed=True)
    unvaried = sorted({t for f in fits[:1] for t in f.replace("*", " ").split()})
    return DimExpr(fits[0], confirmed=False, alternatives=(*fits[1:3], str(value)),
                   reason=f"{' and '.join(unvaried)} never changed between runs (changing it made the op fail), so "
                          f"this could also be {', '.join((*fits[1:3], str(value)))}")


#: observations a "no expression fits" reason quotes (one line a reader can take in; the rest are counted)
_OBSERVED_SHOWN = 4


def _observed(runs: Runs) -> str:
    """The distinct observations, each with only the symbols that vary across runs (the fixed ones say nothing of
    the dim), at most ``_OBSERVED_SHOWN`` of them."""
    varied = [k for k in runs.symbols[0] if len({s.get(k) for s in runs.symbols}) > 1] if runs.symbols else []
    seen = list(dict.fromkeys(f"{v} at {_brief(s, varied)}" for s, v in zip(runs.symbols, runs.values)))
    more = f" (and {len(seen) - _OBSERVED_SHOWN} more)" if len(seen) > _OBSERVED_SHOWN else ""
    return ", ".join(seen[:_OBSERVED_SHOWN]) + more


def _brief(symbols: dict[str, int], keys: list[str] | None = None) -> str:
    shown = {k: symbols[k] for k in (keys or symbols) if k in symbols}
    return "(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"
