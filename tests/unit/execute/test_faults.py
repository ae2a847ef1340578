"""Faults around ``ablate run`` (issue #14), each with real processes: a second ``ablate run`` of a grid
another process is training, two started at the same moment, a PostgreSQL store stopped mid-grid and
restarted, a SQLite store on a disk that fills up, and ``ablate ui`` stopped by a signal. No mocks: the
stores, servers and signals are the real ones.

The runs: the tiny preset on the arithmetic stream (tests/tiny_grids.py), one torch thread per worker.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.layout import CHECKPOINT
from ablate.store import Store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
ABLATE = str(Path(sys.executable).parent / "ablate")


@pytest.fixture
def env(module_cache):
    return {**os.environ, "ABLATE_CACHE": str(module_cache)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _statuses(url: str | None, home: Path) -> dict[str, dict]:
    try:
        with Store.open(url, home=home) as store:
            frame = store.runs_frame()
    except Exception:  # noqa: BLE001 - not created yet, or (on purpose) down
        return {}
    return {r["run_id"]: r for r in frame.to_dict("records")}


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := predicate()):
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before {what}: {proc.stderr.read()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class _Stderr:
    """A process's stderr read to its end by a thread, line by line (a pipe read any other way can keep lines
    in a buffer where a wait for them never sees them)."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(proc.stderr,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for line in stream:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()
        with self._new:
            self.lines.append("")  # the end
            self._new.notify_all()

    def wait_for(self, text: str, timeout: float) -> None:
        with self._new:
            if not self._new.wait_for(lambda: any(text in x for x in self.lines) or self.lines[-1:] == [""],
                                      timeout):
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {text!r}: {''.join(self.lines)}"
                )
            if not any(text in x for x in self.lines):
                raise AssertionError(f"the process ended before saying {text!r}: {''.join(self.lines)}")

    def text(self, timeout: float) -> str:
        """All of it, once the process has closed its stderr."""
        self._thread.join(timeout)
        return "".join(self.lines)


