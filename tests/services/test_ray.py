"""``ablate run --executor ray`` on a real Ray cluster on this machine: a head (``ray start --head`` on
127.0.0.1, free ports, one CPU) and a second node process of its own (one CPU, one declared GPU), both
started here and stopped by PID. On it: a grid of 8 runs over the two nodes recorded in PostgreSQL (with
``--until-resolved``), ``ablate status`` showing the Ray tasks and ``ablate cancel`` cancelling them, bad
input refused in one line before anything starts, the local default (no address: a Ray instance started for
the command and stopped at its end), and, last, the second node killed mid-run: its run is retried on the
head and resumes from its checkpoint to the loss of an uninterrupted run, each step recorded once.

And a training command as the trainer (the toy script of tests/command_scripts.py): its grid as Ray tasks, its
stored values what the script printed, mirrored into MLflow, compare and ``--until-resolved`` on them, and
``ablate cancel`` leaving no process of the commands.

The runs are the tiny preset on the arithmetic stream (``--devices cpu``: the declared GPU is only for the
GPU check). Tests wait on events (rows in the store, files appearing), never on wall-clock windows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from command_scripts import command_grid, live_marked
from store_data import mlflow_client
from tiny_grids import tiny_grid

from ablate.execute.locks import holder_pid
from ablate.layout import CHECKPOINT
from ablate.result import read_result
from ablate.store import Store

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
ABLATE, RAY = str(BIN / "ablate"), str(BIN / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, poll: float = 0.2):
    """``predicate()``'s first truthy value; a failure naming ``what`` past ``timeout`` (a bound on a hang,
    not a window the test relies on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(poll)
    pytest.fail(f"timed out waiting for {what}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def started_by(pid: int, group: int) -> bool:
    """Whether process ``pid`` descends from a process of process group ``group`` (Ray starts its workers in
    groups of their own, as children of the node's raylet)."""
    seen = 0
    while pid and pid > 1 and seen < 64:
        try:
            if os.getpgid(pid) == group:
                return True
        except ProcessLookupError:
            return False
        pid, seen = _parent(pid) or 0, seen + 1
    return False


def descendants(group: int) -> list[int]:
    """The processes started by process group ``group`` (its raylet's workers among them)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [p for p in pids if started_by(p, group)]


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop a ``ray start --block`` process and everything it started (its own session), by its PID."""
    if _group_alive(proc.pid):
        os.killpg(proc.pid, sig)
        deadline = time.monotonic() + 10
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            proc.poll()
            time.sleep(0.1)
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class Cluster:
    """The test cluster: its address, its two ``ray start`` processes and where they log."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head = self._start("head", "--head", f"--port={self.port}", "--dashboard-host=127.0.0.1",
                                f"--dashboard-port={_free_port()}", f"--temp-dir={root / 't'}",
                                "--num-gpus=0")
        wait_until(self._listening, 120, "the Ray head to listen")
        self.node = self._start("node", f"--address={self.address}", "--num-gpus=1")
        wait_until(lambda: len(self.nodes()) == 2, 180, "both Ray nodes to be alive")

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        ports = [f"--{p}={_free_port()}" for p in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                   "metrics-export-port", "runtime-env-agent-port")]
        log = (self.root / f"{name}.log").open("w")
        return subprocess.Popen([RAY, "start", *args, "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                 "--object-store-memory=80000000", "--disable-usage-stats", *ports,
                                 "--block"],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def nodes(self) -> list:
        from ray.util.state import list_nodes

        try:
            return [n for n in list_nodes(address=self.address, timeout=10) if n.state == "ALIVE"]
        except Exception:  # noqa: BLE001 - not up yet
            return []

    def tasks(self, task_ids: set[str]) -> list:
        """Every attempt of these tasks, as Ray's state API lists them."""
        from ray.util.state import list_tasks

        return [t for t in list_tasks(address=self.address, filters=[("name", "=", "ray_task")], limit=10_000,
                                      raise_on_missing_output=False) if t.task_id in task_ids]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Cluster:
    # short: Ray's socket paths live under its temp dir; never the shared /tmp/ray of this machine's users
    root = Path(tempfile.mkdtemp(prefix="ablate-ray-"))
    # `ray start` asks for this user's token (~/.ray/auth_token, made once), as ablate sends it
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    subprocess.run([RAY, "get-auth-token", "--generate"], capture_output=True, check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI",
                                                            "ABLATE_HOME", "ABLATE_STORE")}
    env["ABLATE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    cluster = None
    try:
        cluster = Cluster(root, env)
        yield cluster
    finally:
        if cluster is not None:
            for proc in (cluster.node, cluster.head):
                stop_group(proc)
        shutil.rmtree(root, ignore_errors=True)


def ablate(cluster: Cluster, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([ABLATE, *args], env=cluster.env, capture_output=True, text=True, timeout=timeout)


def grid(path: Path, name: str, *, seeds: list[int], steps: int, checkpoint_every: int = 10) -> Path:
    path.write_text(tiny_grid(name, seeds=seeds, steps=steps, checkpoint_every=checkpoint_every))
    return path


def pg_store(server: str) -> str:
    """A new, empty database on the session's PostgreSQL server (a schema first on the search path)."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"ablate_ray_{uuid.uuid4().hex[:12]}"
    url = make_url(server)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)


def gcs(job_id: str) -> str:
    return job_id.partition("@")[2]


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize(("args", "message"), [
    (["--executor", "rya"], "unknown executor 'rya' (did you mean 'ray'?); allowed: local, ray, slurm"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:{free}"], "--ray-address: nothing answers at "
                                                                 "127.0.0.1:{free}"),
    (["--executor", "ray", "--ray-address", "{address}", "--set", "train.devices=2"],
     "train.devices: run {run} asks for 2 GPUs (train.devices = 2), but the Ray cluster's largest node "
     "has 1"),
    (["--ray-address", "{address}"], "--ray-address: an option of the Ray executor; add --executor ray"),
], ids=["misspelled", "unreachable", "more-gpus-than-any-node", "address-without-ray"])
def test_bad_input_is_one_line_and_nothing_starts(ray_cluster, tmp_path, args, message):
    from ablate.grid import expand, load_grid

    path = grid(tmp_path / "b.yaml", "bad", seeds=[0], steps=10)
    fill = {"free": _free_port(), "address": ray_cluster.address,
            "run": expand(load_grid(path, ["train.devices=2"]))[0].run_id}
    home = tmp_path / "home"
    out = ablate(ray_cluster, "run", str(path), "--home", str(home), *(a.format(**fill) for a in args))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: {message.format(**fill)}"), out.stderr
    assert out.stderr.count("\n") == 1 and not out.stdout, out.stderr
    assert not (home / "ablate.db").exists() and not (home / "runs").exists()  # nothing half-recorded


def test_without_ray_installed_the_ray_executor_is_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ablate.cli import app

    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed: `import ray` fails
    monkeypatch.setenv("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE", "disabled"))
    path = grid(tmp_path / "n.yaml", "noray", seeds=[0], steps=10)
    out = CliRunner().invoke(app, ["run", str(path), "--executor", "ray", "--home", str(tmp_path / "h")])
    assert out.exit_code == 2
    assert out.output == ("error: --executor ray needs Ray, which is not installed: pip install "
                          "'ablate[ray]' (or pip install 'ray[default]')\n")
    assert not (tmp_path / "h" / "ablate.db").exists()


# ------------------------------------------------------------ a grid over two nodes
def test_eight_runs_over_two_nodes_are_recorded_in_postgres_until_resolved(ray_cluster, pg_server_url,
                                                                           tmp_path):
    path = grid(tmp_path / "g.yaml", "eight", seeds=[0, 1, 2, 3], steps=30)
    home, store = tmp_path / "home", pg_store(pg_server_url)
    out = ablate(ray_cluster, "run", str(path), "--executor", "ray", "--ray-address", ray_cluster.address,
                 "--devices", "cpu", "--home", str(home), "--store", store, "--until-resolved",
                 "--max-seeds", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 to run (0 resuming), 0 skipped; one Ray task per run on the Ray cluster" in out.stderr
    assert "2 nodes)" in out.stderr and "look 1 of 1 (n=4 seeds" in out.stderr
    assert "sdpa-elementwise vs baseline" in out.stdout  # the verdict
    with Store.open(store) as opened:
        runs = opened.runs_frame(grid="eight").set_index("run_id")
        curves = opened.curves(run_ids=list(runs.index), metrics=["loss"])
    assert len(runs) == 8 and set(runs["status"]) == {"done"} and set(runs["executor"]) == {"ray"}
    assert runs["mlflow_run_id"].notna().all()
    for rid in runs.index:  # every step once, the whole curve
        assert sorted(curves[curves["run_id"] == rid]["step"]) == list(range(30))
        # its line names it as a local run's does: variant, seed, the task's time
        variant, seed = runs.loc[rid, "variant"], runs.loc[rid, "seed"]
        assert re.search(rf"^ +done {rid} {variant} {seed} in \d+s  loss ", out.stderr, re.M), out.stderr
    tasks = {j.partition("@")[0] for j in runs["job_id"]}
    assert len(tasks) == 8 and {gcs(j) for j in runs["job_id"]} == {gcs(j) for j in runs["job_id"][:1]}
    nodes = {t.node_id for t in ray_cluster.tasks(tasks)}
    assert len(nodes) == 2  # both nodes trained
    client = mlflow_client(home)
    nested = client.search_runs([client.get_experiment_by_name("eight").experiment_id],
                                filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in nested) == sorted(runs.index)  # one MLflow run each
    assert {r.info.status for r in nested} == {"FINISHED"}


# ------------------------------------------------------------ the runtime_env
def test_a_plugin_arm_reaches_the_workers_through_the_runtime_env(ray_cluster, tmp_path, monkeypatch):
    """The plugin module is on this process's path only (not the nodes', not in the working directory): the
    job's ``py_modules`` carry it to the tasks, and the arm trains there."""
    src, work = tmp_path / "src", tmp_path / "work"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "plugin" / "myattn", src / "myattn")
    work.mkdir()
    path = work / "p.yaml"
    arm = '{arm: "myattn:CappedSoftmax", args: {cap: 5}}'
    text = tiny_grid("plugged", variants=["baseline"], seeds=[0], steps=10)
    text = text.replace("variant: ['baseline']", f"variant: [baseline, {arm}]")
    path.write_text(text.replace("\nbase:", "\nplugins: [myattn]\nbase:", 1))
    from ablate.execute.ray.cluster import runtime_env

    monkeypatch.syspath_prepend(str(src))
    # another test of this process may have imported an example plugin of the same name from elsewhere
    for name in [m for m in sys.modules if m == "myattn" or m.startswith("myattn.")]:
        monkeypatch.delitem(sys.modules, name)
    carried = runtime_env(["myattn"], cwd=work, home=work / "home")
    assert carried["py_modules"] == [str(src / "myattn")] and carried["working_dir"] == str(work)
    assert "home" in carried["excludes"] and ".git" in carried["excludes"]
    env = {**ray_cluster.env, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([ABLATE, "run", str(path), "--executor", "ray", "--ray-address", ray_cluster.address,
                          "--devices", "cpu", "--home", str(tmp_path / "home"), "--no-mlflow"], env=env,
                         cwd=work, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    with Store.open(home=tmp_path / "home") as store:
        runs = store.runs_frame(grid="plugged")
    assert len(runs) == 2 and any(v.startswith("myattn:CappedSoftmax") for v in runs["variant"])
    assert set(runs["status"]) == {"done"} and set(runs["executor"]) == {"ray"}


# ------------------------------------------------------------ status and cancel
def test_status_shows_the_ray_tasks_and_cancel_puts_the_runs_back_in_the_queue(ray_cluster, tmp_path):
    """Four runs on two one-CPU nodes: two train, two wait for a node. ``ablate cancel`` says which were
    which, and the grid's counts it prints are those ``ablate status`` reads right after."""
    path = grid(tmp_path / "c.yaml", "cancelled", seeds=[0, 1], steps=5000)
    home = tmp_path / "home"
    driver = subprocess.Popen([ABLATE, "run", str(path), "--executor", "ray", "--ray-address",
                               ray_cluster.address, "--devices", "cpu", "--home", str(home), "--no-mlflow"],
                              env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def training() -> bool:
            if not (home / "ablate.db").exists():
                return False
            with Store.open(home=home) as store:
                running = store.status_summary()["running"]
            return len(running) == 2 and all((r["step"] or 0) >= 20 for r in running)

        wait_until(training, 300, "both runs to train past a checkpoint")
        status = json.loads(ablate(ray_cluster, "status", "--home", str(home), "--format", "json").stdout)
        states = sorted(r["state"] for r in status["jobs"] if r["status"] == "running")
        assert states == ["RUNNING"] * 2 and {r["executor"] for r in status["jobs"]} == {"ray"}
        assert len(status["jobs"]) == 4 and all(r["state"].startswith("PENDING") for r in status["jobs"]
                                                if r["status"] == "queued")
        training = {r["run_id"] for r in status["running"]}
        assert all(r["job"].startswith("Ray task ") for r in status["jobs"])
        assert not any(r["stale"] for r in status["running"])  # alive by their tasks
        table = ablate(ray_cluster, "status", "--home", str(home)).stdout
        assert "in executors' jobs" in table and "RUNNING" in table

        out = ablate(ray_cluster, "cancel", "cancelled", "--home", str(home))
        after = json.loads(ablate(ray_cluster, "status", "--home", str(home), "--format", "json").stdout)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            "cancelled 4 Ray task(s) of grid cancelled (2 training, 2 waiting to start)",
            "4 run(s) of cancelled back in the queue",
            "grid cancelled now: 4 queued, 0 running of 4 (as ablate status counts them)"]
        (counts,) = after["grids"]
        assert (counts["queued"], counts["running"], counts["total"]) == (4, 0, 4)  # as cancel said
        assert after["jobs"] == [] and after["running"] == []
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130, err  # interrupted: the next `ablate run` resumes the runs
    assert "ablate cancel: cancelling 4 Ray task(s)" in err
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="cancelled").set_index("run_id")
    assert set(runs["status"]) == {"queued"} and runs["job_id"].isna().all()
    for rid in runs.index:  # each that trained saved a checkpoint to resume from
        assert (home / "runs" / rid / CHECKPOINT).is_file() == (rid in training)
        variant, seed = runs.loc[rid, "variant"], runs.loc[rid, "seed"]
        shown = rf"^interrupted {rid} {variant} {seed}" + (r" in \d+s" if rid in training else "  cancelled")
        assert re.search(shown, err, re.M), err
    assert json.loads(ablate(ray_cluster, "status", "--home", str(home), "--format", "json").stdout)[
        "jobs"] == []


# ------------------------------------------------------------ the local default
def test_without_an_address_a_ray_instance_is_started_here_and_stopped_at_the_end(ray_cluster, tmp_path):
    """Its tasks are this machine's processes, in this working directory with this environment (no
    runtime_env is carried): a plugin arm beside the grid file trains there. And the tasks mirror into the
    MLflow experiment the user named (carried in the tasks' spec)."""
    work = tmp_path / "work"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "plugin" / "myattn", work / "myattn")
    text = tiny_grid("embedded", variants=["baseline"], seeds=[0], steps=20)
    arm = '{arm: "myattn:CappedSoftmax", args: {cap: 5}}'
    text = text.replace("variant: ['baseline']", f"variant: [baseline, {arm}]")
    path = work / "l.yaml"
    path.write_text(text.replace("\nbase:", "\nplugins: [myattn]\nbase:", 1))
    home = tmp_path / "home"
    out = subprocess.run([ABLATE, "run", "l.yaml", "--executor", "ray", "--home", str(home),
                          "--mlflow-experiment", "team"], env=ray_cluster.env, cwd=work, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "warning" not in out.stderr, out.stderr
    assert "one Ray task per run on a Ray instance started here" in out.stderr
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="embedded")
    assert set(runs["status"]) == {"done"} and set(runs["executor"]) == {"ray"}
    assert any(v.startswith("myattn:CappedSoftmax") for v in runs["variant"])
    (address,) = {gcs(j) for j in runs["job_id"]}
    assert address.rpartition(":")[2] != str(ray_cluster.port)  # not the test cluster
    host, _, port = address.rpartition(":")
    with pytest.raises(ConnectionRefusedError):  # stopped at the end of the command
        socket.create_connection((host, int(port)), timeout=5).close()
    client = mlflow_client(home)
    assert client.get_experiment_by_name("embedded") is None
    nested = client.search_runs([client.get_experiment_by_name("team").experiment_id],
                                filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in nested) == sorted(runs["run_id"])
    assert {(r.data.tags["grid"], r.info.status) for r in nested} == {("embedded", "FINISHED")}


