"""The memory plan: the estimated peak per device against the peak PyTorch's ``MemTracker`` measures on CPU,
its itemisation, the fixes it proposes, and ``--device-memory`` on ``ablate plan`` / ``ablate run`` / ``ablate
tune`` (and a library ``run_grid`` call).

The measured step is the runner's (``LitDecoder``): forward under autocast when mixed, fp32 cross-entropy,
backward (accumulated over micro-batches), gradient clipping, AdamW with the runner's parameter groups; the
second step is measured (the optimizer state exists by then). MemTracker sees every op, so the cases are few.
Observed errors: +2% to +11% (the estimate errs high: it counts every saved tensor at its full size), so the
bound below is -5% .. +15%.
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.ablations import ModelConfig, apply_variant, build_model, count_params
from ablate.ablations.config import PluginArm
from ablate.ablations.memory import GiB, estimate_memory, parse_memory
from ablate.cli import app
from ablate.config import RunConfig
from ablate.errors import ConfigError
from ablate.runner.run_memory import cheapest_fix, run_memory


def measured_peak(cfg: ModelConfig, *, rows: int, seq_len: int, half: bool = False,
                  checkpointing: bool = False, accumulate: int = 1) -> float:
    """Peak bytes of the runner's training step on CPU, measured by torch's MemTracker."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from ablate.runner.module import param_groups

    torch.manual_seed(0)
    model = build_model(cfg)
    if checkpointing:
        from ablate.runner.parallel import checkpoint_blocks

        checkpoint_blocks(model)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    idx = torch.randint(0, cfg.vocab_size, (rows, seq_len + 1))

    def step(tracker=None) -> None:
        for _ in range(accumulate):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
                out = model(idx[:, :-1])
                loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(),
                                                         idx[:, 1:].flatten())
            (loss / accumulate).backward()
            if tracker is not None:
                tracker.reset_mod_stats()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    step()  # the optimizer state exists from here on
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        step(tracker)
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


CASES = {
    "tiny-G1": dict(preset="tiny", variant="sdpa-elementwise", rows=8, seq_len=64),
    "tiny-switch": dict(preset="tiny", variant="switch-v-4top4", rows=8, seq_len=64),
    "tiny-moe": dict(preset="tiny-moe", variant="baseline", rows=8, seq_len=64),
    "tiny-G1-accumulated": dict(preset="tiny", variant="sdpa-elementwise", rows=4, seq_len=64, accumulate=2),
    "small-G1-checkpointed-bf16": dict(preset="small", variant="sdpa-elementwise", rows=2, seq_len=64,
                                       checkpointing=True, half=True),
    # T x T maps: the attention weights arms
    **{f"tiny-{arm}": dict(preset="tiny", variant=arm, rows=8, seq_len=256)
       for arm in ("sink-learned", "softmax-off-by-one", "sigmoid-attention", "softpick")},
    # the 2025-26 arms: fused calls (differential, DIFF V2), float masks (forgetting, selective), sparse G1
    **{f"tiny-{arm}": dict(preset="tiny", variant=arm, rows=8, seq_len=256)
       for arm in ("diff-attention", "diff-attention-matched", "diff-v2", "forgetting-attention",
                   "forgetting-pro", "selective-attention", "sdpa-headwise-sparse")},
    "tiny-forgetting-attention-rope-T128": dict(preset="tiny", variant="forgetting-attention-rope", rows=8,
                                                seq_len=128),
    # the example plugin arms (examples/plugin/myattn), one for each kind of slot: measured on the meta device
    "tiny-plugin-gate-G2": dict(preset="tiny", plugin={"arm": "myattn:HeadGate", "args": {"position": "G2"}},
                                rows=8, seq_len=64),
    "tiny-plugin-gate-G1-bf16": dict(preset="tiny",
                                     plugin={"arm": "myattn:HeadGate", "args": {"position": "G1"}}, rows=8,
                                     seq_len=64, half=True),
    "tiny-plugin-attn_out": dict(preset="tiny", plugin={"arm": "myattn:LayerScale"}, rows=8, seq_len=64),
    "tiny-plugin-weights": dict(preset="tiny", plugin={"arm": "myattn:CappedSoftmax", "args": {"cap": 5}},
                                rows=8, seq_len=256),
}


