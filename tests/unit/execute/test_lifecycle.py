"""The run lifecycle every executor goes through, on a real store (SQLite and PostgreSQL): claim, live
heartbeats and step metrics, each way a run ends, a pool event mapped onto them, the liveness rule, and the
shared opening that ingests a result nobody recorded instead of training it again. The executors' own tests
(test_executor, test_tune, test_slurm) run it end to end."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import socket
import time
from pathlib import Path

import pandas as pd
import pytest
from store_data import planned, result

from ablate.execute.lifecycle import Lifecycle
from ablate.execute.liveness import Holder, Liveness
from ablate.execute.locks import RunLock
from ablate.execute.messages import (
    Died,
    Failed,
    Finished,
    Interrupted,
    Job,
    JobOutcome,
    Killed,
    Progress,
    Started,
)
from ablate.execute.opening import open_grid
from ablate.layout import run_dir
from ablate.result import write_result

HOST = socket.gethostname()


@pytest.fixture
def lifecycle(store, tmp_path):
    store.register_grid(name="g", text="name: g", runs=[planned(i) for i in range(6)])
    life = Lifecycle(store, home=tmp_path, live_every_s=0.05)
    yield life
    life.close()


def _row(store, run_id):
    return store.runs_frame(grid="g").set_index("run_id").loc[run_id]


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"step": s, "loss": 5.0 - 0.1 * s, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0 + s}
            for s in range(start, start + n)]


def test_a_claimed_run_is_running_and_its_steps_reach_the_store_while_it_trains(lifecycle, store):
    cfg = planned(0).config.model_dump(mode="json")
    lifecycle.claim("run000", device="cuda:1", config=cfg)
    row = _row(store, "run000")
    assert (row["status"], row["host"], row["device"]) == ("running", HOST, "cuda:1")
    lifecycle.progress("run000", _rows(10))
    assert lifecycle.live.flush()
    row = _row(store, "run000")
    assert (row["steps"], row["heartbeat_step"], row["train_loss"], row["tokens_per_s"]) == (10, 9, 5.0 - 0.9,
                                                                                             109.0)
    curves = store.curves(run_ids=["run000"], metrics=["loss"])
    assert list(curves["step"]) == list(range(10))
    # a resumed run reports steps 8 and 9 again: still one point per step
    lifecycle.progress("run000", _rows(5, start=8))
    lifecycle.live.flush()
    assert list(store.curves(run_ids=["run000"], metrics=["loss"])["step"]) == list(range(13))
    assert _row(store, "run000")["steps"] == 13


def test_heartbeats_go_on_without_steps_and_stop_when_the_run_ends(lifecycle, store):
    lifecycle.claim("run001", device="cpu", config={})
    first = _row(store, "run001")["heartbeat"]
    time.sleep(1.2)  # the store keeps seconds
    assert _row(store, "run001")["heartbeat"] > first  # evaluating: no step, still alive
    lifecycle.interrupted("run001")
    row = _row(store, "run001")
    assert row["status"] == "queued" and row["heartbeat"] is None
    time.sleep(0.2)
    assert _row(store, "run001")["heartbeat"] is None


def test_finished_ingests_the_result_once_whatever_was_streamed(lifecycle, store, tmp_path):
    lifecycle.claim("run002", device="cpu", config={})
    lifecycle.progress("run002", _rows(40))
    lifecycle.live.flush()
    res = result(2)
    write_result(res, run_dir(tmp_path, "run002"))
    ended = lifecycle.finished("run002")
    assert ended.kind == "done" and ended.result == res and ended.note.startswith("loss ")
    lifecycle.progress("run002", _rows(3))  # late rows of an ended run are ignored
    lifecycle.live.flush()
    row = _row(store, "run002")
    assert row["status"] == "done" and row["train_loss"] == pytest.approx(res.summary["train_loss"])
    assert row["tokens_per_s"] == 1000.0  # the result's, not the last live value
    curves = store.curves(run_ids=["run002"])
    assert curves.groupby("metric")["step"].agg(lambda s: s.is_unique).all()
    assert list(curves[curves["metric"] == "loss"]["value"]) == pytest.approx(res.metrics["loss"])


def test_each_other_end(lifecycle, store, tmp_path):
    for rid in ("run001", "run002", "run003", "run004"):
        lifecycle.claim(rid, device="cpu", config={})
    ended = lifecycle.failed("run001", "ValueError: bad [thing]", "Traceback ...")
    assert (ended.kind, ended.note, ended.error) == ("failed", "ValueError: bad [thing]",
                                                     "ValueError: bad [thing]")
    assert _row(store, "run001")["error"] == "ValueError: bad [thing]\n\nTraceback ..."
    ended = lifecycle.died("run002", -9)
    assert ended.kind == "failed" and "exit code -9" in _row(store, "run002")["error"]
    assert "--retry-failed resumes it" in ended.error
    ended = lifecycle.pruned("run003", step=5, value=300.0)
    row = _row(store, "run003")
    assert (ended.kind, ended.step, row["status"], row["steps"]) == ("pruned", 5, "pruned", 5)
    assert pd.isna(row["error"])  # stopped on purpose: not a crash
    assert lifecycle.busy("run004").kind == "busy" and _row(store, "run004")["status"] == "running"
    (run_dir(tmp_path, "run004")).mkdir(parents=True)
    (run_dir(tmp_path, "run004") / "result.json").write_text('{"run_id": "run004", "sta')  # cut off
    ended = lifecycle.finished("run004")
    assert ended.kind == "failed" and "not a complete result file" in _row(store, "run004")["error"]


@pytest.mark.parametrize("end", ["failed", "pruned", "interrupted"])
def test_a_run_that_ends_without_a_result_keeps_the_steps_it_reported_last(store, tmp_path, end):
    """A failed, pruned or stopped run leaves no ``result.json`` to ingest: the step rows it reported since
    the live writer's last flush are written as it ends, not dropped (the writer here never flushes by
    itself after the first step)."""
    store.register_grid(name="g", text="name: g", runs=[planned(0)])
    life = Lifecycle(store, home=tmp_path, live_every_s=3600)
    try:
        life.claim("run000", device="cpu", config={})
        life.progress("run000", _rows(3))
        life.progress("run000", _rows(4, start=3))
        {"failed": lambda: life.failed("run000", "ValueError: broke"),
         "pruned": lambda: life.pruned("run000", step=6, value=4.4),
         "interrupted": lambda: life.interrupted("run000")}[end]()
        assert list(store.curves(run_ids=["run000"], metrics=["loss"])["step"]) == list(range(7))
        assert _row(store, "run000")["status"] == {"interrupted": "queued"}.get(end, end)
    finally:
        life.close()


def test_pool_events_map_onto_the_lifecycle(lifecycle, store, tmp_path):
    lifecycle.expect(Job("run000", str(run_dir(tmp_path, "run000")),
                         planned(0).config.model_dump(mode="json")))
    assert lifecycle.record(Started("run000", pid=1, device="cpu")) is None
    assert lifecycle.record(Progress("run000", tuple(_rows(3)))) is None
    write_result(result(0), run_dir(tmp_path, "run000"))
    assert lifecycle.record(Finished("run000", JobOutcome("trained", status="done"))).kind == "done"
    assert lifecycle.record(Finished("run001", JobOutcome("busy"))).kind == "busy"
    assert lifecycle.record(Finished("run002", JobOutcome("pruned", step=3, value=9.0))).kind == "pruned"
    assert lifecycle.record(Failed("run003", "KeyError: 'x'", "tb")).error == "KeyError: 'x'"
    assert lifecycle.record(Died("run004", exitcode=-9)).kind == "failed"
    assert lifecycle.record(Interrupted("run005", started=True)).kind == "interrupted"
    assert lifecycle.record(Killed("run005", exitcode=-9)).note == ""
    statuses = store.statuses(run_ids=[f"run00{i}" for i in range(6)])
    assert statuses == {"run000": "done", "run001": "queued", "run002": "pruned", "run003": "failed",
                        "run004": "failed", "run005": "queued"}


# ---------------------------------------------------------------- liveness


def _hold(path: str, ready, release) -> None:  # a spawned process that holds a run directory's lock
    lock = RunLock(Path(path))
    assert lock.acquire()
    ready.set()
    release.wait(30)


def test_liveness_lock_pid_this_host_other_hosts_and_slurm(tmp_path):
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(run_dir(tmp_path, "held")), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        for rid in ("cut", "ended"):  # taken and dropped: a lock file nobody holds
            with RunLock(run_dir(tmp_path, rid)) as lock:
                assert lock.acquire()
        # "ended": its worker finished and freed the lock; the result waits for the ingest that ends its row
        write_result(result(0).model_copy(update={"run_id": "ended"}), run_dir(tmp_path, "ended"))
        rows = [{"run_id": r, "host": h, "stale": s} for r, h, s in (
            ("held", HOST, False), ("cut", HOST, False), ("far", "node7", False), ("quiet", "node7", True),
            ("job", HOST, False), ("ended", HOST, False))]
        live = Liveness(tmp_path, rows, jobs={"job": ("slurm", "12_3"), "lost": ("slurm", "12_4")},
                        live={"slurm": {"12_3"}}, names={"job": "Slurm job 12_3"})
        assert live.holder("held") == Holder(HOST, holder.pid)
        assert str(live.holder("held")) == f"pid {holder.pid}"
        assert live.holder("cut") is None  # this host, lock free: its process is gone, at once
        assert live.holder("far") == Holder("node7") and not live.is_alive("quiet")
        assert str(live.holder("job")) == "Slurm job 12_3" and not live.is_alive("lost")
        assert live.holder("ended") is None  # nobody trains it: the triage ingests its result
        marked = {r["run_id"]: (r["stale"], r["gone"],
                                r["ended"]) for r in live.mark([dict(r) for r in rows])}
        assert marked == {"held": (False, False, False), "cut": (True, True, False),
                          "far": (False, False, False), "quiet": (True, False, False),
                          "job": (False, False, False), "ended": (False, False, True)}
    finally:
        release.set()
        holder.join()
    assert not Liveness(tmp_path, rows).is_alive("held")  # the holder exited: the kernel dropped its lock


def test_status_shows_a_run_that_ended_before_its_ingest_as_ended_not_cut_off(lifecycle, store_url, tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app

    lifecycle.claim("run003", device="cpu", config={})
    lifecycle.progress("run003", _rows(38))
    assert lifecycle.live.flush()
    with RunLock(run_dir(tmp_path, "run003")) as lock:  # the worker held it while it trained, then ended
        assert lock.acquire()
    write_result(result(3), run_dir(tmp_path, "run003"))  # its result, complete; the ingest has not come yet

    def status(*fmt: str):
        return CliRunner().invoke(app, ["status", "--home", str(tmp_path), "--store", store_url, *fmt])

    (row,) = json.loads(status("--format", "json").stdout)["running"]
    assert (row["run_id"], row["step"], row["ended"], row["gone"], row["stale"]) == ("run003", 37, True,
                                                                                     False, False)
    table = status()
    assert table.exit_code == 0 and "ENDED" in table.stdout and "GONE" not in table.stdout
    assert "1 run(s) marked running have ended and wait to be recorded" in table.output
    assert "cut off" not in table.output
    assert lifecycle.finished("run003").kind == "done"
    assert json.loads(status("--format", "json").stdout)["running"] == []


def test_a_run_that_crashed_while_the_store_was_away_is_failed_not_gone(tmp_path, store_url):
    """#26: the store was full when a run crashed, so it still says running; its run directory says how it
    ended (error.txt). status shows it FAILED, not GONE (cut off, resumable), and the next opening records it
    failed."""
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.execute.last_attempt import ERROR_FILE

    path = tmp_path / "g.yaml"
    path.write_text(GRID)
    home = tmp_path / "home"
    with open_grid(path, home=home, store=store_url, retry_failed=False, stale_after_s=300) as o:
        a, b, _ = (d.run for d in o.todo)
        for run in (a, b):
            o.store.mark_running(run_id=run.run_id, host=HOST, device="cpu")
    for run in (a, b):  # both workers took and dropped their locks: a crashed, b was cut off (kill -9)
        with RunLock(run_dir(home, run.run_id)) as worker:
            assert worker.acquire()
    ckpt = run_dir(home, a.run_id) / "checkpoints" / "last.ckpt"
    error = f"DiskFullError: no space left on device: cannot write {ckpt}"
    (run_dir(home, a.run_id) / ERROR_FILE).write_text(f"{error}\n\nTraceback (most recent call last): ...")

    def status(*fmt: str):
        return CliRunner().invoke(app, ["status", "--home", str(home), "--store", store_url, *fmt])

    rows = {r["run_id"]: r for r in json.loads(status("--format", "json").stdout)["running"]}
    assert (rows[a.run_id]["failed"], rows[a.run_id]["gone"]) == (True, False)
    assert (rows[b.run_id]["failed"], rows[b.run_id]["gone"]) == (False, True)
    table = status()
    line = next(x for x in table.stdout.splitlines() if a.run_id in x)
    assert "FAILED" in line and "GONE" not in line, table.stdout
    said = " ".join(table.stderr.split())
    assert (f"1 run(s) marked running failed while the store could not be told (their error.txt says why; "
            f"the next `ablate run` of their grid records them failed): {a.run_id}") in said
    with open_grid(path, home=home, store=store_url, retry_failed=False, stale_after_s=300) as o:
        assert o.failed_before == [a.run_id] and b.run_id in {d.run_id for d in o.todo}
        row = o.store.runs_frame(run_ids=[a.run_id]).iloc[0]
        assert row["status"] == "failed" and row["error"].startswith(error)
    with open_grid(path, home=home, store=store_url, retry_failed=True, stale_after_s=300) as o:
        assert a.run_id in {d.run_id for d in o.todo}  # retried: its old crash is no longer how it ended
        assert not (run_dir(home, a.run_id) / ERROR_FILE).exists()


# ---------------------------------------------------------------- the opening


GRID = """
name: opened
base:
  model: {preset: tiny}
  data: {seq_len: 32, train: [{kind: builtin, name: arithmetic}],
         heldout: {a: {kind: builtin, name: arithmetic}}}
  train: {steps: 5, batch_size: 4}
