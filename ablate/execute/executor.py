"""One seam for executors: what every way of training a grid's runs offers the rest of ablate, and the
registry that ``--executor`` chooses from.

An executor trains runs under the shared run lifecycle (``ablate.execute.lifecycle``): whichever process
trains a run claims it, streams its steps and records its end through a ``Lifecycle``. What differs is
where the runs train and how their jobs are asked about:

- ``run(path, sets, options) -> int``: ``ablate run GRID`` on it, printing as it goes; the exit status;
- ``session(expanded, options)``: a context manager that checks what the executor can check before
  anything is made (bad input: one line, exit 2), gets it ready (a Ray instance started or joined) and
  gives ``runner(lifecycle, ...)``s: rounds of jobs, for ``ablate run`` and ``ablate tune``;
- ``alive(job_ids) -> set | None``: which of its jobs still hold their runs (None: it cannot tell from
  here, and the heartbeat decides);
- ``states(job_ids) -> {job id: state} | None``: what ``ablate status`` shows of them;
- ``cancel(job_ids) -> [what it cancelled]``: ``ablate cancel GRID``;
- ``job_name(job_id)``: the job in its own words (``Slurm job 12_3``, ``Ray task 5f2e...``).

A new executor is one subpackage of ``ablate.execute`` whose ``executor`` module defines an object with
these, whose ``options`` module declares its own ``ablate run`` options (``--partition``, ``--ray-address``:
``ablate.options.Option``), and one entry in ``registry.EXECUTORS``. The command line builds its flags from
those declarations; one given for another executor is refused before anything starts (``check_flags``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console

from ablate.errors import ConfigError, UserInputError, one_of
from ablate.execute.recorder import STORE_PATIENCE_S
from ablate.execute.registry import EXECUTORS, owner
from ablate.grid import Grid, PlannedRun
from ablate.runner.fingerprints import Fingerprints
from ablate.trainers.registry import MODEL, TRAINERS, Trainer

if TYPE_CHECKING:
    from ablate.execute.lifecycle import Ended, Lifecycle
    from ablate.execute.messages import Job

TRAIN_JOB = "ablate.execute.training:train"


@dataclass(frozen=True)
class Expanded:
    """A grid file loaded and expanded, once: what the memory check, the worker count and the opening all
    read."""

    path: Path
    grid: Grid  # with the extra runs among its include entries
    planned: list[PlannedRun]
    fingerprints: Fingerprints  # the data hashes read for ``planned``, saved on opening
    joins: bool  # its runs join the grid's current configuration (--set, extra runs), else they are it
    trainer: Trainer = TRAINERS[MODEL]  # what trains its runs: its job function, its checks



@dataclass
class RunOptions:
    """How ``ablate run`` runs a grid, whatever the executor: where (home, store), what it retries, how it
    reports; ``own`` holds the executor's own options by name (``partition``, ``ray_address``), only those
    given."""

    home: Path = Path("ablate-runs")
    store: str | None = None
    executor: str = "local"
    jobs: int | None = None
    devices: str | None = None
    jobs_per_device: int = 1
    threads: int | None = None  # torch threads per run (--threads); local default: the usable CPUs // workers
    retry_failed: bool = False
    mlflow: bool = True
    mlflow_experiment: str | None = None  # the MLflow experiment the user named; None: the grid's own
    wait: bool = False  # wait for runs another process is training (slurm: for the array to end)
    append: bool = False  # a grid whose name the store holds with another base: the same study grown
    device_memory: float | None = None  # bytes per device every run to train must fit
    stale_after_s: float = 300.0  # a run on another host with no heartbeat for this long is taken as dead
    store_patience_s: float = STORE_PATIENCE_S  # a store unreachable this long stops the grid cleanly
    progress_every_s: float | None = None  # without a terminal: a progress line this often (default 30 s)
    job_fn: str | None = None  # the job function ("module:function"); None: the grid's trainer's
    console: Console | None = None
    extra: tuple[dict[str, Any], ...] = ()  # runs beyond the file's, as include entries (--until-resolved)
    idle_table: bool = True  # the summary table also when nothing trained (False: a look of --until-resolved)
    own: dict[str, Any] = field(default_factory=dict)  # the executor's own options, by name
    # a large grid (ablate.execute.large) starts after its one line (yes), else only if ``ask`` (a terminal's
    # question; None: no terminal) says yes
    yes: bool = True
    ask: Callable[[str], bool] | None = None


class Runner(Protocol):
    """Rounds of jobs on an executor: ``run(jobs) -> {run_id: Ended}`` once every job has ended. Each job's
    run is recorded through the lifecycle the runner was made with, wherever it trains."""

    width: int  # how many jobs train at once (a round of tune's trials)
    interrupted: bool
    pool_started: float | None  # time.monotonic() when it could first train
    job_times: dict[str, tuple[float, float]]  # run_id -> (started, ended), monotonic
    run_one_s: dict[str, float]  # run_id -> seconds inside run_one
    worker_pids: dict[str, int]  # run_id -> pid of the process that trained it

    @property
    def store_error(self) -> str | None: ...  # the store stayed away past its patience: why it stopped

    def expect(self, n: int) -> None: ...
    def run(self, jobs: Sequence[Job]) -> dict[str, Ended]: ...
    def run_dir(self, run_id: str) -> Path: ...
    def close(self) -> None: ...
    def __enter__(self) -> Runner: ...
    def __exit__(self, *exc: object) -> None: ...


class Session(Protocol):
    """An executor made ready for one grid (``Executor.session``)."""

    remote: bool  # its runs train in other processes that must see the home by its absolute path
    width: int  # jobs at once

    def describe(self, jobs: int) -> tuple[str, str | None]:
        """Where ``jobs`` jobs would train, in a few words, and a warning about it (None when none)."""
        ...

    def runner(self, lifecycle: Lifecycle, *, title: str, job_fn: str = TRAIN_JOB,
               console: Console | None = None, progress_every_s: float | None = None,
               jobs: int | None = None) -> Runner:
        """Rounds of jobs recorded through ``lifecycle`` (``jobs``: the most there will be at once)."""
        ...


class Executor(Protocol):
    """What every executor offers (see the module docstring)."""

    name: str
    about: str  # a few words: --executor's help (its registry entry's)

    def run(self, path: str | Path, sets: Sequence[str], options: RunOptions) -> int: ...
    def session(self, expanded: Expanded, options: RunOptions) -> AbstractContextManager[Session]: ...
    def alive(self, job_ids: Collection[str]) -> set[str] | None: ...
    def states(self, job_ids: Collection[str]) -> dict[str, str] | None: ...
    def cancel(self, job_ids: Collection[str]) -> list[str]: ...
    def job_name(self, job_id: str) -> str: ...


def executor(name: str) -> Executor:
    """The executor registered as ``name``; a misspelled name is a UserInputError with a near match."""
    if name not in EXECUTORS:
        raise UserInputError(one_of(name, list(EXECUTORS), what="executor") + " (option --executor)")
    module, _, attr = EXECUTORS[name].target.partition(":")
    found: Executor = getattr(importlib.import_module(module), attr)
    return found


def executors(names: Collection[str | None]) -> Iterator[Executor]:
    """The registered executors among ``names`` (those the store's rows name; an unknown one is skipped)."""
    for name in sorted({n for n in names if n}):
        if name in EXECUTORS:
            yield executor(name)


def check_flags(chosen: Executor, own: Mapping[str, object]) -> None:
    """Refuse (ConfigError, exit 2) an executor option given for an executor that does not read it."""
    reads = {o.name for o in EXECUTORS[chosen.name].options} if chosen.name in EXECUTORS else set()
    for key in own:
        if key in reads:
            continue
        name = owner(key)
        opt = next((o for o in EXECUTORS[name].options if o.name == key), None) if name else None
        flag = opt.flag if opt is not None else "--" + key.replace("_", "-")
        if name is None or opt is None:
            raise ConfigError(f"no executor reads {flag}", where=flag)
        raise ConfigError(f"{opt.refusal or f'an option of the {name} executor'}; add --executor {name}",
                          where=flag)


def executor_name(name: str, job_id: str) -> str:
    """A job in its executor's words (``Slurm job 12_3``); an executor this ablate does not know: as
    stored."""
    return executor(name).job_name(job_id) if name in EXECUTORS else f"{name} job {job_id}"
