"""The studies ablate ships (``ablate/studies``): run by name, listed by ``ablate grids``, printed by ``ablate
grids show`` to copy and edit; and in the wheel, so a pip user has them: the wheel, installed into a fresh
environment outside the repository, plans and runs ``quickstart`` from an empty folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store import Store
from ablate.studies import FOLDER, shipped, summary

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def test_every_shipped_study_opens_with_a_one_line_summary():
    for name, path in shipped().items():
        first, second = path.read_text(encoding="utf-8").splitlines()[:2]
        assert first.startswith("# ") and second == "#", name
        assert summary(path) == first[2:] and len(first) <= 92, name  # one line of `ablate grids`


def test_grids_lists_each_study_on_one_line():
    out = runner.invoke(app, ["grids"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(shipped())
    quick = "The quick start: the paper's most telling arms on a tiny model, two seeds each."
    assert lines[0].split(None, 1)[1] == quick
    assert all(len(line) <= 110 for line in lines)
    rows = json.loads(runner.invoke(app, ["grids", "--format", "json"]).stdout)
    assert rows[0] == {"name": "quickstart", "summary": summary(shipped()["quickstart"]),
                       "file": "quickstart.yaml"}
    assert {r["file"] for r in rows} == {p.relative_to(FOLDER).as_posix() for p in FOLDER.rglob("*.yaml")}


def test_a_shipped_study_is_printed_to_copy_edit_and_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["grids", "show", "lite"])
    assert out.exit_code == 0 and out.stdout == shipped()["lite"].read_text(encoding="utf-8")
    (tmp_path / "mine.yaml").write_text(out.stdout.replace("name: lite", "name: my-lite"))
    planned = runner.invoke(app, ["plan", "mine.yaml", "--format", "json", "--home", str(tmp_path / "h")])
    assert planned.exit_code == 0 and json.loads(planned.stdout)["grid"] == "my-lite"


def test_a_file_here_wins_over_a_study_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text("name: my-own\ngrid: {seed: [0, 1]}\n")
    out = runner.invoke(app, ["plan", "quickstart", "--format", "json", "--home", str(tmp_path / "h")])
    assert out.exit_code == 0 and json.loads(out.stdout)["grid"] == "my-own"


@pytest.mark.parametrize(("args", "message"), [
    (["grids", "show", "quikstart"], "error: no shipped study 'quikstart' (did you mean 'quickstart'?); the "
                                     "studies: quickstart, attention-2025, attention-2025-text, "
                                     "ladder-lite,"),
    (["plan", "quikstart"], "error: quikstart: no such grid file; nor a shipped study (did you mean "
                            "'quickstart'?) (`ablate grids` lists them)"),
    (["run", "tabel1"], "error: tabel1: no such grid file; nor a shipped study (did you mean 'table1'?)"),
])
def test_a_misspelled_study_is_one_line_with_its_near_match(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, [*args, "--home", str(tmp_path / "h")] if args[0] != "grids" else args)
    assert out.exit_code == 2 and out.stderr.startswith(message) and len(out.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# Every command that takes a GRID argument, each given a study by name. The study's file stem (``mystudy``)
# and its grid's name (``named-apart``) differ, so a command that used the argument as a name, or as a path,
# would not find it. ``run`` and ``tune`` stop at the memory check (1 KB per device), which names the study's
# runs: they were planned from its file, and nothing was written.
STUDY = """# a study for the tests
#
name: named-apart
base:
  model: {preset: tiny}
  data: {seq_len: 32, train: [{kind: builtin, name: arithmetic}], heldout: {}}
  train: {steps: 2, batch_size: 2}
grid:
  variant: [baseline]
  seed: [0]
