"""What running a training command under ablate costs, against the same command run bare (issue #44's goals:
ablate's overhead <= 5% of the command's own wall time and <= 0.5 s a run; parsing never the bottleneck at
100,000 lines a second).

The command is a fixed amount of training written here (``TRAIN``: SGD on a linear model in pure Python, one
``step N: train X, val Y`` line a step; ``--steps`` sets its length). In one run, interleaved so that the
machine's load falls on both alike, medians of ``--repeat``:

1. **Side by side**: the command bare (``subprocess.run``, its output read) against ``ablate run`` of a
   command grid whose runs are that command (seeds 0..n-1, a home of its own each time), as a user runs it,
   for 1 run, 10 runs at ``--jobs 1`` (bare: one after the other) and 10 runs at ``--jobs 2`` (bare: two at a
   time); with ``--no-mlflow`` in a new home, and with MLflow (the default) in a new home (the run makes
   MLflow's store) and in a used one (a grid ran there before). Overhead: the difference in wall seconds, per
   run and as a share of the bare time; and in CPU seconds (the children's rusage: what another process's
   load moves least).
2. **Where it goes**: ``ablate run`` in a process that stamps its phases (the interpreter's start, the
   imports, planning, the store, the workers' start, each job beyond its command, the end), for 1 run and 10
   runs at ``--jobs 1`` with ``--no-mlflow`` in a new home, and 10 runs with MLflow in a used home; from them,
   what one ``ablate run`` costs once, what each run adds (its job beyond its command, the hand-out, and the
   guard process each command starts inside), and the command length from which the overhead is within 5%.
3. **Parsing**: lines per second of the stdout parsers alone (bench/command_parse.py's measurement), and end
   to end: a command that prints its lines as fast as it can (``FLOOD``), alone (its output to /dev/null)
   against ``run_command`` (read from the pipe, written to train.log, parsed), and the whole run with its
   result (the stability events on the stream, result.json).

Every process runs with its bytecode cached, as an installed ablate does (in a temporary
``PYTHONPYCACHEPREFIX``, written by a first ``ablate run`` that is not timed); ``--no-bytecode-cache`` keeps
this environment's ``PYTHONDONTWRITEBYTECODE``, under which each start compiles ablate's own modules again.

    .venv/bin/python bench/command_overhead.py [--steps 100] [--repeat 3] [--no-mlflow]
                                               [--only side|where|parse] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ABLATE = str(Path(sys.executable).parent / "ablate")
BENCH = Path(__file__).resolve().parent

TRAIN = '''"""A fixed amount of training: SGD on a linear model of 8 inputs in pure Python; a line a step."""
import argparse
import random

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch", type=int, default=2000)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
rng = random.Random(args.seed)
true_w = [rng.uniform(-1, 1) for _ in range(8)]


def sample(n):
    xs = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(n)]
    return [(x, sum(a * b for a, b in zip(x, true_w)) + rng.gauss(0, 0.1)) for x in xs]


val = sample(200)
w = [0.0] * 8
for step in range(1, args.steps + 1):
    train = 0.0
    for x, y in sample(args.batch):
        err = sum(a * b for a, b in zip(x, w)) - y
        train += err * err
        w = [wi - args.lr * err * xi for wi, xi in zip(w, x)]
    loss = sum((sum(a * b for a, b in zip(x, w)) - y) ** 2 for x, y in val) / len(val)
    print(f"step {step}: train {train / args.batch:.6f}, val {loss:.6f}")
'''

FLOOD = '''"""Prints --lines metric lines as fast as it can, a thousand to a write."""
import argparse
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=300_000)
parser.add_argument("--seed", type=int, default=0)
n = parser.parse_args().lines
for start in range(0, n, 1000):
    sys.stdout.write("".join(f"step {i}: train {2 + i * 1e-6:.4f}, val 2.1000\\n"
                             for i in range(start, min(n, start + 1000))))
'''

GRID = """name: overhead
trainer:
  command: {python} {script} {{args}}
  metrics: {{stdout: 'step (?P<step>\\d+): train (?P<train_loss>[\\d.]+), val (?P<val_loss>[\\d.]+)'}}
  objective: {{metric: val_loss, better: lower}}