@pytest.mark.parametrize("case", CASES)
def test_estimate_bounds_the_measured_peak(case: str, request: pytest.FixtureRequest) -> None:
    c = dict(CASES[case])
    if "plugin" in c:
        request.getfixturevalue("plugin_dir")
        cfg = ModelConfig(preset=c.pop("preset"), plugin=PluginArm(**c.pop("plugin")))
    else:
        cfg = apply_variant(ModelConfig(preset=c.pop("preset")), c.pop("variant"))
    measured = measured_peak(cfg, **c)
    est = estimate_memory(cfg, seq_len=c["seq_len"], rows=c["rows"], accumulate=c.get("accumulate", 1),
                          precision="bf16-mixed" if c.get("half") else "32-true",
                          checkpointing=c.get("checkpointing", False))
    error = est.total / measured - 1
    print(
        f"{case}: measured {measured / 2**20:.2f} MiB, estimated {est.total / 2**20:.2f} MiB ({error:+.1%})"
    )
    assert -0.05 <= error <= 0.15, (case, measured, est)


def paper(variant: str = "baseline", **train) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": "paper-dense-1.7b"}, "variant": variant, "data": {"seq_len": 4096},
        "train": {"batch_size": 64, "precision": "bf16-mixed", **train},
    })


def test_the_estimate_follows_the_config() -> None:
    base = run_memory(paper(micro_batch_size=1), gpu=True)
    # the gate's
    assert run_memory(paper("sdpa-elementwise", micro_batch_size=1), gpu=True).total > base.total
    assert run_memory(paper(micro_batch_size=2), gpu=True).total > base.total
    assert run_memory(paper(micro_batch_size=1, activation_checkpointing=True), gpu=True).total < base.total
    sharded = run_memory(paper(micro_batch_size=1, strategy="fsdp", devices=8), gpu=True)
    assert sharded.optimizer == pytest.approx(base.optimizer / 8)
    assert sharded.total < base.total
    # parameters, gradients, optimizer state and activations add up to the total
    items = base.itemised_gb()
    assert items["total"] == pytest.approx(sum(v for k, v in items.items() if k != "total"), abs=0.05)
    # AdamW's two fp32 moments: 8 bytes per parameter (1.72B parameters: 12.8 GiB)
    assert 12.5 < items["optimizer"] < 13.0
    # every stage counts: a longer second stage needs more
    staged = RunConfig.model_validate({**paper(micro_batch_size=1).model_dump(),
                                       "stages": [{"data.seq_len": 8192}]})
    assert run_memory(staged, gpu=True).total > base.total


def test_cheapest_fix_tries_micro_batches_then_checkpointing_then_fsdp() -> None:
    assert cheapest_fix(paper(), 80 * GiB, gpu=True).startswith("train.micro_batch_size=")
    # one row per device does not fit in 48 GB; checkpointing does
    assert cheapest_fix(paper(micro_batch_size=1), 48 * GiB,
                        gpu=True).startswith("train.activation_checkpointing=True")
    # 24 GB: parameters, gradients and optimizer state take too much of it; sharded over 4 devices they do not
    assert cheapest_fix(paper(micro_batch_size=1), 24 * GiB, gpu=True).startswith(
        "train.strategy=fsdp, train.devices=4, train.activation_checkpointing=True")
    # 8 GB: one row's logits and their gradients alone take more
    assert cheapest_fix(paper(micro_batch_size=1), 8 * GiB, gpu=True) is None