grid:
  variant: [baseline, sdpa-elementwise, sdpa-headwise]
"""


def test_the_opening_triages_and_ingests_a_result_nobody_recorded(tmp_path, store_url):
    path = tmp_path / "g.yaml"
    path.write_text(GRID)
    home = tmp_path / "home"
    with open_grid(path, home=home, store=store_url, retry_failed=False, stale_after_s=300) as o:
        assert len(o.todo) == 3 and all(d.action == "train" for d in o.todo) and not o.skipped
        a, b, c = (d.run for d in o.todo)
        o.store.mark_running(run_id=a.run_id, host=HOST, device="cpu")
        o.store.mark_running(run_id=b.run_id, host=HOST, device="cpu")
        o.store.mark_failed(run_id=c.run_id, error="boom")
    # a finished while the store could not hear it: its worker took and dropped its lock, its result.json is
    # there
    with RunLock(run_dir(home, a.run_id)) as worker:
        assert worker.acquire()
    write_result(result(0).model_copy(update={"run_id": a.run_id,
                                              "config": a.config.model_dump(mode="json")}),
                 run_dir(home, a.run_id))
    lock = RunLock(run_dir(home, b.run_id))
    assert lock.acquire()  # b is being trained by a live process of this machine (this one)
    try:
        with open_grid(path, home=home, store=store_url, retry_failed=False, stale_after_s=300) as o:
            assert o.reused == {a.run_id: "done"} and o.store.statuses(run_ids=[a.run_id])[a.run_id] == "done"
            assert o.held == {b.run_id: Holder(HOST, os.getpid())}
            assert o.held_line() == f"1 running in another process (pid {os.getpid()}), skipped"
            assert o.failed_before == [c.run_id] and o.todo == []
    finally:
        lock.release()
    with open_grid(path, home=home, store=store_url, retry_failed=True, stale_after_s=300) as o:
        assert sorted(d.run_id for d in o.todo) == sorted([b.run_id, c.run_id])  # b was cut off; c retried
        assert set(o.store.statuses(run_ids=[b.run_id, c.run_id]).values()) == {"queued"}


def test_a_store_whose_disk_is_full_is_said_to_be_full_not_unreachable(tmp_path):
    """A real SQLITE_FULL (the database capped at its pages), through SQLAlchemy as the store sees it; and a
    real ENOSPC (/dev/full) as a write to a file sees it."""
    import errno

    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    from ablate.errors import DiskFullError
    from ablate.layout import disk_full
    from ablate.store.faults import unavailable

    engine = create_engine(f"sqlite:///{tmp_path / 'small.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x TEXT)"))
    with pytest.raises(OperationalError) as full, engine.begin() as conn:
        conn.execute(text("PRAGMA max_page_count = 2"))
        conn.execute(text("INSERT INTO t VALUES (:x)"), [{"x": "y" * 4000}] * 10)
    assert (said := unavailable(full.value,
                                "w")) is not None and said.away == "full (no space left on its disk)"
    with pytest.raises(OperationalError) as away:
        create_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}").connect()
    assert (said := unavailable(away.value, "w")) is not None and said.away == "unreachable"

    with pytest.raises(OSError) as nospace, open("/dev/full", "wb", buffering=0) as fh:
        fh.write(b"x")
    assert nospace.value.errno == errno.ENOSPC
    found = disk_full(nospace.value, tmp_path / "f.npy")
    assert isinstance(found, DiskFullError)
    assert str(found).startswith(f"no space left on device: cannot write {tmp_path / 'f.npy'} (")
    assert disk_full(OSError("requested and written"), tmp_path / "f.npy") is None  # room left: not full


def test_the_recorder_keeps_writes_while_the_store_is_away_and_says_so_once_each_way(tmp_path):
    """A real outage: the SQLite store's folder moved away (a new connection cannot open it) and back. The
    store raises StoreUnavailable; the recorder keeps the write, says the store went away, that it stayed away
    past the patience, and that it is back, once each, and the kept write lands."""
    from ablate.errors import StoreUnavailable
    from ablate.execute.recorder import Recorder
    from ablate.store import Store

    folder, moved = tmp_path / "db", tmp_path / "moved"
    folder.mkdir()
    store = Store.open(f"sqlite:///{folder / 'ablate.db'}")
    store.register_grid(name="g", text="name: g", runs=[planned(0)])
    recorder = Recorder(store, home=tmp_path, patience_s=0.2)
    said: list[tuple[str, str]] = []

    def watch() -> bool:
        return recorder.watch(lambda news, text: said.append((news, text)))

    folder.rename(moved)
    store.engine.dispose()  # the next connection opens the file anew: it is gone
    with pytest.raises(StoreUnavailable, match=r"the store sqlite:///\S+ is unreachable \(unable to open"):
        store.statuses(run_ids=["run000"])
    recorder.write("mark run000 failed", lambda s: s.mark_failed(run_id="run000", error="boom"))
    recorder.write("put run000 back in the queue", lambda s: s.mark_queued(run_id="run000"))
    assert recorder.pending() == 2 and recorder.attempt(lambda: store.statuses(run_ids=["run000"])) is None
    assert not watch() and not watch()
    time.sleep(0.3)
    assert watch() and not watch()
    moved.rename(folder)
    time.sleep(1.1)  # the first retry is 1 s after it went away
    recorder.tick()
    assert recorder.pending() == 0 and store.statuses(run_ids=["run000"]) == {"run000": "queued"}  # in order
    assert not watch()
    where = recorder.where
    assert [n for n, _ in said] == ["away", "gave_up", "back"]
    assert said[0][1] == (f"the store {where} is unreachable: training goes on, results are kept and "
                          "recorded when it is back (stopping after 0 s)")
    assert re.fullmatch(rf"the store {re.escape(where)} has been unreachable for 0 s: stopping \(running "
                        r"jobs save a checkpoint\)", said[1][1]) and recorder.gave_up == said[1][1]
    assert said[2][1] == f"the store {where} is back"
    store.close()


@pytest.mark.parametrize(("wording", "expected"), [
    ("recorder.LOCAL", "the store {where} is full (no space left on its disk): training goes on, results "
                       "are kept and recorded when it is back (stopping after 0 s)"),
    ("slurm.wait.WAIT", "the store {where} is full (no space left on its disk): the Slurm tasks train on "
                          "and record their runs when it is back; waiting for it (up to 0 s)"),
    ("recorder.TASK", "the store {where} is full (no space left on its disk): training goes on, the result "
                      "is kept in the run directory"),
])
def test_every_executor_says_a_full_store_is_full(tmp_path, wording, expected):
    import importlib

    from ablate.errors import StoreUnavailable
    from ablate.execute import recorder as rec
    from ablate.store import Store

    module, _, name = wording.rpartition(".")
    said_as = getattr(importlib.import_module(f"ablate.execute.{module}"), name)

    store = Store.open(f"sqlite:///{tmp_path / 'ablate.db'}")
    recorder = rec.Recorder(store, home=tmp_path, patience_s=0.0)

    def full() -> None:
        raise StoreUnavailable(recorder.where, full=True, reason="database or disk is full")

    assert recorder.attempt(full) is None
    said: list[str] = []
    recorder.watch(lambda _, text: said.append(text), said_as.filled(array="7"))
    assert said[0] == expected.format(where=recorder.where)
    if said_as.gave_up:  # past the patience (a task has none)
        assert said[1].startswith(
            f"the store {recorder.where} has been full (no space left on its disk) for "
        )
    store.close()
