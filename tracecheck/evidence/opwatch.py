"""Op registrations seen while a file loads and its probes run (``Library.define``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.frame import Frame
from ..model.records import Redefinition
from ..model.reportio import Json
from .frames import caller_frame
from .parsers import parser_failed


@dataclass(frozen=True)
class Definition:
    """The schema an op name was last defined with, and where."""

    schema: str
    frame: Frame | None = None


class OpRegistrationWatch:
    """Sees every ``Library.define`` (custom_op and torch.library.define go through it) while active.

    A name defined again with a different schema is an ``op-redefined`` event: ``torch.library.custom_op``
    silently replaces the earlier op (pytorch PR #122344), the mutates_args case of pytorch#187319.
    """

    def __init__(self) -> None:
        self.schemas: dict[str, Definition] = {}
        self.redefinitions: list[Redefinition] = []

    @property
    def events(self) -> list[Json]:
        """The redefinitions so far, as they cross to the parent (JSON)."""
        return [r.to_wire() for r in self.redefinitions]

    def __enter__(self) -> "OpRegistrationWatch":
        import torch.library

        self._orig = orig = torch.library.Library.define
        watch = self

        def define(lib: Any, schema: str, *args: Any, **kwargs: Any) -> Any:
            result = orig(lib, schema, *args, **kwargs)
            try:
                watch._saw(lib.ns, schema)
            except Exception:  # the user's define went through; the task reports the watch's own failure
                parser_failed()
            return result

        setattr(torch.library.Library, "define", define)
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.library

        setattr(torch.library.Library, "define", self._orig)

    def _saw(self, ns: str, schema: str) -> None:
        name = schema.split("(", 1)[0].strip()
        qualname = name if "::" in name else f"{ns}::{name}"
        full = f"{qualname}{schema[len(name):].strip()}" if "::" not in name else schema
        frame = caller_frame()
        first = self.schemas.get(qualname)
        if first is not None and first.schema != full:
            self.redefinitions.append(Redefinition(qualname, first.schema, full, first.frame, frame))
        self.schemas[qualname] = Definition(full, frame)
