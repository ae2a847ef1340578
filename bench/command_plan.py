"""How long the pure half of ``ablate plan`` takes on a command grid of 10,000 runs (issue #44's goal: the
whole ``ablate plan`` < 3 s): a fresh process reads the grid file and expands it (2 arms x 50 learning rates x
100 seeds), its code identity taken of this repository with git, as a plan would.

Prints CPU seconds, median of 3 fresh processes: the whole process (Python's start, the imports, the git calls
of the code identity, which its children's time covers), and inside it the import, the file's load and check,
and the expansion. tests/unit/trainers/test_command_grid.py counts the same work, so a regression fails a test
before it shows here.

    .venv/bin/python bench/command_plan.py [--arms 2 --lrs 50 --seeds 100]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", type=int, default=2)
    parser.add_argument("--lrs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grid.yaml"
        path.write_text(grid_text(args.arms, args.lrs, args.seeds))
        results = [one(path) for _ in range(args.repeat)]
    runs = int(results[0][1]["runs"])
    load = os.getloadavg()[0]
    print(f"ablate plan's expansion of a command grid: {runs:,} runs ({args.arms} arms x {args.lrs} lrs x "
          f"{args.seeds} seeds), CPU seconds, median of {args.repeat} fresh processes "
          f"(load average {load:.2f} on {os.cpu_count()} CPUs)")
    whole = statistics.median(r[0] for r in results)
    print(f"  {'whole process (start, imports, git, load, expand)':<50}{whole:6.3f}")
    for part in ("import", "load", "expand"):
        print(f"  {part:<50}{statistics.median(r[1][part] for r in results):6.3f}")
    print("  aim: the whole ablate plan < 3 s (issue #44); this part well under 1 s")


if __name__ == "__main__":
    main()
