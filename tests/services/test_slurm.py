"""``ablate run --executor slurm`` on a real one-node Slurm cluster (scripts/slurm.sh: munged, slurmctld,
slurmd on 127.0.0.1): a grid as one job array filling the store, a rerun that submits nothing, a task
preempted mid-run (``SIGUSR2``, as Slurm sends it) that is requeued and resumes from its checkpoint to the
same losses, ``ablate status`` showing the jobs, ``ablate cancel``, a run on two DDP processes, ``--wait``
through a PostgreSQL store that goes away, and tasks that run another job function than the model's (one
that finishes, one that fails). The runs: the tiny preset on the arithmetic stream, 40 steps of
4 x 32 tokens; the store is SQLite in a temporary directory (the jobs run on this machine).

And a training command as the trainer (the toy script of tests/command_scripts.py): its grid as one array, its
stored values what the script printed, compare and ``--until-resolved`` on them, ``ablate cancel`` leaving no
process of the commands, and a command run on two GPUs asking Slurm for one task with both.

Skipped only when the Slurm binaries are missing and ``CI`` is unset (in CI the script installs them).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from command_scripts import command_grid, live_marked
from store_data import mlflow_client
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ConfigError
from ablate.execute.slurm.queue import ALIVE
from ablate.store import Store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ABLATE = str(Path(sys.executable).parent / "ablate")
STEPS = 120  # long enough that a signal sent once training is seen lands mid-run on an idle machine
AWAY_STEPS = 10 * STEPS  # the store-outage test's run: trains through a look of the wait and an outage


def grid_text(name: str, variants: list[str], train: str = "") -> str:
    return tiny_grid(name, variants=variants, steps=STEPS, checkpoint_every=1000, train_extra=train)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def runs(home: Path, grid: str | None = None):
    with Store.open(home=home) as store:
        return store.runs_frame(grid=grid).set_index("run_id")


def squeue() -> dict[str, tuple[str, str]]:
    out = subprocess.run(["squeue", "-h", "-r", "--states=all", "-o", "%i|%T|%r"], capture_output=True,
                         text=True, check=True).stdout
    return {j: (s, r) for j, s, r in (line.split("|") for line in out.split())}


def wait_until(predicate, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := predicate()) is not None and value is not False:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; squeue: {squeue()}")


def ended(job: str) -> bool:
    """Every task of the job (or array) ``job`` has ended (or aged out of squeue). A task ends only after its
    lifecycle closed: its MLflow mirror complete (or given up), its store writes flushed. The exact trigger
    for what a task writes last, where a wall-clock window would race a busy machine."""
    return all(
        state not in ALIVE for j, (state, _) in squeue().items() if j == job or j.startswith(f"{job}_")
    )


@pytest.fixture(scope="session")
def arrayed(slurm_cluster, tmp_path_factory):
    """A two-run grid run as one job array and waited for (the reference for the other tests)."""
    root = tmp_path_factory.mktemp("arrayed")
    path = root / "g.yaml"
    path.write_text(grid_text("arr", ["baseline", "sdpa-elementwise"]))
    home = root / "home"
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--wait", "--home",
                    str(home), "--slurm-opt", "cpus_per_task=1", "--time", "0:10:00")
    return path, home, result


def test_a_grid_runs_as_one_job_array_and_fills_the_store(arrayed):
    _, home, result = arrayed
    assert result.exit_code == 0, result.output
    frame = runs(home, "arr")
    assert set(frame["status"]) == {"done"} and len(frame) == 2
    array = result.stdout.strip().splitlines()[-1]
    assert array.isdigit(), result.output
    assert sorted(frame["job_id"]) == [f"{array}_0", f"{array}_1"]
    assert (frame["steps"] == STEPS).all() and frame["resumed_from"].isna().all()
    assert all(math.isfinite(v) and v < 5.0 for v in frame["train_loss"])
    for run_id in frame.index:
        assert (home / "runs" / run_id / "result.json").is_file()
    assert f"submitted 2 run(s) as Slurm job array {array}" in result.output
    # each task mirrored its run into MLflow, live, through the same lifecycle as the local pool (the two
    # tasks opened the new tracking store together)
    # --wait returns once the store says done; each task then completes its mirror and writes the MLflow run
    # id
    wait_until(lambda: ended(array), 600, "the array's tasks to end", poll=0.5)
    client = mlflow_client(home)
    ids = dict(runs(home, "arr")["mlflow_run_id"])
    assert all(isinstance(v, str) for v in ids.values()), ids
    exp = client.get_experiment_by_name("arr")
    nested = client.search_runs([exp.experiment_id], filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in nested) == sorted(frame.index)
    for r in nested:
        assert r.info.status == "FINISHED" and ids[r.data.tags["run_id"]] == r.info.run_id
        assert sorted(m.step for m in client.get_metric_history(r.info.run_id, "loss")) == list(range(STEPS))


def test_a_rerun_submits_nothing(arrayed):
    path, home, _ = arrayed
    jobs_before = set(squeue())
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--home", str(home))
    assert result.exit_code == 0, result.output
    assert "nothing to submit (2 skipped)" in result.output
    assert not set(squeue()) - jobs_before  # nothing new (an old job may age out of squeue meanwhile)


def test_a_preempted_task_is_requeued_and_resumes_to_the_same_losses(arrayed, tmp_path):
    _, ref_home, _ = arrayed
    path = tmp_path / "p.yaml"
    path.write_text(grid_text("pre", ["baseline"]))
    home = tmp_path / "home"
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--home", str(home),
                    "--slurm-opt", "cpus_per_task=1")
    assert result.exit_code == 0, result.output
    job = result.stdout.strip().splitlines()[-1]
    run_id = runs(home).index[0]
    with Store.open(home=home) as store:
        def training() -> bool:
            running = store.status_summary()["running"]
            return bool(running) and running[0]["step"] is not None

        wait_until(training, 240, "the task to start training")
        # what Slurm sends before a time limit or a preemption: SIGUSR2 to the job's processes
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        # requeued: pending again (Slurm delays a requeued job's start; let it go at once)
        wait_until(lambda: squeue().get(job, ("", ""))[0] == "PENDING", 120, "the job to be requeued")
        assert store.statuses(run_ids=[run_id])[run_id] == "queued"
        status = json.loads(invoke("status", "--home", str(home), "--format", "json").stdout)
        assert [(r["run_id"], r["job_id"], r["state"]) for r in status["jobs"]] == \
            [(run_id, job, "PENDING")]
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
        wait_until(lambda: store.statuses(run_ids=[run_id])[run_id] in ("done", "failed"), 300,
                   "the resumed run")
        curves = store.curves(run_ids=[run_id], metrics=["loss"])
    frame = runs(home)
    assert frame.loc[run_id, "status"] == "done", frame.loc[run_id, "error"]
    resumed = int(frame.loc[run_id, "resumed_from"])
    assert 1 <= resumed < STEPS
    assert (home / "runs" / run_id / "checkpoints" / "last.ckpt").is_file()
    # the same run id trained without interruption in the array: the same loss at every step
    assert run_id in runs(ref_home).index
    with Store.open(home=ref_home) as ref_store:
        ref = ref_store.curves(run_ids=[run_id], metrics=["loss"])
    assert list(curves["step"]) == list(range(STEPS)) == list(ref["step"])
    assert list(curves["value"]) == pytest.approx(list(ref["value"]), rel=1e-6)
    assert frame.loc[run_id, "train_loss"] == pytest.approx(runs(ref_home).loc[run_id, "train_loss"],
                                                            rel=1e-6)
    # MLflow: the requeued task continued the same run (KILLED at the preemption, then FINISHED), each step
    # once
    # the store learns the MLflow run id once its mirror is complete, before the task ends
    wait_until(lambda: ended(job), 600, "the resumed task to end", poll=0.5)
    client = mlflow_client(home)
    mlflow_id = runs(home).loc[run_id, "mlflow_run_id"]
    (nested,) = client.search_runs([client.get_experiment_by_name("pre").experiment_id],
                                   filter_string="tags.`ablate.role` = 'run'")
    assert nested.info.status == "FINISHED" and nested.info.run_id == mlflow_id
    assert sorted(m.step for m in client.get_metric_history(nested.info.run_id, "loss")) == list(range(STEPS))


def test_status_shows_the_jobs_and_cancel_puts_the_runs_back_in_the_queue(slurm_cluster, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(grid_text("can", ["baseline", "sdpa-headwise"]))
    home = tmp_path / "home"
    # held: the array waits in the queue without training (as it would behind other users' jobs)
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--home", str(home),
                    "--slurm-opt", "hold=true", "--array-parallelism", "1")
    assert result.exit_code == 0, result.output
    array = result.stdout.strip().splitlines()[-1]
    table = invoke("status", "--home", str(home))
    assert "in executors' jobs" in table.stdout and f"{array}_0" in table.stdout and "PENDING" in table.stdout
    status = json.loads(invoke("status", "--home", str(home), "--format", "json").stdout)
    assert sorted(r["job_id"] for r in status["jobs"]) == [f"{array}_0", f"{array}_1"]
    assert {(r["executor"], r["state"]) for r in status["jobs"]} == {("slurm", "PENDING")}

    result = invoke("cancel", str(path), "--home", str(home))
    assert result.exit_code == 0, result.output
    assert f"cancelled Slurm job(s) {array} of grid can" in result.stdout
    assert "2 run(s) of can back in the queue" in result.stdout
    frame = runs(home, "can")
    assert set(frame["status"]) == {"queued"} and frame["job_id"].isna().all()
    assert all(state not in ("PENDING", "RUNNING") for job, (state, _) in squeue().items()
               if job.startswith(f"{array}_"))
    assert json.loads(invoke("status", "--home", str(home), "--format", "json").stdout)["jobs"] == []
    # cancelling again finds nothing to cancel; an unknown grid is the user's mistake
    again = invoke("cancel", "can", "--home", str(home))
    assert again.exit_code == 0 and "0 run(s) of can back in the queue" in again.stdout
    unknown = invoke("cancel", "cna", "--home", str(home))
    assert unknown.exit_code == 2 and "can" in unknown.output


# ------------------------------------------------------------ several devices per run
# ``train.devices = 2`` with ``strategy: ddp`` trains as two CPU processes (gloo), one Slurm task each under
# ``srun`` (Lightning reads the ranks from Slurm). "The same loss curve as one process", numerically: DDP
# averages the gradients of the two half batches, which is the gradient of the whole batch, so the parameters
# follow the one-process run up to float summation order, and the logged loss is the mean over both ranks (the
# whole batch's loss). So every step's loss must match the one-process run's within 1e-3 relative (observed:
# ~1e-7). Rank 0 alone writes: one ``result.json``, one row in the store, one value per step and metric.


def test_two_ddp_processes_follow_the_one_process_loss_curve_and_record_one_result(arrayed, tmp_path):
    _, ref_home, _ = arrayed
    path = tmp_path / "d.yaml"
    path.write_text(grid_text("ddp", ["baseline"], train=", devices: 2, strategy: ddp"))
    home = tmp_path / "home"
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--wait", "--home",
                    str(home), "--slurm-opt", "cpus_per_task=1", "--time", "0:10:00")
    assert result.exit_code == 0, result.output
    frame = runs(home)
    assert len(frame) == 1
    run_id = frame.index[0]
    row = frame.loc[run_id]
    assert row["status"] == "done" and row["train.devices"] == 2 and row["train.strategy"] == "ddp"
    assert row["device"] == "cpu" and row["steps"] == STEPS
    assert sorted(p.name for p in (home / "runs").iterdir()) == [run_id]
    assert [p.name for p in (home / "runs" / run_id).glob("result*.json")] == ["result.json"]

    ref = runs(ref_home, "arr")
    ref_id = ref.index[ref["variant"] == "baseline"][0]
    with Store.open(home=home) as store, Store.open(home=ref_home) as ref_store:
        curves = store.curves(run_ids=[run_id])
        one = ref_store.curves(run_ids=[ref_id], metrics=["loss"])
    counts = curves.groupby("metric")["step"].agg(["count", "nunique"])
    assert (counts["count"] == STEPS).all() and (counts["nunique"] == STEPS).all(), counts
    two = curves[curves["metric"] == "loss"].sort_values("step")
    assert list(two["step"]) == list(one["step"]) == list(range(STEPS))
    diffs = [abs(a - b) / abs(b) for a, b in zip(two["value"], one["value"], strict=True)]
    print(f"ddp vs one process: max relative loss difference {max(diffs):.2e}")
    assert max(diffs) < 1e-3
    assert row["train_loss"] == pytest.approx(ref.loc[ref_id, "train_loss"], rel=1e-3)
    assert two["value"].iloc[-1] < 0.8 * two["value"].iloc[0]  # it learned


@pytest.mark.parametrize(("args", "message"), [
    (["--time", "soon"], "--time: 'soon' is not a Slurm time"),
    (["--gpus-per-job", "2"], "2 GPUs per job for runs with train.devices = 1"),
    (["--slurm-opt", "qos"], "--slurm-opt: 'qos' is not K=V"),
    (["--executor", "slrum"], "slurm"),
], ids=["time", "gpus", "slurm-opt", "executor"])
def test_bad_slurm_options_are_one_line_and_exit_2(slurm_cluster, tmp_path, args, message):
    path = tmp_path / "g.yaml"
    path.write_text(grid_text("bad", ["baseline"]))
    jobs_before = set(squeue())
    result = invoke("run", str(path), "--executor", "slurm", "--home", str(tmp_path / "home"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not set(squeue()) - jobs_before  # nothing was submitted (an old job may age out meanwhile)


# ``--wait`` follows the array through the store. When the store (here a PostgreSQL server of the test's own)
# goes away, the wait says so and waits for it up to --store-patience seconds: the task trains on either way.
# Back in time, the wait ends as usual (exit 0, the run done); away for longer, it stops waiting with one
# error line and exit 1, and the task, still running, records its run itself once the store is back.
@pytest.mark.parametrize("outage", ["back in time", "away too long"])
def test_wait_rides_out_a_store_outage_or_stops_cleanly_after_its_patience(slurm_cluster, own_postgres,
                                                                           tmp_path, outage):
    url, stop, start = own_postgres
    path, home = tmp_path / "o.yaml", tmp_path / "home"
    # long enough that the wait (which looks every 5 s) sees the store away while the task still trains, on an
    # idle machine too, where 3 x STEPS took the task under 8 s from start to end
    path.write_text(tiny_grid("away", variants=["baseline"], steps=AWAY_STEPS, checkpoint_every=1000))
    patience = "120" if outage == "back in time" else "3"
    proc = subprocess.Popen([ABLATE, "run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--wait",
                             "--home", str(home), "--store", url, "--store-patience", patience, "--slurm-opt",
                             "cpus_per_task=1", "--time", "0:10:00"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []  # its stderr, line by line as it comes

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def training() -> bool:
        try:
            with Store.open(url) as store:
                frame = store.runs_frame()
        except Exception:  # noqa: BLE001 - not created yet
            return False
        return bool(len(frame) == 1 and frame["status"].iloc[0] == "running"
                    and (frame["heartbeat_step"].fillna(0).iloc[0]) >= 5)

    try:
        wait_until(training, 300, "the task to train", poll=0.2)
        stop()
        # back once the wait has seen it away (not after a guess at how long that takes)
        if outage == "back in time":
            wait_until(lambda: any("is unreachable" in line for line in lines), 300,
                       "the wait to see the outage")
            start()
        out = proc.stdout.read()
        proc.wait(timeout=600)
        reader.join(timeout=10)
        err = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    assert re.search(r"the store \S+ is unreachable: the Slurm tasks train on and record their runs when it "
                     rf"is back; waiting for it \(up to {patience} s\)", err), err
    if outage == "back in time":
        assert proc.returncode == 0, err
        assert re.search(r"the store \S+ is back after \d+ s", err) and "1 done" in err, err
    else:
        assert proc.returncode == 1, err
        assert re.search(r"error: the store \S+ has been unreachable for \d+ s: stopped waiting; array \d+ "
                         r"goes on, and its runs are recorded when the store is back \(by their tasks, or by "
                         r"the next `ablate run` for a task that ended meanwhile\)", err), err
        start()
        array = out.strip().splitlines()[-1]
        wait_until(
            lambda: all(state not in ALIVE for job, (state, _) in squeue().items() if job.startswith(array)),
            300,
            "the task to end",
        )
        again = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--wait", "--home",
                       str(home), "--store", url)
        assert again.exit_code == 0 and "nothing to submit (1 skipped)" in again.output, again.output
    final = runs_at(url)
    assert list(final["status"]) == ["done"] and list(final["steps"]) == [AWAY_STEPS]
    assert final["resumed_from"].isna().all()  # trained once, through the outage


def runs_at(url: str):
    with Store.open(url) as store:
        return store.runs_frame().set_index("run_id")


def test_until_resolved_trains_the_added_seeds_as_slurm_arrays(slurm_cluster, tmp_path):
    """The file's seeds are finished already (their ``result.json`` files, ingested); the seed
    ``--until-resolved`` adds to both cells of the open comparison trains on Slurm, waited for, and the second
    look reads it."""
    from ablate.grid import expand, load_grid
    from ablate.layout import run_dir
    from ablate.resolve import UntilResolved, plan_until_resolved
    from ablate.result import RunResult, write_result

    path, home = tmp_path / "g.yaml", tmp_path / "home"
    path.write_text(tiny_grid("seq", seeds=[0, 1], steps=8, checkpoint_every=1000))
    for p in expand(load_grid(path)):
        summary = {"steps": 8, "tokens": 1024, "train_loss": 2.0 + 0.1 * p.config.seed, "val_ppl": 9.0}
        write_result(RunResult(run_id=p.run_id, config=p.config.model_dump(mode="json"), status="done",
                               summary=summary, metrics={"step": [0], "loss": [2.0]}),
                               run_dir(home, p.run_id))
    planner, ids = plan_until_resolved(path, (), UntilResolved(max_seeds=3, round=1, metric="train_loss"),
                                       home=home)
    added = sorted(ids[c][2] for c in (planner.comps[0].cell, planner.comps[0].reference))
    result = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--home", str(home),
                    "--slurm-opt", "cpus_per_task=1", "--time", "0:10:00", "--no-mlflow", "--until-resolved",
                    "--max-seeds", "3", "--round", "1", "--metric", "train_loss")
    assert result.exit_code == 0, result.output
    assert "--until-resolved: 1 comparison, looks at n=2, 3 seeds; at most 2 more runs" in result.output
    assert "look 2 of 2 (n=3 seeds" in result.output and "sdpa-elementwise vs baseline: " in result.stdout
    frame = runs(home, "seq")
    assert set(frame["status"]) == {"done"} and len(frame) == 6
    trained = frame[frame["job_id"].notna()]
    assert sorted(trained.index) == added and set(trained["seed"]) == {2} and (trained["steps"] == 8).all()


# ------------------------------------------------------------ any job function
# The array task runs the job function it is given, as a pool worker and a Ray task do: here two of a
# module written for the test (on the tasks' PYTHONPATH, which sbatch passes on), neither ablate's model. One
# reports a step, writes a ``result.json`` and finishes; the other reports a step and raises: failed in the
# store with its traceback, also in the run's ``error.txt``, and ``--wait`` exits 1.
JOBS = '''
import time
from pathlib import Path

from ablate.execute.messages import JobOutcome
from ablate.result import RunResult, write_result


def finishes(job, ctx):
    ctx.started()
    ctx.progress([{"step": 0, "loss": 2.5}])
    summary = {"steps": 1, "tokens": 128, "train_loss": 2.5}
    write_result(RunResult(run_id=job.run_id, config=job.config, status="done", summary=summary,
                           metrics={"step": [0], "loss": [2.5]}), Path(job.run_dir))
    return JobOutcome("trained", status="done")


def breaks(job, ctx):
    ctx.started()
    ctx.progress([{"step": 0, "loss": 2.5}])
    raise ValueError(f"the command of {job.run_id} exited with status 3")
'''


@pytest.mark.parametrize("job", ["finishes", "breaks"])
def test_a_task_runs_the_job_function_it_is_given(slurm_cluster, tmp_path, monkeypatch, job):
    from ablate.execute.executor import RunOptions, executor

    (tmp_path / "slurm_jobs_of_the_test.py").write_text(JOBS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    path, home = tmp_path / "j.yaml", tmp_path / "home"
    path.write_text(grid_text("fn", ["baseline"]))
    options = RunOptions(home=home, executor="slurm", mlflow=False, wait=True,
                         job_fn=f"slurm_jobs_of_the_test:{job}",
                         own={"gpus_per_job": 0, "slurm_opts": ("cpus_per_task=1",), "time": "0:10:00"})
    code = executor("slurm").run(path, (), options)
    frame = runs(home, "fn")
    (run_id,) = frame.index
    row = frame.loc[run_id]
    assert row["job_id"] and row["device"] == "cpu"
    with Store.open(home=home) as store:
        curve = store.curves(run_ids=[run_id], metrics=["loss"])
    assert list(curve["step"]) == [0] and list(curve["value"]) == [2.5]  # reported through the lifecycle
    if job == "finishes":
        assert code == 0 and row["status"] == "done" and row["train_loss"] == 2.5
        assert not (home / "runs" / run_id / "error.txt").exists()
        return
    assert code == 1 and row["status"] == "failed"
    said = f"ValueError: the command of {run_id} exited with status 3"
    assert row["error"].startswith(said) and "Traceback" in row["error"] and "in breaks" in row["error"]
    text = (home / "runs" / run_id / "error.txt").read_text()
    assert text.startswith(said) and "in breaks" in text


def test_a_running_runs_device_needs_no_train_section(monkeypatch):
    from ablate.execute.messages import Job
    from ablate.execute.slurm.task import _device_label

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _device_label(Job("r", "/r", {"trainer": "command", "variant": "a", "seed": 0})) == "cpu"
    assert _device_label(Job("r", "/r", {"train": {"devices": 2}})) == "2xcpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert _device_label(Job("r", "/r", {"trainer": "command"})) == "cuda"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # a command on the two GPUs of its one task
    assert _device_label(Job("r", "/r", {"trainer": "command"})) == "2xcuda"


@pytest.mark.parametrize("finished", [True, False], ids=["finished-before-the-signal", "mid-run"])
def test_slurms_signal_leaves_a_finished_run_done_and_puts_one_mid_run_back_in_the_queue(tmp_path, finished):
    """``SlurmTask.checkpoint`` as submitit calls it on Slurm's ``SIGUSR2`` (here from a second thread, while
    the task's main thread waits for its job): a job that had already finished has recorded its run done
    itself, and the signal leaves it so; a job mid-run stops at its stop flag, and its run is back in the
    queue. Both hand back the same task to requeue. (The real signal: the preemption tests above.)"""
    from store_data import planned, result
    from submitit.helpers import DelayedSubmission

    from ablate.execute.devices import Slot
    from ablate.execute.job_function import JobInterrupted
    from ablate.execute.messages import Job, JobOutcome
    from ablate.execute.slurm.task import SlurmTask
    from ablate.layout import run_dir
    from ablate.result import write_result

    home, url = tmp_path / "home", f"sqlite:///{tmp_path / 'ablate.db'}"
    with Store.open(url) as store:
        store.register_grid(name="g", text="name: g", runs=[planned(0)])
    job = Job("run000", str(run_dir(home, "run000")), planned(0).config.model_dump(mode="json"))
    started = threading.Event()

    def fn(job, ctx):
        ctx.started()
        started.set()
        if finished:
            write_result(result(0), Path(job.run_dir))
            return JobOutcome("trained", status="done")
        ctx.stop.wait(300)
        raise JobInterrupted("stopped at the end of step 3, with a checkpoint")

    task = SlurmTask(home=str(home), store=url)
    lifecycle = task._lifecycle = task._open("7_0")
    lifecycle.expect(job)
    handed: list[object] = []
    signal = threading.Thread(target=lambda: started.wait(300) and handed.append(task.checkpoint(job)))
    if not finished:
        signal.start()  # mid-run: the signal comes while the main thread waits for the job
    outcome = task._rank_zero(job, fn, Slot(0, "cpu", 1), lifecycle)
    if finished:
        signal.start()  # after the job ended, before the task returned
    signal.join(300)
    lifecycle.close()
    lifecycle.store.close()
    assert len(handed) == 1 and isinstance(handed[0], DelayedSubmission)
    with Store.open(url) as store:
        assert store.statuses(run_ids=["run000"]) == {"run000": "done" if finished else "queued"}
        if finished:
            assert store.runs_frame(run_ids=["run000"])["val_ppl"].tolist() == [10.0]
    if finished:
        assert outcome["outcome"] == "trained" and outcome["status"] == "done"
    else:
        assert outcome == {"outcome": "interrupted"}


# ------------------------------------------------------------ a training command as the trainer
# The toy script (tests/command_scripts.py) as each array task's command: the task runs the command trainer's
# job function, which starts the script in a process group of its own and reads what it prints.
SLURM_RUN = ("--executor", "slurm", "--gpus-per-job", "0", "--slurm-opt", "cpus_per_task=1", "--time",
             "0:10:00", "--no-mlflow")


def printed(home: Path, run_id: str) -> list[tuple[int, float]]:
    """The ``step N: val X`` lines the script printed into its run's ``train.log``."""
    log = (home / "runs" / run_id / "train.log").read_text()
    return [(int(s), float(v)) for s, v in re.findall(r"^step (\d+): val ([\d.]+)$", log, re.M)]