@pytest.mark.parametrize(("text", "gib"),
                         [("80GB", 80), ("80 GiB", 80), ("40960MB", 40), ("1.5T", 1536), ("2g", 2)])
def test_memory_amounts_parse(text: str, gib: float) -> None:
    assert parse_memory(text) == gib * GiB


@pytest.mark.parametrize("text", ["lots", "80XB", "-3GB", "0GB", ""])
def test_bad_memory_amounts_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--device-memory: .* is not an amount of memory; .* e\.g\. 80GB"):
        parse_memory(text)


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(tiny_grid("mem", steps=4))
    return path


def test_plan_shows_each_runs_memory(grid, tmp_home) -> None:
    out = CliRunner().invoke(app, ["plan", str(grid), "--format", "json"])
    assert out.exit_code == 0, out.output
    runs = json.loads(out.stdout)["runs"]
    by_variant = {r["variant"]: r for r in runs}
    assert set(by_variant) == {"baseline", "sdpa-elementwise"}
    base, gated = by_variant["baseline"], by_variant["sdpa-elementwise"]
    assert 0 < base["memory_gb"] < gated["memory_gb"] < 1
    assert set(base["memory"]) == {"params", "grads", "optimizer", "activations", "temporaries", "total"}
    table = CliRunner().invoke(app, ["plan", str(grid)])
    assert table.exit_code == 0 and "memory" in table.stdout and " GB" in table.stdout
    fits = CliRunner().invoke(app, ["plan", str(grid), "--device-memory", "1GB"])
    assert fits.exit_code == 0, fits.output


@pytest.mark.parametrize("command", ["plan", "run"])
def test_runs_that_cannot_fit_are_refused_before_anything_starts(grid, tmp_home, command: str) -> None:
    out = CliRunner().invoke(app, [command, str(grid), "--device-memory", "2MB"])
    assert out.exit_code == 2, out.output
    line = out.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: --device-memory: 2 of 2 run(s) cannot fit in 0.00195 GB per device")
    assert (
        "(sdpa-elementwise, " in line
        and "the largest needs" in line
        and "cheapest fix for the largest" in line
    )
    assert list(tmp_home.iterdir()) == []  # no store, no run directory
    bad = CliRunner().invoke(app, [command, str(grid), "--device-memory", "eighty"])
    assert bad.exit_code == 2 and "'eighty' is not an amount of memory" in bad.output


def test_tune_and_library_callers_go_through_the_same_check(grid, tmp_home) -> None:
    """The check is the library's: ``ablate tune`` and a ``run_grid`` call refuse what ``ablate run`` refuses,
    with its one line, before anything is made."""
    from ablate.execute.executor import RunOptions
    from ablate.execute.grid_run import run_grid

    refused = CliRunner().invoke(app, ["run", str(grid), "--device-memory", "2MB"]).output.strip()
    tuned = CliRunner().invoke(app, ["tune", str(grid), "--low", "1e-4", "--high", "1e-2", "--trials", "1",
                                     "--device-memory", "2MB"])
    assert tuned.exit_code == 2, tuned.output
    assert tuned.output.strip() == refused
    with pytest.raises(ConfigError) as called:
        run_grid(grid, [], RunOptions(home=tmp_home, device_memory=parse_memory("2MB"), mlflow=False))
    assert f"error: {called.value}" == refused
    assert refused.startswith("error: --device-memory: 2 of 2 run(s) cannot fit in 0.00195 GB per device")
    assert list(tmp_home.iterdir()) == []  # no store, no study, no run directory


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_estimate_bounds_the_cuda_peak(checkpointing: bool) -> None:
    """On a GPU (bench/gpu_check.sh runs it): bf16 autocast, the peak torch's allocator reports over the
    second step. Wider bounds than on CPU: cuBLAS workspaces and the allocator's 512-byte rounding are not
    estimated."""
    from ablate.runner.module import param_groups
    from ablate.runner.parallel import checkpoint_blocks

    cfg = apply_variant(ModelConfig(preset="small"), "sdpa-elementwise")
    rows, seq_len = 8, 512
    torch.manual_seed(0)
    model = build_model(cfg).cuda()
    if checkpointing:
        checkpoint_blocks(model)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    idx = torch.randint(0, cfg.vocab_size, (rows, seq_len + 1), device="cuda")
    for step in range(2):
        if step == 1:  # the optimizer state exists from here on
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(idx[:, :-1])
            loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    measured = torch.cuda.max_memory_allocated()
    est = estimate_memory(cfg, seq_len=seq_len, rows=rows, precision="bf16-mixed",
                          checkpointing=checkpointing, gpu=True)
    error = est.total / measured - 1
    print(f"cuda {'checkpointed' if checkpointing else 'plain'}: measured {measured / 2**20:.1f} MiB, "
          f"estimated {est.total / 2**20:.1f} MiB ({error:+.1%})")
    assert -0.10 <= error <= 0.25