base: {base}
grid:
  seed: [{seeds}]
"""

# the phases of `ablate run`, stamped with time.time() in a process that runs its CLI (see `where`)
STAMPED = """
import json, sys, time
stamps = {"enter": time.time()}
from ablate.cli import main
stamps["imported"] = time.time()
import ablate.execute.grid_run as gr
from ablate.execute.lifecycle import Lifecycle
from ablate.execute.local.pool import WorkerPool

offset = time.time() - time.monotonic()


def timed(owner, name, label):
    inner = getattr(owner, name)

    def call(*args, **kwargs):
        began = time.time()
        try:
            return inner(*args, **kwargs)
        finally:
            stamps[label] = (began, time.time())
    setattr(owner, name, call)


timed(gr, "expand_grid", "plan")
timed(gr, "open_grid", "store")
timed(Lifecycle, "close", "close")
timed(WorkerPool, "close", "pool close")
reports = []
run_grid = gr.run_grid


def keep(*args, **kwargs):
    stamps["run_grid"] = time.time()
    reports.append(run_grid(*args, **kwargs))
    stamps["run_grid ended"] = time.time()
    return reports[-1]


gr.run_grid = keep
out = sys.argv[1]
sys.argv = ["ablate", "run", *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
stamps["done"] = time.time()
r = reports[0]
stamps["pool"] = r.pool_started + offset
stamps["jobs"] = sorted((s + offset, e + offset, r.run_one_s[rid]) for rid, (s, e) in r.job_times.items())
with open(out, "w") as f:
    json.dump(stamps, f)
"""


@dataclass
class Setup:
    root: Path
    steps: int

    @property
    def folder(self) -> Path:
        return self.root / "grid"

    def argv(self, seed: int) -> list[str]:
        """The command a grid run renders (``{args}``: base, then the seed), run bare."""
        return [sys.executable, "train.py", f"--steps={self.steps}", "--batch=2000", "--lr=0.01",
                f"--seed={seed}"]

    def grid(self, runs: int) -> Path:
        path = self.folder / f"grid{runs}.yaml"
        if not path.exists():
            path.write_text(GRID.format(python=sys.executable, script="train.py",
                                        base=f"{{steps: {self.steps}, batch: 2000, lr: 0.01}}",
                                        seeds=", ".join(str(s) for s in range(runs))))
        return path

    def home(self, used: bool = False) -> Path:
        """A new home; ``used``: one where a grid has run before (its store and MLflow's made), as a
        researcher's is after the first ``ablate run``."""
        home = Path(tempfile.mkdtemp(prefix="home-", dir=self.root))
        if used:
            warm = self.folder / "warm.yaml"
            warm.write_text(GRID.format(python=sys.executable, script="train.py", base="{steps: 1}",
                                        seeds="0").replace("name: overhead", "name: warm-up"))
            subprocess.run([ABLATE, "run", str(warm), "--home", str(home)], capture_output=True, check=True)
        return home


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds (the children's, waited for) of ``work``."""
    cpu, wall = children_cpu(), time.perf_counter()
    work()
    return time.perf_counter() - wall, children_cpu() - cpu


def bare(setup: Setup, runs: int, width: int) -> tuple[float, float]:
    """``runs`` commands, ``width`` at a time, each one's output read as ablate reads it (a pipe)."""
    def one(seed: int) -> None:
        out = subprocess.run(setup.argv(seed), cwd=setup.folder, capture_output=True, text=True)
        assert out.returncode == 0 and f"step {setup.steps}:" in out.stdout, out.stderr

    def all_runs() -> None:
        with ThreadPoolExecutor(width) as pool:
            list(pool.map(one, range(runs)))

    return timed(all_runs)


def under_ablate(setup: Setup, runs: int, width: int, mlflow: bool, used: bool = False
                 ) -> tuple[float, float]:
    """``ablate run`` of the grid of ``runs`` seeds at ``--jobs width`` in a home of its own (``used``: one
    where a grid ran before)."""
    cmd = [ABLATE, "run", str(setup.grid(runs)), "--home", str(setup.home(used)), "--jobs", str(width),
           *(() if mlflow else ("--no-mlflow",))]

    def run() -> None:
        out = subprocess.run(cmd, capture_output=True, text=True)
        assert out.returncode == 0 and re.search(rf"done\s*│\s*{runs}\b", out.stdout), out.stdout + out.stderr

    return timed(run)


CASES = (("1 run", 1, 1), ("10 runs, --jobs 1", 10, 1), ("10 runs, --jobs 2", 10, 2))


def side_by_side(setup: Setup, repeat: int, mlflow: bool) -> dict[str, dict[str, list[tuple[float, float]]]]:
    kinds: dict[str, tuple[bool, bool] | None] = {"bare": None, "--no-mlflow": (False, False)}
    if mlflow:  # MLflow's store made by this run (a new home), and there already (a used one)
        kinds.update({"MLflow, new home": (True, False), "MLflow, used home": (True, True)})
    times: dict[str, dict[str, list[tuple[float, float]]]] = {c: {k: [] for k in kinds} for c, _, _ in CASES}
    for _ in range(repeat):
        for case, runs, width in CASES:
            for kind, how in kinds.items():
                times[case][kind].append(bare(setup, runs, width) if how is None
                                         else under_ablate(setup, runs, width, *how))
    return times


def print_side_by_side(times: dict[str, dict[str, list[tuple[float, float]]]], repeat: int) -> None:
    print(f"A fixed training command bare and under `ablate run` (wall seconds, median of {repeat}; CPU: the "
          f"processes' CPU seconds; overhead: ablate - bare, the median of the {repeat} pairs run side by "
          f"side):")
    print(f"  {'':<20} {'':<20} {'wall s':>7} {'CPU s':>7} {'overhead/run':>13} {'% of bare':>10} "
          f"{'CPU/run':>8}")
    over: dict[tuple[str, str], float] = {}  # (case, kind) -> overhead in wall seconds, all runs
    for case, runs, _ in CASES:
        bare = times[case]["bare"]
        for kind, ts in times[case].items():
            wall, cpu = statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts)
            extra = ""
            if kind != "bare":
                over[case, kind] = statistics.median(a - b for (a, _), (b, _) in zip(ts, bare, strict=True))
                share = over[case, kind] / statistics.median(w for w, _ in bare)
                cpu_over = statistics.median(a - b for (_, a), (_, b) in zip(ts, bare, strict=True))
                extra = f" {over[case, kind] / runs:>12.2f}s {100 * share:>9.1f}% {cpu_over / runs:>7.2f}s"
            print(f"  {case if kind == 'bare' else '':<20} {kind:<20} {wall:>7.2f} {cpu:>7.2f}{extra}")
    print("  goals: overhead <= 0.5 s a run and <= 5% of the bare time")


def where(setup: Setup, runs: int, mlflow: bool, used: bool) -> dict[str, object]:
    """``ablate run`` of ``runs`` seeds at ``--jobs 1`` in a process that stamps its phases."""
    out = setup.root / f"stamps-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-c", STAMPED, str(out), str(setup.grid(runs)), "--home", str(setup.home(used)),
           "--jobs", "1", *(() if mlflow else ("--no-mlflow",))]
    born = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True)
    ended = time.time()
    assert result.returncode == 0, result.stderr
    stamps: dict[str, object] = json.loads(out.read_text())
    stamps["born"], stamps["ended"] = born, ended
    return stamps


