"""Test data for the store tests: planned runs and RunResults with real shapes (not collected by pytest).

Also the worker the concurrency test starts in 8 spawned processes (it must be importable by module name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ablate.config import RunConfig
from ablate.result import RunResult

VARIANTS = ("baseline", "sdpa-elementwise", "sdpa-headwise")


@dataclass(frozen=True)
class Planned:
    """Shaped like the grid package's PlannedRun (the store reads only these attributes)."""

    run_id: str
    config: RunConfig
    params: int
    added_params: int
    axes: dict[str, Any] = field(default_factory=dict)


def planned(i: int, *, lr: float = 3e-3) -> Planned:
    """The i-th planned run of a small grid: variant cycles over VARIANTS, seed = i // 3."""
    variant = VARIANTS[i % 3]
    config = RunConfig(variant=variant, seed=i // 3, train={"lr": lr, "steps": 40})
    return Planned(run_id=f"run{i:03d}", config=config, params=100_000 + 10 * (i % 3),
                   added_params=10 * (i % 3), axes={"variant": variant, "seed": i // 3})


def result(i: int, *, steps: int = 40, status: str = "done", lr: float = 3e-3) -> RunResult:
    """A finished run's result for ``planned(i)``: a decaying loss curve, 2 held-out sets, probes on 2
    layers."""
    p = planned(i, lr=lr)
    loss = [4.0 * math.exp(-s / 20) + 1.0 + 0.01 * i for s in range(steps)]
    return RunResult(
        run_id=p.run_id,
        config=p.config.model_dump(mode="json"),
        status=status,  # type: ignore[arg-type]
        summary={"steps": steps, "tokens": steps * 4096, "train_loss": loss[-1], "val_ppl": 10.0 + i,
                 "ppl/code": 8.0 + i, "ppl/prose": 12.0 + i, "loss_spikes": 1,
                 "gate_score": 0.1 * (i % 3) or None, "bench/arith": 0.25 + 0.01 * i, "tokens_per_s": 1000.0,
                 "wall_s": 3.5, "params": p.params, "added_params": p.added_params},
        metrics={"step": list(range(steps)), "loss": loss, "lr": [lr] * steps,
                 "val_step": [steps // 2, steps - 1], "val_ppl": [11.0 + i, 10.0 + i]},
        probes={"gate_score": [0.2, 0.3], "m_act": [5.0, 50.0]},
        histograms={"gate_score": [[1, 2, 3], [3, 2, 1]]},
        histogram_edges=[0.0, 0.25, 0.5, 1.0],
        events=[{"kind": "loss_spike", "step": 7, "data": {"loss": 3.5, "trend": 2.1}}],
        started="2025-01-01T10:00:00+00:00", finished="2025-01-01T10:05:00+00:00", host="node1", device="cpu")


def worker(url: str, index: int, n_runs: int, per_worker: int) -> None:
    """One of the concurrent processes: register an overlapping slice of runs, run them through their
    lifecycle, and ingest each result (two workers share each run)."""
    from ablate.store import Store

    mine = [(index * per_worker // 2 + k) % n_runs for k in range(per_worker)]
    with Store.open(url) as store:
        store.register_grid(name=f"grid{index % 3}", text=f"name: grid{index % 3}\n",
                            runs=[planned(i) for i in mine])
        for i in mine:
            run_id = planned(i).run_id
            store.mark_running(run_id=run_id, host=f"worker{index}", device="cpu")
            store.heartbeat(run_id=run_id, step=10)
            store.ingest(result(i))


def mlflow_client(home):
    """An MLflow client on ``home``'s tracking store, opened as ablate opens it: under the store's creation
    lock. ``MlflowClient(uri)`` makes (migrates) a new SQLite store at once; a task still mirroring may be
    making it at the same moment, and two unlocked migrations of one file break it."""
    from ablate.store.mlflow_tracking import open_client, tracking_uri

    return open_client(tracking_uri(home))
