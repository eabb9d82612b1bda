"""The patched copy of a probe file that ``tracecheck fix`` writes for graph breaks (model_code.py): the edits kept
so far (``Patch``), the copy's text with the functions of other files it replaces (library.py), the diffs, and
where a line of the original or of a library's rewritten function is in the copy. Pure text: the CLI process
builds it."""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Callable

from ..model.exitcodes import UsageError
from . import library
from .library import Function
from .prelude import read_source, source_lines, with_prelude
from .rewrites import Candidate
from .sourcetext import Edit, Source, apply, new_span, overlap

#: the first line of every diff ``fix`` writes: only such a file is ever overwritten by ``--diff``
DIFF_MARK = "# tracecheck fix: a rewrite of"


@dataclass(frozen=True)
class Patch:
    """What is kept: edits of the probe's file, and per other file the edits of its functions that the copy
    replaces (each function once, whatever number of its lines were rewritten)."""

    edits: tuple[Edit, ...] = ()
    #: file -> its edits
    library: tuple[tuple[str, tuple[Edit, ...]], ...] = ()
    #: (file, the function its edits are in, the rewrites there): the blocks the copy appends
    functions: tuple[tuple[str, Function, tuple[str, ...]], ...] = ()

    def lib_edits(self, file: str) -> tuple[Edit, ...]:
        return next((e for f, e in self.library if f == file), ())

    def overlaps(self, cand: Candidate, file: str) -> bool:
        return overlap(self.edits, cand.edits) or (bool(cand.library) and overlap(self.lib_edits(file), cand.library))

    def with_(self, cand: Candidate, file: str = "") -> "Patch":
        """This patch and the candidate's edits, a module setting or import added once."""
        edits = self.edits + tuple(e for e in cand.edits if e not in self.edits)
        if not cand.library or cand.function is None:
            return Patch(edits, self.library, self.functions)
        library_ = tuple((f, e + cand.library) if f == file else (f, e) for f, e in self.library)
        if not any(f == file for f, _ in self.library):
            library_ += ((file, cand.library),)
        functions = tuple((f, fn, what + (cand.rewrite,)) if f == file and fn == cand.function else (f, fn, what)
                          for f, fn, what in self.functions)
        if not any(f == file and fn == cand.function for f, fn, _ in self.functions):
            functions += ((file, cand.function, (cand.rewrite,)),)
        return Patch(edits, library_, functions)

    def __bool__(self) -> bool:
        return bool(self.edits or self.library)


@dataclass
class _Block:
    """A function block at the end of the copy: its rewritten library text's lines ``first..last`` are the copy's
    lines from ``at`` (before the prelude)."""

    file: str
    first: int
    last: int
    at: int