def _run(home: Path, path: Path, *args: str, env: dict) -> subprocess.Popen:
    # --jobs 2 with --no-mlflow: one torch thread per worker, nothing but the store
    return subprocess.Popen([ABLATE, "run", str(path), "--home", str(home), "--no-mlflow", "--jobs", "2",
                             *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _trained_lines(output: str) -> list[str]:
    """The lines of runs this process trained to the end (not those it found finished by another)."""
    return [line for line in output.splitlines() if re.match(r"\s*done [0-9a-f]+ ", line)
            and "trained by another process" not in line]


# ---------------------------------------------------------------- #14 item 1: a grid another process is
# training


def test_a_second_run_of_a_grid_being_trained_skips_it_in_one_line_and_wait_waits(tmp_path, env):
    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("busy", steps=300, checkpoint_every=1000))
    first, waiting = _run(home, path, env=env), None
    try:
        running = _wait(lambda: (r := _statuses(None, home)) and all(
            x["status"] == "running" and x["heartbeat_step"] is not None for x in r.values()) and r, 300,
            "both runs to train", first)
        pids = [int((home / "runs" / rid / ".lock").read_text()) for rid in running]
        # the two workers hold their runs, frozen, until the second and the waiting run have looked
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            second = CliRunner().invoke(app, ["run", str(path), "--home", str(home), "--no-mlflow"])
            waiting = _run(home, path, "--wait", env=env)
            waiting_err = _Stderr(waiting)
            waiting_err.wait_for("waiting for 2 run(s) another process is training", 300)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert second.exit_code == 0, second.output  # before: exit 1, rich.errors.MarkupError
        line = f"2 running in another process ({', '.join(sorted(f'pid {p}' for p in pids))}), skipped"
        assert f"ablate run busy: {line}" in second.output and "to run" not in second.output
        assert "Traceback" not in second.output
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
        waiting.wait(timeout=300)
        w_err = waiting_err.text(timeout=60)
        assert waiting.returncode == 0, w_err
    finally:
        for proc in (first, waiting):
            if proc is not None:
                _stop(proc)
    assert "waiting for 2 run(s) another process is training" in w_err
    assert "to run" not in w_err and not _trained_lines(w_err)  # it waited, then had nothing left to train
    assert len(_trained_lines(err)) == 2
    final = _statuses(None, home)
    assert {r["status"] for r in final.values()} == {"done"} and all(
        r["resumed_from"] is None for r in final.values()
    )


def test_two_runs_started_together_train_each_run_once(tmp_path, env):
    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("race", steps=60))
    procs = [_run(home, path, env=env) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            _stop(p)
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    errs = "\n".join(err for _, err in outs)
    assert "Traceback" not in errs and "MarkupError" not in errs
    assert len(_trained_lines(errs)) == 2  # two runs, each trained by exactly one of the two processes
    final = _statuses(None, home)
    assert len(final) == 2 and {r["status"] for r in final.values()} == {"done"}


# ---------------------------------------------------------------- #14 item 2: the store goes away


def _outage(url: str | None, home: Path, path: Path, env: dict, take_away, bring_back,
            away: str = "unreachable") -> None:
    """Start a grid, take the store away once a run trains, check the clean stop (the lines say the store is
    ``away``), bring the store back, rerun."""
    proc = _run(home, path, "--store-patience", "4", *(["--store", url] if url else []), env=env)
    try:
        seen = _wait(lambda: {rid: r["heartbeat_step"] for rid, r in _statuses(url, home).items()
                              if r["status"] == "running" and (r["heartbeat_step"] or 0) >= 5}, 300,
                     "a run to train", proc)
        take_away()
        out, err = proc.communicate(timeout=600)
    finally:
        _stop(proc)
    # a clean stop: exit 1, the store named, how to resume, no traceback; what trained meanwhile is on disk
    assert proc.returncode == 1, err
    assert "Traceback" not in err and f"has been {away} for" in err, err
    assert f"is {away}: training goes on" in err, err
    assert re.search(r"when the store is back, run the same command again \(or `ablate ingest .*runs`\)",
                     err), err
    assert f"has been {away} for" in err and "interrupted" in err  # patience (4 s) ran out mid-run
    runs = home / "runs"
    results = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/result.json")}
    # it trained on while the store was away: finished, or checkpointed further
    for rid, step in seen.items():
        assert rid in results or (runs / rid / CHECKPOINT).is_file(), (rid, step, err)
    # cut off with a checkpoint: every such run, seen training above or started just after the look
    cut = {
        rid
        for rid in (p.name for p in runs.iterdir())
        if rid not in results and (runs / rid / CHECKPOINT).is_file()
    }
    bring_back()
    rerun = _run(home, path, *(["--store", url] if url else []), env=env)
    out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    final = _statuses(url, home)
    assert len(final) == 2 and {r["status"] for r in final.values()} == {"done"}, final
    for rid, mtime in results.items():  # finished during the outage: recorded now, never trained again
        assert (runs / rid / "result.json").stat().st_mtime_ns == mtime
    assert len(_trained_lines(err)) == 2 - len(results)
    resumed = {rid for rid, r in final.items() if rid not in results and r["resumed_from"] is not None}
    assert resumed == cut, (resumed, cut)  # cut off: resumed from its checkpoint, not restarted


def test_a_postgres_store_stopped_mid_grid_then_restarted(tmp_path, env, own_postgres):
    url, stop, start = own_postgres
    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("away", steps=2500, checkpoint_every=50))  # still training when patience ends
    _outage(url, home, path, env, take_away=stop, bring_back=start)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real small disk at ``path``: a tmpfs of ``size`` (root only: it mounts), unmounted afterwards."""
    path.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_sqlite_store_on_a_disk_that_fills_up(tmp_path, env):
    """A real full disk: a small tmpfs holding the SQLite store, filled mid-grid."""
    with _tmpfs(tmp_path / "disk", "64m") as disk:
        filler = disk / "filler"
        url = f"sqlite:///{disk / 'ablate.db'}"
        path, home = tmp_path / "g.yaml", tmp_path / "home"
        path.write_text(tiny_grid("full", steps=2500, checkpoint_every=50))

        def fill() -> None:  # until the disk says no more
            with filler.open("wb", buffering=0) as fh:
                try:
                    while fh.write(b"\0" * 4096):
                        pass
                except OSError:
                    pass

        _outage(url, home, path, env, take_away=fill, bring_back=lambda: filler.unlink(),
                away="full (no space left on its disk)")  # full, not unreachable: say what it is


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MB disk."""
    with _tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk


def test_a_home_whose_disk_is_full_fails_each_run_in_one_line_naming_the_path(tmp_path, env, small_disk):
    """#26: a checkpoint that does not fit. Each run fails in one line, 'no space left' and the file it could
    not write, nothing else on screen; the whole trace is in the run's train.log; no half-written file is
    left; the store says failed (not running, not GONE)."""
    path, home = tmp_path / "g.yaml", small_disk
    path.write_text(tiny_grid("full", steps=30, checkpoint_every=10))  # a checkpoint is ~1.4 MB
    proc = _run(home, path, env=env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert "Traceback" not in out + err, err
    runs = _statuses(None, home)
    assert len(runs) == 2 and {r["status"] for r in runs.values()} == {"failed"}, runs
    for rid, row in runs.items():
        ckpt = home / "runs" / rid / CHECKPOINT
        said = f"DiskFullError: no space left on device: cannot write {ckpt} ("
        mine = [x for x in err.splitlines() if rid in x]
        assert len(mine) == 1 and said in mine[0] and said in out, (err, out)
        assert row["error"].startswith(said)
        assert list(ckpt.parent.iterdir()) == []  # the partial checkpoint was removed
        log = (home / "runs" / rid / "train.log").read_text()
        assert f"run {rid} failed\nTraceback" in log and "last.ckpt" in log
    store_full = re.compile(
        r"the store sqlite:///\S+ is full \(no space left on its disk\): training goes on"
    )
    other = [x for x in err.splitlines() if not x.startswith(("ablate run full: 2 to run", "starting workers",
                                                              "progress full: ")) and not store_full.match(x)]
    assert len(other) == 2, err  # the two failed lines (and, when the store's disk filled too, its one line)


def test_tune_stops_cleanly_when_the_store_goes_away_and_resumes_its_study(tmp_path, env, own_postgres):
    """The study lives in the store too: while it is away the trial trains on (its evaluations are not
    reported to the pruner), then tune stops with one error line (exit 1: past its patience, or at the next
    ask/tell), and the same command, the store back, resumes the trial and completes the study."""
    import optuna

    from ablate.tune.storage import optuna_storage

    url, stop, start = own_postgres
    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("tuneaway", variants=["baseline"], steps=1500, checkpoint_every=50))
    # --jobs 2 for one trial: one worker with one torch thread (steady pace on a busy machine, as _run's
    # workers)
    args = [ABLATE, "tune", str(path), "--param", "train.lr", "--low", "1e-3", "--high", "1e-2", "--log",
            "--trials", "1", "--jobs", "2", "--no-mlflow", "--home", str(home), "--store", url]
    proc = subprocess.Popen([*args, "--store-patience", "4"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(lambda: any(r["status"] == "running" and (r["heartbeat_step"] or 0) >= 5
                          for r in _statuses(url, home).values()), 300, "a trial to train", proc)
        stop()
        out, err = proc.communicate(timeout=600)
    finally:
        _stop(proc)
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    assert re.search(r"error: the store \S+ (has been unreachable for \d+ s|became unreachable while "
                     r"tuning).*when the store is back, run the same command again: the studies "
                     r"resume", err), err
    runs = home / "runs"
    (run_id,) = [p.name for p in runs.iterdir()]
    finished = (runs / run_id / "result.json").is_file()
    assert finished or (runs / run_id / CHECKPOINT).is_file(), err
    mtime = (runs / run_id / "result.json").stat().st_mtime_ns if finished else None
    start()
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    row = _statuses(url, home)[run_id]
    assert row["status"] == "done", row
    if finished:  # finished while the store was away: read from its result.json, not trained again
        assert (runs / run_id / "result.json").stat().st_mtime_ns == mtime
    else:  # cut off: resumed from its checkpoint
        assert row["resumed_from"] is not None, row
    with Store.open(url) as store:
        (study,) = optuna.get_all_study_summaries(optuna_storage(store.url))
        trials = optuna.load_study(study_name=study.study_name, storage=optuna_storage(store.url)).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE], trials
    assert trials[0].user_attrs["run_id"] == run_id and trials[0].value == pytest.approx(row["val_ppl"])


# ---------------------------------------------------------------- #14 item 6: `ablate ui` and signals


def _descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ui_stops_its_whole_process_group(tmp_path, env, sig):
    """SIGTERM or SIGINT to `ablate ui` stops the MLflow server and every worker it started (before: 15
    processes lived on). Waited for as an event: SIGTERM, then SIGKILL after 3 s, bounds it by design."""
    from ablate.store.mlflow_mirror import open_client, tracking_uri

    open_client(tracking_uri(tmp_path / "home")).create_experiment("g")  # what a first `ablate run` makes
    port = _free_port()
    proc = subprocess.Popen([ABLATE, "ui", "--port", str(port), "--home", str(tmp_path / "home")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    spawned: set[int] = set()
    try:
        def serving() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        _wait(serving, 180, "the UI to serve", proc)
        spawned = _descendants(proc.pid)
        assert spawned  # the MLflow server and its workers
        t0 = time.monotonic()
        os.kill(proc.pid, sig)  # the `ablate ui` process only, as `kill` or a service manager sends it
        proc.wait(timeout=120)
        while time.monotonic() - t0 < 120 and any(_alive(p) for p in spawned):
            time.sleep(0.05)
        took = time.monotonic() - t0
        assert not [p for p in spawned if _alive(p)], f"still alive after {took:.1f}s"
        assert not serving()
    finally:
        _stop(proc)
        for p in spawned:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


# ---------------------------------------------------------------- #26: a reader that goes away
def test_a_closed_output_pipe_lets_the_grid_finish(tmp_path, env):
    """``ablate run ... 2>&1 | head -1``: the reader takes one line and goes; the grid trains on to its end
    (no worker dies, no run restarts), records every run, and exits 0. Also: ``--jobs 100`` starts a worker
    per run."""
    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("pipe", steps=40, checkpoint_every=1000))  # no checkpoint to resume from
    proc = subprocess.Popen([ABLATE, "run", str(path), "--home", str(home), "--no-mlflow", "--jobs", "100",
                             "--progress-every", "0.2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:  # --jobs 100 starts the 2 workers there are runs for
        first = proc.stdout.readline()
        assert first.startswith(b"ablate run pipe: 2 to run (0 resuming), 0 skipped; 2 workers on cpu"), first
        proc.stdout.close()  # what `head -1` does after its line
        assert proc.wait(timeout=600) == 0
    finally:
        _stop(proc)
    runs = _statuses(None, home)
    assert {r["status"] for r in runs.values()} == {"done"} and len(runs) == 2, runs
    assert all(r["resumed_from"] is None and r["steps"] == 40 for r in runs.values()), runs
