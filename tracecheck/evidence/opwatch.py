"""Op registrations seen while a file loads and its probes run (``Library.define``)."""
from __future__ import annotations

from typing import Any

from .frames import caller_frame
from .parsers import parser_failed


class OpRegistrationWatch:
    """Sees every ``Library.define`` (custom_op and torch.library.define go through it) while active.

    A name defined again with a different schema is an ``op-redefined`` event: ``torch.library.custom_op``
    silently replaces the earlier op (pytorch PR #122344), the mutates_args case of pytorch#187319.
    """

    def __init__(self) -> None:
        self.schemas: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self.events: list[dict[str, Any]] = []

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
        if qualname in self.schemas and self.schemas[qualname][0] != full:
            first, first_frame = self.schemas[qualname]
            self.events.append({"op": qualname, "first_schema": first, "second_schema": full,
                                "first_frame": first_frame, "second_frame": frame})
        self.schemas[qualname] = (full, frame)
