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


def test_runs_columns_and_all(filled: str) -> None:
    """The table shows the summary columns; --columns picks (globs too, any format, in the order given); --all
    adds the config and lifecycle fields; an unknown column is one line, exit 2."""
    out = invoke("runs", "--store", filled, "--grid", "g", "--format", "markdown")
    head = out.stdout.splitlines()[0]
    assert "ppl/code" in head and "train.lr" not in head and "host" not in head
    out = invoke("runs", "--store", filled, "--grid", "g", "--format", "markdown", "--all")
    head = out.stdout.splitlines()[0]
    assert out.exit_code == 0 and "| train.lr |" in head and "| host |" in head
    for fmt in ("csv", "markdown"):
        out = invoke("runs", "--store", filled, "--format", fmt, "--grid", "g",
                     "--columns", "run_id, variant,ppl/*,train.lr")
        assert out.exit_code == 0, out.output
        head = out.stdout.splitlines()[0]
        assert head == ("run_id,variant,ppl/code,ppl/prose,train.lr" if fmt == "csv" else
                        "| run_id | variant | ppl/code | ppl/prose | train.lr |")
    out = invoke("runs", "--store", filled, "--format", "json", "--columns", "run_id,status")
    rows = json.loads(out.stdout)
    assert rows == [{"run_id": f"run00{i}", "status": s} for i, s in enumerate(("done", "running", "queued"))]
    out = invoke("runs", "--store", filled, "--columns", "run_id,train.l")
    assert out.exit_code == 2 and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith("error: --columns: unknown column 'train.l' (did you mean 'train.lr'?)")


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
    # off a terminal nothing is cut to '…': the running run's row holds its whole id, variant and host
    assert "…" not in out.stdout, out.stdout
    assert any(all(w in line for w in ("run001", "sdpa-elementwise", "node9", "cuda:0", "STALE"))
               for line in out.stdout.splitlines()), out.stdout
    assert "no heartbeat for over" in out.stderr and "run001" in out.stderr


def test_ingest_and_db_upgrade(store_url: str, tmp_path) -> None:  # noqa: ANN001
    out = invoke("db", "upgrade", "--store", store_url)
    assert out.exit_code == 0 and "schema upgraded from empty to 0009" in out.stdout
    out = invoke("db", "upgrade", "--store", store_url)
    assert out.exit_code == 0 and "schema already at 0009" in out.stdout
    runs = tmp_path / "runs"
    for i in range(3):
        write_result(result(i), runs / planned(i).run_id)
    (runs / "run009").mkdir()
    (runs / "run009" / "result.json").write_text('{"run_id": "run009", "conf')  # cut off mid-write
    out = invoke("ingest", "--store", store_url, str(runs))
    assert out.exit_code == 1
    assert (
        out.stdout.count("ingested run00") == 3 and "run009" in out.stderr and "not a complete" in out.stderr
    )
    out = invoke("ingest", "--store", store_url, str(runs / "run001"))  # again: idempotent
    assert out.exit_code == 0 and "ingested run001" in out.stdout
    with Store.open(store_url) as store:
        assert store.statuses(run_ids=["run000", "run001", "run002", "run009"]) == dict.fromkeys(
            ["run000", "run001", "run002"], "done")
        assert len(store.curves()) == 3 * (2 * 40 + 2)


def test_default_store_lives_in_home(tmp_home) -> None:  # noqa: ANN001
    assert invoke("db", "upgrade").exit_code == 0  # what makes a store: run, ingest, db upgrade
    assert (tmp_home / "ablate.db").is_file()
    out = invoke("status", "--format", "json")
    assert out.exit_code == 0 and json.loads(out.stdout) == {"grids": [], "running": [], "stale": [],
                                                             "jobs": []}


