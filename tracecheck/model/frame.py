"""A source location: where a finding points (the user's line, a fake impl's raise, a library's call). On the wire
and in a report it is a plain dict (``evidence["user_frame"]``, an error record's ``user_frame``); code reads it
as a ``Frame`` through ``Frame.from_dict`` or ``Finding.user_frame``, never by its keys. Pure: no torch import."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Frame:
    file: str
    line: int | None = None
    function: str | None = None
    #: the source line, stripped
    code: str | None = None

    @classmethod
    def from_dict(cls, d: Any) -> "Frame | None":
        """The frame of a report's or a record's dict; None for a missing one or one without a file (what any
        version's report may hold where nothing placed the failure)."""
        if not isinstance(d, dict) or not d.get("file"):
            return None
        line = d.get("line")
        return cls(str(d["file"]), int(line) if isinstance(line, (int, str)) and str(line).isdigit() else None,
                   d.get("function") or None, d.get("code") or None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def location(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"
