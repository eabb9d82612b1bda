"""The house rules, checked: no import cycle in tracecheck/, one registry of stages, and every stage has its
module, its docs and a place in the CLI. Reads the source with ``ast``; imports inside functions count."""
import ast
from pathlib import Path

from tracecheck import stages
from tracecheck.cli import cli

PKG = Path(__file__).resolve().parents[1] / "tracecheck"
README = (PKG.parent / "README.md").read_text()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[:len(base) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                targets = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_tracecheck():
    graph = import_graph()
    assert "tracecheck.stages" in graph and graph["tracecheck.api"]     # the graph was read
    assert cycles(graph) == []


def test_the_registry_is_the_stage_modules():
    modules = sorted(p.stem for p in (PKG / "stages").glob("*.py") if not p.stem.startswith("_"))
    assert sorted(stages.STAGES) == modules
    assert stages.STAGES == ("eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck", "compiled_autograd")


def test_every_stage_is_offered_by_the_cli_and_documented():
    option = next(p for p in cli.commands["run"].params if p.name == "stages")
    assert option.default.split(",") == list(stages.STAGES)
    for name in stages.STAGES:
        assert f"| `{name}` |" in README, name              # the README's stage table


def test_the_registry_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, tracecheck.stages, tracecheck.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
