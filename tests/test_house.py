"""The house rules, checked: no import cycle in tracecheck/, one registry of stages, and every stage has its
module, its docs and a place in the CLI. Reads the source with ``ast``; imports inside functions count."""
import ast
import re
from pathlib import Path

from tracecheck import stages
from tracecheck.cli import cli

PKG = Path(__file__).resolve().parents[1] / "tracecheck"
USAGE = (PKG.parent / "docs" / "usage.md").read_text()   # the stage table and the list of kinds (README links to it)


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
    assert stages.STAGES == ("eager", "explain", "aot_eager", "inductor", "fullgraph", "opcheck", "compiled_autograd",
                             "gradcheck", "dynamic", "vmap", "export")


def test_every_stage_is_offered_by_the_cli_and_documented():
    option = next(p for p in cli.commands["run"].params if p.name == "stages")
    assert option.default.split(",") == list(stages.STAGES)
    for name in stages.STAGES:
        assert f"| `{name}` |" in USAGE, name               # docs/usage.md's stage table


def test_the_registry_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, tracecheck.stages, tracecheck.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _kinds_made_by_code() -> dict[str, list[str]]:
    """The kinds the code makes or tests, as ``K.NAME`` (taxonomy's constants) or as string literals: the first
    argument of Finding(...)/GraphBreak(...), the first element of a returned tuple in classify's rules, values
    assigned to a ``kind`` variable, and values compared with ``.kind``."""
    from tracecheck.model import taxonomy

    found: dict[str, list[str]] = {}

    def add(value: object, where: str) -> None:
        if isinstance(value, ast.Attribute) and getattr(value.value, "id", None) == "K":
            value = ast.Constant(getattr(taxonomy.K, value.attr, f"K.{value.attr}"))  # a constant names its id
        if isinstance(value, ast.Constant):
            value = value.value
        if isinstance(value, str):
            found.setdefault(value, []).append(where)

    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.relative_to(PKG.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                    "Finding", "GraphBreak") and node.args:
                add(node.args[0], where)
            if isinstance(node, ast.Return) and path.parent.name == "classify" and node.value is not None:
                add(node.value.elts[0] if isinstance(node.value, ast.Tuple) and node.value.elts else node.value, where)
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "kind" for t in node.targets):
                for c in ast.walk(node.value):
                    add(c, where)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "kind":
                for comp in node.comparators:
                    for c in ([comp] if isinstance(comp, (ast.Constant, ast.Attribute)) else getattr(comp, "elts", [])):
                        add(c, where)
    return found


def test_kinds_json_docs_readme_and_code_name_the_same_kinds():
    from tracecheck.model import taxonomy

    ids = set(taxonomy.ids())
    pages = {p.stem for p in (PKG / "model" / "failures").glob("*.md")}
    assert pages == ids
    start = USAGE.index("`pybind-builtin` ·")
    kinds_list = USAGE[start:USAGE.index("\n\n", start)]              # docs/usage.md's list of kinds
    assert {k.strip().strip("`") for k in kinds_list.replace("\n", " ").split("·")} == ids
    used = _kinds_made_by_code()
    assert {"numeric-mismatch", "timeout", "crash", "eager-error"} <= set(used)   # the scan sees the code
    assert {k: where for k, where in used.items() if k not in ids} == {}
    # every kind can be made: by a detection rule of kinds.json, or by the code
    detected = {k.id for k in taxonomy.rules()}
    assert detected >= {"pybind-builtin", "missing-fake", "graph-break"}
    assert ids - detected - set(used) == set()


