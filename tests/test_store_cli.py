"""`ablate runs`, `status`, `ingest` and `db upgrade` through Typer's CliRunner, on both backends."""

from __future__ import annotations

import json

import pytest
from store_data import planned, result
from typer.testing import CliRunner

from ablate.cli import app
from ablate.result import write_result
from ablate.store import Store

runner = CliRunner()


def invoke(*args: str):  # noqa: ANN201 - click's Result
    return runner.invoke(app, list(args))


@pytest.fixture
def filled(store: Store, store_url: str) -> str:
    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(3)])
    store.ingest(result(0))
    store.mark_running(run_id="run001", host="node9", device="cuda:0")
    return store_url


def test_runs_json(filled: str) -> None:
    out = invoke("runs", "--store", filled, "--format", "json", "--where", "status != 'queued'")
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [(r["run_id"], r["status"]) for r in rows] == [("run000", "done"), ("run001", "running")]
    assert rows[0]["ppl/code"] == 8.0 and rows[1]["ppl/code"] is None and rows[0]["train.lr"] == 0.003
    assert rows[0]["grid"] == "g" and rows[0]["resumed_from"] is None


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_runs_formats(filled: str, fmt: str) -> None:
    out = invoke("runs", "--store", filled, "--format", fmt, "--grid", "g")
    assert out.exit_code == 0, out.output
    assert all(f"run00{i}" in out.stdout for i in range(3))
    if fmt == "csv":
        header = out.stdout.splitlines()[0].split(",")
        assert header[:5] == ["run_id", "grid", "variant", "seed", "status"] and "train.lr" in header
    if fmt == "markdown":
        lines = out.stdout.splitlines()
        assert lines[0].startswith("| run_id | grid | variant | seed | status |") and "ppl/code" in lines[0]
        assert lines[1].startswith("| --- |") and "train.lr" not in lines[0] and len(lines) == 5


def test_runs_bad_input_exits_2(filled: str) -> None:
    out = invoke("runs", "--store", filled, "--where", "trainlr > 1")
    assert out.exit_code == 2 and "unknown column 'trainlr'" in out.stderr and "Traceback" not in out.output
    out = invoke("runs", "--store", filled, "--format", "yaml")
    assert out.exit_code == 2 and "unknown format 'yaml'" in out.stderr
    out = invoke("runs", "--store", filled, "--grid", "h")
    assert out.exit_code == 2 and "unknown grid 'h'" in out.stderr


def test_status(filled: str) -> None:
    out = invoke("status", "--store", filled, "--format", "json")
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["grids"] == [{"grid": "g", "total": 3, "queued": 1, "running": 1, "done": 1, "diverged": 0,
                                 "pruned": 0, "failed": 0, "older": 0}]
    assert [r["run_id"] for r in summary["running"]] == ["run001"] and summary["stale"] == []
    out = invoke("status", "--store", filled, "--stale-after", "-1")
    assert out.exit_code == 0 and "node9" in out.stdout and "STALE" in out.stdout
    assert "no heartbeat for over" in out.stderr and "run001" in out.stderr


def test_ingest_and_db_upgrade(store_url: str, tmp_path) -> None:  # noqa: ANN001
    out = invoke("db", "upgrade", "--store", store_url)
    assert out.exit_code == 0 and "schema upgraded from empty to 0005" in out.stdout
    out = invoke("db", "upgrade", "--store", store_url)
    assert out.exit_code == 0 and "schema already at 0005" in out.stdout
    runs = tmp_path / "runs"
    for i in range(3):
        write_result(result(i), runs / planned(i).run_id)
    (runs / "run009").mkdir()
    (runs / "run009" / "result.json").write_text('{"run_id": "run009", "conf')  # cut off mid-write
    out = invoke("ingest", "--store", store_url, str(runs))
    assert out.exit_code == 1
    assert out.stdout.count("ingested run00") == 3 and "run009" in out.stderr and "not a complete" in out.stderr
    out = invoke("ingest", "--store", store_url, str(runs / "run001"))  # again: idempotent
    assert out.exit_code == 0 and "ingested run001" in out.stdout
    with Store.open(store_url) as store:
        assert store.statuses(run_ids=["run000", "run001", "run002", "run009"]) == dict.fromkeys(
            ["run000", "run001", "run002"], "done")
        assert len(store.curves()) == 3 * (2 * 40 + 2)


def test_default_store_lives_in_home(tmp_home) -> None:  # noqa: ANN001
    out = invoke("status", "--format", "json")
    assert out.exit_code == 0 and json.loads(out.stdout) == {"grids": [], "running": [], "stale": [], "slurm": []}
    assert (tmp_home / "ablate.db").is_file()
