"""What ``ablate tune`` is asked (``TuneOptions``) and what it answers (``TuneReport``, a ``CellResult`` per
cell)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from ablate.execute.recorder import STORE_PATIENCE_S
from ablate.tune.protocol import DEFAULT_TOLERANCE, Point

if TYPE_CHECKING:
    from ablate.execute.grid_run import GridReport


@dataclass
class TuneOptions:
    """What ``tune`` searches and how (CLI.md ``ablate tune``)."""

    param: str = "train.lr"
    low: float | None = None
    high: float | None = None
    log: bool = False
    trials: int = 10
    metric: str | None = None  # None: the grid's (val_ppl; a command grid's objective)
    pruner: str = "median"
    tolerance: float = DEFAULT_TOLERANCE
    then_run: bool = False
    find_max_stable: bool = False
    stable_steps: int = 4
    home: Path = Path("ablate-runs")
    store: str | None = None
    executor: str = "local"  # where the trials train (ablate.execute.executor.EXECUTORS)
    own: dict[str, object] = field(default_factory=dict)  # the executor's own options (ray_address)
    jobs: int | None = None
    devices: str | None = None
    threads: int | None = None
    jobs_per_device: int = 1
    device_memory: float | None = None  # bytes per device every run must fit (default: a local GPU's)
    mlflow: bool = True  # trials (experiment <grid>/tune, under their study) and the --then-run runs
    mlflow_experiment: str | None = None  # the experiment the user named for both; None: each grid's own
    # a store unreachable this long while trials train stops the tuning
    store_patience_s: float = STORE_PATIENCE_S
    console: Console | None = None


@dataclass
class CellResult:
    """One cell after tuning: its study, every point, the best and the largest stable value."""

    label: str
    variant: str
    study: str
    seeds: list[int]
    points: list[Point]
    best: Point | None
    stable: Point | None
    # the smallest value above ``stable`` that diverged or ended more than the tolerance worse than the best
    # (the bracket's upper end)
    unstable: Point | None
    note: str = ""


@dataclass
class TuneReport:
    """What one ``ablate tune`` did and found."""

    grid: str
    tune_grid: str
    metric: str = "val_ppl"  # what the studies optimized
    tolerance: float = DEFAULT_TOLERANCE  # what "worse" means: the metric over the best by more than this
    cells: list[CellResult] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # outcome -> jobs this time (plus "reused")
    interrupted: bool = False
    tuned: GridReport | None = None  # the --then-run grid's report
    tuned_grid: Path | None = None
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """130 interrupted; 1 when a trial crashed this time or a tuned run failed; else 0."""
        if self.interrupted:
            return 130
        if self.tuned is not None and (code := self.tuned.exit_code):
            return int(code)
        return 1 if self.counts.get("failed") else 0
