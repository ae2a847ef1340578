"""The edges of a large grid: Ctrl-C while it is expanded or registered is one line, exit 130, and nothing of
the grid is left in the store.

Each interruption is a real SIGINT, sent by the ``ablate run`` process to itself at a chosen point (a hundred
runs into the expansion; after two batches of the registration's inserts), so the test waits on the event,
not on a clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_grids import tiny_grid

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

    import ablate.store.records as records

    records.CHUNK = 50
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