"""
TOO_SMALL = ["--device-memory", "1KB"]
BY_NAME = {
    "plan": ["plan", "mystudy", "--format", "json"],
    "run": ["run", "mystudy", "--no-mlflow", *TOO_SMALL],
    "tune": ["tune", "mystudy", "--low", "1e-3", "--high", "1e-2", "--trials", "1", "--no-mlflow",
             *TOO_SMALL],
    "cancel": ["cancel", "mystudy"],
}


def grid_commands() -> set[str]:
    """The commands with a GRID argument, read from the app: a new one must join BY_NAME."""
    import inspect
    import typing

    names = set()
    for command in app.registered_commands:
        hints = typing.get_type_hints(command.callback, include_extras=True)
        grid = hints.get("grid")
        if grid is None or "grid" not in inspect.signature(command.callback).parameters:
            continue
        if any(type(meta).__name__ == "ArgumentInfo" for meta in getattr(grid, "__metadata__", ())):
            names.add(command.name or command.callback.__name__)
    return names


def test_every_command_that_takes_a_grid_is_tested_by_name():
    assert grid_commands() == set(BY_NAME)


@pytest.mark.parametrize("command", list(BY_NAME))
def test_every_command_that_takes_a_grid_takes_a_study_by_name(command, tmp_path, monkeypatch):
    from ablate.grid import expand, load_grid

    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "mystudy.yaml").write_text(STUDY)
    monkeypatch.setattr("ablate.studies.FOLDER", studies)
    (work := tmp_path / "work").mkdir()
    monkeypatch.chdir(work)  # no file named mystudy here: the name is the study's
    home = tmp_path / "home"
    (run,) = expand(load_grid(studies / "mystudy.yaml"))
    if command == "cancel":  # a grid the store holds, by the name its file gives it
        with Store.open(home=home) as store:
            store.register_grid(name="named-apart", text=STUDY, runs=[run])
    out = runner.invoke(app, [*BY_NAME[command], "--home", str(home)])
    if command == "plan":
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["grid"] == "named-apart"
    elif command == "cancel":
        assert out.exit_code == 0, out.output
        assert "0 run(s) of named-apart back in the queue" in out.stdout
    else:
        assert out.exit_code == 2 and "run(s) cannot fit in" in out.stderr, out.output
        assert run.run_id in out.stderr and len(out.stderr.splitlines()) == 1
        assert not home.exists()
    assert list(work.iterdir()) == []


def test_tune_takes_the_shipped_quickstart_by_name(tmp_path, monkeypatch):
    from ablate.grid import expand, load_grid

    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["tune", "quickstart", "--low", "1e-3", "--high", "3e-2", "--log", "--trials",
                              "1", "--home", str(tmp_path / "h"), *TOO_SMALL])
    runs = expand(load_grid(shipped()["quickstart"]))
    assert out.exit_code == 2 and f"{len(runs)} of {len(runs)} run(s) cannot fit" in out.stderr, out.output
    assert any(run.run_id in out.stderr for run in runs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_wheel_installed_outside_the_repository_runs_quickstart(tmp_path):
    # the package as a wheel, built from a copy of what it is made of (nothing written into the repository),
    # without the network: setuptools is here, and --no-deps
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "ablate", src / "ablate", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("ablate-*.whl")
    # a fresh environment whose own site-packages hold only the wheel; its dependencies are this one's
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def ablate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "ablate"), *args], cwd=empty, env=env, capture_output=True,
                              text=True, timeout=900)

    where = subprocess.run([str(python), "-c", "import ablate; print(ablate.__file__)"], cwd=empty, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv))  # the wheel's ablate, not the repository's
    listed = ablate("grids")
    assert listed.returncode == 0 and listed.stdout.split()[0] == "quickstart", listed.stderr
    planned = ablate("plan", "quickstart", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["grid"] == "quickstart" and len(plan["runs"]) == 10
    ran = ablate("run", "quickstart", "--jobs", "2", "--no-mlflow", "--set", "train.steps=3",
                 "--set", "eval.heldout_tokens=256", "--set", "eval.probe_tokens=128")
    assert ran.returncode == 0, ran.stderr[-3000:]
    status = json.loads(ablate("status", "--format", "json").stdout)
    assert [(g["grid"], g["done"]) for g in status["grids"]] == [("quickstart", 10)]
    assert sorted(p.name for p in empty.iterdir()) == ["ablate-runs"]
