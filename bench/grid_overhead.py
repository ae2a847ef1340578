"""What the grid machinery costs on top of training: issue #13's three figures, and a finished grid's rerun.

1. ``ablate plan`` of a 10,000-run grid: the CPU seconds of the whole process (aim: under 3 s), with the model
   counts it needs made by an earlier process (warm, the usual case) and not (cold: it imports torch to
   count).
2. Twelve tiny runs on two workers. The ideal makespan is the sum of the runs' own times (``wall_s`` in their
   result.json: data, training, evaluation, probes) over two; the figure is the measured makespan over it
   (aim: at most 1.05x), with and without the workers' start-up, and the per-job overhead in seconds.
3. Worker start-up (importing torch and Lightning) is paid once per worker: the twelve jobs ran in as many
   worker processes as there are workers, and the start-up is seconds before the first job, not per job.
   And ``ablate status``, ``ablate runs --format csv`` and ``ablate runs`` on a store of 10,000 finished runs
   (aim: under 1.5 s of CPU each).
4. A finished 100-run grid (filled into the store directly), rerun through the CLI as a user would: the wall
   time of the whole ``ablate run`` process.
5. ``ablate --help`` (aim: under 0.5 s): its wall time, beside the same help drawn by Typer's rich formatter
   (which ablate turned off: it imports rich.markdown) and beside a bare ``python -c pass``, interleaved in
   one run.

    .venv/bin/python bench/grid_overhead.py [--steps 60] [--no-mlflow] [--only plan|store|pool|rerun|help]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ABLATE = str(Path(sys.executable).parent / "ablate")

GRID = """
name: {name}
base:
  model: {{preset: tiny}}
  data:
    seq_len: 32
    stream_tokens: 20000
    train: [{{kind: builtin, name: arithmetic}}]
    heldout: {{arith: {{kind: builtin, name: arithmetic}}}}
  train: {{steps: {steps}, batch_size: 4, checkpoint_every: 50}}
  eval: {{heldout_tokens: 256, probe_tokens: 128}}
grid:
  variant: {variants}
  seed: {seeds}
