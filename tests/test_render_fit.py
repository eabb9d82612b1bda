"""The verdict table at 80, 100 and 160 columns, drawn the way rich's own table tests draw
(``Console(file=StringIO(), width=...)``): every stage column and the breaks column are there, and every kind
name is whole (broken only after a hyphen, never cut like ``pybind-bu…``). Expected cells are written by hand."""
import io

import pytest
from rich.console import Console

from tracecheck.render import terminal
from tracecheck.model.report import FAIL, PASS, SKIP, Finding, ProbeReport, RunReport, StageResult

STAGES = ["eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck", "compiled_autograd"]


def _fail(stage: str, *kinds: str) -> StageResult:
    found = [Finding(k, f"{k} here") for k in kinds]
    return StageResult(stage, FAIL, failure=found[0], findings=found)


def _probe(name: str, cells: dict[str, tuple[str, ...]], breaks: int | None) -> ProbeReport:
    stages = {}
    for s in STAGES:
        kinds = cells.get(s)
        if kinds == ("skip",):
            stages[s] = StageResult(s, SKIP, skip_reason="no custom op")
        elif kinds:
            stages[s] = _fail(s, *kinds)
        else:
            stages[s] = StageResult(s, PASS, graph_count=1, graph_break_count=breaks if s == "explain" else None)
    if breaks is not None and "explain" in cells:
        stages["explain"].graph_break_count = breaks
    return ProbeReport(f"probes/mhc_probes.py::{name}", "/r/probes/mhc_probes.py", name, stages)


PB, MF, MA = ("pybind-builtin",), ("missing-fake",), ("missing-autograd",)
REPORT = RunReport([
    _probe("probe_model_autograd_function", {s: PB for s in STAGES[1:5]} | {"opcheck": ("skip",),
                                                                              "compiled_autograd": PB}, 2),
    _probe("probe_model_missing_fake", {s: MF for s in STAGES[1:]}, None),
    _probe("probe_model_missing_autograd", {s: MA for s in ["eager", *STAGES[2:6]]} | {"compiled_autograd": ("skip",)}, 0),
    _probe("probe_data_dependent", {"explain": ("data-dependent", "graph-break")}, 3),
    _probe("probe_fixed", {}, 0),
], {"torch": "2.13.0"}, STAGES, rootdir="/r")

# (probe, stage) -> the words its cell must show, in order; hand-written
EXPECTED = {
    ("probe_model_autograd_function", "aot_eager"): ["✗", "pybind-builtin"],
    ("probe_model_autograd_function", "opcheck"): ["–"],
    ("probe_model_missing_fake", "compiled_autograd"): ["✗", "missing-fake"],
    ("probe_model_missing_autograd", "eager"): ["✗", "missing-autograd"],
    ("probe_model_missing_autograd", "explain"): ["✓"],
    ("probe_data_dependent", "explain"): ["✗", "data-dependent", "graph-break"],
    ("probe_fixed", "compiled_autograd"): ["✓"],
}
BREAKS = {"probe_model_autograd_function": "2", "probe_model_missing_fake": "–", "probe_model_missing_autograd": "0",
          "probe_data_dependent": "3", "probe_fixed": "0"}


