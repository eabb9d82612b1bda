"""The failure taxonomy, read from kinds.json: the one registry of kinds.

Each kind has a stable id, a title, a summary template (filled from the finding's context), a fix (one per
cause the evidence can name: ``fix_by_cause``), a snippet, and ``code_fix`` when ``tracecheck fix``
generates code for it. ``report.Finding`` refuses an id that is not here. Pure: no torch import.
"""
from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Kind:
    id: str
    title: str
    summary: str
    fix: str
    snippet: str = ""
    #: a fix per cause the evidence supports (``Finding.context["cause"]``); ``fix`` when none is named
    fix_by_cause: dict[str, str] = field(default_factory=dict)
    #: what ``tracecheck fix`` generates for this kind; "" when it has no code fix
    code_fix: str = ""
    #: how evidence is recognised as this kind (``Detect``); None: only code makes it (timeout, crash, ...)
    detect: "Detect | None" = None

    @property
    def doc(self) -> str:
        return f"docs/failures/{self.id}.md"


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    #: trusted only when a torch exception or a graph break carries the text (user code could write it)
    torch_only: bool = False


@dataclass(frozen=True)
class Detect:
    """A kind's detection rule (kinds.json ``detect``); classify.py applies the rules by ``order``."""

    order: int
    patterns: tuple[Pattern, ...] = ()
    gb_types: frozenset[str] = frozenset()
    exception_types: frozenset[str] = frozenset()
    #: the kind applies only to evidence with one of these gb_types, or none ("" stands for none)
    only_with_gb_types: frozenset[str] | None = None
    #: any Dynamo graph break (a gb_type on an Unsupported exception or a trace break) is this kind
    any_gb_type: bool = False


def _detect(d: dict[str, Any] | None) -> Detect | None:
    if not d:
        return None
    only = d.get("only_with_gb_types")
    return Detect(
        order=int(d["order"]),
        patterns=tuple(Pattern(re.compile(p["regex"]), bool(p.get("torch_only"))) for p in d.get("patterns", [])),
        gb_types=frozenset(d.get("gb_types", [])),
        exception_types=frozenset(d.get("exception_types", [])),
        only_with_gb_types=frozenset(only) if only is not None else None,
        any_gb_type=bool(d.get("any_gb_type")))


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    """All kinds by id, in taxonomy order."""
    data = json.loads(resources.files("tracecheck").joinpath("kinds.json").read_text())
    return {k["id"]: Kind(k["id"], k["title"], k["summary"], k["fix"], k.get("snippet", ""),
                          k.get("fix_by_cause", {}), k.get("code_fix", ""), _detect(k.get("detect")))
            for k in data["kinds"]}


def rules() -> list[Kind]:
    """The kinds that evidence can be recognised as, in the order their rules are tried."""
    return sorted((k for k in kinds().values() if k.detect is not None), key=lambda k: k.detect.order)


def ids() -> frozenset[str]:
    return frozenset(kinds())


class _Blank(dict):
    """Placeholders the context lacks read as ``?``: a summary never fails to render."""

    def __missing__(self, key: str) -> str:
        return "?"


def _fill(template: str, values: dict[str, Any]) -> str:
    flat = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in values.items()}
    try:
        return string.Formatter().vformat(template, (), _Blank(flat))
    except (ValueError, IndexError, AttributeError):
        return template


def summary(kind: str, values: dict[str, Any]) -> str:
    """The kind's one-sentence summary with ``values`` (the finding's context and derived fields) filled in."""
    return _fill(kinds()[kind].summary, values)


def fix_text(f: Any) -> str:
    """The fix for this finding (a ``report.Finding``): the kind's fix for the cause its evidence names, with the context's values
    (``{custom_ops}``, ``{random_ops}``, ``{stage}``) filled in."""
    kind = kinds().get(f.kind)
    if kind is None:
        return ""
    return _fill(kind.fix_by_cause.get(str(f.context.get("cause")), kind.fix), f.context)