# ------------------------------------------------------------ tune's trials as Ray tasks
def test_tune_trains_its_trials_as_ray_tasks_with_the_pruner(ray_cluster, tmp_path):
    path = tmp_path / "t.yaml"
    text = tiny_grid("tuned", variants=["baseline"], seeds=[0], steps=12, checkpoint_every=100,
                     train_extra=", warmup_frac: 0.0")
    path.write_text(text.replace("eval: {heldout_tokens: 256, probe_tokens: 128}",
                                 "eval: {heldout_tokens: 256, probes: false, every: 4}"))
    home = tmp_path / "home"
    out = ablate(ray_cluster, "tune", str(path), "--executor", "ray", "--ray-address", ray_cluster.address,
                 "--devices", "cpu", "--low", "1e-3", "--high", "1e-2", "--log", "--trials", "2",
                 "--pruner", "median:1", "--home", str(home), "--no-mlflow")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ablate tune tuned: train.lr per cell" in out.stdout
    with Store.open(home=home) as store:
        trials = store.runs_frame(grid="tuned/tune")
    assert len(trials) == 2 and set(trials["executor"]) == {"ray"}  # each trial a Ray task
    assert set(trials["status"]) <= {"done", "pruned"} and "done" in set(trials["status"])


# ------------------------------------------------------------ a training command as the trainer
# The toy script as each Ray task's command: the task runs the command trainer's job function, which starts
# the script in a process group of its own and reads what it prints. On CPUs (``--devices cpu``): the second
# node's declared GPU is no real one.
def printed(home: Path, run_id: str) -> list[tuple[int, float]]:
    """The ``step N: val X`` lines the script printed into its run's ``train.log``."""
    log = (home / "runs" / run_id / "train.log").read_text()
    return [(int(s), float(v)) for s, v in re.findall(r"^step (\d+): val ([\d.]+)$", log, re.M)]