def _draw(width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(terminal.verdict_view(REPORT, width))
    return console.file.getvalue().splitlines()


def _listed(lines: list[str]) -> dict[str, dict[str, list[str]]]:
    """The per-probe list (terminal.verdict_list) read back: probe -> stage -> the words of its outcome."""
    out: dict[str, dict[str, list[str]]] = {}
    probe, entry = None, None
    for ln in lines[1:]:
        if ln.startswith("✓ pass ·"):  # the legend ends the list
            break
        if ln and not ln.startswith(" "):  # "✗ probe_name · 2 graph breaks"
            probe = ln.split()[1]
            out[probe] = {}
        elif ln.startswith("    ") and ln[4] != " ":  # "    ✗ missing-fake   explain, aot_eager,"
            words = ln.split(None, 2) if ln.split()[1:2] and not ln.split()[1].endswith(",") else ln.split(None, 1)
            entry = [words[0]] + ([words[1]] if len(words) == 3 else [])
            stages = words[-1]
            _add(out[probe], entry, stages)
        elif ln.strip() and entry is not None:  # a wrapped line of stage names
            _add(out[probe], entry, ln)
    return out


def _add(row: dict[str, list[str]], entry: list[str], stages: str) -> None:
    for stage in (s.strip() for s in stages.split(",")):
        if stage:
            row.setdefault(stage.split(" (")[0], []).extend(entry)


def _grid(lines: list[str]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Headings and, per probe row block, each column's text (lines joined): read by the heading offsets."""
    head_i = next(i for i, ln in enumerate(lines) if "eager" in ln and "explain" in ln)
    head = lines[head_i]
    names = head.replace("│", " ").replace("┃", " ").split()
    starts = [head.index(n) for n in names]
    body = [ln for ln in lines[head_i + 1:] if ln.strip() and not set(ln.strip()) <= set("─━┡┩╇└┘┴├┤┼│┃")]
    blocks: list[list[str]] = []
    for ln in body:
        if ln.startswith(("✓ fwd", "tracecheck")):
            break
        if ln[starts[1]:starts[1] + 1] in ("✓", "✗", "–", "⏱"):  # a row's first line marks every stage
            blocks.append([])
        if blocks:
            blocks[-1].append(ln)
    grid = {}
    for block in blocks:
        cols = []
        for j, start in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else None
            if j == len(starts) - 1:  # right-justified, one line: the row's last word
                cols.append(block[0].strip(" │┃").split()[-1])
                continue
            cols.append("".join(ln[start:end].strip(" │┃") + "\n" for ln in block))
        grid[cols[0].replace("\n", "")] = dict(zip(names, cols))
    return names, grid


@pytest.mark.parametrize("width", [60, 80, 100, 160, 200])
def test_verdict_view_fits_without_cutting_kinds(width):
    lines = _draw(width)
    assert all(len(ln) <= width for ln in lines)
    assert "…" not in "\n".join(lines)
    if not any("eager" in ln and "explain" in ln and "breaks" in ln for ln in lines):  # the per-probe list
        listed = _listed(lines)
        assert set(listed) == set(BREAKS)
        for (name, stage), words in EXPECTED.items():
            assert sorted(set(listed[name][stage])) == sorted(words), (width, name, stage, listed[name])
        for name, count in BREAKS.items():
            head = next(ln for ln in lines if ln.split()[1:2] == [name])
            assert (f"· {count} graph break" in head) if count != "–" else "graph break" not in head
        return
    names, grid = _grid(lines)
    full = {"eager", "explain", "inductor", "opcheck"}
    assert full <= set(names)                            # never shortened
    assert {"aot", "aot_eager"} & set(names) and {"CA", "compiled_autograd"} & set(names)
    assert ("breaks" in names) or ("graph" in names)     # the break count column is never dropped
    heading = {"aot_eager": "aot" if "aot" in names else "aot_eager",
               "compiled_autograd": "CA" if "CA" in names else "compiled_autograd",
               "fullgraph": "fullgr" if "fullgr" in names else "fullgraph"}
    text = " ".join("\n".join(lines).split())
    rows = {}
    for label, cols in grid.items():
        name = next((n for n in BREAKS if n.replace("_", "") == label.replace("_", "")), None)
        if name is None:  # numbered layout: the caption maps numbers to ids
            name = next(n for n in BREAKS if f"{label} = {n}" in text)
        rows[name] = cols
    assert set(rows) == set(BREAKS)
    for (name, stage), words in EXPECTED.items():
        drawn = rows[name][heading.get(stage, stage)]
        joined = drawn.replace("-\n", "-").replace("\n+", " ").replace("\n", " ").replace(",", " ").split()
        assert joined == words, (width, name, stage, drawn)
    last = names[-1]
    for name, count in BREAKS.items():
        assert rows[name][last].split() == [count], (width, name)