@dataclass
class Copies:
    """The probe file and the other files whose functions the copy replaces (read once each)."""

    path: str
    text: str
    #: what the upstream diffs' names start with (the patched copy's name without ``_fixed``): one fix's diffs never
    #: overwrite another probe's
    stem: str = "fix"
    sources: dict[str, Source | str] = field(default_factory=dict)

    def library(self, file: str) -> Source | None:
        """Another file's source (None where it cannot be read as UTF-8 Python: its breaks get no code rewrite)."""
        if file not in self.sources:
            try:
                self.sources[file] = Source(read_source(file, utf8_only=True))
            except (UsageError, SyntaxError, ValueError) as e:
                self.sources[file] = str(e)
        got = self.sources[file]
        return got if isinstance(got, Source) else None

    def unreadable(self, file: str) -> str:
        """Why ``file`` could not be read ("" when it was)."""
        got = self.sources.get(file, "")
        return got if isinstance(got, str) else ""

    def where(self, file: str) -> str:
        return library.label(file, os.path.dirname(os.path.abspath(self.path)))

    def upstream_name(self, file: str) -> str:
        """The upstream diff's file name for ``file``'s package (``model.transformers.upstream.diff``)."""
        top = self.where(file).split("/")[0]
        return f"{self.stem}.{os.path.splitext(top)[0]}.upstream.diff"

    def _layout(self, patch: Patch) -> tuple[str, list[_Block]]:
        text = apply(self.text, patch.edits)
        if not patch.functions:
            return text, []
        parts = [text.rstrip("\n") + "\n\n\n" + library.SWAP_HELPER + "\n\n"]
        line = sum(len(source_lines(p, keepends=True)) for p in parts) + 1
        blocks = []
        # a nested function's block before the one of the function around it: its original code is still there to
        # find (in the outer's constants) until the outer's is swapped
        def depth(item: tuple[str, Function, tuple[str, ...]]) -> int:
            return -sum(f == item[0] and g != item[1] and g.start <= item[1].start and item[1].end <= g.end
                        for f, g, _ in patch.functions)
        for file, fn, what in sorted(patch.functions, key=depth):
            src = self.library(file)
            assert src is not None  # (a candidate was made from it)
            edits = patch.lib_edits(file)
            rewritten = apply(src.text, edits)
            lo, hi = new_span(edits, fn.start, fn.end)
            code, at = library.block(fn, rewritten, new_span(edits, fn.first, fn.first)[0], self.where(file),
                                     ", ".join(dict.fromkeys(what)), self.upstream_name(file))
            blocks.append(_Block(file, lo, hi, line + at))  # (after the blank line before each block)
            parts.append("\n" + code)
            line += len(source_lines("\n" + code, keepends=True))
        return "".join(parts), blocks

    def rewritten(self, patch: Patch) -> str:
        return self._layout(patch)[0]

    def runnable(self, patch: Patch, where: str) -> tuple[str, Callable[[int], int], Callable[[str, int], int | None]]:
        """The copy to write at ``where``; a map from a line of the rewritten probe text to its line in that copy;
        and one from a line of another file's rewritten text (``new_span`` of its edits) to the copy's line of it,
        None where the copy holds no function of that file with that line."""
        body, blocks = self._layout(patch)
        text, at, added = with_prelude(body, self.path, where)

        def copy_line(line: int) -> int:
            return line + added if line >= at else line

        def lib_line(file: str, line: int) -> int | None:
            b = next((b for b in blocks if b.file == file and b.first <= line <= b.last), None)
            return None if b is None else copy_line(b.at + line - b.first)

        return text, copy_line, lib_line

    def diff(self, patch: Patch, label: str) -> str:
        """A unified diff from the original to the rewritten text (``git apply`` / ``patch -p1``), after a first
        line that says what wrote it (both tools skip text before the first ``---``)."""
        return _unified(self.text, self.rewritten(patch), label, f"{DIFF_MARK} {label}")

    def upstream(self, patch: Patch, owners: dict[str, str]) -> dict[str, str]:
        """Per other file rewritten: its upstream diff's file name and text (``owners``: file -> "name version")."""
        out: dict[str, str] = {}
        for file, edits in patch.library:
            src = self.library(file)
            if src is None:
                continue
            where = self.where(file)
            name = self.upstream_name(file)
            text = _unified(src.text, apply(src.text, edits), where,
                            f"{library.UPSTREAM_MARK} {where} ({owners.get(file) or 'its package'})")
            out[name] = out[name] + text.split("\n", 1)[1] if name in out else text
        return out


def _unified(old: str, new: str, label: str, head: str) -> str:
    lines = difflib.unified_diff(source_lines(old, keepends=True), source_lines(new, keepends=True),
                                 f"a/{label}", f"b/{label}")
    # a last line without its newline gets the marker diff(1) writes, or git apply calls the patch corrupt
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return f"{head}\n{body}"


def how_to_apply(patch: Patch, copies: Copies, diff: str | None, patched: str, upstream: list[str]) -> list[str]:
    """One line per kind of change: how to make it in the user's own code (the patched copy shows it applied)."""
    label = os.path.basename(copies.path)
    out = [f"every change at once, in {label}: " + (f"git apply {diff}" if diff else "the diff shown above (--diff "
                                                    "PATH writes it as a patch for git apply)")]
    settings = [line.split("  # ")[0] for e in patch.edits for line in e.text.splitlines()
                if line.startswith("torch._dynamo.config.")]
    if settings:
        out.append("or by hand, after your imports: " + "; ".join(dict.fromkeys(settings)) +
                   (" (with `import logging`)" if any("logging.Logger" in x for x in settings) else ""))
    for file in dict.fromkeys(f for f, _, _ in patch.functions):
        where = copies.where(file)
        top = where.split("/")[0].removesuffix(".py")
        names = ", ".join(fn.name for f, fn, _ in patch.functions if f == file)
        out.append(f"or by hand, {where} ({names}): copy `_tc_swap_code` and each block from `# ---- tracecheck "
                   f"fix: ...` to `# ---- end` out of {os.path.relpath(patched)}, after your import of {top}" +
                   (f"; upstream: apply {copies.upstream_name(file)} to {top}'s source" if copies.upstream_name(file) in
                    upstream else ""))
    return out