def ray_run(cluster: Cluster, path: Path, home: Path, *args: str) -> list[str]:
    """``ablate run``'s arguments for ``path`` on the test cluster, on its CPUs."""
    return ["run", str(path), "--executor", "ray", "--ray-address", cluster.address, "--devices", "cpu",
            "--home", str(home), *args]


def command_runs(home: Path):
    with Store.open(home=home) as store:
        return store.runs_frame(grid="toy").set_index("run_id")


@pytest.fixture(scope="module")
def commanded(ray_cluster, tmp_path_factory):
    """A command grid (two arms x seeds 0 and 1) run as Ray tasks, mirrored into MLflow."""
    root = tmp_path_factory.mktemp("commanded")
    path = command_grid(root, seeds=[0, 1])
    home = root / "home"
    return path, home, ablate(ray_cluster, *ray_run(ray_cluster, path, home))


def test_a_command_grid_runs_as_ray_tasks_and_stores_what_the_script_printed(commanded):
    _, home, out = commanded
    assert out.returncode == 0, out.stderr[-3000:]
    runs = command_runs(home)
    assert len(runs) == 4 and set(runs["status"]) == {"done"}, runs[["status", "error"]]
    assert set(runs["executor"]) == {"ray"} and len(set(runs["job_id"])) == 4
    for run_id, row in runs.iterrows():
        lines = printed(home, str(run_id))
        assert lines and row["val_loss"] == lines[-1][1] and row["steps"] == lines[-1][0]
    compare = subprocess.run([ABLATE, "report", "compare", "--home", str(home), "--format", "json"],
                             capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0, compare.stderr
    (row,) = json.loads(compare.stdout)["comparisons"]
    assert (row["arm"], row["metric"], row["n"]) == ("gated", "val_loss", 2)  # the objective, by default
    by = {(r["variant"], int(r["seed"])): float(r["val_loss"]) for _, r in runs.iterrows()}
    deltas = [by["gated", s] - by["baseline", s] for s in (0, 1)]
    assert row["delta"] == pytest.approx(sum(deltas) / 2, abs=1e-12)
    # each task mirrored its run's parsed stream into MLflow, through the same lifecycle as a local run's
    client = mlflow_client(home)
    nested = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                                filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in nested) == sorted(runs.index)
    for r in nested:
        history = client.get_metric_history(r.info.run_id, "val_loss")
        run_id = r.data.tags["run_id"]
        assert r.info.status == "FINISHED" and runs.loc[run_id, "mlflow_run_id"] == r.info.run_id
        assert sorted((m.step, m.value) for m in history) == printed(home, run_id)


