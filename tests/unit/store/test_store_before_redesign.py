"""A store made by ablate before the house was redrawn (main at 876e701, issue #43) opens after it unchanged:
every run keeps its id and reads done, `ablate run` trains nothing again, and the runs read as trained by the
same model code as today's.

The fixture (tests/fixtures/store-876e701/) is that commit's SQLite store of its grid.yaml: 4 arms (one of
them revised, revision 2) x 2 learning rates x 2 seeds, 10 steps each, made by `ablate run grid.yaml
--no-mlflow`.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.provenance import comparable, differing, model_code, spread_warning

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "store-876e701"
runner = CliRunner()


@pytest.fixture
def old_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(FIXTURE / "ablate.db", home / "ablate.db")
    shutil.copy(FIXTURE / "grid.yaml", tmp_path / "grid.yaml")
    return home


def test_every_run_of_the_old_store_keeps_its_id_and_reads_done(old_home: Path) -> None:
    result = runner.invoke(app, ["plan", str(old_home.parent / "grid.yaml"), "--home", str(old_home),
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output)["runs"]
    assert sorted(r["run_id"] for r in runs) == json.loads((FIXTURE / "run_ids.json").read_text())
    assert {r["status"] for r in runs} == {"done"}


def test_ablate_run_trains_nothing_again(old_home: Path) -> None:
    result = runner.invoke(app, ["run", str(old_home.parent / "grid.yaml"), "--home", str(old_home),
                                 "--no-mlflow", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert re.search(r"skipped\W+16\b", result.output), result.output  # every run: done before
    assert not any((old_home / "runs").glob("*"))  # no run directory: nothing was trained


def test_the_old_runs_read_as_trained_by_todays_model_code() -> None:
    # the redesign moved imports and typed functions in ablate/ablations: what the model computes is the same,
    # and the hash says so (provenance.code_of leaves imports and annotations out; SAME_MODEL maps the hash
    # the old runs carry)
    with sqlite3.connect(f"file:{FIXTURE / 'ablate.db'}?mode=ro&immutable=1", uri=True) as db:  # read only
        stored = [json.loads(row[0]) for row in db.execute("select provenance from runs")]
    assert len(stored) == 16 and {p["model_code"] for p in stored} == {"a9b79855457b"}
    today = {**stored[0], "model_code": model_code()}
    assert comparable("model_code", stored[0]["model_code"]) == comparable("model_code", model_code())
    assert not differing(stored[0], today)
    assert spread_warning([*stored, today], what="table1") is None
