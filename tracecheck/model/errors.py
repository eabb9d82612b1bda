"""An exception a stage caught, as data: ``ErrorRecord`` (evidence/exceptions.error_record makes it in the stage
process, classify.detect.classify_error labels it in the parent), its cause chain (``ChainLink``) and, when a custom
op's fake impl raised it, that raise (``FakeImplRaise``). Typed where it is made; a dict only on the wire
(``to_wire``/``of``: JSON to the parent, a task's result, the survey's ``setup_error``). Pure: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .evidence import headline
from .frame import Frame
from .reportio import Json, integer, obj, text, texts


def frame_wire(frame: Frame | None) -> Json | None:
    """A frame as the wire writes it (a dict, or null)."""
    return frame.to_dict() if frame is not None else None


@dataclass(frozen=True)
class ChainLink:
    """One exception of an error's chain: the exception itself first, then what it wraps."""

    #: the exception's qualified type name (``torch._dynamo.exc.Unsupported``; a builtin's bare name)
    type: str = ""
    message: str = ""
    #: where it was raised (its innermost traceback frame, torch's own files included); None: raised in C
    raised_at: Frame | None = None
    #: how it was reached from the link before: "raised" (the first), "inner" (BackendCompilerFailed's
    #: ``inner_exception``), "cause" (``raise ... from``) or "context" (raised while another was handled)
    via: str = "raised"
    #: its own traceback, outermost first, with no source lines: recorded for the innermost link only (None: not
    #: recorded; classify.facts.root_frames then reads the formatted traceback)
    frames: tuple[Frame, ...] | None = None

    def to_wire(self) -> Json:
        out: Json = {"type": self.type, "message": self.message, "raised_at": frame_wire(self.raised_at),
                     "via": self.via}
        if self.frames is not None:
            out["frames"] = [{"file": f.file, "line": f.line, "function": f.function} for f in self.frames]
        return out

    @classmethod
    def of(cls, d: Any) -> "ChainLink":
        if isinstance(d, ChainLink):
            return d
        d = obj(d)
        frames = d.get("frames")
        return cls(str(d.get("type") or ""), str(d.get("message") or ""), Frame.from_dict(d.get("raised_at")),
                   str(d.get("via") or "raised"),
                   tuple(f for f in map(Frame.from_dict, frames) if f is not None) if isinstance(frames, list)
                   else None)


@dataclass(frozen=True)
class FakeImplRaise:
    """An exception a custom op's own fake impl raised (evidence/exceptions.fake_impl_raised): the op, what it
    raised, and the fake's line."""

    #: the op as torch prints it (``mylib.op.default``)
    op: str
    #: the exception's short type name
    exception_type: str
    message: str
    frame: Frame | None = None

    def to_wire(self) -> Json:
        return {"op": self.op, "exception_type": self.exception_type, "message": self.message,
                "frame": frame_wire(self.frame)}

    @classmethod
    def of(cls, d: Any) -> "FakeImplRaise | None":
        if isinstance(d, FakeImplRaise) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        return cls(str(d.get("op") or ""), str(d.get("exception_type") or ""), str(d.get("message") or ""),
                   Frame.from_dict(d.get("frame")))


@dataclass(frozen=True)
class ErrorRecord:
    """One exception a stage caught (evidence/exceptions.error_record), for ``classify.detect.classify_error``; the
    fields below ``traced_in_torch`` are set by the stage that caught it, where they apply."""

    #: the outermost exception's qualified type name, and its message
    type: str = ""
    message: str = ""
    #: the exception, then what it wraps (``inner_exception``, cause, context), outermost first
    chain: tuple[ChainLink, ...] = ()
    #: Dynamo's graph-break type (``Unsupported.gb_type``) of an exception of the chain, and its GB code
    gb_type: str | None = None
    gb_code: str | None = None
    #: when it was raised: "setup" (calling the probe function), "forward", "backward", an opcheck test name, ...
    phase: str | None = None
    #: the innermost frame in the user's or a library's code (evidence/exceptions.user_frame)
    user_frame: Frame | None = None
    #: the formatted traceback (its last 20,000 characters)
    traceback: str = ""
    #: a custom op's fake impl raised it (evidence/exceptions.fake_impl_raised)
    fake_impl: FakeImplRaise | None = None
    #: Dynamo was tracing torch's own code when it stopped (the innermost ``from user code:`` frame is torch's)
    traced_in_torch: bool = False
    #: the training step that raised (eager's second step; compiled_autograd's steps)
    step: int | None = None
    #: the batch size it was raised at (the dynamic stage)
    batch_size: int | None = None
    #: opcheck: where the op's fake impl is defined (where a fake-mismatch's fix goes)
    fake_def: Frame | None = None
    #: the vmap stage: the torch.func transform that raised, and the old-style autograd.Function classes the probe
    #: calls (when the refusal names setup_context)
    transform: str | None = None
    functions: tuple[str, ...] = ()

    def headline(self, limit: int = 200) -> str:
        """``Type: first line`` (model/evidence.headline)."""
        return headline({"type": self.type, "message": self.message}, limit)

    def to_wire(self) -> Json:
        """The record as JSON writes it: every field error_record fills, then those a stage set."""
        out: Json = {
            "type": self.type, "message": self.message, "chain": [c.to_wire() for c in self.chain],
            "gb_type": self.gb_type, "gb_code": self.gb_code, "phase": self.phase,
            "user_frame": frame_wire(self.user_frame), "traceback": self.traceback,
            "fake_impl": self.fake_impl.to_wire() if self.fake_impl is not None else None,
            "traced_in_torch": self.traced_in_torch}
        for name, value in (("step", self.step), ("batch_size", self.batch_size),
                            ("fake_def", frame_wire(self.fake_def)), ("transform", self.transform)):
            if value is not None:
                out[name] = value
        if self.functions:
            out["functions"] = list(self.functions)
        return out

    @classmethod
    def of(cls, d: Any) -> "ErrorRecord | None":
        """The record of its wire form (a missing key is the field's default, a value of the wrong shape reads as
        missing); a record as it is; None for none."""
        if isinstance(d, ErrorRecord) or d is None:
            return d
        if not isinstance(d, dict):
            return None
        chain = d.get("chain")
        return cls(
            type=str(d.get("type") or ""), message=str(d.get("message") or ""),
            chain=tuple(ChainLink.of(c) for c in chain) if isinstance(chain, list) else (),
            gb_type=text(d.get("gb_type")), gb_code=text(d.get("gb_code")), phase=text(d.get("phase")),
            user_frame=Frame.from_dict(d.get("user_frame")), traceback=str(d.get("traceback") or ""),
            fake_impl=FakeImplRaise.of(d.get("fake_impl")), traced_in_torch=d.get("traced_in_torch") is True,
            step=integer(d.get("step")), batch_size=integer(d.get("batch_size")),
            fake_def=Frame.from_dict(d.get("fake_def")), transform=text(d.get("transform")),
            functions=texts(d.get("functions")))

    @property
    def links(self) -> tuple[ChainLink, ...]:
        """The chain; a record that carries none (a recorded message) is its own one link."""
        return self.chain or (ChainLink(self.type, self.message),)
