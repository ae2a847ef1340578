"""bf16 mixed precision and ``torch.compile`` end to end on CPU: a compiled bf16 run cut after a checkpoint is
resumed by ``ablate run`` (a fresh process, compiling again) and ends with the losses of the uninterrupted
compiled run, recorded in the store.

The first compilation is the slow part (inductor generates and builds C++ kernels: about a minute on two
cores); the uninterrupted run reuses it in this process, the resumed one through inductor's on-disk cache.
"""

from __future__ import annotations

import pytest
import torch
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app
from ablate.grid import expand, load_grid
from ablate.layout import run_dir
from ablate.runner import run_one
from ablate.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_cache")]

STEPS = 12


def test_bf16_compiled_run_trains_is_stored_and_resumes(tmp_path, tmp_home):
    path = tmp_path / "bf16.yaml"
    path.write_text(tiny_grid("bf16", variants=["sdpa-elementwise"], steps=STEPS, checkpoint_every=4,
                              train_extra=", lr: 1.0e-2, precision: bf16-mixed, compile: true"))
    (planned,) = expand(load_grid(path))
    config, rid = planned.config, planned.run_id

    def crash(row):
        if row["step"] == 6:  # after the checkpoint at 4 steps
            raise RuntimeError("cut")

    torch._dynamo.utils.counters.clear()
    with pytest.raises(RuntimeError, match="cut"):
        run_one(config, run_dir(tmp_home, rid), run_id=rid, on_step=crash)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the model was compiled
    whole = run_one(config, tmp_path / "whole", run_id=rid)  # uninterrupted, for comparison
    fp32 = run_one(config.model_copy(update={"train": config.train.model_copy(
        update={"precision": "32-true", "compile": False})}), tmp_path / "fp32", run_id="fp32")

    out = CliRunner().invoke(app, ["run", str(path), "--no-mlflow"])
    assert out.exit_code == 0, out.output
    with Store.open(home=tmp_home) as store:
        row = store.runs_frame(grid="bf16").set_index("run_id").loc[rid]
        curve = store.curves(run_ids=[rid], metrics=["loss"]).sort_values("step")
    assert row["status"] == "done" and row["resumed_from"] == 4
    assert row["train.precision"] == "bf16-mixed" and bool(row["train.compile"])
    losses = list(curve["value"])
    assert list(curve["step"]) == list(range(STEPS))
    assert losses[-1] < 0.6 * losses[0]  # it learned
    # the resumed run ends where the uninterrupted one does
    assert losses == pytest.approx(whole.metrics["loss"], rel=1e-3)
    assert row["val_ppl"] == pytest.approx(whole.summary["val_ppl"], rel=1e-2)
    # bf16 is what computed it: close to the fp32 run, not equal to it
    assert losses == pytest.approx(fp32.metrics["loss"], rel=2e-2) and losses != fp32.metrics["loss"]
