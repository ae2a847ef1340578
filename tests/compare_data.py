"""A store of known numbers for the comparison report's tests (not collected by pytest).

Grid ``cmp``, at lr 3e-3, five seeds of:

- ``baseline``: Avg PPL ``BASE`` (a spread across seeds that pairing cancels);
- ``sdpa-elementwise`` (G1): the baseline's PPL - 0.3 + a little noise: a real, resolved gain, the arms
  strongly correlated;
- plugin arms (their labels as ``RunConfig`` writes them): ``mine:Arm(k=1)``, the baseline's PPL plus
  zero-mean noise (no effect, unresolved); ``mine:Anti``, the baseline's PPL mirrored (correlation -1:
  pairing costs); ``mine:Same``, the baseline's PPL exactly (the same function: identical runs).

At lr 1e-2 only G1 ran (3 seeds): a cell without a reference run. Grid ``null`` holds the same baseline with
G1 and ``mine:Arm(k=1)`` shifted by zero-mean noise only, and every arm's probes the baseline's: no
comparison in it is significant.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from ablate.config import RunConfig
from ablate.result import RunResult

LR, HIGH_LR = 3e-3, 1e-2
BASE = (6.0, 6.3, 5.9, 6.2, 6.1)
G1_NOISE = (0.02, -0.01, 0.0, 0.01, -0.02)
ARM_NOISE = (0.15, -0.15, 0.20, -0.02, 0.07)
NULL_NOISE = (0.08, -0.12, 0.05, -0.03, 0.04)
ARM, ANTI, SAME = "mine:Arm(k=1)", "mine:Anti", "mine:Same"


def values() -> dict[str, list[float]]:
    """Grid ``cmp``'s Avg PPL at lr 3e-3, per arm, by seed."""
    return {"baseline": list(BASE),
            "sdpa-elementwise": [b - 0.3 + e for b, e in zip(BASE, G1_NOISE, strict=True)],
            ARM: [b + e for b, e in zip(BASE, ARM_NOISE, strict=True)],
            ANTI: [12.2 - b for b in BASE], SAME: list(BASE)}


def run(grid: str, variant: str, seed: int, lr: float, ppl: float, *,
        effect: bool = True) -> tuple[dict[str, Any], RunResult]:
    """A planned run (as ``register_grid`` takes it) and its finished result: PPL ``ppl``, F-Attn and M-Act
    that G1 lowers (``effect``; else every arm's are the baseline's), a loss curve."""
    config = RunConfig(variant="baseline", seed=seed, model={"preset": "tiny"},
                       train={"lr": lr, "steps": 40}).model_dump(mode="json")
    config["variant"] = variant
    rid = hashlib.sha256(f"{grid}/{variant}/{seed}/{lr}".encode()).hexdigest()[:16]
    gated = variant == "sdpa-elementwise"
    lowered = gated and effect
    summary = {"steps": 40, "tokens": 40 * 16 * 256, "train_loss": ppl / 3, "val_ppl": ppl,
               "params": 119168 + (8192 if gated else 0), "added_params": 8192 if gated else 0,
               "f_attn": 0.1 + 0.01 * seed if lowered else 0.4 + 0.01 * seed,
               "m_act": (10.0 if lowered else 100.0) * (1 + 0.1 * seed)}
    loss = [5.0 * math.exp(-s / 10) + ppl / 3 for s in range(40)]
    result = RunResult(run_id=rid, config=config, status="done", summary=summary,
                       metrics={"step": list(range(40)), "loss": loss},
                       probes={"m_act": [summary["m_act"] / 2, summary["m_act"]]},
                       started="2025-01-01T10:00:00+00:00", finished="2025-01-01T10:05:00+00:00")
    axes = {"variant": variant, "seed": seed, "train.lr": lr}
    planned = {"run_id": rid, "config": config, "params": summary["params"],
               "added_params": summary["added_params"], "axes": axes}
    return planned, result


def cmp_runs() -> list[tuple[dict[str, Any], RunResult]]:
    out = [run("cmp", v, seed, LR, ppl) for v, ppls in values().items() for seed, ppl in enumerate(ppls)]
    out += [run("cmp", "sdpa-elementwise", seed, HIGH_LR, 5.5 + 0.1 * seed) for seed in range(3)]
    return out


def null_runs() -> list[tuple[dict[str, Any], RunResult]]:
    arms = {"baseline": list(BASE),
            "sdpa-elementwise": [b + e for b, e in zip(BASE, NULL_NOISE, strict=True)],
            ARM: [b + e for b, e in zip(BASE, ARM_NOISE, strict=True)]}
    return [run("null", v, seed, LR, ppl, effect=False) for v, ppls in arms.items()
            for seed, ppl in enumerate(ppls)]


def fill(store: Any, grid: str, runs: list[tuple[dict[str, Any], RunResult]]) -> None:
    store.register_grid(name=grid, text=f"name: {grid}\n", runs=[p for p, _ in runs])
    for _, result in runs:
        store.ingest(result)


def both_grids(folder: Path) -> Any:
    """A new SQLite store in ``folder`` holding grids ``cmp`` and ``null`` (the caller closes it)."""
    from ablate.store import Store

    store = Store.open(f"sqlite:///{folder / 'ablate.db'}")
    fill(store, "cmp", cmp_runs())
    fill(store, "null", null_runs())
    return store