def test_a_finding_of_an_unknown_kind_is_refused():
    import pytest

    from tracecheck.model.report import Finding

    with pytest.raises(ValueError, match="missing_fake"):
        Finding("missing_fake", "typo of missing-fake")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def private_torch_names(source: str) -> list[str]:
    """Private torch attributes and modules a module names in code (not in strings): ``torch._dynamo.reset``,
    ``from torch._C import ...``, ``torch.autograd.function._SingleLevelFunction``, and through an alias
    (``import torch.autograd.graph as graph; graph._engine_run_backward``). Dunders like ``__version__`` are
    public. An attribute of an object (``op._schema``) is out of its sight: compat's shims name those."""
    found = []
    tree = ast.parse(source)
    aliases = {"torch": "torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module.split(".")[0] == "torch":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def private(dotted: str) -> bool:
        return dotted.split(".")[0] == "torch" and any(
            p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:])

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [n for n in names if private(n)][:1]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if private(a.name)]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and dotted.split(".")[0] in aliases:
                full = ".".join([aliases[dotted.split(".")[0]], *dotted.split(".")[1:]])
                if private(full):
                    found.append(full)
    return found


def test_the_private_name_finder_finds_them():
    code = ("import torch\nfrom torch._dynamo.utils import counters\nimport torch._inductor.config\n"
            "torch._dynamo.reset()\nx = torch.autograd.function._SingleLevelFunction\ny = torch.__version__\n"
            "z = 'torch._dynamo.reset() in a string'\nfrom torch.utils import _pytree\n"
            "import torch.autograd.graph as graph\nw = graph._engine_run_backward\n")
    found = set(private_torch_names(code))
    assert {"torch._dynamo.utils", "torch._inductor.config", "torch._dynamo.reset",
            "torch.autograd.function._SingleLevelFunction", "torch.utils._pytree",
            "torch.autograd.graph._engine_run_backward"} <= found
    assert not any("__version__" in f for f in found)


def test_private_torch_names_live_in_compat_only():
    offenders = {}
    for path in PKG.rglob("*.py"):
        if path == PKG / "compat.py":
            continue
        names = private_torch_names(path.read_text())
        if names:
            offenders[str(path.relative_to(PKG))] = sorted(set(names))
    assert offenders == {}, offenders


