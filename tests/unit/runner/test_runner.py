"""The runner end to end on the tiny preset: training, determinism, resuming, divergence, probes,
result.json."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ablate.config import RunConfig
from ablate.result import read_result
from ablate.runner import RunInterrupted, run_one
from ablate.runner.callbacks import RunMonitor
from ablate.runner.module import lr_factor
from ablate.stats.stability import DivergenceDetector, SpikeDetector

STEPS = 12


pytestmark = pytest.mark.usefixtures("module_cache")


def tiny(**over) -> RunConfig:
    """Arithmetic data (fast to generate), 12 steps of 4 x 32 tokens, a checkpoint every 4 steps."""
    base = {
        "model": {"preset": "tiny"},
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"math": {"kind": "builtin", "name": "arithmetic"}},
                 "seq_len": 32, "stream_tokens": 20_000},
        "train": {"steps": STEPS, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 4, "warmup_frac": 0.1},
        "eval": {"heldout_tokens": 256, "probe_tokens": 64, "hist_bins": 10, "every": 6},
    }
    for key, value in over.items():
        section, field = key.split("__") if "__" in key else (key, None)
        if field is None:
            base[section] = value
        else:
            base[section][field] = value
    return RunConfig.model_validate(base)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run that several tests compare against."""
    run_dir = tmp_path_factory.mktemp("ref")
    steps_seen = []
    result = run_one(tiny(), run_dir, run_id="ref", on_step=steps_seen.append)
    return result, run_dir, steps_seen


def test_tiny_run_trains_and_writes_a_complete_result(reference):
    result, run_dir, steps_seen = reference
    assert result.status == "done"
    losses = result.metrics["loss"]
    assert len(losses) == STEPS and result.metrics["step"] == list(range(STEPS))
    assert np.mean(losses[-3:]) < losses[0] - 0.5, losses  # the loss falls
    for curve in ("lr", "grad_norm", "tokens_per_s"):
        assert len(result.metrics[curve]) == STEPS and all(
            v is not None and v > 0 for v in result.metrics[curve]
        )
    assert result.metrics["lr"][0] == pytest.approx(1e-2 * lr_factor(0, tiny().train))
    assert [s["step"] for s in steps_seen] == list(range(STEPS))
    assert set(steps_seen[0]) == {"step", "loss", "lr", "grad_norm", "tokens_per_s"}
    assert result.metrics["val_step"] == [5, 11] and len(result.metrics["val_ppl"]) == 2  # eval.every = 6
    assert result.metrics["val_ppl"][-1] == pytest.approx(result.summary["val_ppl"])
    s = result.summary
    assert s["steps"] == STEPS and s["tokens"] == STEPS * 4 * 32
    assert s["train_loss"] == losses[-1]
    assert s["val_ppl"] == pytest.approx(s["ppl/math"]) and 1 < s["val_ppl"] < 257
    assert s["gate_score"] is None and 0 < s["f_attn"] < 1 and s["m_act"] > 0
    assert (
        s["massive_ratio"] > 1 and 0 <= s["massive_first"] <= 1 and len(result.probes["massive_first"]) == 2
    )
    assert s["massive_ratio"] == max(result.probes["massive_ratio"])
    assert s["params"] == 119168 and s["added_params"] == 0 and s["loss_spikes"] == 0
    assert s["tokens_per_s"] > 0 and s["wall_s"] > 0
    assert len(result.probes["f_attn"]) == 2 and result.histograms == {}
    # result.json: complete, reads back equal, no temporary files left beside it
    assert read_result(run_dir) == result
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "result.json"]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["last.ckpt"]


def test_same_config_twice_gives_identical_losses(reference, tmp_path):
    again = run_one(tiny(), tmp_path, run_id="again")
    assert again.metrics["loss"] == reference[0].metrics["loss"]
    assert again.metrics["grad_norm"] == reference[0].metrics["grad_norm"]
    assert again.summary["val_ppl"] == reference[0].summary["val_ppl"]


def test_crash_after_a_checkpoint_then_restart_reproduces_the_losses(reference, tmp_path):
    def crash(row):
        if row["step"] == 6:  # after the checkpoint at 4 steps, before the next at 8
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        run_one(tiny(), tmp_path, run_id="r", on_step=crash)
    assert not (tmp_path / "result.json").exists()  # a crash writes nothing
    resumed = run_one(tiny(), tmp_path, run_id="r")
    assert resumed.resumed_from == 4
    assert [(e.kind, e.step) for e in resumed.events] == [("resumed", 4)]
    assert resumed.metrics["loss"] == reference[0].metrics["loss"]
    assert resumed.metrics["val_ppl"] == reference[0].metrics["val_ppl"]
    assert resumed.metrics["step"] == list(range(STEPS))
    assert read_result(tmp_path).resumed_from == 4


