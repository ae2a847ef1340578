"""A real training script for the command trainer's tests, and command grids over it.

``TOY_SCRIPT`` is an argparse script (no torch: it starts in a few tens of milliseconds) that prints
``step N: val X`` for ``--steps`` steps. Its loss depends on the step, the seed, ``--lr`` and, for the gated
arm, ``--gate=True`` (an effect of ``--effect`` plus a seed-dependent part, so two seeds differ). It may crash
(``--crash``), sleep between steps, and start ``--children`` child processes that live as long as it does
(the DataLoader workers a real script has), each carrying ``--marker`` on its command line so that a test
finds every process the script left (``live_marked``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOY_SCRIPT = '''\
import argparse, os, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--gate", default="False")
p.add_argument("--effect", type=float, default=-0.05)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--children", type=int, default=0)
p.add_argument("--marker", default="")
p.add_argument("--crash", default="False")
p.add_argument("--mlflow", default="False")
p.add_argument("--ckpt", default="")  # the last step done is written here after each step
p.add_argument("--init_from", default="scratch")  # resume: go on after the step --ckpt holds
a = p.parse_args()
first = int(open(a.ckpt).read()) + 1 if a.init_from == "resume" else 1
run = None
if a.mlflow == "True":  # log into the MLflow run ablate opened for this command (MLFLOW_RUN_ID)
    import os, mlflow
    given = os.environ.get("MLFLOW_RUN_ID")  # read before start_run, which may take it out
    run = mlflow.start_run()
    print(f"mlflow run {run.info.run_id} (ablate gave {given})", flush=True)
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", a.marker])
        for _ in range(a.children)]
if a.crash == "True":
    raise RuntimeError("the toy script was asked to crash")
gated = a.gate == "True"
for step in range(first, a.steps + 1):
    noise = 0.013 * ((a.seed * 7 + step) % 5)
    effect = (a.effect + 0.004 * (a.seed % 3)) if gated else 0.0
    val = round(3.0 / step + noise + effect + a.lr, 4)
    if run is not None:
        mlflow.log_metric("val_loss", val, step=step)
    else:
        print(f"step {step}: val {val:.4f}", flush=True)
    if a.ckpt:
        with open(a.ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(a.ckpt + ".tmp", a.ckpt)
    time.sleep(a.sleep)
if run is not None:
    mlflow.end_run()
'''


def command_grid(root: Path, *, seeds: list[int], effect: float = -0.05, steps: int = 5, sleep: float = 0.0,
                 children: int = 0, marker: str = "", crash: bool = False, cwd: str | None = None,
                 program: str | None = None, regex: str | None = None, mlflow: bool = False,
                 resume: bool = False) -> Path:
    """Write the toy script and a command grid over it (arms ``baseline`` and ``gated``) into ``root``; the
    grid file's path. ``cwd``, ``program`` and ``regex`` replace the trainer's (for bad input)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "toy.py").write_text(TOY_SCRIPT)
    pattern = regex or r"step (?P<step>\d+): val (?P<val_loss>[\d.]+)"
    base = {"steps": steps, "sleep": sleep, "children": children, "effect": effect, "lr": 0.1}
    if marker:
        base["marker"] = marker
    if crash:
        base["crash"] = True
    if mlflow:
        base["mlflow"] = True
    lines = [
        "name: toy",
        "trainer:",
        f"  command: {program or sys.executable} toy.py {{args}}"
        + (" --ckpt={run_dir}/ckpt.txt" if resume else ""),
        *(["  resume: {args: '--init_from=resume', when: '{run_dir}/ckpt.txt'}"] if resume else []),
        *([f"  cwd: {cwd}"] if cwd is not None else []),
        "  metrics:",
        "    mlflow: true" if mlflow else f"    stdout: '{pattern}'",
        "  objective: {metric: val_loss, better: lower}",
        "base:",
        *(f"  {k}: {v!r}" if isinstance(v, str) else f"  {k}: {v}" for k, v in base.items()),
        "grid:",
        "  arm:",
        "    baseline: {}",
        "    gated: {gate: true}",
        f"  seed: {seeds}",
    ]
    path = root / "grid.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def live_marked(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (zombies left out: they hold nothing)."""
    ps = ["ps", "-ww", "-eo", "pid=,stat=,args="]  # -ww: whole command lines, whatever COLUMNS says
    out = subprocess.run(ps, capture_output=True, text=True, check=True).stdout
    return [int(line.split(None, 2)[0]) for line in out.splitlines()
            if marker in line and not line.split(None, 2)[1].startswith("Z") and "ps -ww" not in line]