def _kind_literals(source: str) -> list[str]:
    """Kind ids written as string literals where code means a kind: the first argument of Finding/GraphBreak, a
    value compared with ``.kind``, assigned to a ``kind`` variable, returned by a classify rule, or a key of a dict
    whose other keys are kinds. (A torch version that reads "unknown" is not a kind.)"""
    from tracecheck.model import taxonomy

    ids = taxonomy.ids()
    found = []
    for node in ast.walk(ast.parse(source)):
        places = []
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                "Finding", "GraphBreak") and node.args:
            places.append(node.args[0])
        if isinstance(node, ast.Compare) and getattr(node.left, "attr", None) == "kind":
            places += [e for c in node.comparators for e in ast.walk(c)]
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "kind" for t in node.targets):
            places += list(ast.walk(node.value))
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
            places.append(node.value.elts[0])
        if isinstance(node, ast.Dict):
            keys = [k for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if keys and sum(k.value in ids for k in keys) >= max(1, len(keys) // 2):
                places += keys
        found += [p.value for p in places if isinstance(p, ast.Constant) and isinstance(p.value, str) and p.value in ids]
    return found


def test_code_names_kinds_through_the_registry_only():
    from tracecheck.model import taxonomy

    constants = {v for k, v in vars(taxonomy.K).items() if k.isupper()}
    assert constants == set(taxonomy.ids())  # one constant per kinds.json id, none extra
    offenders = {str(p.relative_to(PKG)): sorted(set(_kind_literals(p.read_text())))
                 for p in PKG.rglob("*.py") if p.name != "taxonomy.py"}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert _kind_literals('kind = "graph-break"\ny = f"a graph-break"\nv = "unknown"\n') == ["graph-break"]  # it finds one


def test_facts_about_kinds_are_in_their_registry_entries():
    from tracecheck.model import taxonomy
    from tracecheck.model.taxonomy import K

    # hand-written: what the pipeline asks of the registry
    assert {K.MISSING_FAKE, K.FAKE_MISMATCH, K.OP_REDEFINED, K.PYBIND_BUILTIN} <= taxonomy.explaining_ids()
    assert K.RECOMPILE not in taxonomy.explaining_ids()
    assert K.OP_REDEFINED in taxonomy.import_ids() and K.GRAPH_BREAK not in taxonomy.import_ids()
    assert taxonomy.draft_kind("MISSING_FAKE_KERNEL") == K.MISSING_FAKE
    assert taxonomy.draft_kind("GUARD_ADDED") == K.DYNAMIC_SHAPE
    assert taxonomy.draft_kind("A_FUTURE_FAILURE_TYPE") == K.UNKNOWN
    assert "setup_context" in taxonomy.kinds()[K.FUNCTORCH_INCOMPATIBLE].refused_by_cause


#: the pipeline's steps are the package's folders: a module's layer is its folder. The top-level modules are the
#: torch boundary (compat, environment) and the application that drives the pipeline (api, cli). Each layer may
#: import its own and the layers listed: render → classify → model, stages/evidence → model, never back
FOLDERS = ("model", "devices", "evidence", "stages", "classify", "collect", "isolate", "render", "gate", "fix")
TOP_LEVEL = {"compat": "torch", "machine": "torch", "api": "app", "cli": "app", "__main__": "app",
             "pytest_plugin": "app", "tracecheck": "app"}
#: render.fix draws ``tracecheck fix``'s outcome: it belongs to the fix command (app), not to the report renderers
APP_MODULES = {"render.fix"}
MAY_IMPORT = {
    "model": set(),
    "torch": {"model"},
    "devices": {"model", "torch", "evidence"},  # the emulated NPU: set up in a task process before the model file imports
    "evidence": {"model", "torch"},
    "stages": {"evidence", "model", "torch", "collect"},  # a stage task builds its cases from the probe file (casemaker)
    "classify": {"evidence", "model", "stages"},  # torch's wording (evidence/wording.py), never a capture; the stage
    # registry's run order and targets (classify/settle.py)
    "collect": {"evidence", "model", "torch"},  # an import failure is classified once, in the parent
    "isolate": {"collect", "stages", "evidence", "model", "torch", "devices"},
    "render": {"gate", "stages", "classify", "model", "torch"},  # the stage registry, and a baseline's comparison
    "gate": {"stages", "model"},  # a baseline and its comparison: data, never a measurement (the pytest plugin is app)
    "fix": {"isolate", "collect", "stages", "evidence", "classify", "model", "torch", "app"},
    "app": set(FOLDERS) | {"torch", "model"},
}


def _layer(module: str) -> str:
    name = module.removeprefix("tracecheck.") if module != "tracecheck" else "tracecheck"
    if name in APP_MODULES:
        return "app"
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    folder = name.split(".")[0]
    if folder in FOLDERS and "." in name or name in FOLDERS:
        return folder
    raise AssertionError(f"tracecheck.{name} is a top-level module outside the pipeline's folders: move it into "
                         f"one ({', '.join(FOLDERS)}) or name its layer in tests/test_house.py")


def test_the_folders_are_the_layers():
    top = sorted(p.stem for p in PKG.glob("*.py"))
    assert set(top) == {"__init__", *TOP_LEVEL} - {"tracecheck"}
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(FOLDERS)


def test_imports_run_down_the_pipeline():
    wrong = []
    for module, targets in import_graph().items():
        here = _layer(module)
        for t in targets - {"tracecheck"}:  # ``from . import x`` names the package too: x is the import
            there = _layer(t)
            if there != here and there not in MAY_IMPORT[here]:
                wrong.append(f"{module} ({here}) imports {t} ({there})")
    assert wrong == []


def test_the_direction_check_sees_a_wrong_import():
    graph = {"tracecheck.model.report": {"tracecheck.render.markdown"}}
    assert _layer("tracecheck.render.markdown") == "render"
    assert "render" not in MAY_IMPORT[_layer("tracecheck.model.report")]
    assert any(_layer(t) not in MAY_IMPORT["model"] for t in graph["tracecheck.model.report"])


def test_a_user_frame_is_read_as_a_frame():
    """``Frame.from_dict`` / ``Finding.user_frame`` (tracecheck/model/records.py), never the dict's keys."""
    readers = [f"{p.relative_to(PKG)}:{n}" for p in PKG.rglob("*.py")
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if re.search(r"""get\(["']user_frame["']\) or \{\}""", line)]
    assert readers == []


def _extra_reads(source: str) -> list[int]:
    """Lines that read a key of an ``.extra`` attribute: ``x.extra[k]`` (not an assignment) or ``x.extra.get(k)``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        target = node.value if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) else \
            node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" else None
        if isinstance(target, ast.Attribute) and target.attr == "extra":
            lines.append(node.lineno)
    return lines


def test_the_payload_check_sees_a_key_read():
    assert _extra_reads("a = s.extra.get('steps')\nb = s.extra['backend']\ns.extra['x'] = 1\n") == [1, 2]


def test_a_stage_payload_is_read_through_its_type():
    """``StageResult.extra`` is read through model/payloads.py (``Payload.of``, ``StageResult.notes``): no module
    outside the stages that write it and the model reads its keys."""
    readers = [f"{p.relative_to(PKG)}:{n}" for p in PKG.rglob("*.py")
               if p.relative_to(PKG).parts[0] not in ("stages", "model") for n in _extra_reads(p.read_text())]
    assert readers == []


# --- typed evidence (issue 39): renderers read fields; no new untyped dict field in model/ ------------------------
#: the dict[str, Any] fields of model/'s dataclasses today, each a debt to pay with a typed record (as
#: model/evidence.Evidence pays Finding.evidence's for every renderer): a new one fails the test below
UNTYPED_MODEL_FIELDS = {
    # a stage's payloads as the report keeps them (model/payloads.py reads each one typed), and the machine record
    "records.StageRecord.extra", "report.StageResult.extra", "report.RunReport.environment",
}


def untyped_model_fields(root: Path = PKG / "model") -> set[str]:
    found = set()
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found |= {f"{path.stem}.{node.name}.{st.target.id}" for st in node.body
                          if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                          and re.search(r"dict\[str, Any\]|\bJson\b", ast.unparse(st.annotation))}
    return found


def test_no_new_untyped_dict_field_in_model():
    found = untyped_model_fields()
    assert found - UNTYPED_MODEL_FIELDS == set(), "type it (a dataclass), as model/evidence.py does"
    assert UNTYPED_MODEL_FIELDS - found == set(), "typed now: drop it from UNTYPED_MODEL_FIELDS"


def test_the_untyped_field_finder_finds_one(tmp_path):
    (tmp_path / "m.py").write_text("from typing import Any\nclass R:\n    a: dict[str, Any]\n    b: dict[str, str]\n")
    assert untyped_model_fields(tmp_path) == {"m.R.a"}


#: a finding's evidence or context read by key: ``f.evidence.get("message")``, ``ev["gb_type"]``,
#: ``f.context.get("op")``, ``ctx["cause"]``
_EVIDENCE_BY_KEY = re.compile(r"""\b(?:evidence|ev|context|ctx)(?:\.get\(|\[)\s*["']""")


def test_renderers_read_a_findings_evidence_and_context_as_fields():
    readers = [f"{p.relative_to(PKG)}:{n}: {line.strip()}" for p in sorted((PKG / "render").rglob("*.py"))
               for n, line in enumerate(p.read_text().splitlines(), 1) if _EVIDENCE_BY_KEY.search(line)]
    assert readers == [], "read Finding.evidence and Finding.context as fields (model/evidence.py, context.py)"


def test_nothing_reads_a_findings_context_or_evidence_by_key():
    """Issue 54: both are typed where classify/ makes them (model/context.py, model/evidence.py); their JSON is read
    once, by ``Context.of`` and ``evidence.read``, on objects not named so. A line quoting a key in double backticks is
    prose (a docstring)."""
    readers = [f"{p.relative_to(PKG)}:{n}: {line.strip()}" for p in sorted(PKG.rglob("*.py"))
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if _EVIDENCE_BY_KEY.search(line) and "``" not in line]
    assert readers == [], "read the fields of Finding.context and Finding.evidence"


def test_the_evidence_key_reader_finder_finds_one():
    assert _EVIDENCE_BY_KEY.search('x = f.evidence.get("message")') and _EVIDENCE_BY_KEY.search("ev['gb_type']")
    assert _EVIDENCE_BY_KEY.search('f.context.get("op")') and _EVIDENCE_BY_KEY.search("ctx['cause']")
    assert not _EVIDENCE_BY_KEY.search("ev.gb_type") and not _EVIDENCE_BY_KEY.search("f.evidence.headline()")
    assert not _EVIDENCE_BY_KEY.search("f.context.op")


#: any string key read on a name, an attribute, a call or a subscript: ``env.get("torch")``, ``f['todo']``,
#: ``x[0]["op"]``; a list literal (``or ["none"]``, ``(["## Findings"])``) has no receiver and is not one
_KEY_READ = re.compile(r"""(?P<receiver>[\w.]*\w\)?|\]|\))(?:\.get\(|\[)\s*f?["']""")
#: (file under render/, receiver) -> why its string keys are no record's: the objects a renderer may index by name
KEY_READS_ALLOWED = {
    ("annotations.py", "os.environ)"): "the process environment",
    ("annotations.py", "environ"): "the process environment (or the mapping a test passes)",
    ("excerpts.py", "groups"): "a regex match's groupdict",
    ("tables.py", "df"): "a pandas DataFrame's columns",
    ("junit.py", "c"): "an XML element's attribute (ElementTree)",
    ("markdown.py", "p.stages"): "ProbeReport.stages: typed StageResults by stage name",
    ("view.py", "p.stages"): "ProbeReport.stages: typed StageResults by stage name",
}


def key_reads(root: Path = PKG / "render") -> list[tuple[str, str, str]]:
    """``(file:line, receiver, line)`` of every string key read under ``root``."""
    return [(f"{p.relative_to(root)}:{n}", m["receiver"], line.strip()) for p in sorted(root.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) for m in _KEY_READ.finditer(line)]


def test_renderers_read_typed_records_not_dict_keys():
    """Issue 39: a renderer reads a record's fields (``report.env``, ``Finding.evidence``, fix/task_results.py), never a
    record dict's keys: the one reader of each dict is its typed view's ``of``."""
    found = key_reads()
    bad = [f"{where}: {line}" for where, receiver, line in found
           if (where.split(":")[0], receiver) not in KEY_READS_ALLOWED]
    assert bad == [], "read the record's typed view (model/environment.py, model/evidence.py, fix/task_results.py)"
    used = {(where.split(":")[0], receiver) for where, receiver, _ in found}
    assert set(KEY_READS_ALLOWED) - used == set(), "no longer read: drop it from KEY_READS_ALLOWED"


def test_the_key_read_finder_finds_one(tmp_path):
    (tmp_path / "r.py").write_text('torch = report.environment.get("torch")\n'
                                   "npu = f\"torch_npu {env['torch_npu']}\"\n"
                                   'todo = o.functions[0]["todo"]\n'
                                   'rows = ["torch", "python"] or (["## Findings"])\n'
                                   "text = env.torch + collect_env[name]\n")
    assert [(where, receiver) for where, receiver, _ in key_reads(tmp_path)] == \
        [("r.py:1", "report.environment"), ("r.py:2", "env"), ("r.py:3", "]")]


def test_mypy_checks_every_module():
    import tomllib

    conf = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["disallow_untyped_defs"] and conf["check_untyped_defs"]
    exempt = [o for o in conf.get("overrides", []) if o.get("ignore_errors")]
    assert exempt == [], f"every module is checked (issue 54): {exempt}"
    assert "mypy" in (PKG.parent / ".ci" / "run").read_text()


# -- issue 54's storey: sizes and counts that only go down --------------------------------------------------------
#: the longest a module may be: past it, one file holds more than one concern
MAX_LINES = 600
#: modules still longer than MAX_LINES (issue 54): this set only shrinks
LONG_MODULES: set[str] = set()


def module_lengths(root: Path = PKG) -> dict[str, int]:
    return {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def test_no_module_is_longer_than_the_limit():
    lengths = module_lengths()
    long = {m for m, n in lengths.items() if n > MAX_LINES}
    assert long <= LONG_MODULES, f"split by concern: {sorted((m, lengths[m]) for m in long - LONG_MODULES)}"
    assert LONG_MODULES - long == set(), "now short enough: drop it from LONG_MODULES"


def test_the_length_check_counts_lines(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n" * 601)
    (tmp_path / "b.py").write_text("x = 1\n")
    assert module_lengths(tmp_path) == {"a.py": 601, "b.py": 1}


#: ``dict[str, Any]`` annotations in tracecheck/: a dict belongs at a process or JSON boundary only, and there it is
#: written ``reportio.Json``, whose definition is the one left (issue 54: 367, then 60, now 1). A heterogeneous runtime
#: bag (a call's kwargs, values by name) is ``dict[str, object]``, which makes its reader narrow each value.
UNTYPED_DICTS_CEILING = 1


def untyped_dicts(root: Path = PKG) -> int:
    return sum(p.read_text().count("dict[str, Any]") for p in root.rglob("*.py"))


#: uses of ``reportio.Json`` (a dict at a JSON or process boundary): counted too, so that the alias is no way around
#: the ceiling above; this one only goes down as well (issue 54 rose it from 172 to 189 once, when the last 58
#: ``dict[str, Any]`` at a boundary were spelled ``Json``: the two together went from 232 to 190; issue 56 to 198:
#: the ``to_json``/``to_wire`` of model/ops.py's records, which cross the test command's process boundary)
JSON_USES_CEILING = 198


def json_uses(root: Path = PKG) -> int:
    return sum(len(re.findall(r"\bJson\b", p.read_text())) for p in root.rglob("*.py"))


def test_no_new_untyped_dict():
    n = untyped_dicts()
    assert "Json = dict[str, Any]" in (PKG / "model" / "reportio.py").read_text()
    assert n <= UNTYPED_DICTS_CEILING, f"{n} dict[str, Any] (ceiling {UNTYPED_DICTS_CEILING}): type the new one"
    j = json_uses()
    assert j <= JSON_USES_CEILING, f"{j} uses of Json (ceiling {JSON_USES_CEILING}): a dict only at a boundary"


#: the gate's questions (does a kind fail the run, is it advice, is a target required): render/view.py and
#: render/cause.py ask them; every other renderer lays out their answers. (file, count) still asking (this only shrinks)
_OUTCOME_QUESTION = re.compile(r"\.fails_on\(|\bis_advice\(|\.requires\(")
OUTCOME_QUESTIONS_LEFT: dict[str, int] = {}  # issue 54: 13, now 0


def outcome_questions(root: Path = PKG / "render") -> dict[str, int]:
    found = {str(p.relative_to(root)): len(_OUTCOME_QUESTION.findall(p.read_text())) for p in sorted(root.rglob("*.py"))
             if p.name not in ("view.py", "cause.py")}
    return {k: v for k, v in found.items() if v}


def test_renderers_do_not_decide_outcomes():
    found = outcome_questions()
    grown = {f: n for f, n in found.items() if n > OUTCOME_QUESTIONS_LEFT.get(f, 0)}
    assert grown == {}, "ask render/view.py or render/cause.py (CauseView.standing), do not decide in a renderer"


def test_the_outcome_question_finder_finds_one(tmp_path):
    (tmp_path / "r.py").write_text("if gate.fails_on(k) or is_advice(k) or gate.requires(t): pass\n")
    (tmp_path / "view.py").write_text("gate.fails_on(k)\n")
    assert outcome_questions(tmp_path) == {"r.py": 3}