"""


def overhead(root: Path, steps: int, mlflow: bool) -> None:
    from ablate.execute.executor import RunOptions
    from ablate.execute.grid_run import run_grid
    from ablate.result import read_result

    path = root / "twelve.yaml"
    path.write_text(GRID.format(name="twelve", steps=steps,
                                variants="[baseline, sdpa-elementwise, sdpa-headwise]", seeds=list(range(4))))
    home = root / "home"
    t0 = time.monotonic()
    report = run_grid(path, [], RunOptions(home=home, jobs=2, mlflow=mlflow))
    total = time.monotonic() - t0
    assert report.exit_code == 0 and len(report.job_times) == 12, report.outcomes
    train = sum(read_result(home / "runs" / rid).summary["wall_s"] for rid in report.job_times)
    inside = sum(report.run_one_s.values())
    ideal = train / 2
    first = min(s for s, _ in report.job_times.values())
    last = max(e for _, e in report.job_times.values())
    with_startup = last - report.pool_started
    steady = last - first
    print(f"12 runs on 2 workers ({steps} steps each, MLflow {'on' if mlflow else 'off'}):")
    print(f"  sum of the runs' own times   {train:7.2f} s   ideal makespan (/2) {ideal:6.2f} s")
    print(f"  makespan, first job -> last  {steady:7.2f} s   = {steady / ideal:.3f}x ideal   "
          f"overhead per job {(2 * steady - train) / 12:.3f} s")
    print(
        f"  sum of run_one's wall times  {inside:7.2f} s   (run_one beyond its wall_s: Lightning's fit "
        "set-up)"
    )
    print(f"  makespan, first job -> last  {steady:7.2f} s   = {steady / (inside / 2):.3f}x sum(run_one)/2   "
          f"executor overhead per job {(2 * steady - inside) / 12:.3f} s")
    print(f"  makespan, workers started    {with_startup:7.2f} s   = {with_startup / ideal:.3f}x ideal   "
          f"(worker start-up {first - report.pool_started:.2f} s)")
    print(f"  whole command                {total:7.2f} s")
    pids = set(report.worker_pids.values())
    print(f"worker start-up: {first - report.pool_started:.2f} s before the first job; the 12 jobs ran in "
          f"{len(pids)} worker process(es) for 2 workers (paid once per worker: {len(pids) == 2})")


def cpu_s(cmd: list[str], *, env: dict[str, str] | None = None, expect: str = "") -> float:
    """The CPU seconds (user + system, children's rusage) of one whole process: what load on a shared machine
    changes least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert out.returncode == 0 and expect in out.stdout, out.stderr
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def plan_10k(root: Path) -> None:
    """``ablate plan`` of 10,000 runs: the CPU of the whole process (children's rusage), cold and warm."""
    path = root / "tenk.yaml"
    lrs = [round(1e-3 * (i + 1), 4) for i in range(10)]
    path.write_text(
        GRID.format(
            name="tenk",
            steps=60,
            variants="[baseline, sdpa-elementwise, sdpa-headwise, sdpa-head-shared, v-elementwise]",
            seeds=list(range(20)),
        )
        + f"  train.lr: {lrs}\n  train.batch_size: [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]\n"
    )
    env = {**os.environ, "ABLATE_CACHE": str(root / "plan-cache")}  # a fresh cache: the first plan is cold

    def cpu(*args: str) -> float:
        return cpu_s([ABLATE, "plan", str(path), "--home", str(root / "plan-home"), *args], env=env,
                     expect='"runs"' if args else "10000 runs")

    cold = cpu()
    warm = sorted(cpu() for _ in range(3))
    js = sorted(cpu("--format", "json") for _ in range(3))
    print(f"ablate plan of a 10,000-run grid (CPU seconds of the whole process; aim < 3 s warm, < 5 s cold; "
          f"load {os.getloadavg()[0]:.2f}):")
    print(f"  table, warm (model counts kept from an earlier process)  {warm[1]:5.2f} s median of 3 "
          f"(best {warm[0]:.2f} s)")
    print(f"  table, cold (counts the models: imports torch)           {cold:5.2f} s")
    print(f"  json, warm                                               {js[1]:5.2f} s median of 3 "
          f"(best {js[0]:.2f} s)")


def store_10k(root: Path) -> None:
    """``ablate status`` and ``ablate runs --format csv`` on a store of 10,000 finished runs (one grid), built
    as bench/store_scale.py builds its store (short curves: the figures are about the runs, not their
    points)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from store_scale import make_result

    from ablate.config import RunConfig
    from ablate.store import Store

    home, n = root / "store-home", 10_000
    base = RunConfig().model_dump(mode="json")
    t0 = time.monotonic()
    with Store.open(home=home) as store:
        store.register_grid(name="scale", text="name: scale\n", runs=[
            {"run_id": f"r{i:06d}", "config": make_result(i, 1, 1, base).config, "params": 1_700_000_000,
             "added_params": 0} for i in range(n)])
        for i in range(n):
            store.ingest(make_result(i, 5, 2, base))
    made = time.monotonic() - t0
    status = sorted(cpu_s([ABLATE, "status", "--home", str(home)], expect="10000") for _ in range(3))
    csv = sorted(cpu_s([ABLATE, "runs", "--home", str(home), "--format", "csv"],
                       expect="run_id") for _ in range(3))
    table = sorted(cpu_s([ABLATE, "runs", "--home", str(home)], expect="run_id") for _ in range(3))
    print(f"a store of {n:,} finished runs (made in {made:.0f} s; CPU seconds of the whole process, median "
          f"of 3; aim < 1.5 s; load {os.getloadavg()[0]:.2f}):")
    print(
        f"  ablate status                                            {status[1]:5.2f} s (best "
        f"{status[0]:.2f} s)"
    )
    print(f"  ablate runs --format csv                                 {csv[1]:5.2f} s (best {csv[0]:.2f} s)")
    print(f"  ablate runs (the table)                                  {table[1]:5.2f} s "
          f"(best {table[0]:.2f} s)")


def rerun_100(root: Path) -> None:
    from ablate.grid import expand, load_grid
    from ablate.result import RunResult, write_result
    from ablate.store import Store

    path = root / "hundred.yaml"
    path.write_text(GRID.format(name="hundred", steps=20, variants="[baseline, sdpa-elementwise]",
                                seeds=list(range(50))))
    home = root / "home100"
    planned = expand(load_grid(path))
    assert len(planned) == 100
    with Store.open(home=home) as store:
        store.register_grid(name="hundred", text=path.read_text(), runs=planned)
        for p in planned:  # what a finished run leaves: its run directory's result.json, ingested
            result = RunResult(run_id=p.run_id, config=p.config.model_dump(mode="json"), status="done",
                               summary={"steps": 20, "train_loss": 3.0},
                               metrics={"step": list(range(20)), "loss": [3.0] * 20})
            write_result(result, home / "runs" / p.run_id)
            store.ingest(result)
    cmd = [ABLATE, "run", str(path), "--home", str(home)]
    times = []
    for _ in range(4):
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.monotonic() - t0)
        assert out.returncode == 0 and "worker" not in out.stderr, out.stderr
    print("rerun of a finished 100-run grid (whole `ablate run` process):")
    print(f"  first (mirrors the 100 runs MLflow never saw) {times[0]:.2f} s; then {min(times[1:]):.2f} s "
          f"best, {sorted(times[1:])[1]:.2f} s median of 3")


def help_time() -> None:
    """``ablate --help`` against Typer's rich help and an empty interpreter: medians of 7, interleaved."""
    rich = ("import sys; from ablate.cli.common import app; app.rich_markup_mode = 'rich'; "
            "from ablate.cli import main; sys.argv = ['ablate', '--help']; main()")
    cases = {"ablate --help (plain, as shipped)": [ABLATE, "--help"],
             "the same with Typer's rich help": [sys.executable, "-c", rich],
             "python -c pass": [sys.executable, "-c", "pass"]}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(7):
        for name, cmd in cases.items():
            t0 = time.monotonic()
            out = subprocess.run(cmd, capture_output=True, text=True)
            times[name].append(time.monotonic() - t0)
            assert out.returncode == 0 and ("Usage" in out.stdout or cmd[-1] == "pass"), out.stderr
    print("CLI start-up (wall seconds, median of 7; aim: ablate --help < 0.5 s):")
    for name, ts in times.items():
        print(f"  {name:<36} {sorted(ts)[3]:5.2f} s (best {min(ts):.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--only", choices=["plan", "store", "pool", "rerun", "help"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        if args.only in (None, "plan"):
            plan_10k(Path(tmp))
        if args.only in (None, "store"):
            store_10k(Path(tmp))
        os.environ.setdefault("ABLATE_CACHE", str(Path(tmp) / "cache"))
        if args.only in (None, "pool"):
            overhead(Path(tmp), args.steps, not args.no_mlflow)
        if args.only in (None, "rerun"):
            rerun_100(Path(tmp))
        if args.only in (None, "help"):
            help_time()


if __name__ == "__main__":
    main()
