"""Discovery rules: which files, which probes, -k selection, probe return shapes."""
import pytest
import torch

from tracecheck import Case, probe
from tracecheck.collect import casemaker, loadfile, locate
from tracecheck.model.exitcodes import UsageError
from tracecheck.model.probe import ProbeShapeError, to_case


def test_directory_skips_packages_hidden_and_init(tmp_path):
    (tmp_path / "model_a.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model_b.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text("")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.py").write_text("")
    (tmp_path / "conftest.py").write_text("")
    found = [p.replace(str(tmp_path), "") for p in locate.find_files([str(tmp_path)])]
    assert found == ["/model_a.py", "/sub/model_b.py"]


def test_missing_path_and_non_python_file(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        locate.find_files([str(tmp_path / "missing.py")])
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(UsageError, match="not a Python file"):
        locate.find_files([str(tmp_path / "notes.txt")])


def test_probes_in_source_order_and_only_own(tmp_path):
    (tmp_path / "helper_mod.py").write_text("def probe_imported():\n    return None\n")
    (tmp_path / "m.py").write_text(
        "import tracecheck\nfrom helper_mod import probe_imported\n"
        "def probe_z():\n    pass\n"
        "@tracecheck.probe\ndef custom_name():\n    pass\n"
        "def probe():\n    pass\n"
        "def not_a_probe():\n    pass\n"
        "class probe_class:\n    pass\n")
    module = loadfile.load_module(str(tmp_path / "m.py"))  # the folder goes on sys.path: helper_mod imports
    assert [n for n, _ in loadfile.find_probes(module)] == ["probe_z", "custom_name", "probe"]


def test_module_name_for_digit_files_and_shadowing_names():
    assert loadfile.module_name_for("/x/01_case.py") == "tc_model_01_case"
    assert loadfile.module_name_for("/x/tc_unlikely_model_name.py") == "tc_unlikely_model_name"
    # a model file must never replace a real module in sys.modules
    assert loadfile.module_name_for("/x/random.py") == "tc_model_random"
    assert loadfile.module_name_for("/x/torch.py") == "tc_model_torch"


@pytest.mark.parametrize("expr, expected", [
    ("fixed", True), ("FIXED", True), ("broken", False), ("fixed and model", True), ("fixed and not model", False),
    ("broken or mhc", True), ("not (fixed or x)", False), (None, True),
])
def test_k_expression(expr, expected):
    assert loadfile.matches(expr, "probes/mhc_probes.py::probe_model_fixed") is expected


def test_k_expression_malformed():
    with pytest.raises(UsageError):
        loadfile.matches("fixed and", "a::b")


def test_to_case_forms():
    fn = torch.sin
    x = torch.ones(2)
    assert to_case((fn, (x,))).kwargs == {}
    assert to_case((fn, [x], {"out": None})).args == (x,)
    c = Case(fn, (x,), grad=False)
    assert to_case(c) is c
    for bad in (42, (fn,), (fn, x), ("notcallable", (x,)), (fn, (x,), [1])):
        with pytest.raises(ProbeShapeError):
            to_case(bad)


def test_probe_decorator_marks():
    @probe
    def p():
        return None

    from tracecheck.model.probe import is_marked

    assert is_marked(p)


def test_rootdir_is_the_nearest_marked_folder_above_the_paths(tmp_path):
    (tmp_path / "proj" / "models" / "sub").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    a = tmp_path / "proj" / "models" / "a.py"
    b = tmp_path / "proj" / "models" / "sub" / "b.py"
    a.write_text(""), b.write_text("")
    assert locate.rootdir([str(a)]) == str(tmp_path / "proj")
    assert locate.rootdir([str(a), str(b)]) == str(tmp_path / "proj")
    assert locate.probe_id(str(b), "probe_x", str(tmp_path / "proj")) == "models/sub/b.py::probe_x"
    for marker in ("setup.cfg", "tox.ini", ".git"):
        other = tmp_path / f"other_{marker.strip('.')}"
        (other / "m").mkdir(parents=True)
        (other / marker).mkdir() if marker == ".git" else (other / marker).write_text("")
        assert locate.rootdir([str(other / "m")]) == str(other), marker


def test_rootdir_without_markers_is_the_common_ancestor(tmp_path, monkeypatch):
    (tmp_path / "x" / "one").mkdir(parents=True)
    (tmp_path / "x" / "two").mkdir()
    f1, f2 = tmp_path / "x" / "one" / "m.py", tmp_path / "x" / "two" / "n.py"
    f1.write_text(""), f2.write_text("")
    monkeypatch.setattr(locate, "ROOT_MARKERS", ("no-such-marker-anywhere",))  # /tmp's parents may hold one
    assert locate.rootdir([str(f1), str(f2)]) == str(tmp_path / "x")
    assert locate.rootdir([str(f1)]) == str(tmp_path / "x" / "one")


def test_rootdir_does_not_depend_on_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "proj" / "models").mkdir(parents=True)
    (tmp_path / "proj" / ".git").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    from_root = locate.rootdir(["models"])
    monkeypatch.chdir(tmp_path / "proj" / "models")
    assert locate.rootdir(["."]) == from_root == str(tmp_path / "proj")


