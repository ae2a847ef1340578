"""Migrations: an empty database and one made by the first schema both reach the newest, and the migrated
schema is exactly ``schema.py`` (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import inspect, text

from ablate.store import Store
from ablate.store.engine import make_engine
from ablate.store.migrate import current_revision, head_revision, upgrade
from ablate.store.schema import Base

TABLES = {"grids", "grid_runs", "runs", "scores", "metrics", "probes", "histograms", "events",
          "sequential_decisions", "alembic_version"}


def _schema_diff(engine) -> list:  # noqa: ANN001
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_empty_database_upgrades_to_head(store_url: str) -> None:
    engine, _ = make_engine(store_url)
    try:
        assert set(inspect(engine).get_table_names()) == set()
        assert upgrade(engine) == (None, head_revision())
        assert head_revision() == "0009"
        assert set(inspect(engine).get_table_names()) == TABLES
        assert _schema_diff(engine) == []  # migrations and schema.py agree
        assert upgrade(engine) == ("0009", "0009")  # again: nothing to do
    finally:
        engine.dispose()


def test_first_schema_database_upgrades_and_keeps_rows(store_url: str) -> None:
    engine, _ = make_engine(store_url)
    try:
        assert upgrade(engine, "0001") == (None, "0001")
        indexes = {ix["name"] for ix in inspect(engine).get_indexes("runs")}
        assert "ix_runs_status_heartbeat" not in indexes
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs (run_id, config, variant, seed, status, created) "
                "VALUES ('old1', '{\"variant\": \"baseline\", \"seed\": 3, \"train\": {\"lr\": 0.002}}', "
                "'baseline', 3, 'done', '2024-05-01 12:00:00')"))
            conn.execute(text("INSERT INTO grids (id, name, text, created) VALUES (1, 'g', 'name: g', "
                              "'2024-05-01 12:00:00')"))
            conn.execute(text("INSERT INTO grid_runs (grid_id, run_id) VALUES (1, 'old1')"))
    finally:
        engine.dispose()
    with Store.open(store_url) as store:  # opening applies the rest
        with store.engine.connect() as conn:
            assert current_revision(conn) == "0009"
        assert "ix_runs_status_heartbeat" in {ix["name"] for ix in inspect(store.engine).get_indexes("runs")}
        assert store.statuses(run_ids=["old1"]) == {"old1": "done"}
        frame = store.runs_frame()
        assert frame[["run_id", "variant", "seed", "train.lr"]].values.tolist() == [["old1", "baseline", 3,
                                                                                     0.002]]
        with store.engine.connect() as conn:  # the migration filled the new column of the old row
            flat = conn.execute(text("SELECT config_flat FROM runs")).scalar_one()
        assert (json.loads(flat) if isinstance(flat, str) else flat) == {"variant": "baseline", "seed": 3,
                                                                         "train.lr": 0.002}
        # a membership from before is in its grid's current configuration; the stem id waits for a rehash
        assert list(store.runs_frame(grid="g", current=True)["run_id"]) == ["old1"]
        assert store.status_summary()["grids"][0]["older"] == 0
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT stem_id FROM runs")).scalar_one() is None


@pytest.mark.parametrize("mounts, expected", [
    ("srv:/export /data nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\n", "nfs4"),
    ("/dev/sda1 / ext4 rw 0 0\nsrv:/export /data/sub lustre rw 0 0\n", None),
    ("/dev/sda1 / ext4 rw 0 0\nuser@h:/x /data fuse.sshfs rw 0 0\n", "fuse.sshfs"),
    ("/dev/sda1 / ext4 rw 0 0\n", None),
], ids=["nfs4", "sibling-mount", "sshfs", "local"])
def test_network_file_system_is_detected(mounts: str, expected: str | None) -> None:
    from ablate.store.engine import network_fs_type

    assert network_fs_type("/data/runs/ablate.db", mounts) == expected


def test_local_sqlite_store_has_no_warning(tmp_path) -> None:  # noqa: ANN001
    engine, warnings = make_engine(f"sqlite:///{tmp_path}/a/ablate.db")
    engine.dispose()
    assert warnings == [] and (tmp_path / "a").is_dir()


def test_store_from_a_newer_ablate_is_a_clear_error(store_url: str) -> None:
    from ablate.errors import StoreError

    engine, _ = make_engine(store_url)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
        with pytest.raises(StoreError, match="from schema revision 0099 to 0009.*another ablate version"):
            Store.open(store_url)
    finally:
        engine.dispose()


def test_pruned_runs_stored_as_failed_become_pruned(store_url: str) -> None:
    """Migration 0003: a run tune stored as failed with a "pruned:" error is ``pruned``, its step and value
    kept; a real failure and every child row stay as they were (SQLite recreates ``runs`` without
    cascading)."""
    import pandas as pd

    engine, _ = make_engine(store_url)
    try:
        upgrade(engine, "0002")
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs (run_id, config, variant, seed, status, created, error) VALUES "
                "('p1', '{}', 'baseline', 0, 'failed', '2024-05-01 12:00:00', "
                "'pruned: stopped by the Optuna pruner at step 5 (val_ppl 812.3); not a crash'), "
                "('p2', '{}', 'baseline', 1, 'failed', '2024-05-01 12:00:00', "
                "'pruned: stopped by the Optuna pruner; not a crash'), "
                "('f1', '{}', 'baseline', 2, 'failed', '2024-05-01 12:00:00', 'RuntimeError: boom')"))
            conn.execute(text("INSERT INTO scores (run_id, name, value) VALUES ('f1', 'ppl/code', 9.5)"))
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        assert store.statuses(run_ids=["p1", "p2", "f1"]) == {"p1": "pruned", "p2": "pruned", "f1": "failed"}
        frame = store.runs_frame().set_index("run_id")
        assert frame.loc["p1", "steps"] == 5 and pd.isna(frame.loc["p1", "error"])
        assert frame.loc["f1", "error"] == "RuntimeError: boom" and frame.loc["f1", "ppl/code"] == 9.5
        events = store.events(run_ids=["p1", "p2"])
        assert events[["run_id", "kind", "step"]].values.tolist() == [["p1", "pruned", 5],
                                                                      ["p2", "pruned", 0]]
        assert events["data"].tolist() == [{"value": 812.3, "metric": "val_ppl"}, {"value": None}]
        # the enum is enforced
        with pytest.raises(Exception, match="(?i)check"), store.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET status = 'finished' WHERE run_id = 'f1'"))


def test_a_slurm_job_becomes_the_runs_executor_job_and_goes_back_on_downgrade(store_url: str) -> None:
    """Migration 0008: ``slurm_job_id`` -> ``executor`` + ``job_id``; a row Slurm held keeps its job, one
    without a job has neither, every other value stays; downgrading gives Slurm's job back."""
    from alembic import command

    from ablate.store.migrate import _sqlite_foreign_keys_off, alembic_config

    engine, _ = make_engine(store_url)
    try:
        upgrade(engine, "0007")
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs (run_id, config, variant, seed, status, created, slurm_job_id, host) "
                "VALUES ('s1', '{}', 'baseline', 0, 'running', '2024-05-01 12:00:00', '1234_5', 'node7'), "
                "('l1', '{}', 'baseline', 1, 'done', '2024-05-01 12:00:00', NULL, 'here')"))
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        frame = store.runs_frame().set_index("run_id")
        assert frame.loc["s1", ["executor", "job_id", "host", "status"]].tolist() == ["slurm", "1234_5",
                                                                                      "node7", "running"]
        assert frame.loc["l1", ["executor", "job_id"]].isna().all() and frame.loc["l1", "host"] == "here"
        assert "slurm_job_id" not in {c["name"] for c in inspect(store.engine).get_columns("runs")}
        assert _schema_diff(store.engine) == []
        with store.engine.connect() as conn, _sqlite_foreign_keys_off(conn), conn.begin():
            command.downgrade(alembic_config(conn), "0007")
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT run_id, slurm_job_id FROM runs ORDER BY run_id")).all() == [
                ("l1", None), ("s1", "1234_5")]


