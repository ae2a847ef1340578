"""How long ``ablate plan`` takes on a command grid of 10,000 runs (issue #44's goal: < 3 s), 2 arms x 50
learning rates x 100 seeds, the code identity taken of this repository with git, as a plan would.

1. The whole ``ablate plan`` command, as a user runs it: wall and CPU seconds (the process and its children:
   the git calls of the code identity), median of 3, for the table and ``--format json``, with no store in
   the home and against a store that holds the grid (a run in a hundred done; the same statuses looked up).
2. Its pure half: a fresh process reads the grid file and expands it, in CPU seconds: the whole process
   (Python's start, the imports, the git calls), and inside it the import, the file's load and check, and the
   expansion.

Every process runs with its bytecode cached, as an installed ablate does (in a temporary
``PYTHONPYCACHEPREFIX``, the first process writing it); ``--no-bytecode-cache`` keeps this environment's
``PYTHONDONTWRITEBYTECODE``, under which each start compiles ablate's own modules again.

tests/unit/grid/test_command_plan_counts.py (the whole plan) and tests/unit/trainers/test_command_grid.py
(the expansion) count the same work, so a regression fails a test before it shows here.

    .venv/bin/python bench/command_plan.py [--arms 2 --lrs 50 --seeds 100] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ABLATE = str(Path(sys.executable).parent / "ablate")
CHILD = """
import json, sys, time
cpu = time.process_time
t0 = cpu()
from ablate.trainers.command.grid import expand_command_grid, load_command_grid
t1 = cpu()
grid = load_command_grid(sys.argv[1])
t2 = cpu()
runs = expand_command_grid(grid)
t3 = cpu()
print(json.dumps({"runs": len(runs), "import": t1 - t0, "load": t2 - t1, "expand": t3 - t2}))
"""


def grid_text(arms: int, lrs: int, seeds: int) -> str:
    others = (f"arm{i}: {{gate: true, gate_init: {i / 10}}}" for i in range(1, arms))
    arm = ", ".join(["baseline: {}", *others])
    lr = ", ".join(f"{(i + 1) * 1e-5:.6g}" for i in range(lrs))
    return f"""name: bench
trainer:
  command: python train.py --out_dir={{run_dir}} {{args}}
  cwd: {REPO}
  env: {{OMP_NUM_THREADS: '1'}}
  metrics: {{stdout: 'step (?P<step>\\d+): val (?P<val_loss>[\\d.]+)'}}
  objective: {{metric: val_loss, better: lower}}
base: {{max_iters: 2000, n_layer: 4, n_head: 4, compile: false, optim: {{wd: 0.1, betas: [0.9, 0.95]}}}}
grid:
  arm: {{{arm}}}
  optim.lr: [{lr}]
  seed: [{", ".join(str(s) for s in range(seeds))}]
"""


def one(path: Path) -> tuple[float, dict[str, float]]:
    """CPU seconds of one fresh process (its children included), and what it measured inside."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True,
                         cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return whole, json.loads(out.stdout)


def whole(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (its children included) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, cwd=REPO)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def registered(path: Path, home: Path) -> None:
    """A store in ``home`` that holds the grid at ``path``, one run in a hundred done."""
    from ablate.grid.planning import plan_grid
    from ablate.result import RunResult
    from ablate.runner.fingerprints import Fingerprints
    from ablate.store import Store

    planned = plan_grid(path, fingerprints=Fingerprints.for_home(home)).planned
    with Store.open(home=home) as store:
        store.register_grid(name="bench", text=path.read_text(), runs=planned)
        for run in planned[::100]:
            store.ingest(RunResult(run_id=run.run_id, config=run.config.model_dump(mode="json"),
                                   status="done", summary={"steps": 1, "val_loss": 2.0}))


def plan_command(path: Path, runs: int, repeat: int) -> None:
    """The whole ``ablate plan``, table and JSON, without a store and against one holding the grid."""
    empty, stored = path.parent / "empty-home", path.parent / "stored-home"
    registered(path, stored)
    homes = (("no store", empty), ("a store holding it", stored))
    cases = {f"{fmt}, {where}": [ABLATE, "plan", str(path), "--home", str(home), "--format", fmt]
             for where, home in homes for fmt in ("table", "json")}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    whole(cases["json, a store holding it"])  # the bytecode written, the page cache warm: not timed
    for _ in range(repeat):  # interleaved: the machine's load falls on each alike
        for name, cmd in cases.items():
            times[name].append(whole(cmd))
    print(f"ablate plan of a command grid of {runs:,} runs (the whole command, median of {repeat}; "
          f"aim < 3 s):")
    print(f"  {'':<30}{'wall s':>8}{'CPU s':>8}")
    for name, ts in times.items():
        wall, cpu = statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts)
        print(f"  {name:<30}{wall:8.3f}{cpu:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", type=int, default=2)
    parser.add_argument("--lrs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-bytecode-cache", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; bytecode cached: "
          f"{not args.no_bytecode_cache}")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_bytecode_cache:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        path = Path(tmp) / "grid.yaml"
        path.write_text(grid_text(args.arms, args.lrs, args.seeds))
        one(path)  # writes the bytecode
        results = [one(path) for _ in range(args.repeat)]
        runs = int(results[0][1]["runs"])
        plan_command(path, runs, args.repeat)
    print(f"ablate plan's expansion of a command grid: {runs:,} runs ({args.arms} arms x {args.lrs} lrs x "
          f"{args.seeds} seeds), CPU seconds, median of {args.repeat} fresh processes "
          f"(load average {os.getloadavg()[0]:.2f})")
    whole = statistics.median(r[0] for r in results)
    print(f"  {'whole process (start, imports, git, load, expand)':<50}{whole:6.3f}")
    for part in ("import", "load", "expand"):
        print(f"  {part:<50}{statistics.median(r[1][part] for r in results):6.3f}")
    print("  aim: the whole ablate plan < 3 s (issue #44); this part well under 1 s")


if __name__ == "__main__":
    main()
