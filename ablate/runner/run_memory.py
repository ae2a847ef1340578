"""A run's memory: the estimate of its largest training stage (``ablate.ablations.memory`` estimates one model
config's), the cheapest change that makes a run fit a device, and the check ``ablate plan`` and ``ablate run``
make with ``--device-memory``.

Here, not beside the estimate: these read a ``RunConfig`` (its stages and train section), which sits above the
model's configs in the layers (docs/internals.md)."""

from __future__ import annotations

from collections.abc import Sequence

from ablate.ablations.memory import (
    FIT_FRACTION,
    GiB,
    MemoryEstimate,
    estimate_memory,
    fmt_gb,
    resolved_precision,
)
from ablate.ablations.variants import apply_variant
from ablate.config import RunConfig, stage_configs
from ablate.errors import ConfigError


def run_memory(config: RunConfig, *, gpu: bool, **changes: object) -> MemoryEstimate:
    """The estimate for a run config (each training stage's, the largest), with ``train`` fields changed by
    ``changes`` (e.g. ``micro_batch_size=1``) for trying fixes."""
    worst: MemoryEstimate | None = None
    for stage in stage_configs(config) if config.stages else [config]:
        tc = stage.train.model_copy(update=changes)
        est = estimate_memory(
            apply_variant(stage.model, stage.variant), seq_len=stage.data.seq_len,
            rows=tc.micro_batch_size or tc.batch_size // tc.devices, accumulate=tc.accumulate,
            precision=resolved_precision(tc.precision, gpu), strategy=tc.strategy, devices=tc.devices,
            checkpointing=tc.activation_checkpointing, gpu=gpu)
        worst = est if worst is None or est.total > worst.total else worst
    assert worst is not None
    return worst


def cheapest_fix(config: RunConfig, available: float, *, gpu: bool, max_devices: int = 64) -> str | None:
    """The first change that makes ``config`` fit in ``available`` bytes (times ``FIT_FRACTION``), from the
    cheapest: a smaller micro-batch (the same step, accumulated), activation checkpointing (a third more
    compute), both, then FSDP over the fewest devices (2, 4, 8, ... up to ``max_devices``) that divide the
    batch, with a micro-batch and checkpointing if those are needed too. None when nothing tried fits."""
    budget = available * FIT_FRACTION
    tc = config.train

    def fits(**ch: object) -> float | None:
        gb = run_memory(config, gpu=gpu, **ch).total
        return gb if gb <= budget else None

    def micro_options(devices: int) -> list[int]:
        per = tc.batch_size // devices
        return sorted((m for m in range(1, per) if per % m == 0), reverse=True)

    def describe(ch: dict[str, object], need: float) -> str:
        return ", ".join(f"train.{k}={v}" for k, v in ch.items()) + f" (est. {need / GiB:.1f} GB per device)"

    tries: list[dict[str, object]] = [{"micro_batch_size": m} for m in micro_options(tc.devices)]
    if not tc.activation_checkpointing:
        tries.append({"activation_checkpointing": True})
        tries += [{"activation_checkpointing": True,
                   "micro_batch_size": m} for m in micro_options(tc.devices)]
    k = max(2, tc.devices * (2 if tc.strategy == "fsdp" else 1))
    while k <= max_devices:
        if tc.batch_size % k == 0:
            base = {"strategy": "fsdp", "devices": k}
            tries.append(base)
            tries += [{**base, "micro_batch_size": m} for m in micro_options(k)]
            if not tc.activation_checkpointing:
                tries.append({**base, "activation_checkpointing": True})
                tries += [{**base, "activation_checkpointing": True,
                           "micro_batch_size": m} for m in micro_options(k)]
        k *= 2
    for ch in tries:
        if (need := fits(**ch)) is not None:
            return describe(ch, need)
    return None


def check_fit(runs: Sequence[tuple[str, str, RunConfig]], available: float, *, gpu: bool,
              where: str = "--device-memory") -> None:
    """Raise a one-line ConfigError naming the runs ``(run_id, variant, config)`` whose estimated peak exceeds
    ``FIT_FRACTION`` of ``available`` bytes per device, the largest need, and the cheapest fix for it."""
    budget = available * FIT_FRACTION
    needs = [(rid, variant, cfg, run_memory(cfg, gpu=gpu).total) for rid, variant, cfg in runs]
    bad = sorted((x for x in needs if x[3] > budget), key=lambda x: -x[3])
    if not bad:
        return
    named = ", ".join(f"{rid} ({variant}, {fmt_gb(need)})" for rid, variant, _, need in bad[:4])
    if len(bad) > 4:
        named += f" and {len(bad) - 4} more"
    fix = cheapest_fix(bad[0][2], available, gpu=gpu)
    advice = f"cheapest fix for the largest: {fix}" if fix else \
        "no smaller micro-batch, activation checkpointing or FSDP over up to 64 devices makes the largest fit"
    raise ConfigError(f"{len(bad)} of {len(runs)} run(s) cannot fit in {fmt_gb(available)} per device "
                      f"(estimated peak vs {FIT_FRACTION:.0%} of it): {named}; the largest needs "
                      f"{fmt_gb(bad[0][3])}; {advice}",
                      where=where)