def phases(s: dict[str, object]) -> dict[str, float]:
    """Seconds of each phase of one stamped ``ablate run``."""
    def at(key: str) -> float:
        value = s[key]
        assert isinstance(value, float)
        return value

    def span(key: str) -> tuple[float, float]:
        value = s[key]
        assert isinstance(value, list)
        return float(value[0]), float(value[1])

    jobs = [(float(a), float(b), float(c)) for a, b, c in s["jobs"]]  # type: ignore[attr-defined]
    plan, store, close, pool_close = span("plan"), span("store"), span("close"), span("pool close")
    gaps = sum(b[0] - a[1] for a, b in zip(jobs, jobs[1:], strict=False))
    return {
        "python's start (interpreter, site)": at("enter") - at("born"),
        "imports (ablate.cli)": at("imported") - at("enter"),
        "CLI to run_grid (options)": at("run_grid") - at("imported"),
        "planning (read, check, code identity, ids)": plan[1] - plan[0],
        "executor session, large-grid check": store[0] - plan[1],
        "store (create, migrate, register, triage)": store[1] - store[0],
        "to the workers' start (jobs, display)": at("pool") - store[1],
        "worker start (spawn, imports) to job 1": jobs[0][0] - at("pool"),
        "jobs beyond their command (all jobs)": sum(e - b - c for b, e, c in jobs),
        "between jobs (hand-out, record)": gaps,
        "after the last job (pool close)": pool_close[1] - pool_close[0],
        "after the last job (lifecycle close)": close[1] - close[0],
        "after the last job (rest of run_grid)": at("run_grid ended") - jobs[-1][1]
        - (pool_close[1] - pool_close[0]) - (close[1] - close[0]),
        "the summary": at("done") - at("run_grid ended"),
        "the interpreter's exit": at("ended") - at("done"),
        "(the commands, as ablate timed them)": sum(c for _, _, c in jobs),
        "(whole process)": at("ended") - at("born"),
    }


