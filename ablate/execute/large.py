"""Before a large grid is written: what ``ablate run`` is about to start, in one line, and the user's yes.

A grid is **large** when it has more than ``LARGE_RUNS`` runs to train (new, queued, cut off; a run done or
diverged is not trained again), or when their estimated disk is above ``LARGE_DISK``. Then, after the grid
is expanded and before the store or the home is touched, one line says the count, the disk and the time it
estimates (``Estimate.line``); ``ablate run`` asks on a terminal, and without one it needs ``--yes``: else
exit 2, nothing written (``check_large``).

The estimates are deliberately simple, from the plan alone (docs/scale.md, "Large grids", has the
measurements behind them):

- **disk** per run: its checkpoint, ``CHECKPOINT_BYTES_PER_PARAM`` (fp32 weights and AdamW's two moments) per
  parameter plus ``CHECKPOINT_OVERHEAD``, one per training stage; what the store and the run directory keep
  per step (``STEP_BYTES``: the step curves in the store and in ``result.json``); and ``RUN_BYTES`` (its store
  rows, ``train.log``). MLflow's copy of the curves and the shared token cache are not counted.
- **time**: the runs' planned FLOPs (``ablate.grid.ladder.planned_flops``) at ``CPU_FLOPS`` per CPU worker
  (measured: the tiny preset on one thread) or ``GPU_FLOPS`` per GPU worker (assumed), plus ``RUN_SECONDS``
  a run, over the session's workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.ablations.memory import gpu_here
from ablate.config import RunConfig, stage_configs
from ablate.errors import UserInputError
from ablate.grid.expand import PlannedRun
from ablate.grid.view import Costs
from ablate.store.plan_status import statuses as stored_statuses

GiB = 2**30
LARGE_RUNS = 1_000  # more runs to train than this asks first
LARGE_DISK = 100 * GiB  # or more estimated disk than this
CHECKPOINT_BYTES_PER_PARAM = 12  # fp32 weights + AdamW's two fp32 moments (tiny preset: 12.4 measured)
CHECKPOINT_OVERHEAD = 64 * 2**10  # Lightning's own keys (tiny preset: 52 KB measured)
STEP_BYTES = 512  # per training step: the store's step curves (~390 B) and result.json's (~120 B)
RUN_BYTES = 8 * 2**10  # per run: its store rows (~5.4 KB measured at 100,000 runs), train.log, the rest
CPU_FLOPS = 1e10  # FLOP/s of a CPU worker (tiny preset, 1 thread: 1.0e10 measured on a 2-core machine)
GPU_FLOPS = 1e14  # FLOP/s of a GPU worker: assumed (a tenth of an H100's dense bf16 peak); small models less
RUN_SECONDS = 1.0  # a run's time beside its FLOPs: its model, data and last evaluation (tiny: 0.1-0.3 s)
SKIPPED = ("done", "diverged", "pruned")  # what `ablate run` does not train again (failed: --retry-failed)


@dataclass(frozen=True)
class Estimate:
    """What running a grid would take: its runs to train, their disk (bytes; ``checkpoints`` of it) and
    FLOPs, at ``rate`` FLOP/s per worker on ``workers`` workers (None: not known here, as for Slurm)."""

    grid: str
    runs: int
    disk: float
    checkpoints: float
    flops: float
    rate: float
    workers: int | None

    @property
    def large(self) -> bool:
        """Over a threshold: asked for before anything is written."""
        return self.runs > LARGE_RUNS or self.disk > LARGE_DISK

    @property
    def seconds(self) -> float:
        """The estimated wall time on the workers (one, when not known)."""
        workers = max(1, min(self.workers or 1, self.runs or 1))
        return (self.flops / self.rate + RUN_SECONDS * self.runs) / workers

    def line(self) -> str:
        """The count, the disk and the time, in one line.

        >>> for part in Estimate("g", 10_000, 16.5e9, 14.9e9, 1.2e16, 1e10, 2).line().split(" and "):
        ...     print(part)
        ablate run g: 10,000 runs to train: about 15.4 GB of disk (checkpoints 13.9 GB)
        7 days on 2 workers (1.2e16 FLOPs at ~1e10 FLOP/s a worker)
        """
        on = f"{self.workers} worker{'s' * (self.workers != 1)}" if self.workers else "one worker"
        return (f"ablate run {self.grid}: {self.runs:,} runs to train: about {_gb(self.disk)} of disk "
                f"(checkpoints {_gb(self.checkpoints)}) and {_duration(self.seconds)} on {on} "
                f"({_sci(self.flops, '.2g')} FLOPs at ~{_sci(self.rate, '.0e')} FLOP/s a worker)")


def _sci(x: float, spec: str) -> str:
    return format(x, spec).replace("e+0", "e").replace("e+", "e")


def _gb(nbytes: float) -> str:
    return f"{nbytes / GiB:,.1f} GB" if nbytes >= GiB / 10 else f"{nbytes / 2**20:,.1f} MB"


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``5.2 h``, ``70 days``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


def estimate(grid: str, planned: Iterable[PlannedRun], statuses: Mapping[str, str], *, workers: int | None,
             gpu: bool, retry_failed: bool = False) -> Estimate:
    """The ``Estimate`` of training ``planned`` (PlannedRuns) given each run's status (``ablate plan``'s:
    ``new``, ``done``, ``done as <id> (ablate db rehash)``, ...): the runs ``ablate run`` would train."""
    costs = Costs(gpu=gpu)  # tokens and FLOPs once per distinct model and train section
    runs, disk, checkpoints, flops = 0, 0.0, 0.0, 0.0
    for run in planned:
        status = statuses.get(run.run_id, "new").split()[0]
        if status in SKIPPED or (status == "failed" and not retry_failed):
            continue
        if not isinstance(run.config, RunConfig):  # a training command's: its cost is not known here
            runs += 1
            disk += RUN_BYTES
            continue
        stages = stage_configs(run.config)  # the run itself, unless it has stages
        steps = sum(c.train.steps for c in stages)
        checkpoint = len(stages) * (CHECKPOINT_BYTES_PER_PARAM * run.params + CHECKPOINT_OVERHEAD)
        runs += 1
        checkpoints += checkpoint
        disk += checkpoint + STEP_BYTES * steps + RUN_BYTES
        flops += costs(run)["flops"]
    return Estimate(grid, runs, disk, checkpoints, flops, GPU_FLOPS if gpu else CPU_FLOPS, workers)


def check_large(est: Estimate, *, yes: bool, ask: Callable[[str], bool] | None,
                say: Callable[[str], None]) -> None:
    """For a large grid (``Estimate.large``): ``say`` its line and go on when ``yes``; else ``ask`` the user
    (on a terminal), refusing (exit 2, nothing written) when the answer is no; without a terminal (``ask``
    None) refuse at once, the estimate in the refusal's one line. A grid that is not large goes on without a
    word."""
    if not est.large:
        return
    if not yes and ask is None:
        raise UserInputError(f"{est.line()}: a grid this large (over {LARGE_RUNS:,} runs to train or "
                             f"{LARGE_DISK / GiB:.0f} GB of disk) starts without a terminal only with --yes; "
                             "nothing was written")
    say(est.line())
    if yes:
        return
    assert ask is not None
    if not ask(f"train {est.runs:,} runs?"):
        raise UserInputError(f"ablate run {est.grid}: not started (answered no); nothing was written")


def confirm_large(grid: str, planned: Sequence[PlannedRun], *, home: Path, store: str | None,
                  workers: int | None, yes: bool, ask: Callable[[str], bool] | None,
                  say: Callable[[str], None], retry_failed: bool = False) -> None:
    """``check_large`` for the runs of ``grid`` that ``ablate run`` would train: a grid that is not large even
    if every run trained is let through at once; else each run's status is read from the store, when there is
    one (``ablate plan``'s lookup: nothing is made)."""
    gpu = gpu_here()
    if not estimate(grid, planned, {}, workers=workers, gpu=gpu, retry_failed=True).large:
        return
    known = stored_statuses(planned, store=store, home=home)
    check_large(estimate(grid, planned, known, workers=workers, gpu=gpu, retry_failed=retry_failed), yes=yes,
                ask=ask, say=say)