def test_runs_made_before_trainers_stay_the_models_and_nothing_retrains(store_url: str) -> None:
    """Migration 0009: ``runs.trainer`` and ``runs.trainer_params``; a row from before is ablate's own model's
    (``trainer`` NULL), keeps its status and values, and goes back on downgrade."""
    from alembic import command

    from ablate.store.migrate import _sqlite_foreign_keys_off, alembic_config

    engine, _ = make_engine(store_url)
    try:
        upgrade(engine, "0008")
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs (run_id, config, variant, seed, status, created, val_ppl) VALUES ('m1', "
                "'{\"variant\": \"baseline\", \"seed\": 0}', 'baseline', 0, 'done', '2024-05-01 12:00:00', "
                "41.5)"))
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        frame = store.runs_frame().set_index("run_id")
        assert frame.loc["m1", ["status", "val_ppl"]].tolist() == ["done", 41.5]
        assert store.statuses(run_ids=["m1"]) == {"m1": "done"}
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT trainer, trainer_params FROM runs")).all() == [(None, None)]
        assert _schema_diff(store.engine) == []
        with store.engine.connect() as conn, _sqlite_foreign_keys_off(conn), conn.begin():
            command.downgrade(alembic_config(conn), "0008")
        assert "trainer" not in {c["name"] for c in inspect(store.engine).get_columns("runs")}


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    """``Store.open`` tells an up-to-date store without importing alembic, by the scripts' revision lines."""
    from ablate.store.migrate import head_revision, packaged_head

    assert packaged_head() == head_revision()