def test_until_resolved_adds_a_seed_to_a_command_grid_as_ray_tasks(ray_cluster, commanded):
    """After the grid above (its comparison open at n=2), ``--until-resolved`` trains seed 2 of both arms as
    Ray tasks and looks again."""
    path, home, first = commanded
    assert first.returncode == 0, first.stderr[-3000:]
    before = command_runs(home)
    until = ("--no-mlflow", "--until-resolved", "--compare", "gated", "--max-seeds", "3")
    out = ablate(ray_cluster, *ray_run(ray_cluster, path, home, *until))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "look 2 of 2 (n=3 seeds" in out.stderr and "gated vs baseline: " in out.stdout
    runs = command_runs(home)
    assert len(runs) == 6 and set(runs["status"]) == {"done"} and sorted(set(runs["seed"])) == [0, 1, 2]
    added = runs[~runs.index.isin(before.index)]
    assert set(added["seed"]) == {2} and sorted(added["variant"]) == ["baseline", "gated"]
    assert set(added["executor"]) == {"ray"}
    assert (runs.loc[before.index, "finished"] == before["finished"]).all()  # the first four: not again
    for run_id, row in added.iterrows():
        assert row["val_loss"] == printed(home, str(run_id))[-1][1]


def test_tune_searches_a_command_grids_lr_with_its_trials_as_ray_tasks(ray_cluster, tmp_path):
    """``ablate tune --param lr`` on a command grid, its trials Ray tasks: a study per arm, each trial a run
    whose stored objective is what its script printed, with the lr the study asked for in its command."""
    path = command_grid(tmp_path, seeds=[0])
    home = tmp_path / "home"
    out = ablate(ray_cluster, "tune", str(path), "--executor", "ray", "--ray-address", ray_cluster.address,
                 "--devices", "cpu", "--param", "lr", "--low", "0.01", "--high", "1.0", "--log",
                 "--trials", "2", "--home", str(home), "--no-mlflow")
    assert out.returncode == 0, out.stderr[-3000:]
    with Store.open(home=home) as store:
        trials = store.runs_frame(grid="toy/tune").set_index("run_id")
    assert len(trials) == 4 and set(trials["status"]) == {"done"} and set(trials["executor"]) == {"ray"}
    assert sorted(trials["variant"]) == ["baseline", "baseline", "gated", "gated"]
    for run_id, row in trials.iterrows():
        assert row["val_loss"] == printed(home, str(run_id))[-1][1]
        # the script's last val at seed 0 is 3/5 + lr (and the gated arm's effect, -0.05): the lr it was given
        lr = row["params.lr"]
        assert 0.01 <= lr <= 1.0
        shift = -0.05 if row["variant"] == "gated" else 0.0
        assert row["val_loss"] == pytest.approx(round(0.6 + shift + lr, 4), abs=1e-9)


