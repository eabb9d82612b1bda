"""Paths in a report that leaves the machine: home becomes ``~``, installed packages ``site-packages/...``, and
with ``redact`` every path is cut to its file name."""
from __future__ import annotations

import os
import re

_SITE = re.compile(r"(?:site|dist)-packages[/\\]")
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~/\\:-")
_POSIX_PATH = re.compile(
    r"(?<![\w.~:/-])(?:~|\.\.?)?/(?:[^\s\"'`(),:;<>\[\]{}|*/]+/)*([^\s\"'`(),:;<>\[\]{}|*/]+)")
_WINDOWS_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\\\s\"'`]+\\)*([^\\\s\"'`]+)")


def _shorten_site_packages(text: str) -> str:
    """``/any/venv/lib/python3.11/site-packages/torch/x.py`` -> ``site-packages/torch/x.py`` (linear time)."""
    out, last = [], 0
    for m in _SITE.finditer(text):
        i = m.start()
        while i > last and text[i - 1] in _PATH_CHARS:
            i -= 1
        out.append(text[last:i])
        out.append(m.group(0).replace("\\", "/"))
        last = m.end()
    out.append(text[last:])
    return "".join(out)


class PathScrubber:
    """Rewrites file paths in text: home -> ``~``; with ``redact``, every path is cut to its file name.

    Paths into an installed package become ``site-packages/...`` in both modes (shorter, and the same on
    every machine).
    """

    def __init__(self, redact: bool = False, home: str | None = None, root: str | None = None) -> None:
        """``root``: the run's rootdir; a path under it is made relative to it (as probe ids are), the rootdir
        itself is kept (the report names it once)."""
        self.redact = redact
        self.roots = sorted({r.rstrip("/\\") for r in (root, os.path.realpath(root) if root else "") if r
                             and r.rstrip("/\\")}, key=len, reverse=True)
        home = home if home is not None else os.path.expanduser("~")
        homes = {h.rstrip("/\\") for h in (home, os.path.realpath(home) if home else "") if h}
        self.homes = sorted((h for h in homes if h not in ("", "/")), key=len, reverse=True)

    def __call__(self, text: str | None) -> str:
        if not text:
            return text or ""
        text = _shorten_site_packages(text)
        for r in self.roots:  # "/ci/repo/model.py" -> "model.py", never inside a longer name ("/ci/repo2/...")
            text = re.sub(r"(?<![\w.~/-])" + re.escape(r) + r"[/\\](?=[^\s/\\])", "", text)
        for h in self.homes:
            text = re.sub(re.escape(h) + r"(?=[/\\]|$|[\s\"'`:)])", "~", text)
        if self.redact:
            text = _WINDOWS_PATH.sub(lambda m: m.group(1), text)
            text = _POSIX_PATH.sub(lambda m: m.group(1), text)
        return text

    def probe_id(self, pid: str) -> str:
        if not self.redact:
            return self(pid)
        file, _, name = pid.partition("::")
        return f"{os.path.basename(file)}::{name}" if name else os.path.basename(file)