@pytest.fixture(scope="module")
def commanded(slurm_cluster, tmp_path_factory):
    """A command grid (two arms x seeds 0 and 1) run as one job array and waited for."""
    root = tmp_path_factory.mktemp("commanded")
    path = command_grid(root, seeds=[0, 1])
    home = root / "home"
    return path, home, invoke("run", str(path), *SLURM_RUN, "--wait", "--home", str(home))


def test_a_command_grid_runs_as_a_job_array_and_stores_what_the_script_printed(commanded):
    _, home, result = commanded
    assert result.exit_code == 0, result.output
    array = result.stdout.strip().splitlines()[-1]
    frame = runs(home, "toy")
    assert len(frame) == 4 and set(frame["status"]) == {"done"}, frame[["status", "error"]]
    assert sorted(frame["job_id"]) == [f"{array}_{i}" for i in range(4)]
    assert set(frame["executor"]) == {"slurm"}
    for run_id, row in frame.iterrows():
        lines = printed(home, str(run_id))
        assert lines and row["val_loss"] == lines[-1][1] and row["steps"] == lines[-1][0]
    out = invoke("report", "compare", "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)["comparisons"]
    assert (row["arm"], row["metric"], row["n"]) == ("gated", "val_loss", 2)  # the objective, by default
    by = {(r["variant"], int(r["seed"])): float(r["val_loss"]) for _, r in frame.iterrows()}
    deltas = [by["gated", s] - by["baseline", s] for s in (0, 1)]
    assert row["delta"] == pytest.approx(sum(deltas) / 2, abs=1e-12)


def test_until_resolved_adds_a_seed_to_a_command_grid_as_a_job_array(commanded):
    """After the grid above (its comparison open at n=2), ``--until-resolved`` trains seed 2 of both arms on
    Slurm and looks again."""
    path, home, first = commanded
    assert first.exit_code == 0, first.output
    before = runs(home, "toy")
    result = invoke("run", str(path), *SLURM_RUN, "--home", str(home), "--until-resolved", "--compare",
                    "gated", "--max-seeds", "3")
    assert result.exit_code == 0, result.output
    assert "look 2 of 2 (n=3 seeds" in result.output and "gated vs baseline: " in result.stdout
    frame = runs(home, "toy")
    assert len(frame) == 6 and set(frame["status"]) == {"done"} and sorted(set(frame["seed"])) == [0, 1, 2]
    added = frame[~frame.index.isin(before.index)]
    assert set(added["seed"]) == {2} and sorted(added["variant"]) == ["baseline", "gated"]
    assert (frame.loc[before.index, "finished"] == before["finished"]).all()  # the first four: not again
    for run_id, row in added.iterrows():
        assert row["val_loss"] == printed(home, str(run_id))[-1][1]


def test_cancel_stops_the_commands_and_their_children_and_puts_the_runs_back_in_the_queue(slurm_cluster,
                                                                                           tmp_path):
    marker = f"ablate-slurm-toy-{os.getpid()}-{time.monotonic_ns()}"
    path = command_grid(tmp_path, seeds=[0], steps=10_000, sleep=0.05, children=2, marker=marker)
    home = tmp_path / "home"
    result = invoke("run", str(path), *SLURM_RUN, "--home", str(home))
    assert result.exit_code == 0, result.output
    array = result.stdout.strip().splitlines()[-1]
    try:
        # both runs' commands with their two children each (and the group leaders that started them)
        wait_until(lambda: len(live_marked(marker)) >= 2 * 3, 240, "both commands and their children")
        out = invoke("cancel", str(path), "--home", str(home))
        assert out.exit_code == 0, out.output
        assert f"cancelled Slurm job(s) {array} of grid toy (2 training, 0 waiting to start)" in out.stdout
        wait_until(lambda: live_marked(marker) == [], 120, "no process of the commands left")
    finally:
        subprocess.run(["scancel", array], check=False)
    assert ended(array)
    frame = runs(home, "toy")
    assert set(frame["status"]) == {"queued"} and frame["job_id"].isna().all(), frame[["status", "error"]]


def test_a_command_run_on_two_gpus_is_one_slurm_task_with_both(tmp_path):
    """A command is one process whatever GPUs it takes (a ``torchrun`` in it starts its own ranks): its array
    asks Slurm for one task with the run's GPUs, where ablate's own model asks for one task per device."""
    from ablate.execute.opening import expand_grid
    from ablate.execute.slurm.array import SlurmOptions
    from ablate.execute.slurm.submit import array_parameters

    path = command_grid(tmp_path, seeds=[0])
    path.write_text(path.read_text().replace("trainer:\n", "trainer:\n  gpus: 2\n", 1))

    def planned(grid: Path) -> list:
        return expand_grid(grid, (), home=tmp_path / "home").planned

    params = array_parameters(SlurmOptions(gpus_per_job=2), planned(path), "toy")
    assert (params["nodes"], params["ntasks_per_node"], params["gpus_per_node"]) == (1, 1, 2)
    cpu = array_parameters(SlurmOptions(gpus_per_job=0), planned(path), "toy")
    assert (cpu["nodes"], cpu["ntasks_per_node"], "gpus_per_node" in cpu) == (1, 1, False)
    with pytest.raises(ConfigError, match=r"--gpus-per-job: 1 GPUs per job for runs of 2 GPUs each"):
        array_parameters(SlurmOptions(gpus_per_job=1), planned(path), "toy")
    with pytest.raises(ConfigError, match=r"--nodes: a run of this grid is one process \(its command\)"):
        array_parameters(SlurmOptions(nodes=2, gpus_per_node=1), planned(path), "toy")
    # ablate's own model on two devices: two tasks (srun starts a process per device), a GPU each
    model = tmp_path / "model.yaml"
    model.write_text(grid_text("two", ["baseline"], train=", devices: 2, strategy: ddp"))
    two = array_parameters(SlurmOptions(gpus_per_job=2), planned(model), "two")
    assert (two["nodes"], two["ntasks_per_node"], two["gpus_per_node"]) == (1, 2, 2)