def print_where(setup: Setup, repeat: int, mlflow: bool) -> None:
    print(f"\nWhere `ablate run` spends its time beyond the commands (wall seconds, median of {repeat}; a "
          f"home each, new, or used for MLflow; --jobs 1):")
    heads = {"1 run": (1, False), "10 runs": (10, False), **({"10, MLflow": (10, True)} if mlflow else {})}
    cols: dict[str, list[dict[str, float]]] = {h: [] for h in heads}
    for _ in range(repeat):
        for head, (runs, on) in heads.items():
            cols[head].append(phases(where(setup, runs, on, used=on)))
    print(f"  {'':<46}" + "".join(f"{h:>12}" for h in heads))
    for name in cols["1 run"][0]:
        medians = (statistics.median(p[name] for p in cols[h]) for h in heads)
        print(f"  {name:<46}" + "".join(f"{m:>12.3f}" for m in medians))
    guard = guard_s()
    print(f"  each command also starts inside ablate's guard process (its own Python): {guard:.3f} s a run, "
          f"inside the commands' times above")
    for head, (runs, _) in heads.items():
        per_job = [(p["jobs beyond their command (all jobs)"] + p["between jobs (hand-out, record)"]) / runs
                   for p in cols[head]]
        once = [p["(whole process)"] - p["(the commands, as ablate timed them)"] - runs * j
                for p, j in zip(cols[head], per_job, strict=True)]
        fixed, per_run = statistics.median(once), statistics.median(per_job) + guard
        print(f"  {head}: {fixed:.2f} s once per `ablate run`, {per_run:.3f} s a run; the overhead is within "
              f"5% of the commands' time from {(fixed + per_run) / 0.05:.0f} s a command for 1 run, "
              f"{(fixed / 10 + per_run) / 0.05:.1f} s for 10 (at --jobs 1)")


def guard_s(repeat: int = 9) -> float:
    """What the guard process adds to a command: ``python -I -S guard.py ... -- true`` against ``true``,
    median of ``repeat`` pairs."""
    from ablate.trainers.command.process import GUARD

    true = shutil.which("true") or "/bin/true"
    guarded = [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), "10", "--", true]

    def wall(cmd: list[str]) -> float:
        began = time.perf_counter()
        subprocess.run(cmd, check=True)
        return time.perf_counter() - began

    return statistics.median(wall(guarded) - wall([true]) for _ in range(repeat))


