"""The text side of ``tracecheck fix``'s rewrites: a file's source with its lines and AST (``Source``), where Dynamo
stopped in it (``Site``), and edits of its text (``Edit``, ``apply``, ``overlap``, ``new_span``). Pure text and
``ast``: the CLI process rewrites with it and never runs user code."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .call_facts import CCall
from .prelude import header_end, source_lines


@dataclass(frozen=True)
class Site:
    """Where Dynamo stopped in the probe's file: the finding's user frame, kind and gb_type."""

    line: int
    kind: str
    gb_type: str
    code: str
    #: a C call (``custom-op``, a pybind-builtin site): the call as c_call_at found it, plus what c_call.py
    #: rendered for it; None for any other site
    call: CCall | None = field(default=None, compare=False, hash=False)
    #: the library file the line is in, for a C call a library makes ("" for the probe's own file): the probe's
    #: file then installs the custom op in that library's module rather than editing the call
    file: str = ""
    #: whose file it is (an installed library's name and version, the finding's evidence): the upstream diff's
    #: header names it ("" where not known)
    owner: str = field(default="", compare=False, hash=False)


@dataclass(frozen=True)
class Edit:
    """Replace the text from ``start`` to ``end`` (``(line, col)``: 1-based line, 0-based column) with ``text``.
    ``start == end`` inserts."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


class Source:
    """The probe file's text, its lines and its AST."""

    def __init__(self, text: str):
        self.text = text
        self.lines = source_lines(text, keepends=True)
        self.tree = ast.parse(text)

    def statement_at(self, line: int) -> ast.stmt | None:
        """The innermost statement spanning ``line``."""
        best: ast.stmt | None = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or (node.lineno, -(node.end_lineno or 0)) >= (best.lineno, -(best.end_lineno or 0)):
                    best = node
        return best

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def position(self, line: int, byte_col: int) -> tuple[int, int]:
        """An Edit position from ast's (line, UTF-8 byte offset) pair: Edit columns count characters."""
        return line, len(self.lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def offset(self, pos: tuple[int, int]) -> int:
        """The index in ``text`` of an Edit position."""
        return sum(len(line) for line in self.lines[:pos[0] - 1]) + pos[1]

    def span(self, node: ast.expr | ast.stmt) -> tuple[tuple[int, int], tuple[int, int]]:
        """A node's start and end as Edit positions."""
        return (self.position(node.lineno, node.col_offset),
                self.position(node.end_lineno or node.lineno, node.end_col_offset or 0))

    def indent(self, node: ast.stmt) -> str:
        line = self.lines[node.lineno - 1]
        return line[:len(line) - len(line.lstrip())]

    def owns_its_lines(self, node: ast.stmt) -> bool:
        """The statement starts its first line and ends its last (no ``a; b`` sharing), so it can be re-indented."""
        first, last = self.lines[node.lineno - 1], self.lines[(node.end_lineno or node.lineno) - 1]
        rest = last.encode("utf-8")[node.end_col_offset or 0:].decode("utf-8", errors="ignore").strip()
        return first.encode("utf-8")[:node.col_offset].strip() == b"" and (rest == "" or rest.startswith("#"))

    def whole_lines(self, node: ast.stmt, text: str) -> Edit:
        """Replace the statement's lines (indentation and trailing comment included) with ``text``."""
        end = node.end_lineno or node.lineno
        return Edit((node.lineno, 0), (end, len(self.lines[end - 1].rstrip("\r\n"))), text.rstrip("\n"))

    def module_setting(self, statement: str) -> tuple[Edit, ...]:
        """Edits that run ``statement`` at import, right after the module's ``import torch`` (added when the file
        only has ``from torch import ...``)."""
        body = self.tree.body
        for node in body:
            if isinstance(node, ast.Import) and any(a.name == "torch" and a.asname is None for a in node.names):
                end = node.end_lineno or node.lineno
                return (Edit((end + 1, 0), (end + 1, 0), statement + "\n"),)
        at = header_end(self.tree)
        return (Edit((at, 0), (at, 0), f"import torch\n{statement}\n"),)

    def end_setting(self, lines: list[str]) -> tuple[Edit, ...]:
        """Edits that run ``lines`` once the module's own imports have run: at its end (a setting that names a
        library's object, ``logging.Logger.warning_once``, which exists once that library is imported)."""
        end = (len(self.lines) + 1, 0)
        lead = "" if not self.text or self.text.endswith(("\n", "\r")) else "\n"
        return (Edit(end, end, lead + "\n" + "\n".join(lines) + "\n"),) + self.needs_torch_import()

    def binds(self, name: str) -> bool:
        """Does the module bind ``name`` at top level otherwise than by ``import name``?"""
        for node in self.tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if any((a.asname or a.name.split(".")[0]) == name and not (a.asname is None and a.name == name
                                                                           and isinstance(node, ast.Import))
                       for a in node.names):
                    return True
            elif any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                     for n in ast.walk(node)) or (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and
                                                  node.name == name):
                return True
        return False

    def needs_torch_import(self) -> tuple[Edit, ...]:
        """An ``import torch`` at the top when the module does not bind the name ``torch`` itself."""
        for node in self.tree.body:
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" and a.asname is None
                                                    for a in node.names):
                return ()
        at = header_end(self.tree)
        return (Edit((at, 0), (at, 0), "import torch\n"),)


