"""What the classifier's rules read of a stage's evidence (``Facts``: an error record's or a graph break's), and what
an error's chain says of itself: the exception it comes down to (``innermost``), where that was raised
(``raising_frame``, ``root_frames``), whether the user's code called torch there (``called_from_user_code``), the
torch.func transform it was raised under (``transform_in_traceback``). Pure: no torch import (files are told apart by
their paths)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..model.errors import ChainLink, ErrorRecord, FakeImplRaise
from ..model.evidence import InnerException
from ..model.records import BreakRecord, Frame
from ..model.report import is_generated, says_nothing


def short_type(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def trim(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"


@dataclass(frozen=True)
class Facts:
    """What the rules read of the evidence: an error record's (``of_error``) or a graph break's (``of_break``)."""

    #: the exception and what it wraps, outermost first (never empty: a break's is one link with no type or message)
    chain: tuple[ChainLink, ...]
    #: the formatted traceback; a break's user code traceback
    traceback: str = ""
    phase: str | None = None
    #: the torch.func transform the error was raised under
    transform: str | None = None
    fake_impl: FakeImplRaise | None = None
    user_frame: Frame | None = None
    traced_in_torch: bool = False
    #: a graph break from the structured trace: where Dynamo placed it, its source line and the user's line that led
    #: there when that is inside torch (``caller``)
    is_break: bool = False
    file: str | None = None
    line: int | None = None
    code: str | None = None
    caller: Frame | None = None

    @classmethod
    def of_error(cls, e: ErrorRecord) -> "Facts":
        return cls(e.links, e.traceback, e.phase, e.transform, e.fake_impl, e.user_frame, e.traced_in_torch)

    @classmethod
    def of_break(cls, b: BreakRecord) -> "Facts":
        return cls((ChainLink(),), b.user_stack, is_break=True, file=b.file, line=b.line, code=b.code,
                   caller=b.caller)

    @property
    def root(self) -> ChainLink:
        """The innermost exception of the chain."""
        return self.chain[-1]


#: a frame of a Python traceback (``File "...", line N, in f``), and the line that names the exception raised
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?:\s*(?P<code>[^\n]*)\n)?', re.M)
_TB_SEPARATORS = re.compile(r"\n(?:The above exception was the direct cause of the following exception:|During handling "
                            r"of the above exception, another exception occurred:)\n")


#: an exception that is Dynamo's own account of why it stopped (a graph break's Explanation/Hints): its words are the
#: root cause to show, whatever internal error it was raised from
_DYNAMO_VERDICT = re.compile(r"^\s*Explanation:", re.M)


#: torch's wrappers: their own words are a header over the error they wrap (``raise ... from`` it), which is the one
#: to show. Any other exception raised from another (a user's ValueError from a KeyError, Inductor's CppCompileError
#: from the compiler's CalledProcessError) says the more useful thing itself.
_TORCH_WRAPPERS = frozenset({"BackendCompilerFailed", "TorchRuntimeError", "InternalTorchDynamoError", "InductorError"})


def innermost(chain: tuple[ChainLink, ...]) -> InnerException | None:
    """The exception an error (its ``chain``) comes down to, when that is not the outermost one: down
    BackendCompilerFailed's ``inner_exception``, down ``raise ... from`` out of torch's own wrappers
    (``_TORCH_WRAPPERS``), and past any exception whose own first line says nothing; stopping at Dynamo's own
    account of a graph break. A ``__context__`` (raised while another was handled) is followed only from an
    exception with nothing of its own to say: torch sometimes handles one error before raising the one that matters."""
    if len(chain) < 2:
        return None
    at = 0
    for i in range(1, len(chain)):
        here, via = chain[at], chain[i].via
        if _DYNAMO_VERDICT.search(here.message):
            break
        wrapper = short_type(here.type) in _TORCH_WRAPPERS
        if via == "inner" or (via == "cause" and wrapper) or says_nothing(here.message):
            at = i
        else:
            break
    if at == 0:
        return None
    return InnerException(short_type(chain[at].type), trim(chain[at].message, 2000))


def raising_frame(raw: Facts) -> Frame | None:
    """Where the innermost exception was raised: its record's ``raised_at`` (evidence/exceptions.raised_at), else the
    innermost of its frames (``root_frames``)."""
    if raw.root.raised_at is not None:
        return raw.root.raised_at
    frames = root_frames(raw)
    return frames[-1] if frames else None


#: torch's, the standard library's and tracecheck's own files (detect imports no torch: by path), and code torch or
#: Python generated (``<eval_with_key>.N``, ``<frozen genericpath>``, ``<string>``)
_TORCH_FILE = re.compile(r"(^|[/\\])torch[/\\]")
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_TRACECHECK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: where torch's compilers take over from running code: Dynamo's frame conversion (its callback intercepts a frame and
#: traces it symbolically), compiled autograd, AOTAutograd and torch.export's tracer
_COMPILER_ENTRY = re.compile(r"(^|[/\\])torch[/\\](_dynamo[/\\](convert_frame|compiled_autograd)\.py|"
                             r"_functorch[/\\]aot_autograd\.py|export[/\\]_trace\.py)$")


def _outside_torch(file: str) -> bool:
    """A frame of the user's or a library's code (site-packages included): not torch's, the standard library's,
    tracecheck's, nor generated code."""
    if not file or file.startswith("<"):
        return False
    full = os.path.abspath(file)
    if _TORCH_FILE.search(file) or full.startswith(_TRACECHECK_DIR):
        return False
    return not (full.startswith(_STDLIB_DIR) and not re.search(r"(site|dist)-packages", full))


