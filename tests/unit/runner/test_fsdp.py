"""Sharded training (``train.strategy: fsdp``) on CPU with gloo: two processes started by the runner follow
the one-process run step by step (through two training stages: the second starts from the first's sharded
final weights), write sharded checkpoints, and a ``kill -9`` mid-run resumes from one.

"The same losses as one process", numerically: FSDP reduce-scatters the mean of the two half batches'
gradients, which is the whole batch's gradient, so the parameters follow the one-process run up to float
summation order; every step's loss must match within 1e-4 relative in fp32 (observed: ~1e-7). Activation
checkpointing recomputes the same fp32 operations, so the resumed run (checkpointed) must match too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ablate.config import RunConfig
from ablate.layout import CHECKPOINT
from ablate.result import read_result
from ablate.runner import run_one
from ablate.runner.checkpoints import load_run_model
from ablate.runner.parallel import sharded_folder
from ablate.runner.stages import checkpoint_position

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_cache")]

STEPS = 12


def config(**train) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": "tiny"},
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}}, "seq_len": 32,
                 "stream_tokens": 20_000},
        "train": {"steps": 8, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 4, **train},
        "eval": {"heldout_tokens": 128, "probe_tokens": 64},
        # a second stage starts from the sharded weights
        "stages": [{"train.steps": STEPS - 8, "data.seq_len": 48}],
    })


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one")
    return run_one(config(), run_dir, run_id="one"), run_dir


def assert_same_losses(a: list[float], b: list[float]) -> None:
    diffs = [abs(x - y) / abs(y) for x, y in zip(a, b, strict=True)]
    print(f"max relative loss difference {max(diffs):.2e}")
    assert len(a) == STEPS and max(diffs) < 1e-4


def test_two_fsdp_processes_follow_the_one_process_run(one_process, tmp_path):
    ref, ref_dir = one_process
    result = run_one(config(devices=2, strategy="fsdp"), tmp_path, run_id="two")
    assert result.status == "done" and read_result(tmp_path) == result  # rank 0 wrote the one result.json
    assert_same_losses(result.metrics["loss"], ref.metrics["loss"])
    assert result.metrics["loss"][-1] < 0.8 * result.metrics["loss"][0]
    assert result.summary["val_ppl"] == pytest.approx(ref.summary["val_ppl"], rel=1e-4)  # evaluated whole
    assert result.summary["f_attn"] == pytest.approx(ref.summary["f_attn"], rel=1e-3)
    # the checkpoints: last.ckpt names a torch.distributed.checkpoint folder holding one shard per rank, the
    # first stage's final checkpoint keeps a folder of its own; older folders are gone
    folder = sharded_folder(tmp_path / CHECKPOINT)
    assert folder == tmp_path / "checkpoints" / f"sharded-1-{STEPS - 8:08d}"
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp",
                                                        "meta.pt"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "last.ckpt", folder.name, "sharded-stage0-final", "stage0-final.ckpt"]
    assert checkpoint_position(tmp_path / CHECKPOINT) == (1, STEPS - 8)
    # the sharded weights read back whole, without a process group: the same model as the one-process run
    model, _, _ = load_run_model(tmp_path)
    ref_model, _, _ = load_run_model(ref_dir)
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.allclose(model(idx).logits, ref_model(idx).logits, atol=1e-4)
    assert not torch.distributed.is_initialized()  # this process can train another run


def test_fsdp_on_one_device_is_plain_training(one_process, tmp_path):
    result = run_one(config(strategy="fsdp"), tmp_path, run_id="fsdp1")
    assert result.metrics["loss"] == one_process[0].metrics["loss"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt", "stage0-final.ckpt"]


WORKER = """
import json, sys, time
from ablate.config import RunConfig
from ablate.runner import run_one
config = RunConfig.model_validate(json.loads(sys.argv[1]))
run_one(config, sys.argv[2], run_id="killed", on_step=lambda row: time.sleep(0.5))
"""


def _processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = next(
                    (ln for ln in (proc / "status").read_text().splitlines() if ln.startswith("State:")), ""
                )
            except OSError:
                continue
            if text in cmdline and "zombie" not in state:
                pids.append(int(proc.name))
    return pids


def test_kill_9_mid_run_resumes_from_the_sharded_checkpoint(one_process, tmp_path):
    cfg = config(devices=2, strategy="fsdp", activation_checkpointing=True)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(cfg.model_dump(mode="json")),
                             str(run_dir)],
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # wait for the first sharded checkpoint (step 4), then kill rank 0
            if (run_dir / CHECKPOINT).is_file() and checkpoint_position(run_dir / CHECKPOINT)[1] >= 4:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint within 240 s")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stage, done = checkpoint_position(run_dir / CHECKPOINT)
    killed_at = done + 8 * stage
    assert 4 <= killed_at < STEPS and not (run_dir / "result.json").exists()
    deadline = time.monotonic() + 30
    while _processes_naming(str(run_dir / "launch.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # rank 1 dies with rank 0 (its parent-death signal)
    assert _processes_naming(str(run_dir / "launch.json")) == []

    resumed = run_one(cfg, run_dir, run_id="killed")
    assert resumed.resumed_from == killed_at
    assert [(e.kind, e.step) for e in resumed.events] == [("resumed", killed_at)]
    assert resumed.metrics["step"] == list(range(STEPS))
    assert_same_losses(resumed.metrics["loss"], one_process[0].metrics["loss"])
    assert resumed.summary["train_loss"] == pytest.approx(one_process[0].summary["train_loss"], rel=1e-4)


def test_a_local_worker_gets_all_the_gpus_of_its_run():
    from ablate.errors import ConfigError
    from ablate.execute.devices import plan_slots

    gpus = [f"cuda:{i}" for i in range(8)]
    slots = plan_slots(devices=gpus, jobs=None, jobs_per_device=1, cpu_count=64, per_run=4)
    assert [s.cuda_visible for s in slots] == ["0,1,2,3", "4,5,6,7"] and [s.threads for s in slots] == [32,
                                                                                                        32]
    assert [s.cuda_visible for s in plan_slots(devices=gpus, jobs=None, jobs_per_device=1, cpu_count=64,
                                               per_run=8)] == ["0,1,2,3,4,5,6,7"]
    with pytest.raises(ConfigError, match=r"--devices: runs with train.devices = 8 need 8 GPUs, 2 given"):
        plan_slots(devices=gpus[:2], jobs=None, jobs_per_device=1, cpu_count=64, per_run=8)