def test_non_leaf_inputs_that_require_grad_become_leaves():
    x = torch.randn(2, 3, requires_grad=True) * 2
    case = casemaker.as_leaves(Case(torch.sin, (x, torch.ones(1))))
    assert case.args[0].is_leaf and case.args[0].requires_grad and torch.equal(case.args[0], x)
    assert case.args[1] is not None and not case.args[1].requires_grad


def test_a_module_level_model_starts_every_run_from_the_same_state(tmp_path):
    (tmp_path / "stateful.py").write_text(
        "import torch\n"
        "class Step(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('step', torch.zeros(()))\n"
        "    def forward(self, x):\n"
        "        self.step += 1\n"
        "        return x * self.step\n"
        "MODEL = Step()\n"
        "def probe():\n"
        "    return MODEL, (torch.ones(2),)\n")
    make = casemaker.case_factory(str(tmp_path / "stateful.py"), "probe")
    firsts = []
    for _ in range(3):
        case = make()
        firsts.append(case.fn(*case.args).tolist())
    assert firsts == [[1.0, 1.0]] * 3                              # the buffer was put back each time


def test_rootdir_through_a_symlinked_current_directory(tmp_path, monkeypatch):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text("")
    (tmp_path / "ext" / "real").mkdir(parents=True)
    (tmp_path / "ext" / "real" / "m.py").write_text("")
    (tmp_path / "proj" / "linked").symlink_to(tmp_path / "ext" / "real")
    monkeypatch.chdir(tmp_path / "proj")
    monkeypatch.setenv("PWD", str(tmp_path / "proj"))
    root_a = locate.rootdir(["linked/m.py"])
    monkeypatch.chdir(tmp_path / "proj" / "linked")
    monkeypatch.setenv("PWD", str(tmp_path / "proj" / "linked"))
    root_b = locate.rootdir(["m.py"])
    assert root_a == root_b == str(tmp_path / "proj")
    assert locate.probe_id(locate.absolute("m.py"), "p", root_b) == "linked/m.py::p"


def test_a_file_inside_a_package_imports_with_its_relative_imports(tmp_path, tracecheck):
    """A model file that is part of a package (``from . import ops``), named directly or by its folder: imported as
    ``pkg.model``, as pytest and ``python -m`` import it, not as a lone file."""
    import subprocess
    import sys

    pkg = tmp_path / "kernels_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("import torch\n\ndef double(x):\n    return x * 2\n")
    (pkg / "model.py").write_text("import torch\nfrom . import ops\n\n"
                                  "def probe():\n    return ops.double, (torch.ones(3),)\n")
    # plain Python, the oracle: the package import works, the lone file's relative import does not
    ok = subprocess.run([sys.executable, "-c", "import kernels_pkg.model as m; f, a = m.probe(); print(f(*a).sum().item())"],
                        cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == "6.0", ok.stderr
    alone = subprocess.run([sys.executable, str(pkg / "model.py")], cwd=tmp_path, capture_output=True, text=True)
    assert "attempted relative import with no known parent package" in alone.stderr
    for target in (str(pkg / "model.py"), str(pkg)):
        res = tracecheck("run", target, "--stages", "eager")
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.probe("probe")["stages"]["eager"]["status"] == "pass"


def test_a_package_file_without_relative_imports_loads_alone_and_a_taken_name_is_refused(tmp_path):
    """Only a file that needs its package (a relative import) imports through it: a broken ``__init__`` elsewhere in
    the package does not stop a self-contained file. A package name another copy answers is a clear usage error."""
    pkg = tmp_path / "tc_pkg_alone"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('the package needs a built extension')\n")
    (pkg / "model.py").write_text("X = 1\n")
    assert loadfile.package_of(str(pkg / "model.py")) is None
    assert loadfile.load_module(str(pkg / "model.py")).X == 1

    other = tmp_path / "elsewhere" / "tc_pkg_taken"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "model.py").write_text("WHO = 'the other copy'\n")
    mine = tmp_path / "mine" / "tc_pkg_taken"
    mine.mkdir(parents=True)
    (mine / "__init__.py").write_text("")
    (mine / "helper.py").write_text("Y = 2\n")
    (mine / "model.py").write_text("from .helper import Y\n")
    import importlib
    import sys
    sys.path.insert(0, str(other.parent))
    try:
        importlib.import_module("tc_pkg_taken.model")  # the other copy, imported first (a neighbour file, a plugin)
        with pytest.raises(UsageError, match="another copy of the package was imported first"):
            loadfile.load_module(str(mine / "model.py"))
    finally:
        sys.path.remove(str(other.parent))
        for name in [m for m in sys.modules if m.startswith("tc_pkg_taken")]:
            del sys.modules[name]


def test_a_folder_holding_only_a_package_says_so(tmp_path, tracecheck):
    pkg = tmp_path / "dirtest" / "kernels_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("import torch\n\ndef probe():\n    return torch.sin, (torch.ones(2),)\n")
    res = tracecheck("run", "dirtest", json_report=False)
    assert res.returncode == 2
    assert "package folders are not searched: dirtest/kernels_pkg/" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1  # one line, no traceback
