"""Runs of several processes on the real local Slurm cluster (scripts/slurm.sh; one node, gloo on CPU):
``ablate run --executor slurm --nodes 1 --gpus-per-node 0`` runs a ``train.devices: 2, strategy: fsdp`` run as
one array task of two Slurm tasks started by ``srun`` (Lightning reads the ranks from Slurm; rank 0 alone
records).

- It gives the losses of the same run trained locally as two processes (``ablate run`` on this machine).
- Preempted (``SIGUSR2``, as Slurm sends it), both tasks checkpoint at the same step, the job is requeued, and
  both resume from the sharded checkpoint to the same final loss.
- A local ``ablate run`` never trains a run that a live Slurm job holds.
- Bad input is one line and exit 2: ``--nodes`` without the Slurm executor, more GPUs per node than the
  partition has, processes that do not split over the nodes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_slurm import invoke, runs, squeue, wait_until
from tiny_grids import tiny_grid

from ablate.store import Store

pytestmark = pytest.mark.slow

STEPS = 200  # long enough that a signal sent once training is seen lands mid-run (80 steps could end first)
FSDP = ", devices: 2, strategy: fsdp, lr: 1.0e-2"


def grid(path: Path, name: str, train: str = FSDP) -> Path:
    path.write_text(tiny_grid(name, variants=["baseline"], steps=STEPS, checkpoint_every=20,
                              train_extra=train))
    return path


def losses(home: Path, run_id: str) -> list[float]:
    with Store.open(home=home) as store:
        curve = store.curves(run_ids=[run_id], metrics=["loss"]).sort_values("step")
    assert list(curve["step"]) == list(range(STEPS))
    return list(curve["value"])


@pytest.fixture(scope="module")
def local_two(tmp_path_factory, module_cache):
    """The fsdp run trained on this machine: two processes started by the runner."""
    root = tmp_path_factory.mktemp("local")
    path = grid(root / "g.yaml", "fsdp")
    home = root / "home"
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output
    return runs(home).index[0], home


def test_a_two_task_fsdp_job_gives_the_local_two_process_losses(slurm_cluster, local_two, tmp_path):
    run_id, local_home = local_two
    home = tmp_path / "home"
    out = invoke("run", str(grid(tmp_path / "g.yaml", "fsdp")), "--executor", "slurm", "--nodes", "1",
                 "--gpus-per-node", "0", "--wait", "--home", str(home), "--slurm-opt", "cpus_per_task=1",
                 "--time", "0:10:00", "--no-mlflow")
    assert out.exit_code == 0, out.output
    frame = runs(home)
    assert list(frame.index) == [run_id] and frame.loc[run_id, "status"] == "done"
    assert frame.loc[run_id, "train.strategy"] == "fsdp" and frame.loc[run_id, "train.devices"] == 2
    run_dir = home / "runs" / run_id
    assert [p.name for p in run_dir.glob("result*.json")] == ["result.json"]
    assert not list(run_dir.glob("rank*.log"))  # srun started the ranks: the runner started none
    ours, theirs = losses(home, run_id), losses(local_home, run_id)
    diffs = [abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True)]
    print(f"slurm fsdp vs local fsdp: max relative loss difference {max(diffs):.2e}")
    assert max(diffs) < 1e-4
    assert ours[-1] < 0.8 * ours[0]


def test_a_preempted_two_task_job_resumes_both_ranks_to_the_same_loss(slurm_cluster, local_two, tmp_path):
    run_id, local_home = local_two
    home = tmp_path / "home"
    out = invoke("run", str(grid(tmp_path / "p.yaml", "fsdp")), "--executor", "slurm", "--nodes", "1",
                 "--gpus-per-node", "0", "--home", str(home), "--slurm-opt", "cpus_per_task=1", "--no-mlflow")
    assert out.exit_code == 0, out.output
    job = out.stdout.strip().splitlines()[-1]
    with Store.open(home=home) as store:
        def past_a_checkpoint() -> bool:
            running = store.status_summary()["running"]
            return bool(running) and (running[0]["step"] or 0) >= 25

        wait_until(past_a_checkpoint, 300, "the job to train past its first checkpoint")
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        wait_until(lambda: squeue().get(job, ("", ""))[0] == "PENDING", 120, "the job to be requeued")
        # the task's handler puts the run back in the queue before it hands the job back; with two ranks on
        # one SQLite file that write may wait out the other rank's lock, so it is read until it lands
        wait_until(lambda: store.statuses(run_ids=[run_id])[run_id] == "queued", 30,
                   "the run back in the queue")
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
        wait_until(lambda: store.statuses(run_ids=[run_id])[run_id] in ("done", "failed"), 300,
                   "the resumed run")
    frame = runs(home)
    assert frame.loc[run_id, "status"] == "done", frame.loc[run_id, "error"]
    assert 25 <= int(frame.loc[run_id, "resumed_from"]) < STEPS
    ckpts = home / "runs" / run_id / "checkpoints"
    assert len([p for p in ckpts.iterdir() if p.name.startswith("sharded-")]) == 1
    ours, theirs = losses(home, run_id), losses(local_home, run_id)
    assert ours[-1] == pytest.approx(theirs[-1], rel=1e-4)
    assert ours == pytest.approx(theirs, rel=1e-4)


def test_a_local_run_never_trains_a_run_a_live_slurm_job_holds(slurm_cluster, tmp_path):
    path = grid(tmp_path / "h.yaml", "held", train="")
    home = tmp_path / "home"
    # held in the queue: the job holds the run without training it yet
    out = invoke("run", str(path), "--executor", "slurm", "--gpus-per-job", "0", "--home", str(home),
                 "--slurm-opt", "hold=true", "--no-mlflow")
    assert out.exit_code == 0, out.output
    job = out.stdout.strip().splitlines()[-1]
    run_id = runs(home).index[0]
    try:
        local = invoke("run", str(path), "--home", str(home), "--no-mlflow")
        assert local.exit_code == 0, local.output
        assert f"Slurm job {job}" in local.output
        assert runs(home).loc[run_id, "status"] == "queued"
        assert not (home / "runs" / run_id / "checkpoints").exists()  # nothing trained here
    finally:
        subprocess.run(["scancel", job], check=False)


@pytest.mark.parametrize(("args", "message"), [
    (["--nodes", "2"], "--nodes: only the Slurm executor spans nodes; add --executor slurm"),
    (["--executor", "slurm", "--nodes", "1", "--gpus-per-node", "2"],
     "--gpus-per-node: 2 GPUs per node asked for, but the default partition has at most 0 per node (sinfo)"),
    (["--executor", "slurm", "--nodes", "4"],
     "--nodes: train.devices = 2 processes do not split evenly over 4 nodes"),
    (["--executor", "slurm", "--nodes", "1", "--gpus-per-node", "4"],
     "--gpus-per-node: 1 node(s) x 4 GPUs = 4 GPUs for runs with train.devices = 2"),
], ids=["nodes-local", "gpus-over-partition", "nodes-split", "gpus-devices"])
def test_bad_scale_options_are_one_line_and_exit_2(slurm_cluster, tmp_path, args, message):
    path = grid(tmp_path / "b.yaml", "bad")
    jobs_before = set(squeue())
    out = invoke("run", str(path), "--home", str(tmp_path / "home"), *args)
    assert out.exit_code == 2, out.output
    assert out.output.startswith(f"error: {message}") and out.output.count("\n") == 1, out.output
    assert not set(squeue()) - jobs_before  # nothing was submitted (an old job may age out meanwhile)