def print_parse(lines: int) -> None:
    sys.path.insert(0, str(BENCH))
    from command_parse import PATTERN, stdout_rate

    nano = "step {i}: train {a:.4f}, val {b:.4f}"
    cases: Sequence[tuple[str, dict[str, object], Callable[[int], str]]] = (
        ("regex, every line", {"stdout": PATTERN}, lambda i: nano.format(i=i, a=2 + i * 1e-6, b=2.1)),
        ("key: value", {"stdout": True}, lambda i: f"val_loss: {2 + i * 1e-6:.5f} (step {i})"),
    )
    print(f"\nstdout parsing ({lines:,} lines, as a run feeds them; bench/command_parse.py has every parser; "
          f"goal >= 100,000 lines/s):")
    for name, metrics, line in cases:
        wall, cpu, _ = stdout_rate(metrics, line, lines)
        print(f"  {name:<20} {wall:>12,.0f} lines/s {cpu:>12,.0f} lines/CPU s")


def print_end_to_end(setup: Setup, lines: int, repeat: int) -> None:
    from ablate.grid.planning import plan_grid
    from ablate.runner.fingerprints import Fingerprints
    from ablate.trainers.command.config import CommandConfig
    from ablate.trainers.command.run import run_command

    (setup.folder / "flood.py").write_text(FLOOD)
    path = setup.folder / "flood.yaml"
    path.write_text(GRID.format(python=sys.executable, script="flood.py", base=f"{{lines: {lines}}}",
                                seeds="0"))
    config = plan_grid(path, fingerprints=Fingerprints.for_home(setup.home())).planned[0].config
    assert isinstance(config, CommandConfig)
    argv = [sys.executable, "flood.py", f"--lines={lines}", "--seed=0"]
    alone, command, whole = [], [], []
    for i in range(repeat):
        began = time.perf_counter()
        subprocess.run(argv, cwd=setup.folder, stdout=subprocess.DEVNULL, check=True)
        alone.append(time.perf_counter() - began)
        began = time.perf_counter()
        result = run_command(config, setup.root / f"flood-run-{i}", run_id=f"flood{i}")
        whole.append(time.perf_counter() - began)
        assert result.status == "done" and result.summary["steps"] == lines - 1, result.error
        command.append(float(result.summary["wall_s"] or 0.0))
    print(f"  end to end, a command printing {lines:,} lines as fast as it can (median of {repeat}):")
    for name, ts in (("alone, its output to /dev/null", alone),
                     ("under run_command: read, logged, parsed", command),
                     ("the whole run_command, its result written", whole)):
        wall = statistics.median(ts)
        print(f"    {name:<44} {wall:6.2f} s {lines / wall:>10,.0f} lines/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="the command's length: 100 is about 1.3 s here")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-mlflow", action="store_true", help="leave out the MLflow column")
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--only", choices=["side", "where", "parse"])
    ap.add_argument("--no-bytecode-cache", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        setup = Setup(Path(tmp), args.steps)
        setup.folder.mkdir()
        (setup.folder / "train.py").write_text(TRAIN)
        os.environ["ABLATE_CACHE"] = str(Path(tmp) / "cache")
        if not args.no_bytecode_cache:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        if args.only in (None, "side", "where"):  # the bytecode written, the page cache warm: not timed
            under_ablate(setup, 1, 1, mlflow=not args.no_mlflow)
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; the command: {args.steps} "
              f"steps of pure-Python SGD; bytecode cached: {not args.no_bytecode_cache}")
        if args.only in (None, "side"):
            print_side_by_side(side_by_side(setup, args.repeat, not args.no_mlflow), args.repeat)
        if args.only in (None, "where"):
            print_where(setup, args.repeat, not args.no_mlflow)
        if args.only in (None, "parse"):
            print_parse(args.lines)
            print_end_to_end(setup, args.lines, args.repeat)
        print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
