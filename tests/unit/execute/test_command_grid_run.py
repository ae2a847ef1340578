"""A command grid end to end through the CLI, on a real training script (tests/command_scripts.py): plan, run,
the stored values against what the script printed, compare's paired delta against the arithmetic on them,
--until-resolved adding seeds, Ctrl-C leaving no process, and the bad input that is one line at plan."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from command_scripts import command_grid, live_marked
from typer.testing import CliRunner

from ablate.cli import app
from ablate.result import read_result
from ablate.store import Store

ABLATE = str(Path(sys.executable).with_name("ablate"))


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def frame(home: Path, grid: str):
    with Store.open(home=home) as store:
        return store.runs_frame(grid=grid).set_index("run_id")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The toy grid (two arms x 3 seeds) run to the end on two workers."""
    root = tmp_path_factory.mktemp("command")
    path = command_grid(root, seeds=[0, 1, 2])
    home = root / "home"
    result = invoke("run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow")
    return root, path, home, result


def test_plan_lists_the_runs_with_their_arms_and_seeds(tmp_path):
    path = command_grid(tmp_path, seeds=[0, 1])
    out = invoke("plan", str(path), "--home", str(tmp_path / "home"), "--format", "json")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert '"trainer": "command"' in out.output
    runs = [line for line in lines if '"run_id"' in line]
    assert len(runs) == 4 and sum('"variant": "gated"' in r for r in runs) == 2
    assert not (tmp_path / "home").exists()  # planning makes nothing


def test_each_stored_value_is_what_the_script_printed(ran):
    _, _, home, result = ran
    assert result.exit_code == 0, result.output
    runs = frame(home, "toy")
    assert len(runs) == 6 and set(runs["status"]) == {"done"}
    for run_id, row in runs.iterrows():
        log = (home / "runs" / str(run_id) / "train.log").read_text()
        printed = [(int(s), float(v)) for s, v in re.findall(r"step (\d+): val ([\d.]+)", log)]
        assert printed and row["val_loss"] == printed[-1][1]  # the last value is the run's
        assert row["steps"] == printed[-1][0]
        with Store.open(home=home) as store:
            curve = store.curves(run_ids=[str(run_id)], metrics=["val_loss"])
        assert list(zip(curve["step"], curve["value"], strict=True)) == printed  # the whole stream, by step
        assert read_result(home / "runs" / str(run_id)).config["trainer"] == "command"


def test_compare_reads_the_objective_and_its_delta_is_the_arithmetic(ran):
    _, _, home, _ = ran
    out = invoke("report", "compare", "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    rows = data["comparisons"]
    assert [(r["arm"], r["metric"]) for r in rows] == [("gated", "val_loss")]  # the objective, by default
    runs = frame(home, "toy")
    by = {(r["variant"], int(r["seed"])): float(r["val_loss"]) for _, r in runs.iterrows()}
    deltas = [by[("gated", s)] - by[("baseline", s)] for s in (0, 1, 2)]
    assert rows[0]["delta"] == pytest.approx(sum(deltas) / 3, abs=1e-12)
    assert rows[0]["n"] == 3


def test_the_paper_tables_say_in_one_line_they_are_for_the_model(ran):
    _, _, home, _ = ran
    out = invoke("report", "table1", "--home", str(home))
    assert out.exit_code == 2
    assert out.output.startswith("error: ablate report table1 is for grids of ablate's own model; this is a "
                                 "command grid (trainer: command)")
    assert out.output.count("\n") == 1


def test_a_rerun_trains_nothing(ran):
    _, path, home, _ = ran
    before = frame(home, "toy")
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output
    after = frame(home, "toy")
    assert (after["finished"] == before["finished"]).all()


def test_until_resolved_adds_seeds_for_an_open_comparison(tmp_path):
    # gated's effect (-0.002 on average) is far below the seeds' spread: every look stays open
    path = command_grid(tmp_path, seeds=[0, 1], effect=-0.002)
    home = tmp_path / "home"
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow", "--jobs", "2", "--until-resolved",
                 "--compare", "gated", "--max-seeds", "4")
    assert out.exit_code == 0, out.output
    runs = frame(home, "toy")
    assert sorted(set(runs["seed"])) == [0, 1, 2, 3]  # two seeds added to both arms
    assert len(runs) == 8 and set(runs["status"]) == {"done"}
    assert "val_loss, paired t over seeds" in out.output  # the objective, by default
    assert "gated vs baseline" in out.output


