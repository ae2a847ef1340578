"""Will a grid's runs fit in a device's memory? The check every way of training goes through before anything
starts: ``ablate run`` (local pool and Slurm, ``run_grid`` and ``submit_grid``), ``ablate tune`` and ``ablate
plan``.

The memory per device is what the caller gives (``--device-memory``), else, for a run on this machine with a
GPU, the smallest visible GPU's memory; without either nothing is checked. A run that does not fit is refused
with one line (``ConfigError``, exit 2) naming the runs, the largest need and the cheapest fix for it
(``runner.run_memory.check_fit``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ablate.ablations.memory import device_memory as gpu_memory
from ablate.ablations.memory import fmt_gb, gpu_here
from ablate.config import RunConfig
from ablate.grid.expand import PlannedRun
from ablate.runner.run_memory import check_fit
from ablate.store.plan_status import statuses

FLAG = "--device-memory"


def memory_budget(device_memory: float | None, *, local: bool) -> tuple[float, str] | None:
    """The bytes per device runs must fit and where that figure comes from (the error's prefix):
    ``device_memory`` when given, else on a local GPU its memory (imports torch); None when neither is
    known."""
    if device_memory is not None:
        return device_memory, FLAG
    if local and gpu_here() and (available := gpu_memory()) is not None:
        return available, f"GPU memory ({fmt_gb(available)}; {FLAG} overrides)"
    return None


def check_memory(runs: Sequence[PlannedRun], status: Mapping[str, str], available: float, where: str) -> None:
    """Refuse (one line, exit 2) the runs still to train (not ``done`` or ``diverged`` in ``status``) whose
    estimated peak memory does not fit ``available`` bytes per device."""
    todo = [(r.run_id, r.config.variant, r.config) for r in runs
            if isinstance(r.config, RunConfig) and status.get(r.run_id) not in ("done", "diverged")]
    check_fit(todo, available, gpu=gpu_here(), where=where)


def require_fit(runs: Sequence[PlannedRun], device_memory: float | None, *, local: bool,
                home: Path | None = None, store: str | None = None) -> None:
    """Refuse the runs that cannot fit (see the module docstring), before anything is made. With ``home``, the
    runs the store already holds done or diverged are left out (their statuses are read, the store not
    created); without it every run is checked (tune: its trials are new runs)."""
    budget = memory_budget(device_memory, local=local)
    if budget is None:
        return
    status: dict[str, str] = {}
    if home is not None:
        status = statuses(runs, store=store, home=home)
    check_memory(runs, status, *budget)
