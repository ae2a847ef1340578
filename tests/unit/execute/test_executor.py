"""``ablate run`` end to end on the tiny preset: a grid, a rerun that trains nothing, a new seed, ``kill -9``
mid-grid then a resume, a crashing run, ``--retry-failed``, MLflow's nested runs and ``ablate ui``.

The runs read the synthetic arithmetic stream (no corpus to tokenize), 60 steps of 4 x 32 tokens, so most of
the time is the workers importing torch and Lightning.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.result import read_result
from ablate.store import Store

pytestmark = pytest.mark.slow

ABLATE = str(Path(sys.executable).parent / "ablate")
TASKSET_0 = ["taskset", "-c", "0"] if shutil.which("taskset") else []


def grid_text(name: str, seeds: list[int], extra: str = "") -> str:
    return tiny_grid(name, seeds=seeds, extra=extra)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """Subprocess environment: a shared token cache (MLflow in each home: the suite clears the caller's)."""
    return {**os.environ, "ABLATE_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(autouse=True)
def _shared_cache(env, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", env["ABLATE_CACHE"])


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def frame(home: Path, grid: str, *, current: bool = False):
    with Store.open(home=home) as store:
        return store.runs_frame(grid=grid, current=current).set_index("run_id")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, env):
    """A two-run grid run to the end on two workers (the reference for everything below)."""
    root = tmp_path_factory.mktemp("finished")
    path = root / "g.yaml"
    path.write_text(grid_text("quick", [0]))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "g.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "grid"], check=True)
    home = root / "home"
    cwd, cache = os.getcwd(), os.environ.get("ABLATE_CACHE")
    os.environ["ABLATE_CACHE"] = env["ABLATE_CACHE"]
    os.chdir(root)  # to see that nothing lands in the working directory (no ./mlruns)
    try:
        result = invoke("run", str(path), "--jobs", "2", "--home", str(home), "--progress-every", "1")
    finally:
        os.chdir(cwd)
        if cache is None:
            os.environ.pop("ABLATE_CACHE")
        else:
            os.environ["ABLATE_CACHE"] = cache
    return root, path, home, result


def test_a_grid_runs_to_the_end_on_two_workers_and_mirrors_to_mlflow(finished):
    root, _, home, result = finished
    assert result.exit_code == 0, result.output
    runs = frame(home, "quick")
    assert len(runs) == 2 and set(runs["status"]) == {"done"}
    assert set(runs["variant"]) == {"baseline", "sdpa-elementwise"}
    assert (runs["steps"] == 60).all() and runs["resumed_from"].isna().all()
    assert set(runs["device"]) == {"cpu"}
    assert "2 to run (0 resuming), 0 skipped; 2 workers on cpu, " in result.output
    # no terminal here (#14 item 9): "starting workers", plain progress lines, finished lines with variant and
    # seed
    assert "starting workers" in result.output
    assert re.search(r"progress quick: [0-2]/2 ended; (starting workers|running: .*step \d+/60)",
                     result.output)
    for rid, variant in runs["variant"].items():  # the whole id: what a log's reader copies
        assert re.search(rf"done {rid} {variant} 0 in \d+s", result.output), result.output
    # the run's log and the workers' logs say what happened (#26): start, a line per tenth of the steps, end
    for rid, variant in runs["variant"].items():
        lines = (home / "runs" / rid / "train.log").read_text().splitlines()
        assert re.search(
            rf"INFO ablate.execute.training: run {rid}: {variant} seed 0 on cpu, \d+ threads?, from step 0",
            lines[0],
        ), lines
        assert sum(re.search(r"step \d+/60, loss [\d.]+", x) is not None for x in lines) == 10, lines
        assert re.search(rf"run {rid}: done after 60 steps in [\d.]+ s \(train_loss [\d.]+", lines[-1]), lines
    # provenance (#24): the software that trained each run, its device and the grid's commit, in result.json,
    # the store and `ablate show`
    import torch

    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    for rid in runs.index:
        prov = json.loads((home / "runs" / rid / "result.json").read_text())["provenance"]
        assert (prov["torch"], prov["device"], prov["git_commit"], prov["git_dirty"]) == (
            torch.__version__, "cpu", commit, False)
        assert (
            prov["python"].startswith("3.") and prov["config_version"] == 2 and len(prov["model_code"]) == 12
        )
    shown = invoke("show", runs.index[0], "--home", str(home))
    assert shown.exit_code == 0 and "provenance" in shown.stdout and commit in shown.stdout, shown.output
    logs = [p.read_text() for p in sorted((home / "logs").glob("worker-*.log"))]
    workers = "".join(logs)
    # a worker still importing torch when every run has ended is stopped before it is ready (a loaded machine)
    took = sum(": ended" in log for log in logs)
    assert 1 <= took <= workers.count("ready on cpu") <= 2 and len(logs) == 2
    assert all(f"run {rid}: ended" in workers for rid in runs.index)

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{home.resolve()}/mlflow.db")
    exp = client.get_experiment_by_name("quick")
    nested = client.search_runs([exp.experiment_id], filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in nested) == sorted(runs.index)
    for r in nested:
        rid = r.data.tags["run_id"]
        assert r.data.tags["status"] == "done" and r.data.tags["variant"] == runs.loc[rid, "variant"]
        assert r.data.params["train.steps"] == "60"
        assert r.data.tags["provenance.git_commit"] == commit and r.data.tags["provenance.device"] == "cpu"
        loss = client.get_metric_history(r.info.run_id, "loss")
        assert [m.step for m in loss] == list(range(60))
        assert r.data.metrics["train_loss"] == pytest.approx(runs.loc[rid, "train_loss"])
        assert runs.loc[rid, "mlflow_run_id"] == r.info.run_id
    # no ./mlruns (.git: the grid's repository)
    assert sorted(p.name for p in root.iterdir()) == [".git", "g.yaml", "home"]


def test_a_rerun_trains_nothing_and_starts_no_worker(finished):
    _, path, home, _ = finished
    results = {p: p.stat().st_mtime_ns for p in (home / "runs").glob("*/result.json")}
    result = invoke("run", str(path), "--jobs", "2", "--home", str(home))
    assert result.exit_code == 0, result.output
    assert "worker" not in result.output  # no pool was started
    assert {p: p.stat().st_mtime_ns for p in results} == results


def test_adding_a_seed_trains_only_the_new_runs_and_ctrl_c_requeues(finished, tmp_path, env):
    _, path, home, _ = finished
    before = frame(home, "quick")
    grown = tmp_path / "g.yaml"
    # the new seed's runs are long (400 steps) so that Ctrl-C lands mid-run even on a fast, idle machine
    grown.write_text(grid_text("quick", [0], extra="""include:
  - {variant: baseline, seed: 1, train.steps: 400}
  - {variant: sdpa-elementwise, seed: 1, train.steps: 400}
"""))
    old_ckpts = set((home / "runs").glob("*/checkpoints/last.ckpt"))
    # Ctrl-C at a terminal: SIGINT to the whole process group, once a new run has saved a checkpoint
    proc = subprocess.Popen([ABLATE, "run", str(grown), "--jobs", "1", "--home", str(home), "--no-mlflow"],
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not set((home / "runs").glob("*/checkpoints/last.ckpt")) - old_ckpts:
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted: run the same command again to resume" in out
    cut = frame(home, "quick")
    assert sorted(cut[cut["seed"] == 1]["status"]) == ["queued", "queued"]  # nothing failed, nothing lost

    result = invoke("run", str(grown), "--jobs", "2", "--home", str(home))
    assert result.exit_code == 0, result.output
    after = frame(home, "quick")
    assert len(after) == 4 and set(after["status"]) == {"done"}
    new = sorted(set(after.index) - set(before.index))
    assert sorted(after[after["seed"] == 1].index) == new
    # the interrupted one went on from its checkpoint
    assert after.loc[new, "resumed_from"].notna().sum() == 1
    assert (after.loc[before.index, "finished"] == before["finished"]).all()  # the old runs were not touched
    assert "2 to run (1 resuming), 2 skipped" in result.output


def test_kill_9_mid_grid_then_a_rerun_resumes_to_the_same_losses(finished, tmp_path, env):
    _, path, ref_home, _ = finished
    reference = frame(ref_home, "quick")
    home = tmp_path / "home"
    # on one CPU (#25): its one worker takes 1 thread, whatever the machine's cores
    cmd = [*TASKSET_0, ABLATE, "run", str(path), "--jobs", "1", "--home", str(home), "--no-mlflow"]
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not list((home / "runs").glob("*/checkpoints/last.ckpt")):
            assert proc.poll() is None and time.monotonic() < deadline, (
                f"no checkpoint appeared: {log.read_text()}"
            )
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole `ablate run`: its process and its workers
        proc.wait()
    assert not list((home / "runs").glob("*/result.json"))  # cut off before any run finished
    with Store.open(home=home) as store:
        assert "running" in store.statuses(run_ids=list(reference.index)).values()
    # #14 item 7: on this machine the run's free lock says its process is gone, at once (not after 5 minutes):
    # as soon as the killed worker has exited (the kernel drops its lock then)
    from ablate.execute.locks import is_locked

    deadline = time.monotonic() + 10
    while any(is_locked(d) for d in (home / "runs").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    status = json.loads(invoke("status", "--home", str(home), "--format", "json").stdout)
    (cut,) = status["running"]
    assert cut["gone"] and cut["stale"] and status["stale"] == [cut["run_id"]]
    if TASKSET_0:
        assert cut["device"] == "cpu, 1 thread"
        # the environment's policy, else passive on a machine already oversubscribed (devices.quiet_threads)
        policy = (
            re.escape(env["OMP_WAIT_POLICY"])
            if "OMP_WAIT_POLICY" in env
            else r"(PASSIVE|\(OpenMP's default\))"
        )
        assert re.search(rf"worker 0: 1 torch threads, OMP_WAIT_POLICY={policy}\n",
                         (home / "logs" / "worker-0.log").read_text())
        assert (
            "seed 0 on cpu, 1 thread, from step 0"
            in (home / "runs" / cut["run_id"] / "train.log").read_text()
        )
    table = invoke("status", "--home", str(home))
    assert "GONE" in table.stdout and "cut off" in table.output

    rerun = invoke("run", str(path), "--jobs", "1", "--home", str(home), "--no-mlflow")
    assert rerun.exit_code == 0, rerun.output
    assert "(1 resuming)" in rerun.output
    runs = frame(home, "quick")
    assert len(runs) == 2 and set(runs["status"]) == {"done"}
    resumed = runs[runs["resumed_from"].notna()]
    assert len(resumed) == 1 and resumed["resumed_from"].iloc[0] % 10 == 0
    for rid in runs.index:
        assert runs.loc[rid, "train_loss"] == pytest.approx(reference.loc[rid, "train_loss"], rel=1e-6,
                                                            abs=1e-7)
        result = read_result(home / "runs" / rid)
        assert result.metrics["step"] == list(range(60))  # each step recorded once
        assert result.metrics["loss"] == pytest.approx(read_result(ref_home / "runs" / rid).metrics["loss"],
                                                       rel=1e-6, abs=1e-7)
    # MLflow catches up with runs that finished while nobody mirrored them
    again = invoke("run", str(path), "--home", str(home))
    assert again.exit_code == 0, again.output
    assert frame(home, "quick")["mlflow_run_id"].notna().all()


def test_a_crashing_run_fails_alone_then_retry_failed(finished, tmp_path):
    _, _, home, _ = finished
    # a corpus that is there (a missing one is refused before anything runs) but breaks while it is read
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("not json, line after line\n" * 20)
    crashy = tmp_path / "crashy.yaml"
    crashy.write_text(grid_text("crashy", [2], extra=f"""
exclude: [{{variant: sdpa-elementwise}}]
include:
  - {{variant: baseline, seed: 0, data.train: [{{kind: jsonl, path: "{corpus}"}}]}}
"""))
    result = invoke("run", str(crashy), "--jobs", "2", "--home", str(home))
    assert result.exit_code == 1, result.output
    runs = frame(home, "crashy")
    assert sorted(runs["status"]) == ["done", "failed"]
    failed = runs[runs["status"] == "failed"].iloc[0]
    assert "not JSON" in failed["error"] and "Traceback" in failed["error"]
    assert f"failed {failed.name}: ConfigError" in " ".join(result.output.split())
    log = (home / "runs" / failed.name / "train.log").read_text()  # the run's log holds the whole traceback
    assert f"ERROR ablate.execute.training: run {failed.name} failed\nTraceback" in log, log
    assert "not JSON" in log, log

    again = invoke("run", str(crashy), "--home", str(home))  # failed runs are skipped without --retry-failed
    assert again.exit_code == 1 and "worker" not in again.output
    assert "1 run(s) failed before and were skipped: --retry-failed would rerun them" in again.output

    retried = invoke("run", str(crashy), "--retry-failed", "--jobs", "2", "--home", str(home))
    assert retried.exit_code == 1 and "1 to run (0 resuming), 1 skipped; 1 worker on cpu" in retried.output
    # retried: the same data, the same crash
    assert sorted(frame(home, "crashy")["status"]) == ["done", "failed"]

    # the data fixed is other data: another run (its fingerprint changed), trained; the failed one is kept as
    # a run of an older configuration of the grid
    corpus.write_text('{"text": "the quick brown fox jumps over the lazy dog."}\n' * 400)
    fixed = invoke("run", str(crashy), "--jobs", "2", "--home", str(home))
    assert fixed.exit_code == 0, fixed.output
    assert "1 to run (0 resuming), 1 skipped; 1 worker on cpu" in fixed.output
    assert set(frame(home, "crashy", current=True)["status"]) == {"done"}
    assert sorted(frame(home, "crashy")["status"]) == ["done", "done", "failed"]


def test_bad_input_is_exit_2(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(grid_text("bad", [0]))
    result = invoke("run", str(path), "--jobs", "0", "--home", str(tmp_path / "h"))
    assert result.exit_code == 2 and "--jobs: 0 workers asked for" in result.output
    result = invoke("run", str(path), "--set", "train.stepz=3", "--home", str(tmp_path / "h"))
    assert result.exit_code == 2 and "stepz" in result.output


def test_ui_runs_mlflow_on_localhost_over_the_homes_store(tmp_path, monkeypatch):
    from ablate.cli.serve import ui_command
    from ablate.errors import NoStoreError

    with pytest.raises(NoStoreError, match=r"no MLflow store at sqlite:///.*/home/mlflow.db: nothing has"):
        ui_command(tmp_path / "home", port=5123)  # a home where nothing ran: nothing made
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "mlflow.db").touch()  # what the first `ablate run` makes
    cmd = ui_command(tmp_path / "home", port=5123)
    assert cmd[:4] == [sys.executable, "-m", "mlflow", "ui"]
    opts = dict(zip(cmd[4::2], cmd[5::2], strict=True))
    assert opts == {"--backend-store-uri": f"sqlite:///{(tmp_path / 'home').resolve()}/mlflow.db",
                    "--default-artifact-root": (tmp_path / "home" / "mlartifacts").resolve().as_uri(),
                    "--host": "127.0.0.1", "--port": "5123"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    result = invoke("ui", "--home", str(tmp_path))
    assert result.exit_code == 2 and "is a tracking server (http://mlflow.example:5000)" in result.output
