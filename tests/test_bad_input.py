"""Bad input: one clear line naming the path and the problem, exit 2, no traceback (issue 2, 'Bad input')."""
import pytest


#: what the piped progress lines start with (render/live.py): they may come before an error found while loading
PROGRESS = ("tracecheck: ", "loading ", "running ")


def assert_usage_error(res, *needles):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [l for l in res.stderr.strip().splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("tracecheck: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], res.stderr      # one line, the last one
    assert all(l.startswith(PROGRESS) for l in lines), res.stderr       # the rest is progress
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in errors[0], errors[0]


def test_missing_path(tracecheck, tmp_path):
    assert_usage_error(tracecheck("run", str(tmp_path / "nope.py"), json_report=False), "nope.py",
                       "no such file")


def test_syntax_error_shows_user_line(tracecheck, write_probe):
    p = write_probe("import torch\ndef probe(:\n    pass\n")
    assert_usage_error(tracecheck("run", str(p), json_report=False), "model.py:2", "syntax error", "def probe(:")


def test_import_error_shows_user_line(tracecheck, write_probe):
    p = write_probe("import torch\nimport not_a_real_module_xyz\ndef probe():\n    return torch.sin, (torch.ones(2),)\n")
    assert_usage_error(tracecheck("run", str(p), json_report=False), "model.py", "line 2",
                       "ModuleNotFoundError", "not_a_real_module_xyz")


def test_no_probes(tracecheck, write_probe):
    p = write_probe("def helper():\n    return 1\n")
    assert_usage_error(tracecheck("run", str(p), json_report=False), "no probes found")


def test_k_selects_nothing(tracecheck, write_probe):
    p = write_probe("import torch\ndef probe_a():\n    return torch.sin, (torch.ones(2),)\n")
    assert_usage_error(tracecheck("run", str(p), "-k", "zzz", json_report=False), "no probes found", "zzz")


def test_probe_returns_wrong_shape(tracecheck, write_probe):
    p = write_probe("def probe_bad():\n    return 42\n")
    assert_usage_error(tracecheck("run", str(p), json_report=False), "probe_bad", "returned int")


def test_unknown_stage(tracecheck, write_probe):
    p = write_probe("import torch\ndef probe():\n    return torch.sin, (torch.ones(2),)\n")
    assert_usage_error(tracecheck("run", str(p), "--stages", "eager,warp", json_report=False), "warp",
                       "unknown stage")


def test_unwritable_output(tracecheck, write_probe, tmp_path):
    p = write_probe("import torch\ndef probe():\n    return torch.sin, (torch.ones(2),)\n")
    res = tracecheck("run", str(p), "--json", str(tmp_path / "no" / "such" / "dir" / "r.json"), json_report=False)
    assert_usage_error(res, "--json", "cannot write")


def test_an_output_in_a_folder_that_refuses_new_files_is_refused_before_the_run(tracecheck, write_probe):
    """/proc passes os.access(W_OK) but refuses a new file (ENOENT): refused up front, not after the run."""
    p = write_probe("import torch\ndef probe():\n    return torch.sin, (torch.ones(2),)\n")
    res = tracecheck("run", str(p), "--json", "/proc/x.json", json_report=False)
    assert_usage_error(res, "--json", "cannot write")
    assert "probe" not in res.stdout  # no stage ran, no verdict printed


def test_verbose_shows_the_traceback(tracecheck, write_probe):
    p = write_probe("import torch\nraise ValueError('bad model')\n")
    res = tracecheck("run", str(p), "--verbose", json_report=False)
    assert res.returncode == 2
    assert "Traceback" in res.stderr and "bad model" in res.stderr


def test_an_exception_whose_str_fails_or_starts_blank_is_still_one_line(tracecheck, write_probe):
    # a broken __str__ at import is the user's input error (exit 2), not tracecheck's internal error (exit 3)
    p = write_probe("class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
                    "raise Weird()\n")
    res = tracecheck("run", str(p), "--stages", "eager", json_report=False)
    assert res.returncode == 2 and "Weird: <exception str() failed>" in res.stderr
    p = write_probe("raise ValueError('\\n\\nthe real message')\n")
    res = tracecheck("run", str(p), "--stages", "eager", json_report=False)
    assert res.returncode == 2 and "ValueError: the real message" in res.stderr


def test_an_output_that_fails_to_write_after_the_run_loses_only_itself(tmp_path, monkeypatch):
    """A full disk at --json: the Markdown report and the JUnit XML are still written, the JSON is named in a one-line
    error, exit 2. The run itself is replaced by a report written by hand (the outputs are what is tested)."""
    from click.testing import CliRunner

    from report_factory import small_report
    from tracecheck import api, cli

    def full_disk(path, doc):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(api, "run", lambda opts, progress: small_report())
    monkeypatch.setattr(cli, "write_json_atomic", full_disk)
    model = tmp_path / "model.py"
    model.write_text("def probe():\n    return abs, (1,)\n")
    res = CliRunner().invoke(cli.cli, ["run", str(model), "--json", str(tmp_path / "r.json"),
                                       "--report", str(tmp_path / "r.md"), "--junit-xml", str(tmp_path / "j.xml")])
    assert res.exit_code == 2, res.output
    assert f"--json {tmp_path / 'r.json'}: could not write it (No space left on device)" in res.output
    assert (tmp_path / "r.md").read_text().startswith("# tracecheck report")
    assert (tmp_path / "j.xml").exists() and not (tmp_path / "r.json").exists()
    assert "Traceback" not in res.output


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["probes"][1]["stages"]["explain"]["findings"][0].update(evidence=["x"]), "evidence must be an object"),
    (lambda d: d["probes"][1]["stages"]["explain"]["findings"][0].update(context=[1]), "context must be an object"),
    (lambda d: d["probes"][1]["stages"]["explain"]["findings"][0]["evidence"].update(gb_type=7),
     "gb_type must be a string"),
    (lambda d: d["probes"][0].update(id=3), "id, file and name must be strings"),
    (lambda d: d.update(command=None), "command and stages must be lists"),
    (lambda d: d.update(seconds="fast"), "seconds must be a number"),
])
@pytest.mark.parametrize("fmt", ["terminal", "md", "csv"])
def test_a_hand_edited_report_of_the_wrong_shape_is_a_usage_error_in_every_format(tmp_path, edit, message, fmt):
    """exit 2 with the field named, never an internal error (3) or a traceback."""
    import json

    from click.testing import CliRunner

    from report_factory import small_report
    from tracecheck import cli

    doc = json.loads(json.dumps(small_report().to_dict()))
    edit(doc)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    res = CliRunner().invoke(cli.cli, ["show", str(path), "--format", fmt])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