def test_until_resolved_with_an_unknown_arm_is_one_line(tmp_path):
    path = command_grid(tmp_path, seeds=[0, 1])
    home = tmp_path / "home"
    out = invoke("run", str(path), "--home", str(home), "--until-resolved", "--compare", "gatd")
    assert out.exit_code == 2
    assert "unknown variant 'gatd' (did you mean 'gated'?)" in out.output and out.output.count("\n") == 1
    assert not home.exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"cwd": "nowhere"}, "trainer.cwd: no such folder"),
    ({"program": "no-such-trainer-program"}, "trainer.command: the program 'no-such-trainer-program' is not "
                                             "on PATH"),
    ({"regex": "step (?P<step>\\d+: val"}, "the regex does not compile"),
    ({"regex": "step (?P<step>\\d+): val (?P<val>[\\d.]+)"}, "the regex has no group named 'val_loss'"),
])
def test_bad_input_is_one_line_at_plan_and_nothing_is_written(tmp_path, change, message):
    path = command_grid(tmp_path, seeds=[0], **change)
    home = tmp_path / "home"
    for command in ("plan", "run"):
        out = invoke(command, str(path), "--home", str(home))
        assert out.exit_code == 2, out.output
        assert message in out.output and out.output.startswith("error: "), out.output
        assert out.output.count("\n") == 1, out.output
    assert not home.exists()


def test_a_crashing_script_is_a_failed_run_with_its_stderr(tmp_path):
    path = command_grid(tmp_path, seeds=[0], crash=True)
    home = tmp_path / "home"
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 1
    assert "ablate/" not in out.output  # no traceback of ablate's: the script's is quoted in its run's error
    runs = frame(home, "toy")
    assert set(runs["status"]) == {"failed"}
    for error in runs["error"]:
        assert error.startswith("the command exited with status 1; its stderr ended: Traceback")
        assert "RuntimeError: the toy script was asked to crash" in error


def test_exit_0_without_the_objective_fails_and_says_what_it_printed(tmp_path):
    path = command_grid(tmp_path, seeds=[0], regex=r"epoch (?P<step>\d+): val (?P<val_loss>[\d.]+)")
    home = tmp_path / "home"
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 1
    for error in frame(home, "toy")["error"]:
        assert error.startswith("the objective 'val_loss' was never reported: the pattern matched no line; "
                                "the output began: 'step 1: val ")