def test_stop_event_saves_a_checkpoint_and_raises(reference, tmp_path):
    import threading

    stop = threading.Event()

    def stop_at_5(row):
        if row["step"] == 5:
            stop.set()

    with pytest.raises(RunInterrupted, match="stopped after step 6 of 12"):
        run_one(tiny(), tmp_path, run_id="s", on_step=stop_at_5, stop=stop)
    assert not (tmp_path / "result.json").exists()
    resumed = run_one(tiny(), tmp_path, run_id="s")
    assert resumed.resumed_from == 6
    assert resumed.metrics["loss"] == reference[0].metrics["loss"]


def test_absurd_lr_ends_diverged_not_crashed(tmp_path):
    cfg = tiny(train={"steps": 40, "batch_size": 4, "lr": 1e4, "warmup_frac": 0.0, "grad_clip": 0.0,
                      "diverge_patience": 3, "checkpoint_every": 100})
    result = run_one(cfg, tmp_path, run_id="d")
    assert result.status == "diverged"
    (event,) = [e for e in result.events if e.kind == "diverged"]
    assert event.step < 39 and result.summary["steps"] == event.step + 1
    assert "non-finite" in event.data["reason"] or "above 2 x best" in event.data["reason"]
    # a diverged run is not measured
    assert result.summary["val_ppl"] is None and result.summary["f_attn"] is None
    assert read_result(tmp_path).status == "diverged"


def test_spike_detector_finds_an_injected_spike():
    rng = np.random.default_rng(0)
    losses = list(3.0 - np.linspace(0, 1, 200) + rng.normal(0, 0.01, 200))
    losses[150] += 1.0  # the injected spike
    det = SpikeDetector(window=50, sigma=6.0)
    spikes = [s for i, x in enumerate(losses) if (s := det.update(i, x))]
    assert [s.step for s in spikes] == [150]
    assert spikes[0].loss == losses[150] and spikes[0].size > 6
    assert spikes[0].trend == pytest.approx(np.mean(losses[100:150]))
    # not judged before the window is full; a restored detector decides the same
    early = SpikeDetector(window=50, sigma=6.0)
    assert all(early.update(i, x) is None for i, x in enumerate([1.0] * 49 + [100.0]))
    a, b = SpikeDetector(10, 3.0), SpikeDetector(10, 3.0)
    for i, x in enumerate(losses[:100]):
        a.update(i, x)
    b.load_state_dict(a.state_dict())
    assert [a.update(i, x) for i, x in enumerate(losses[100:])] == [
        b.update(i, x) for i, x in enumerate(losses[100:])
    ]


def test_divergence_rule():
    d = DivergenceDetector(factor=2.0, patience=3)
    assert [d.update(x) for x in (4.0, 1.0, 2.5, 2.5, 1.5, 2.5, 2.5)] == [None] * 7  # streak reset by 1.5
    assert d.update(2.5) == "loss 2.5 above 2 x best 1 for 3 steps"
    assert DivergenceDetector(2.0, 50).update(math.inf) == "non-finite loss inf"


def test_divergence_margin_ignores_noise_on_a_loss_near_zero():
    """An answer-only loss at ~1e-4 doubles by noise alone: with a margin it is not diverged; a real blow-up
    is."""
    noise = [1e-4, 2.5e-4, 3e-4, 2.2e-4, 4e-4]
    plain = DivergenceDetector(2.0, 3)
    reasons = [plain.update(x) for x in noise]  # the misfire: noise alone ends the run
    assert reasons[:4] == [None, None, None, "loss 0.00022 above 2 x best 0.0001 for 3 steps"]
    kept = DivergenceDetector(2.0, 3, margin=0.5)
    assert [kept.update(x) for x in noise * 20] == [None] * 100
    assert [kept.update(x) for x in (2.0, 3.0, 4.0)][-1] == (
        "loss 4 above 2 x best 0.0001 (and 0.5 above it) for 3 steps")


def test_divergence_rule_is_the_configured_one():
    train = RunConfig.model_validate({"train": {"diverge_factor": 3, "diverge_patience": 7,
                                                "diverge_margin": 0.25}}).train
    d = DivergenceDetector.for_run(train)
    assert (d.factor, d.patience, d.margin) == (3, 7, 0.25)
    with pytest.raises(ValueError, match="diverge_margin"):
        RunConfig.model_validate({"train": {"diverge_margin": -1}})