READ_ONLY = [["status"], ["status", "--format", "json"], ["runs"], ["runs", "--format", "csv"],
             ["runs", "--where", "seed == 0"], ["report", "table1"], ["report", "scorecard"],
             ["report", "ladder"], ["show", "abc123"], ["diff", "abc", "def"], ["cancel", "g"],
             ["eval", "--grid", "g", "--tasks", "ablate"], ["probe", "--grid", "g"],
             ["db", "rehash", "--dry-run"]]


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_a_command_that_reads_where_nothing_ran_names_the_store_and_makes_nothing(args, tmp_path,
                                                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default home: ./ablate-runs
    out = invoke(*args)
    home = tmp_path / "ablate-runs"
    assert out.exit_code == 1, out.output
    assert out.stderr == (f"error: no store at sqlite:///{home}/ablate.db: nothing has run here (ABLATE_HOME="
                          f"{home}; --home or --store reads another)\n")
    assert list(tmp_path.iterdir()) == []


def test_ui_where_nothing_ran_names_the_tracking_store_and_makes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = invoke("ui")
    home = tmp_path / "ablate-runs"
    assert out.exit_code == 1, out.output
    assert out.stderr == (f"error: no MLflow store at sqlite:///{home}/mlflow.db: nothing has run here "
                          f"(ABLATE_HOME={home}; --home reads another)\n")
    assert list(tmp_path.iterdir()) == []


def test_a_mistyped_home_or_store_is_named_and_made_nowhere(store_url: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "typo" / "home"))
    out = invoke("runs", "--format", "json")
    assert out.exit_code == 1 and f"no store at sqlite:///{tmp_path}/typo/home/ablate.db" in out.stderr
    assert f"(ABLATE_HOME={tmp_path}/typo/home;" in out.stderr and not (tmp_path / "typo").exists()
    # a URL: a SQLite file that is not there, or a PostgreSQL database that holds no store
    monkeypatch.setenv("ABLATE_STORE", store_url)
    out = invoke("status")
    assert out.exit_code == 1 and out.stdout == "", out.output
    assert out.stderr.startswith("error: no store at ") and out.stderr.endswith(
        ": nothing has run there (the URL of --store or ABLATE_STORE; `ablate run` makes it)\n")
    assert not (tmp_path / "store").exists()
    assert invoke("db", "upgrade").exit_code == 0 and invoke("status").exit_code == 0  # made: read


def test_a_relative_sqlite_store_says_where_it_resolves(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    out = invoke("db", "upgrade", "--store", "sqlite:///rel/ablate.db")
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith(f"sqlite:///rel/ablate.db (here {tmp_path / 'rel' / 'ablate.db'}): schema")


def test_a_report_without_grid_reads_the_study_run_last_and_says_so(store: Store, store_url: str) -> None:
    """The README's `ablate report table1` after `ablate tune`: the store holds the study, its tuning trials
    and another study. With no --grid the report reads the study whose runs last ran (the trials' grid only
    when nothing else is there), and one stderr line says which and names the others."""
    def ran(name: str, ids: range, day: int) -> None:
        store.register_grid(name=name, text=name, runs=[planned(i) for i in ids])
        for i in ids:
            store.ingest(result(i).model_copy(update={"finished": f"2025-01-0{day}T10:00:00+00:00"}))

    ran("first", range(0, 6), 1)
    ran("second", range(6, 12), 2)
    ran("first/tune", range(12, 15), 3)  # the latest runs, but trials: one seed per value, nothing to compare
    out = invoke("report", "table1", "--store", store_url)
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines()[0] == ("report of grid second, the one run last; the store also holds "
                                          "first, first/tune (--grid names one)")
    named = invoke("report", "table1", "--store", store_url, "--grid", "second")
    assert named.exit_code == 0 and named.stdout == out.stdout and "run last" not in named.stderr
    store.mark_running(run_id="run000", host="here", device="cpu")  # the first study runs again: now last
    again = invoke("report", "table1", "--store", store_url)
    assert again.exit_code == 0, again.output
    assert again.stderr.startswith("report of grid first, the one run last"), again.output
