"""The OpBuilder-style loader (probes/mhc/builder.py): builds once, later loads import the cached
library without compiling, and concurrent first loads in two processes both succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROBES = Path(__file__).resolve().parents[2] / "probes"

LOAD_SCRIPT = textwrap.dedent(
    f"""
    import json, sys, time
    sys.path.insert(0, {str(PROBES)!r})
    import torch
    from mhc import builder
    ext = builder.load()
    x = torch.randn(1, 2, 4, 8)
    y = ext.mhc_post(x, torch.eye(4).expand(1, 2, 4, 4).contiguous(), torch.zeros(1, 2, 8), torch.zeros(1, 2, 4))
    print(json.dumps(dict(built=builder.MhcOpBuilder.last_load_built, load_s=builder.MhcOpBuilder.last_load_s,
                          identity_ok=bool(torch.equal(y, x)), build_dir=str(builder.build_directory()))))
    """
)


def _run_load(env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_warm_load_in_a_fresh_process_does_not_rebuild():
    first = _result(_run_load())  # builds if this machine never did
    library = Path(first["build_dir"]) / "tracecheck_mhc.so"
    mtime = library.stat().st_mtime_ns
    second = _result(_run_load())
    assert second["built"] is False and second["identity_ok"]
    # no rebuild: the library file is the same one (no timing bound: the brief forbids timing assertions)
    assert library.stat().st_mtime_ns == mtime


def test_two_processes_building_concurrently_both_succeed(tmp_path):
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))
    procs = [_run_load(env), _run_load(env)]
    results = [_result(p) for p in procs]
    assert all(r["identity_ok"] for r in results)
    assert results[0]["build_dir"] == results[1]["build_dir"]
    assert Path(results[0]["build_dir"], "built.ok").exists()
    third = _result(_run_load(env))
    assert third["built"] is False


def test_a_lock_left_by_a_killed_build_is_removed_and_a_fresh_one_kept(tmp_path, capsys):
    # cpp_extension's baton would wait for ever on a lock a killed first build left behind
    sys.path.insert(0, str(PROBES))
    from mhc import builder

    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    for d in (stale, fresh):
        d.mkdir()
        (d / "lock").write_text("")
    old = (stale / "lock").stat().st_mtime - builder.STALE_LOCK_S - 60
    os.utime(stale / "lock", (old, old))
    builder._clear_stale_lock(stale)
    builder._clear_stale_lock(fresh)
    assert not (stale / "lock").exists() and (fresh / "lock").exists()
    err = capsys.readouterr().err
    assert "removing" in err and "another process is building" in err
