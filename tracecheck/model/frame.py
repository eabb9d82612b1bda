"""A source location: where a finding points (the user's line, a fake impl's raise, a library's call). Its own module
because every record names one: the evidence of a finding (model/evidence.py), a stage's records (model/records.py,
model/errors.py) and the report all read it. Pure: no torch import."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .reportio import Json, text


@dataclass(frozen=True)
class Frame:
    """A source location. On the wire and in a report it is a plain dict (an error record's ``user_frame``,
    ``evidence["user_frame"]``); code reads it as a ``Frame`` through ``Frame.from_dict`` or ``Finding.user_frame``,
    never by its keys."""

    file: str
    line: int | None = None
    function: str | None = None
    #: the source line, stripped
    code: str | None = None

    @classmethod
    def of(cls, file: str, line: int | None = None, function: str | None = None,
           code: str | None = None) -> "Frame":
        """The frame of a location a listener read, as ``from_dict`` would read it back: an empty function name or
        source line (a frame of ``<string>``) is None."""
        return cls(file, line, function or None, code or None)

    @classmethod
    def from_dict(cls, d: Any) -> "Frame | None":
        """The frame of a report's or a record's dict; None for a missing one or one without a file (what any
        version's report may hold where nothing placed the failure). A ``Frame`` is read as it is."""
        if isinstance(d, Frame):
            return d
        if not isinstance(d, dict) or not d.get("file"):
            return None
        line = d.get("line")
        return cls(str(d["file"]), int(line) if isinstance(line, (int, str)) and str(line).isdigit() else None,
                   text(d.get("function")), text(d.get("code")))

    def to_dict(self) -> Json:
        return asdict(self)

    @property
    def location(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"