def overlap(a: "list[Edit] | tuple[Edit, ...]", b: "list[Edit] | tuple[Edit, ...]") -> bool:
    """Do two sets of edits touch the same text (an insertion at the same point is no overlap)?"""
    return any(x != y and x.start < y.end and y.start < x.end for x in a for y in b)


def apply(text: str, edits: "list[Edit] | tuple[Edit, ...]") -> str:
    """``text`` with ``edits`` applied, bottom-up so that positions stay valid. Raises ValueError on overlapping
    edits (a rewrite inside text another rewrite replaced)."""
    if overlap(edits, edits):
        raise ValueError("overlapping edits")
    lines = source_lines(text, keepends=True) + [""]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lc: tuple[int, int]) -> int:
        return offsets[lc[0] - 1] + lc[1] if lc[0] - 1 < len(offsets) else len(text)

    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:pos(e.start)] + e.text + text[pos(e.end):]
    return text


def new_span(edits: "list[Edit] | tuple[Edit, ...]", first: int, last: int) -> tuple[int, int]:
    """Where the original lines ``first..last`` are once ``edits`` are applied: shifted by the lines the edits
    above them add or remove, and widened to any edit that touches them."""
    shift = 0
    lo, hi = first, last
    for e in sorted(edits, key=lambda e: e.start):
        added = e.text.count("\n") - (e.end[0] - e.start[0])
        if e.end[0] < first or (e.start == e.end and e.start[0] <= first):
            shift += added
        elif e.start[0] <= last:
            lo, hi = min(lo, e.start[0]), max(hi + added, e.start[0] + e.text.count("\n"))
    return lo + shift, hi + shift


def inline(expr: str) -> str:
    """An expression's text where a statement's head puts it: parenthesised when it spans lines (its own line breaks
    were inside the `if`'s parentheses, which the new statement does not have)."""
    return f"({expr})" if "\n" in expr else expr


def one_line(text: str) -> str:
    """Source text for a comment: one line."""
    return " ".join(text.split())


def reindent(lines: "list[str]", old: str, new: str) -> str:
    """Lines of one statement (each with its line end) moved from indentation ``old`` to ``new``. Unlike
    ``textwrap.dedent``, a comment or a line inside brackets that starts left of ``old`` (a column-0 comment in a
    method) does not set the indentation: a comment moves to ``new``, a bracketed line stays as it is."""
    out = []
    for line in lines:
        if line.startswith(old):
            out.append(new + line[len(old):] if line.strip() else line[len(old):])
        elif line.lstrip().startswith("#"):
            out.append(new + line.lstrip())
        else:
            out.append(line)
    return "".join(out)
