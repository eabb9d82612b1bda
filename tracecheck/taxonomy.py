"""The failure taxonomy, read from kinds.json: the one registry of kinds.

Each kind has a stable id, a title, a summary template (filled from the finding's context), a fix (one per
cause the evidence can name: ``fix_by_cause``), a snippet, and ``code_fix`` when ``tracecheck fix``
generates code for it. ``report.Finding`` refuses an id that is not here. Pure: no torch import.
"""
from __future__ import annotations

import json
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

    @property
    def doc(self) -> str:
        return f"docs/failures/{self.id}.md"


@lru_cache(maxsize=1)
def kinds() -> dict[str, Kind]:
    """All kinds by id, in taxonomy order."""
    data = json.loads(resources.files("tracecheck").joinpath("kinds.json").read_text())
    return {k["id"]: Kind(k["id"], k["title"], k["summary"], k["fix"], k.get("snippet", ""),
                          k.get("fix_by_cause", {}), k.get("code_fix", "")) for k in data["kinds"]}


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