def root_frames(raw: Facts) -> tuple[Frame, ...]:
    """The innermost exception's traceback, outermost frame first: its record's ``frames`` (evidence/exceptions.tb_frames),
    else the frames of the first block of the formatted traceback (Python prints the innermost exception first)."""
    if raw.root.frames is not None:
        return raw.root.frames
    tb = raw.traceback
    if "Traceback (most recent call last)" not in tb:
        return ()
    block = _TB_SEPARATORS.split(tb)[0].split("\nfrom user code:", 1)[0]
    return tuple(Frame.of(m.group("file"), int(m.group("line")), m.group("func"), (m.group("code") or "").strip())
                 for m in _TB_FRAME.finditer(block))


def called_from_user_code(raw: Facts) -> bool:
    """Did torch raise under a call the user's or a library's code made for real: the innermost frame of theirs in the
    innermost exception's traceback has no compiler entry (``_COMPILER_ENTRY``) under it. Their code called torch
    directly (a real tensor mixed into a FakeTensorMode they made), or torch ran their code for real and it called torch
    (a fake impl, a ``__torch_function__``): theirs to look at first, never "a torch bug". Code Dynamo traces runs
    symbolically and leaves no frame; a frame it intercepts (a graph break's resume function) has the entry under it."""
    frames = root_frames(raw)
    mine = [i for i, f in enumerate(frames) if _outside_torch(f.file)]
    if not mine:
        return False
    below = frames[mine[-1] + 1:]
    return not any(_COMPILER_ENTRY.search(f.file.replace("\\", "/")) for f in below)


def generated_frame(text: str) -> Frame | None:
    """The innermost frame of Dynamo's ``from user code:`` block when it is code torch generated (``<eval_with_key>``:
    an FX graph such as compiled autograd's backward), else None."""
    if "from user code:" not in text:
        return None
    block = text.split("from user code:", 1)[1].split("Set TORCHDYNAMO_VERBOSE", 1)[0]  # Dynamo's suffix ends it
    frames = list(_TB_FRAME.finditer(block))
    if not frames or not is_generated(frames[-1].group("file")):
        return None
    m = frames[-1]
    return Frame.of(m.group("file"), int(m.group("line")), None, (m.group("code") or "").strip())


#: a frame of torch.func's own Python in a traceback, and the function that names the transform it runs
_FUNCTORCH_FRAME = re.compile(r'torch/_functorch/\w+\.py", line \d+, in (?P<func>\w+)')
_TRANSFORM_OF = {"_flat_vmap": "vmap", "vmap_impl": "vmap", "grad_impl": "grad", "grad_and_value_impl": "grad",
                 "_vjp_with_argnums": "vjp", "_jvp_with_argnums": "jvp", "jacrev": "jacrev", "jacfwd": "jacfwd",
                 "hessian": "hessian"}


def transform_in_traceback(traceback: str) -> str | None:
    """The torch.func transform an eager error was raised under (the probe called torch.func.vmap or grad itself),
    read from the frames of its ``traceback``, innermost first; None when it ran under none. Only for an error raised
    in eager code: a compiled run's traceback holds the frames Dynamo traced (torch.vmap inlined), not transforms."""
    tb = traceback.replace("\\", "/")
    found = [_TRANSFORM_OF[m.group("func")] for m in _FUNCTORCH_FRAME.finditer(tb) if m.group("func") in _TRANSFORM_OF]
    return found[-1] if found else None