def test_ctrl_c_stops_the_commands_and_their_children_and_requeues(tmp_path):
    marker = f"ablate-toy-{os.getpid()}-{time.monotonic_ns()}"
    path = command_grid(tmp_path, seeds=[0, 1], steps=10_000, sleep=0.05, children=2, marker=marker)
    home = tmp_path / "home"
    proc = subprocess.Popen([ABLATE, "run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow"],
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(live_marked(marker)) < 2 * 3:  # two commands, each with its two children
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the whole foreground group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert live_marked(marker) == []  # no command, no child left
    runs = frame(home, "toy")
    assert set(runs["status"]) == {"queued"}  # nothing failed: the next run starts them again


def test_show_and_diff_give_the_commands_own_metrics(ran):
    _, _, home, _ = ran
    runs = frame(home, "toy")
    base, gated = (runs[(runs["variant"] == arm) & (runs["seed"] == 0)].index[0]
                   for arm in ("baseline", "gated"))
    out = invoke("show", str(base), "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["results"]["val_loss"] == runs.loc[base, "val_loss"]
    out = invoke("diff", str(base), str(gated), "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    row = next(r for r in json.loads(out.output)["results"] if r["metric"] == "val_loss")
    assert row["b_minus_a"] == pytest.approx(runs.loc[gated, "val_loss"] - runs.loc[base, "val_loss"])


@pytest.mark.parametrize("args", [("probe", "{run}"), ("export", "{run}", "--out", "{tmp}/x"),
                                  ("eval", "--grid", "toy", "--tasks", "hellaswag")])
def test_the_model_commands_say_in_one_line_they_are_for_the_model(ran, tmp_path, args):
    _, _, home, _ = ran
    run = str(frame(home, "toy").index[0])
    out = invoke(*(a.format(run=run, tmp=tmp_path) for a in args), "--home", str(home))
    assert out.exit_code == 2, out.output
    assert f"{args[0]} is for " in out.output and "own model" in out.output and out.output.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_a_command_logs_into_the_mlflow_run_ablate_opened_and_its_metrics_are_read_back(tmp_path):
    from mlflow.tracking import MlflowClient

    # ~7 s a run: past a read-back from MLflow (every 5 s) and a live flush of the mirror, whose points were
    # once logged into the run a second time
    path = command_grid(tmp_path, seeds=[0], steps=3, sleep=2.5, mlflow=True)
    home = tmp_path / "home"
    out = invoke("run", str(path), "--home", str(home), "--jobs", "1")
    assert out.exit_code == 0, out.output
    runs = frame(home, "toy")
    assert set(runs["status"]) == {"done"}
    client = MlflowClient(tracking_uri=f"sqlite:///{home.resolve() / 'mlflow.db'}")
    for run_id, row in runs.iterrows():
        log = (home / "runs" / str(run_id) / "train.log").read_text()
        (mine, given), = re.findall(r"mlflow run (\w+) \(ablate gave (\w+)\)", log)
        assert mine == given == row["mlflow_run_id"]  # the script logged into ablate's nested run
        history = client.get_metric_history(mine, "val_loss")
        logged = sorted((p.step, p.value) for p in history)
        assert row["val_loss"] == logged[-1][1] and row["steps"] == 3
        assert len(logged) == len({s for s, _ in logged}) == 3  # each point once, not mirrored back
        assert client.get_run(mine).data.tags["run_id"] == run_id


def test_a_cut_run_resumes_with_the_trainers_resume_args(tmp_path):
    path = command_grid(tmp_path, seeds=[0], steps=400, sleep=0.02, resume=True)
    home = tmp_path / "home"
    proc = subprocess.Popen([ABLATE, "run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow"],
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        ckpts = lambda: [p for p in (home / "runs").glob("*/ckpt.txt") if int(p.read_text() or 0) >= 5]  # noqa: E731
        while len(ckpts()) < 2:  # both runs are past step 5
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    cut = {p.parent.name: int(p.read_text()) for p in (home / "runs").glob("*/ckpt.txt")}
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow", "--jobs", "2")
    assert out.exit_code == 0, out.output
    assert "2 to run (2 resuming)" in out.output
    runs = frame(home, "toy")
    for run_id, row in runs.iterrows():
        log = (home / "runs" / str(run_id) / "train.log").read_text()
        assert log.count("--init_from=resume") == 1  # the second command line, not the first
        steps = [int(s) for s in re.findall(r"step (\d+): val", log)]
        assert steps[-1] == 400 and row["steps"] == 400
        assert row["resumed_from"] == cut[str(run_id)] + 1  # the first step the resumed command reported


DDP = """\
import argparse, os, torch, torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--scale", type=float)
a = p.parse_args()
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1) * a.scale + a.seed])
dist.all_reduce(x)  # ranks 0 and 1: (1 + 2) * scale + 2 * seed
if dist.get_rank() == 0:
    print(f"step 1: val {x.item():.4f} world {dist.get_world_size()}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_torchrun_command_of_two_processes_is_one_run(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP)
    (tmp_path / "grid.yaml").write_text(
        "name: ddp\ntrainer:\n"
        f"  command: {sys.executable} -m torch.distributed.run --standalone --nproc_per_node=2 ddp.py "
        "{args}\n"
        "  metrics: {stdout: 'step (?P<step>\\d+): val (?P<val_loss>[\\d.]+) world (?P<world>\\d+)'}\n"
        "  objective: {metric: val_loss, better: lower}\n"
        "base: {scale: 1.0}\ngrid:\n  arm: {baseline: {}, big: {scale: 2.0}}\n  seed: [3]\n")
    home = tmp_path / "home"
    out = invoke("run", str(tmp_path / "grid.yaml"), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output
    runs = frame(home, "ddp")
    assert len(runs) == 2 and set(runs["status"]) == {"done"} and set(runs["world"]) == {2.0}
    assert sorted(runs["val_loss"]) == [3 * 1.0 + 2 * 3, 3 * 2.0 + 2 * 3]  # both ranks took part


def test_a_jsonl_line_that_is_not_json_is_warned_once_and_the_run_goes_on(tmp_path):
    script = ("import json, os\nwith open(os.environ['ABLATE_METRICS'], 'a') as f:\n"
              "    f.write(json.dumps({'step': 1, 'val_loss': 2.5}) + '\\n')\n"
              "    f.write('not json\\n')\n    f.write('{broken\\n')\n"
              "    f.write(json.dumps({'step': 2, 'val_loss': 2.25}) + '\\n')\n")
    (tmp_path / "j.py").write_text(script)
    (tmp_path / "grid.yaml").write_text(
        f"name: j\ntrainer:\n  command: {sys.executable} j.py\n  seed_arg: null\n"
        "  metrics: {jsonl: '{run_dir}/metrics.jsonl'}\n  objective: {metric: val_loss, better: lower}\n"
        "grid:\n  seed: [0]\n")
    home = tmp_path / "home"
    out = invoke("run", str(tmp_path / "grid.yaml"), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output
    (run_id,) = frame(home, "j").index
    assert frame(home, "j").loc[run_id, "val_loss"] == 2.25
    log = (home / "runs" / str(run_id) / "train.log").read_text()
    assert "# ablate: warning: 2 line(s) of " in log and "the first at line 2" in log


def test_plan_says_which_runs_are_new_because_the_code_changed(tmp_path):
    path = command_grid(tmp_path, seeds=[0])
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "toy.py", "grid.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "toy"], check=True)
    home = tmp_path / "home"
    (tmp_path / ".gitignore").write_text("home/\n.gitignore\n")  # the runs are not the code
    assert invoke("run", str(path), "--home", str(home), "--no-mlflow").exit_code == 0
    before = set(frame(home, "toy").index)
    with (tmp_path / "toy.py").open("a") as f:
        f.write("# an edit\n")
    out = invoke("plan", str(path), "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    runs = [json.loads(line.rstrip(",")) for line in out.stdout.splitlines() if '"run_id"' in line]
    assert len(runs) == 2
    for run in runs:
        assert run["run_id"] not in before
        assert run["status"].startswith("new: the code changed since run ")
        assert run["status"].split()[6] in before  # the run it replaces


def test_the_objectives_spikes_and_divergence_are_events_as_for_the_model(tmp_path):
    script = ("for s in range(1, 61):\n    print(f'val_loss: {2.0 + 0.01 * (s % 3):.2f} (step {s})')\n"
              "print('val_loss: 9.5 (step 61)')\nprint('val_loss: nan (step 62)')\n")
    (tmp_path / "spiky.py").write_text(script)
    (tmp_path / "grid.yaml").write_text(
        f"name: spiky\ntrainer:\n  command: {sys.executable} spiky.py\n  seed_arg: null\n"
        "  metrics: {stdout: true}\n  objective: {metric: val_loss, better: lower}\ngrid:\n  seed: [0]\n")
    home = tmp_path / "home"
    out = invoke("run", str(tmp_path / "grid.yaml"), "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output  # diverged is a result, not a failure
    (run_id,) = frame(home, "spiky").index
    assert frame(home, "spiky").loc[run_id, "status"] == "diverged"
    with Store.open(home=home) as store:
        events = store.events(run_ids=[str(run_id)])
    assert [(k, int(s)) for k, s in zip(events["kind"], events["step"], strict=True)] == [
        ("loss_spike", 61), ("diverged", 62)]


def test_kill_9_of_ablate_takes_its_commands_with_it_and_leaves_no_stale_claim(tmp_path):
    marker = f"ablate-toy-{os.getpid()}-{time.monotonic_ns()}"
    path = command_grid(tmp_path, seeds=[0], steps=300, sleep=0.05, children=1, marker=marker)  # ~15 s a run
    home = tmp_path / "home"
    proc = subprocess.Popen([ABLATE, "run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow"],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(live_marked(marker)) < 2 * 2:  # two commands, each with its child
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.kill()  # SIGKILL to ablate alone: no handler runs, its workers and commands are not told
        proc.wait()
        while live_marked(marker):  # the parent-death signals end the workers, then the commands
            assert time.monotonic() < deadline, live_marked(marker)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert set(frame(home, "toy")["status"]) == {"running"}  # as ablate left them
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow", "--jobs", "2")
    assert out.exit_code == 0, out.output
    assert "2 to run" in out.output  # no claim held them: the dead process's runs are trained again
    assert set(frame(home, "toy")["status"]) == {"done"}


def test_running_a_command_grid_never_loads_the_models_side(tmp_path):
    """The ``ablate run`` process of a command grid imports neither torch nor the data side's numpy (the
    model's input checks are imported only for a model grid): its start is part of every run's overhead."""
    path = command_grid(tmp_path, seeds=[0])
    code = ("import atexit, sys; atexit.register(lambda: print('loaded:', sorted(m for m in ('torch', "
            "'numpy', 'lightning') if m in sys.modules), file=sys.stderr)); sys.argv = ['ablate', 'run', "
            "sys.argv[1], '--no-mlflow']; from ablate.cli import main; main()")
    env = {**os.environ, "ABLATE_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "loaded: []" in out.stderr
    assert set(frame(tmp_path / "home", "toy")["status"]) == {"done"}
