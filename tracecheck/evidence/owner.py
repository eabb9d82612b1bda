"""Whose code a frame is (issue 41): the user's (under the run's rootdir, outside site-packages), an installed
library's (its distribution's name and version) or torch's. Computed once, in the parent, after the probe's stages
are settled (``assign``, called by ``api.run``): the parent has the stage processes' environment. Cached per file.
No torch import: torch is the distribution named ``torch``, found like any other.

A file under no distribution outside the rootdir (``/tmp/x.py``, a folder put on ``PYTHONPATH``, the standard
library) is ``unknown``, not "yours": nothing says the user wrote it or can change it, and the label must not claim
more than is known. A file-less frame is torch's when torch generated it (``<eval_with_key>.N``), else unknown."""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import sys

from ..model.evidence import LIBRARY, TORCH, UNKNOWN, YOURS, Owner
from ..model.report import ProbeReport, is_generated

_SITE = ("site-packages", "dist-packages")


def owner_of(file: str | None, rootdir: str) -> Owner | None:
    """Whose code ``file`` is; None for no file. Cached per (file, rootdir)."""
    if not file:
        return None
    return _owner(str(file), os.path.realpath(rootdir) if rootdir else "")


@functools.lru_cache(maxsize=4096)
def _owner(file: str, root: str) -> Owner:
    if file.startswith("<"):
        return Owner(TORCH, "torch", _version("torch")) if is_generated(file) else Owner(UNKNOWN)
    full = os.path.realpath(file)
    if f"{os.sep}torchinductor_" in full:  # Inductor's output code
        return Owner(TORCH, "torch", _version("torch"))
    in_site = any(f"{os.sep}{s}{os.sep}" in full for s in _SITE)
    if root and not in_site and (full == root or full.startswith(root.rstrip(os.sep) + os.sep)):
        return Owner(YOURS)
    top = _top_level(full)
    dists = _distributions().get(top, []) if top else []
    if dists:
        dist = dists[0]
        return Owner(TORCH if dist.lower() == "torch" else LIBRARY, dist, _version(dist))
    if in_site and top:  # installed without metadata (a copied folder): the package's own name, no version
        return Owner(LIBRARY, top)
    return Owner(UNKNOWN)


def _top_level(full: str) -> str | None:
    """The top-level module ``full`` belongs to: its first path part under the deepest ``sys.path`` entry that holds
    it; else (an editable install's import hook puts no folder on sys.path) the outermost package folder above it
    (the last one up with an ``__init__.py``)."""
    best = ""
    for entry in sys.path:
        if not isinstance(entry, str) or not os.path.isdir(entry or "."):
            continue
        base = os.path.realpath(entry or ".").rstrip(os.sep) + os.sep
        if full.startswith(base) and len(base) > len(best):
            best = base
    if best:
        first = full[len(best):].split(os.sep)[0]
        return first[:-3] if first.endswith(".py") else first.split(".")[0] or None
    folder, top = os.path.dirname(full), None
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        top, folder = os.path.basename(folder), os.path.dirname(folder)
    return top


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # a broken distribution's metadata: no library is named, none is guessed
        return {}


@functools.lru_cache(maxsize=256)
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except Exception:
        return None


def assign(p: ProbeReport, rootdir: str) -> None:
    """Store the owner of every finding's user frame (``evidence["owner"]``) and of every graph break
    (``GraphBreak.owner``: the frame its finding points at, the caller outside torch where the break sits inside
    torch) of ``p``, in place."""
    for s in p.stages.values():
        for f in [*s.findings, *([s.failure] if s.failure is not None else [])]:
            frame = f.user_frame
            owner = owner_of(frame.file, rootdir) if frame is not None else None
            if owner is not None:
                f.evidence = dataclasses.replace(f.evidence, owner=owner)
        for b in s.breaks:
            caller = b.context.caller
            b.owner = owner_of(caller.file if caller is not None and caller.file else b.file, rootdir)
