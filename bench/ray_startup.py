"""Where ``ablate run --executor ray`` spends its start-up on a Ray instance it starts here, phase by phase,
and what Ray adds to a grid end to end, measured side by side in one run.

- ``phases``: in a fresh process each (nothing imported before), the steps the Ray executor takes, timed one
  after another: ``import ray``; ``ray.init`` of a local instance as ``cluster.connect`` calls it; the cancel
  mailbox actor ready (``cluster.mailbox``, made at the first round); the first task (a worker process, and
  its runtime environment); a second task (a worker reused); a task that imports what a run's task imports
  (torch, Lightning, ablate's runner: paid by the local pool's workers too); ``ray.shutdown``. Two arms:
  ``carried``, the working directory and ablate's settings carried to the workers as a ``runtime_env`` (what
  ablate did for a local instance until this measurement), and ``none``, no runtime env (what it does now:
  the workers are this machine's processes, started in this working directory with this environment).
- ``grid``: ``ablate run`` of a one-run grid (the tiny preset, 20 steps on the arithmetic stream),
  ``--executor local --jobs 1`` against ``--executor ray``, each in a fresh home, arms alternated: the
  difference of the medians is what Ray adds to a grid. ``--before TREE`` adds ``--executor ray`` with the
  ablate of another source tree (``git archive <commit> | tar -x -C TREE``), on ``PYTHONPATH``: before and
  after side by side.

Run it from the folder a user would run ablate from (a checkout: its working directory is what ``carried``
zips). The load average is printed before and after: on a shared machine the phases stretch with it.

    .venv/bin/python bench/ray_startup.py --rounds 3                     # ~6 min on 2 cores
    .venv/bin/python bench/ray_startup.py --rounds 3 --before /tmp/old   # and the grid on an older ablate
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("import ray", "ray.init", "mailbox ready", "first task", "second task",
          "task imports torch, Lightning", "ray.shutdown")
GRID = """name: raystart
base:
  model: {preset: tiny}
  data: {seq_len: 32, stream_tokens: 20000, train: [{kind: builtin, name: arithmetic}],
         heldout: {arith: {kind: builtin, name: arithmetic}}}
  train: {steps: 20, batch_size: 4, checkpoint_every: 10}
  eval: {heldout_tokens: 256, probe_tokens: 128}
grid:
  variant: [baseline]
"""


def child(arm: str) -> None:
    """One arm's phases, in this process: print ``{phase: seconds}`` as JSON."""
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        marks[name], t0 = now - t0, now

    from ablate.execute.ray.cluster import use_token

    use_token()  # before Ray is imported, as ray_module does
    import ray

    mark("import ray")
    import logging

    from ablate.execute.devices import usable_cpus
    from ablate.execute.ray.cluster import NAMESPACE, mailbox, runtime_env

    env = runtime_env([], cwd=Path.cwd(), home=Path(tempfile.gettempdir()) / "ablate-ray-startup")
    kw = {"runtime_env": env} if arm == "carried" else {}
    t0 = time.perf_counter()
    ray.init(address="local", include_dashboard=True, object_store_memory=100 * 2**20, num_cpus=usable_cpus(),
             namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False,
             **kw)
    mark("ray.init")
    ray.get(mailbox().take.remote([]))
    mark("mailbox ready")

    @ray.remote
    def noop() -> int:
        return os.getpid()

    ray.get(noop.remote())
    mark("first task")
    ray.get(noop.remote())
    mark("second task")

    @ray.remote
    def heavy() -> int:
        import torch  # noqa: F401

        import ablate.runner.run  # noqa: F401 - Lightning and the model, as a run's task imports them

        return os.getpid()

    ray.get(heavy.remote())
    mark("task imports torch, Lightning")
    ray.shutdown()
    mark("ray.shutdown")
    print(json.dumps(marks))


def phases(arm: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", arm], capture_output=True, text=True,
                         check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def grid_wall(arm: str, root: Path, before: Path | None) -> float:
    """Seconds of one ``ablate run`` of the one-run grid (``arm``: local, ray, or ray on the ``before`` tree),
    in a fresh home."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=root))
    args = ["--jobs", "1"] if arm == "local" else ["--executor", "ray", "--devices", "cpu"]
    env = {**os.environ, "ABLATE_CACHE": str(root)}
    if arm == "ray before" and before is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(before), env.get("PYTHONPATH", "")])
    ablate = str(Path(sys.executable).parent / "ablate")
    t0 = time.perf_counter()
    subprocess.run([ablate, "run", str(root / "raystart.yaml"), "--home", str(home), "--no-mlflow", *args],
                   capture_output=True, text=True, check=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-grid", action="store_true", help="only the phases")
    parser.add_argument("--before", type=Path, help="another source tree of ablate: its Ray grid beside")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print(f"load average before: {os.getloadavg()[0]:.1f}; cwd {Path.cwd()}")
    arms = ("carried", "none")
    runs: dict[str, list[dict[str, float]]] = {a: [] for a in arms}
    for i in range(args.rounds):
        for arm in arms if i % 2 == 0 else arms[::-1]:
            runs[arm].append(phases(arm))
    print(f"\nphases, median of {args.rounds} (s)   " + "   ".join(f"{a:>8}" for a in arms))
    for phase in PHASES:
        print(f"  {phase:<30} " + "   ".join(f"{statistics.median(r[phase] for r in runs[a]):8.2f}"
                                            for a in arms))
    totals = {a: statistics.median(sum(r.values()) for r in runs[a]) for a in arms}
    print(f"  {'total':<30} " + "   ".join(f"{totals[a]:8.2f}" for a in arms))
    if not args.skip_grid:
        with tempfile.TemporaryDirectory(prefix="ablate-ray-startup-") as tmp:
            root = Path(tmp)
            (root / "raystart.yaml").write_text(GRID)
            grid_arms = ["local", "ray"] + (["ray before"] if args.before else [])
            walls: dict[str, list[float]] = {a: [] for a in grid_arms}
            for i in range(args.rounds):
                for arm in grid_arms if i % 2 == 0 else grid_arms[::-1]:
                    walls[arm].append(grid_wall(arm, root, args.before))
        local = statistics.median(walls["local"])
        print(f"\nablate run of a one-run grid, median of {args.rounds} (each):")
        for arm in grid_arms:
            wall = statistics.median(walls[arm])
            added = "" if arm == "local" else f": Ray adds {wall - local:.1f} s"
            print(f"  {arm:<10} {wall:6.1f} s{added}  ({', '.join(f'{w:.1f}' for w in walls[arm])})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