@pytest.mark.parametrize(("arm", "args", "expected"), [
    # y [8, 64, 2 kv heads, 16] and the scores [8, 64, 2], fp32
    ("myattn:HeadGate", {"position": "G2"}, (8 * 64 * 2 * 16 + 8 * 64 * 2) * 4),
    ("myattn:HeadGate", {"position": "G1"}, (8 * 64 * 4 * 16 + 8 * 64 * 4) * 4),  # 4 q heads
    ("myattn:LayerScale", {}, 8 * 64 * 64 * 4),  # the scaled output a [8, 64, 64]; the scale is a parameter
], ids=["gate-G2", "gate-G1", "attn_out"])
def test_a_plugin_arm_counts_what_it_saves_for_backward(plugin_dir, arm, args, expected) -> None:
    from ablate.ablations.plugins import saved_bytes

    cfg = ModelConfig(preset="tiny", plugin=PluginArm(arm=arm, args=args))
    assert saved_bytes(cfg, rows=8, seq_len=64) == expected
    assert saved_bytes(cfg, rows=8, seq_len=64, half=True) == expected // 2  # bf16
    plain = estimate_memory(ModelConfig(preset="tiny"), seq_len=64, rows=8, accumulate=1, precision="32-true")
    est = estimate_memory(cfg, seq_len=64, rows=8, accumulate=1, precision="32-true")
    # w, grad, Adam 2
    params = (count_params(cfg).total - count_params(ModelConfig(preset="tiny")).total) * 4 * 4
    assert est.total - plain.total == pytest.approx(cfg.n_layers * expected + params, rel=0.02)


def test_a_plugin_arm_that_cannot_run_on_meta_counts_nothing_and_says_so(tmp_path, monkeypatch,
                                                                         caplog) -> None:
    from ablate.ablations.plugins import saved_bytes

    (tmp_path / "onhost.py").write_text('''
import torch
from pydantic import BaseModel
from torch import nn


class DataDependent(nn.Module):
    """A gate that reads a value back to the host: it cannot run on the meta device."""

    slot = "gate"
    position = "G1"

    class Args(BaseModel):
        pass

    def __init__(self, args, cfg):
        super().__init__()
        self.proj = nn.Linear(cfg.d_model, cfg.n_heads, bias=False)

    def forward(self, y, x):
        s = torch.sigmoid(self.proj(x))
        return y * float(s.mean().item()), s
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = ModelConfig(preset="tiny", plugin=PluginArm(arm="onhost:DataDependent"))
    with caplog.at_level("WARNING", logger="ablate.ablations.plugins"):
        assert saved_bytes(cfg, rows=8, seq_len=64) == 0
    assert len(caplog.records) == 1
    assert (
        caplog.records[0]
        .getMessage()
        .startswith("plugin arm onhost:DataDependent cannot run on the meta device (")
    )
    assert caplog.records[0].getMessage().endswith(
        "what it saves for the backward pass is not in the memory estimate")
