"""Every torch-version difference tracecheck depends on, in one place (tested in tests/test_compat.py).

Supported: torch 2.8 - 2.14 (pyproject). Paths taken per version are noted at each shim.
"""
from __future__ import annotations

import contextlib
import json
import os
from functools import lru_cache
from typing import Any, Callable, Iterator

import torch

GB_SITE = "https://meta-pytorch.github.io/compile-graph-break-site/gb/"


@lru_cache(maxsize=1)
def gb_registry() -> dict[str, str]:
    """gb_type -> GB code from torch/_dynamo/graph_break_registry.json (all historical wordings).

    The registry ships with torch 2.8+; an older or stripped install gives an empty map, and codes then
    come from the doc link in the message (classify.gb_code_from_text).
    """
    path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
    try:
        with open(path) as f:
            registry = json.load(f)
    except (OSError, ValueError):
        return {}
    mapping: dict[str, str] = {}
    for code, entries in registry.items():
        for entry in entries:  # newest first; keep the first code seen for a wording
            mapping.setdefault(entry.get("Gb_type", ""), code)
    return mapping


def gb_code(gb_type: str | None) -> str | None:
    return gb_registry().get(gb_type) if gb_type else None


def gb_doc_link(code: str | None) -> str | None:
    return f"{GB_SITE}gb{code[2:]}.html" if code else None


def explain(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``torch._dynamo.explain(fn)(*args)``; the curried form is the only one left since 2.2."""
    return torch._dynamo.explain(fn)(*args, **kwargs)


@contextlib.contextmanager
def compiled_autograd(compiler: Callable[..., Any] | str = "aot_eager") -> Iterator[None]:
    """Turn compiled autograd on for the enclosed backward passes.

    Paths: 2.13+ has ``torch._dynamo.compiled_autograd._enable`` (the tutorials' ``enable`` is gone);
    2.8 - 2.12 have ``enable``. Both take a compiler fn; a backend name is wrapped in torch.compile.
    """
    from torch._dynamo import compiled_autograd as ca

    if isinstance(compiler, str):
        backend = compiler

        def compiler(gm):  # noqa: F811 - compiled autograd wants a callable
            return torch.compile(gm, backend=backend, fullgraph=True)

    enable = getattr(ca, "_enable", None) or getattr(ca, "enable")
    with enable(compiler):
        yield


def set_single_compile_thread() -> None:
    """Inductor spawns a compile-worker pool per process by default; one stage process needs none."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
