"""The edges of a large grid: Ctrl-C while it is expanded or registered is one line, exit 130, and nothing of
the grid is left in the store; a grid over the threshold (``ablate.execute.large``) says what it will cost
and asks first on a terminal (a real pseudo-terminal here), and needs --yes without one.

Each interruption is a real SIGINT, sent by the ``ablate run`` process to itself at a chosen point (a hundred
runs into the expansion; after two batches of the registration's inserts), so the test waits on the event,
not on a clock.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execute import large
from ablate.execute.large import (
    CHECKPOINT_BYTES_PER_PARAM,
    CHECKPOINT_OVERHEAD,
    CPU_FLOPS,
    LARGE_RUNS,
    RUN_BYTES,
    STEP_BYTES,
    estimate,
)
from ablate.grid import expand, load_grid
from ablate.grid.ladder import planned_flops
from ablate.store import Store

INTERRUPT = """
import os, signal, sys

where = sys.argv[1]
if where == "expanding":
    import importlib

    expand = importlib.import_module("ablate.grid.expand")  # the package exports the function of that name
    real, calls = expand._resolve, [0]

    def resolve(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 100:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    expand._resolve = resolve
else:  # after the grid's row and two batches of its runs are written, inside the registration's transaction
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    import ablate.store.registration as registration

    registration.CHUNK = 50
    batches = [0]

    @event.listens_for(Engine, "after_cursor_execute")
    def after(conn, cursor, statement, *rest):
        if statement.lstrip().upper().startswith("INSERT INTO RUNS"):
            batches[0] += 1
            if batches[0] == 2:
                os.kill(os.getpid(), signal.SIGINT)

sys.argv = ["ablate", "run", *sys.argv[2:]]
from ablate.cli import main

main()
"""


@pytest.mark.parametrize("where", ["expanding", "registering"])
def test_ctrl_c_while_planning_is_one_line_and_leaves_no_grid(where, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text(tiny_grid("big", variants=["baseline"], seeds=range(300), steps=2))
    home = tmp_path / "home"
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache")}
    args = [sys.executable, "-c", INTERRUPT, where, str(grid), "--home", str(home), "--no-mlflow"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env,
                         # Python's own SIGINT handler (KeyboardInterrupt), whatever this process inherited
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert out.returncode == 130, (out.returncode, out.stderr[-3000:])
    assert out.stderr == "interrupted while planning; nothing was run\n" and out.stdout == "", out.stderr
    if where == "expanding":
        assert not home.exists()  # nothing was written
        return
    with Store.open(home=home, create=False) as store:  # the store was made; the grid's transaction undone
        assert store.grids() == [] and len(store.runs_frame()) == 0
    assert list(Path(home / "runs").iterdir()) == []


# ------------------------------------------------------------ a large grid asks first
def big_grid(tmp_path: Path, seeds: int = LARGE_RUNS + 1, steps: int = 2) -> Path:
    path = tmp_path / "big.yaml"
    path.write_text(tiny_grid("big", variants=["baseline"], seeds=range(seeds), steps=steps))
    return path


def test_the_estimate_counts_the_runs_to_train_their_checkpoints_steps_and_flops(tmp_path):
    runs = expand(load_grid(big_grid(tmp_path, seeds=4, steps=7)))
    est = estimate("big", runs, {runs[0].run_id: "done", runs[1].run_id: "failed"}, workers=2, gpu=False)
    per_run = CHECKPOINT_BYTES_PER_PARAM * runs[0].params + CHECKPOINT_OVERHEAD
    assert est.runs == 2 and est.checkpoints == 2 * per_run  # done and failed (no --retry-failed) are skipped
    assert est.disk == 2 * (per_run + 7 * STEP_BYTES + RUN_BYTES)
    assert est.flops == 2 * planned_flops(runs[0].config) and est.rate == CPU_FLOPS and not est.large
    assert estimate("big", runs, {}, workers=2, gpu=False, retry_failed=True).runs == 4


def test_a_large_grid_without_a_terminal_needs_yes_else_nothing_is_written(tmp_path):
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["run", str(big_grid(tmp_path)), "--home", str(home), "--no-mlflow"])
    assert out.exit_code == 2, out.output
    (line,) = out.stderr.splitlines()
    pattern = (rf"error: ablate run big: {LARGE_RUNS + 1:,} runs to train: about [0-9.]+ GB of disk "
               r"\(checkpoints [0-9.]+ GB\) and [0-9.]+ (s|min|h|days) on 1 worker \([0-9.e]+ FLOPs at ~1e10 "
               r"FLOP/s a worker\): a grid this large \(over 1,000 runs to train or 100 GB of disk\) starts "
               r"without a terminal only with --yes; nothing was written")
    assert re.fullmatch(pattern, line), line
    assert not home.exists()


def test_yes_prints_the_estimate_and_runs_it(tmp_path, monkeypatch):
    monkeypatch.setattr(large, "LARGE_RUNS", 1)  # two tiny runs are a large grid
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["run", str(big_grid(tmp_path, seeds=2)), "--home", str(home),
                                   "--no-mlflow", "--yes"])
    assert out.exit_code == 0, out.output
    assert out.stderr.startswith("ablate run big: 2 runs to train: about "), out.stderr
    with Store.open(home=home, create=False) as store:
        assert sorted(store.runs_frame(grid="big")["status"]) == ["done", "done"]
    again = CliRunner().invoke(app, ["run", str(big_grid(tmp_path, seeds=2)), "--home", str(home),
                                     "--no-mlflow"])
    assert again.exit_code == 0 and "runs to train" not in again.stderr  # done: nothing left to ask about


ASK = """
import sys
import ablate.execute.large as large

large.LARGE_RUNS = int(sys.argv[1])
sys.argv = ["ablate", *sys.argv[2:]]
from ablate.cli import main

main()
"""


def on_terminal(args: list[str], answer: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``python -c ASK args`` on a real pseudo-terminal; answer ``answer`` when it asks; its exit status
    and everything it wrote to the terminal, without colours."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin, stdout and stderr
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(sys.executable, [sys.executable, "-c", ASK, *args], env)
    seen, answered = b"", False
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal: it ended
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"[y/N]" in seen:  # the question is on the terminal: answer it
            os.write(fd, answer.encode() + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode(errors="replace"))  # the terminal's colours
    return os.waitstatus_to_exitcode(status), text.replace("\r\n", "\n")


@pytest.mark.parametrize("answer", ["n", "y"])
def test_on_a_terminal_a_large_grid_asks_first(answer, tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    # "n": the real threshold and a grid just over it; "y": two tiny runs over a threshold of one, trained
    limit, seeds = (LARGE_RUNS, LARGE_RUNS + 1) if answer == "n" else (1, 2)
    code, seen = on_terminal([str(limit), "run", str(big_grid(tmp_path, seeds=seeds)), "--home", str(home),
                              "--no-mlflow"], answer, env)
    assert f"ablate run big: {seeds:,} runs to train: about " in seen, seen
    # the question (the terminal's echo of the answer may come before input()'s space after it)
    assert f"train {seeds:,} runs? [y/N]:" in seen, seen
    if answer == "n":
        assert code == 2, seen
        assert seen.rstrip().endswith("error: ablate run big: not started (answered no); nothing was written")
        assert not home.exists()
        return
    assert code == 0, seen
    with Store.open(home=home, create=False) as store:
        assert sorted(store.runs_frame(grid="big")["status"]) == ["done", "done"]