def test_cancel_stops_the_commands_and_their_children_and_puts_the_runs_back_in_the_queue(ray_cluster,
                                                                                           tmp_path):
    marker = f"ablate-ray-toy-{os.getpid()}-{time.monotonic_ns()}"
    path = command_grid(tmp_path, seeds=[0], steps=10_000, sleep=0.05, children=2, marker=marker)
    home = tmp_path / "home"
    driver = subprocess.Popen([ABLATE, *ray_run(ray_cluster, path, home, "--no-mlflow")], env=ray_cluster.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def both_running() -> bool:
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            # both runs' commands with their two children each (and the group leaders that started them)
            return len(live_marked(marker)) >= 2 * 3

        wait_until(both_running, 300, "both commands and their children")
        out = ablate(ray_cluster, "cancel", "toy", "--home", str(home))
        assert out.returncode == 0, out.stderr
        said = "cancelled 2 Ray task(s) of grid toy (2 training, 0 waiting to start)"
        assert out.stdout.splitlines()[0] == said, out.stdout
        wait_until(lambda: live_marked(marker) == [], 120, "no process of the commands left")
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130, err[-3000:]  # interrupted: the next `ablate run` starts the runs again
    runs = command_runs(home)
    assert set(runs["status"]) == {"queued"} and runs["job_id"].isna().all(), runs[["status", "error"]]


def test_a_command_run_on_two_gpus_asks_ray_for_one_process(tmp_path):
    """A command is one process whatever GPUs it takes (a ``torchrun`` in it starts its own ranks): its task
    asks for the run's GPUs and one process's CPUs, on CPUs too, where ablate's own model asks for a process
    per device."""
    from ablate.execute.opening import expand_grid
    from ablate.execute.ray.cluster import Ask, Cluster, requirements

    path = command_grid(tmp_path, seeds=[0])
    path.write_text(path.read_text().replace("trainer:\n", "trainer:\n  gpus: 2\n", 1))
    planned = expand_grid(path, (), home=tmp_path / "home").planned
    with_gpus = Cluster("127.0.0.1:1", started_here=False, most_cpus=8, most_gpus=2, nodes=1)
    cpus_only = Cluster("127.0.0.1:1", started_here=False, most_cpus=8, most_gpus=0, nodes=1)
    assert set(requirements(planned, with_gpus, threads=3, devices=None).values()) == {Ask(gpus=2, cpus=3)}
    assert set(requirements(planned, with_gpus, threads=3, devices="cpu").values()) == {Ask(gpus=0, cpus=3)}
    assert set(requirements(planned, cpus_only, threads=3, devices=None).values()) == {Ask(gpus=0, cpus=3)}
    model = tmp_path / "model.yaml"
    model.write_text(tiny_grid("two", variants=["baseline"], seeds=[0], steps=10,
                               train_extra=", devices: 2, strategy: ddp"))
    two = expand_grid(model, (), home=tmp_path / "home").planned
    assert set(requirements(two, cpus_only, threads=3, devices=None).values()) == {Ask(gpus=0, cpus=6)}


# ------------------------------------------------------------ a node lost mid-run (last: it kills the node)
def test_a_run_whose_node_dies_resumes_on_the_other_node_to_the_same_loss(ray_cluster, tmp_path):
    steps = 300
    path = grid(tmp_path / "k.yaml", "lost", seeds=[0], steps=steps)
    home, ref_home = tmp_path / "home", tmp_path / "reference"
    driver = subprocess.Popen([ABLATE, "run", str(path), "--executor", "ray", "--ray-address",
                               ray_cluster.address, "--devices", "cpu", "--home", str(home), "--no-mlflow"],
                              env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def on_the_node() -> str | None:
            """The run the second node trains, once it has a checkpoint."""
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            for run_dir in (home / "runs").glob("*"):
                pid = holder_pid(run_dir)
                on_it = pid is not None and started_by(pid, ray_cluster.node.pid)
                if on_it and (run_dir / CHECKPOINT).is_file():
                    return run_dir.name
            return None

        lost = wait_until(on_the_node, 300, "a run on the second node with a checkpoint")
        workers = descendants(ray_cluster.node.pid)
        stop_group(ray_cluster.node, signal.SIGKILL)  # the node dies: its raylet, its agents
        for pid in workers:  # and its workers
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, err[-3000:]
    reference = subprocess.run([ABLATE, "run", str(path), "--jobs", "2", "--home", str(ref_home),
                                "--no-mlflow"], env=ray_cluster.env, capture_output=True, text=True,
                               timeout=600)
    assert reference.returncode == 0, reference.stderr[-2000:]
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid="lost").set_index("run_id")
        curves = store.curves(run_ids=[lost], metrics=["loss"])
        tasks = {runs.loc[lost, "job_id"].partition("@")[0]}
    with Store.open(home=ref_home) as store:
        ref = store.runs_frame(grid="lost").set_index("run_id")
    assert set(runs["status"]) == {"done"}
    assert 10 <= runs.loc[lost, "resumed_from"] < steps  # resumed from its checkpoint, not from step 0
    assert sorted(curves["step"]) == list(range(steps))  # each step recorded once
    result = read_result(home / "runs" / lost)
    assert result.metrics["step"] == list(range(steps))
    for rid in runs.index:
        assert runs.loc[rid, "train_loss"] == pytest.approx(ref.loc[rid, "train_loss"], rel=1e-6, abs=1e-7)
    attempts = sorted(ray_cluster.tasks(tasks), key=lambda t: t.attempt_number)
    assert len(attempts) >= 2 and attempts[-1].state == "FINISHED"
    assert attempts[-1].node_id != attempts[0].node_id  # retried on the other node