@pytest.mark.parametrize("variant", ["baseline", "sdpa-elementwise"])
def test_probes_on_a_model_with_known_attention(variant):
    """Zero query weights make every attention row uniform over the causal prefix: query t gives 1/(t+1) to
    the first token. A zero gate projection makes every sigmoid gate score exactly 0.5."""
    from ablate.ablations import apply_variant, build_model
    from ablate.runner.evaluate import probe

    cfg = apply_variant(tiny().model, variant)
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():
        for block in model.blocks:
            for w in block.attn.q_proj.parameters():  # and the G1 gate's rows: they are fused into q_proj
                w.zero_()
    T = 16
    windows = np.random.default_rng(0).integers(0, 256, size=(3, T + 1))
    p = probe(model, windows, hist_bins=10, device=torch.device("cpu"))
    expected = np.mean([1 / (t + 1) for t in range(1, T)])
    assert p.layers["f_attn"] == pytest.approx([expected] * 2, rel=1e-5)
    assert p.summary()["f_attn"] == pytest.approx(expected, rel=1e-5)
    assert all(m > 0 for m in p.layers["m_act"]) and len(p.edges) == 11
    if variant == "baseline":
        assert p.layers["gate_score"] == [None, None] and p.summary()["gate_score"] is None
        assert p.layers["mean_abs_post"] == p.layers["mean_abs_pre"]
        assert p.layers["frac_below_1e-2_scaled"] == [None, None] and p.histograms == {}
    else:
        assert p.layers["gate_score"] == pytest.approx([0.5, 0.5])
        assert p.layers["mean_abs_post"] == pytest.approx([0.5 * v for v in p.layers["mean_abs_pre"]],
                                                          rel=1e-5)
        assert p.layers["frac_below_1e-2_scaled"] == pytest.approx(p.layers["frac_below_1e-2_post"])
        # 0.5 falls in bin [0.5, 0.6)
        assert p.histograms["gate_score"] == [[0.0] * 5 + [1.0] + [0.0] * 4] * 2


def test_monitor_state_round_trips():
    mon = RunMonitor(tiny(), ckpt_path=None)
    mon.metrics["loss"].append(1.0)
    mon.spikes.update(0, 1.0)
    other = RunMonitor(tiny(), ckpt_path=None)
    other.load_state_dict(mon.state_dict())
    assert other.metrics["loss"] == [1.0] and list(other.spikes.history) == [1.0]


def test_moe_aux_loss_is_added_to_the_training_loss():
    from ablate.ablations import build_model
    from ablate.runner.module import LitDecoder, param_groups

    cfg = tiny(model={"preset": "tiny-moe"})
    torch.manual_seed(0)
    model = build_model(cfg.model)
    lit = LitDecoder(model, cfg.train)
    tokens = torch.randint(0, 256, (2, 17))
    total = lit.training_step({"step": 0, "tokens": tokens}, 0)
    out = model(tokens[:, :-1])
    assert out.aux_loss.item() > 0
    assert total.item() == pytest.approx(lit.last_loss.item() + out.aux_loss.item())
    # with a loss mask: the mean over the masked targets of the batch, the aux loss still added
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[0, 3:5] = mask[1, 10:13] = True
    masked = lit.training_step({"step": 0, "tokens": tokens, "mask": mask}, 0)
    every = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten(),
                                              reduction="none")
    assert lit.last_loss.item() == pytest.approx(every[mask.flatten()].mean().item(), rel=1e-5)
    assert masked.item() == pytest.approx(lit.last_loss.item() + out.aux_loss.item(), rel=1e-5)
    decay, no_decay = param_groups(model, 0.1)
    assert model.embed.weight in no_decay["params"] and all(p.ndim >= 2 for p in decay["params"])
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == sum(
        p.numel() for p in model.parameters()
    )


def test_task_source_and_benchmarks(tmp_path):
    cfg = tiny(data={"train": [{"kind": "task", "name": "mqar"}],
                     "heldout": {"mqar": {"kind": "task", "name": "mqar"}}, "seq_len": 32,
                     "stream_tokens": 5_000},
               train={"steps": 2, "batch_size": 2},
               eval={"heldout_tokens": 64, "probes": False, "benchmarks": ["mqar@64"]})
    result = run_one(cfg, tmp_path, run_id="t")
    s = result.summary
    assert result.status == "done" and s["f_attn"] is None and result.probes == {}
    assert 0 <= s["bench/mqar@64"] <= 100 and s["bench/mqar"] == s["bench/mqar@64"]
    assert s["ppl/mqar"] == s["val_ppl"]


