"""Gradient accumulation (``train.micro_batch_size``): the same steps and losses as the whole batch at once.

In fp32 a step accumulated from micro-batches has the gradient of the whole batch up to float summation order,
so every step's loss and gradient norm must match the unaccumulated run's within 1e-5 relative (observed:
~1e-7). Both loss kinds are covered: every target (a text source), and the answer tokens only (a task source,
where each micro-batch's masked sum is divided by the whole batch's count).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ablate.config import RunConfig, TrainConfig
from ablate.runner import run_one

pytestmark = pytest.mark.usefixtures("module_cache")

SOURCES = {
    "all": {"train": [{"kind": "builtin", "name": "arithmetic"}],
            "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}}},
    "answer": {"train": [{"kind": "task", "name": "mqar@16"}],
               "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}}},
}


def config(loss: str, micro: int) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": "tiny"},
        "data": {**SOURCES[loss], "seq_len": 32, "stream_tokens": 20_000},
        "train": {"steps": 6, "batch_size": 8, "micro_batch_size": micro, "lr": 1e-2,
                  "checkpoint_every": 100},
        "eval": {"heldout_tokens": 64, "probes": False},
    })


@pytest.mark.parametrize("loss", ["all", "answer"])
def test_accumulated_micro_batches_equal_the_whole_batch(tmp_path, loss):
    whole = run_one(config(loss, 0), tmp_path / "whole", run_id="whole")
    accumulated = run_one(config(loss, 2), tmp_path / "micro", run_id="micro")  # 4 micro-batches of 2 rows
    assert config(loss, 2).train.accumulate == 4
    assert accumulated.metrics["step"] == whole.metrics["step"] == list(range(6))
    for curve in ("loss", "grad_norm"):
        for a, b in zip(accumulated.metrics[curve], whole.metrics[curve], strict=True):
            assert a == pytest.approx(b, rel=1e-5), (curve, accumulated.metrics[curve], whole.metrics[curve])
    assert accumulated.metrics["loss"][-1] < accumulated.metrics["loss"][0]
    # the global batch is the step's
    assert accumulated.summary["tokens"] == whole.summary["tokens"] == 6 * 8 * 32


@pytest.mark.parametrize(("train", "message"), [
    ({"batch_size": 8, "micro_batch_size": 3}, "micro_batch_size 3 does not divide the per-device batch 8"),
    ({"batch_size": 8, "devices": 2, "micro_batch_size": 3},
     r"per-device batch 4 \(batch_size 8 / devices 2\)"),
    ({"batch_size": 6, "devices": 4}, "batch_size 6 is not divisible by devices 4"),
])
def test_batches_that_do_not_split_are_refused(train, message):
    with pytest.raises(ValidationError, match=message):
        TrainConfig(**train)
    assert TrainConfig(batch_size=8, devices=2, micro_batch_size=2).accumulate == 2
    assert TrainConfig(batch_size=8).accumulate == 1
