"""The Ray executor: one Ray task per run on a Ray cluster, joined at ``--ray-address`` (or ``RAY_ADDRESS``),
else on a Ray instance started on this machine for the command and stopped at its end.

``RAY`` is the object its registry entry names (``ablate.execute.registry``). Its session
(``cluster.connect``) checks what can be checked before anything starts (an address nothing answers at, a run
asking for more GPUs or CPUs than any node has: one line, exit 2), carries the grid's plugin modules and the
working directory to the workers (a ``runtime_env``), and gives ``runner.RayRunner``s. Importing this module
does not import Ray: without it, ``--executor ray`` is one line saying how to install it."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ablate.execute.executor import TRAIN_JOB, Expanded, RunOptions
from ablate.execute.fit import require_fit
from ablate.execute.grid_run import run_and_report
from ablate.execute.lifecycle import Lifecycle
from ablate.execute.ray.cluster import (
    ALIVE,
    Ask,
    Cluster,
    ask_to_cancel,
    connect,
    ray_module,
    requirements,
    runtime_env,
    split_job,
    task_states,
)
from ablate.execute.ray.options import ABOUT
from ablate.execute.ray.runner import RayRunner
from ablate.execute.ray.task import TaskSpec


@dataclass
class RaySession:
    """A Ray cluster made ready for one grid: its address, what each run asks of it, where it records."""

    cluster: Cluster
    asks: Mapping[str, Ask]
    home: Path
    store: str | None
    mlflow: bool
    remote: bool = True

    @property
    def width(self) -> int:
        """Runs at once if the cluster held only the largest node (a round of tune's trials)."""
        cpus = max((a.cpus for a in self.asks.values()), default=1)
        return max(1, int(self.cluster.most_cpus // max(1, cpus)) * max(1, self.cluster.nodes))

    def describe(self, jobs: int) -> tuple[str, str | None]:
        where = "a Ray instance started here" if self.cluster.started_here else "the Ray cluster"
        return (f"one Ray task per run on {where} ({self.cluster.address}, {self.cluster.nodes} "
                f"node{'s' * (self.cluster.nodes != 1)})"), None

    def runner(self, lifecycle: Lifecycle, *, title: str, job_fn: str = TRAIN_JOB,
               console: Console | None = None, progress_every_s: float | None = None,
               jobs: int | None = None) -> RayRunner:
        mirror = lifecycle.mirror
        spec = TaskSpec(home=str(lifecycle.home.absolute()), store=lifecycle.store.url,
                        address=self.cluster.address, job_fn=job_fn, grid=title, mlflow=mirror is not None,
                        mlflow_experiment=getattr(mirror, "experiment", None))
        return RayRunner(lifecycle, cluster=self.cluster, asks=self.asks, spec=spec, title=title,
                         width=min(self.width, jobs or self.width), console=console,
                         progress_every_s=progress_every_s)


class Ray:
    """``--executor ray``."""

    name = "ray"
    about = ABOUT

    def run(self, path: str | Path, sets: Sequence[str], options: RunOptions) -> int:
        return run_and_report(path, sets, options)

    @contextmanager
    def session(self, expanded: Expanded, options: RunOptions) -> Iterator[RaySession]:
        """Join (or start) the cluster, check every run fits a node of it, and stop what was started."""
        ray_module()  # not installed: one line saying how, before anything else
        require_fit(expanded.planned, options.device_memory, local=False, home=Path(options.home),
                    store=options.store)
        env = runtime_env(expanded.grid.plugins or (), cwd=Path.cwd(), home=Path(options.home))
        cluster = connect(options.own.get("ray_address"), runtime_env=env)
        try:
            asks = requirements(expanded.planned, cluster, threads=options.threads, devices=options.devices)
            yield RaySession(cluster, asks, Path(options.home), options.store, options.mlflow)
        finally:
            cluster.shutdown()

    def alive(self, job_ids: Collection[str]) -> set[str] | None:
        """The jobs whose tasks their clusters list as pending or running (None: no cluster answered)."""
        states = task_states(job_ids) if job_ids else {}
        return None if states is None else {j for j, s in states.items() if s in ALIVE}

    def states(self, job_ids: Collection[str]) -> dict[str, str] | None:
        """Ray's state of each task (None: no cluster answered)."""
        return task_states(job_ids) if job_ids else None

    def cancel(self, job_ids: Collection[str]) -> list[str]:
        """Ask the drivers that own the tasks to cancel them (only a task's owner can)."""
        asked = ask_to_cancel(job_ids) if job_ids else []
        return [f"{len(asked)} Ray task(s)"] if asked else []

    def job_name(self, job_id: str) -> str:
        task, address = split_job(job_id)
        return f"Ray task {task[:16]} on {address}"


RAY = Ray()