def test_load_run_model_gives_back_the_trained_model(reference):
    from ablate.runner.checkpoints import load_run_model
    from ablate.runner.data import cache_dir_for, heldout_windows, token_array
    from ablate.runner.evaluate import perplexity

    result, run_dir, _ = reference
    model, tok, config = load_run_model(run_dir)
    assert config == tiny() and tok.name == "byte" and not model.training
    arr = token_array(config.data.heldout["math"], "heldout", tok, config.data, cache_dir_for(run_dir))
    windows = heldout_windows(arr, config.eval.heldout_tokens, config.data.seq_len)
    ppl = perplexity(model, windows, batch_size=config.train.batch_size, device=torch.device("cpu"))
    assert ppl == pytest.approx(result.summary["ppl/math"], rel=1e-6)


def test_a_run_cut_during_evaluation_resumes_at_its_end(reference, tmp_path):
    import shutil

    result, run_dir, _ = reference
    # trained to the end, no result.json yet
    shutil.copytree(run_dir / "checkpoints", tmp_path / "checkpoints")
    again = run_one(tiny(), tmp_path, run_id="ref")
    assert again.resumed_from == STEPS and again.metrics["loss"] == result.metrics["loss"]
    assert again.summary["val_ppl"] == result.summary["val_ppl"] and again.probes == result.probes
    assert [(e.kind, e.step) for e in again.events] == [("resumed", STEPS)]


def test_lr_schedule_warms_up_then_decays_to_the_minimum():
    from ablate.config import TrainConfig

    cfg = TrainConfig(steps=100, warmup_frac=0.1, min_lr_ratio=0.1)
    f = [lr_factor(s, cfg) for s in range(100)]
    assert f[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert f[10] == 1.0 and f[99] == pytest.approx(0.1) and f[54] > 0.55 > f[55]  # half-way: (1 + 0.1) / 2
    assert all(a >= b for a, b in zip(f[10:-1], f[11:], strict=True))  # monotone decay after warm-up


@pytest.mark.parametrize("seed", [0, 1])
def test_answer_only_loss_learns_recall_end_to_end(tmp_path, seed):
    """A ``kind: task`` source trains on its answer tokens only (its default ``loss: answer``): the tiny
    preset learns one-pair MQAR (chance: 1%) within ~60 steps; with the loss on every token it stays near 0-2%
    even after 200 steps."""
    cfg = tiny(seed=seed, data={"train": [{"kind": "task", "name": "mqar@16"}], "heldout": {}, "seq_len": 32,
                                "stream_tokens": 100_000},
               train={"steps": 150, "batch_size": 32, "lr": 3e-3, "checkpoint_every": 1000},
               eval={"probes": False, "benchmarks": ["mqar@16"]})
    assert cfg.data.train[0].loss == "answer"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add overhead
    try:
        result = run_one(cfg, tmp_path, run_id="recall")
    finally:
        torch.set_num_threads(threads)
    s = result.summary
    assert result.status == "done" and s["tokens"] == 150 * 32 * 32
    assert s["bench/mqar"] >= 50.0, s
    assert result.metrics["loss"][-1] < 0.5 * result.metrics["loss"][0]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_gradients_are_freed_right_after_the_optimizer_step(accumulate):
    """Lightning zeroes gradients between a step's forward and its backward; the module frees them after the
    optimizer's step, so no step's forward (the memory peak) runs beside the last step's gradients, while
    micro-batches of one step still accumulate into them."""
    import lightning as L
    from torch.utils.data import DataLoader

    from ablate.ablations import build_model
    from ablate.runner.module import LitDecoder

    cfg = tiny(train={"steps": 3, "batch_size": 2 * accumulate, "micro_batch_size": 2})
    assert cfg.train.accumulate == accumulate
    torch.manual_seed(0)
    lit = LitDecoder(build_model(cfg.model), cfg.train)
    seen: list[tuple[int, bool]] = []

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append((int(batch["micro"]), any(p.grad is not None for p in pl_module.parameters())))

    batches = [{"step": s, "micro": m, "tokens": torch.randint(0, 256, (2, 17))}
               for s in range(3) for m in range(accumulate)]
    trainer = L.Trainer(max_steps=3, accumulate_grad_batches=accumulate, callbacks=[Watch()], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1)
    trainer.fit(lit, DataLoader(batches, batch_size=None))
    assert len(seen) == 3 * accumulate
    # a step's first micro-batch starts with no gradient held; a later one adds to the earlier's
    assert seen == [(m, m > 0) for _ in range(3) for m in range(accumulate)]
