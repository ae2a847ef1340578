"""One run, end to end: data -> model -> Lightning training (resumable) -> held-out PPL, probes, benchmarks ->
``result.json``.

The run directory holds ``checkpoints/last.ckpt`` (model, optimizer, scheduler, RNG, loop position and the
monitor's record so far) and, once finished, ``result.json``. A restarted run resumes from the checkpoint and
ends with exactly the losses of an uninterrupted run (on CPU); the data needs no state for that, because the
batch at step t is a function of (seed, t) only. A run with training stages (``RunConfig.stages``, context
extension) trains them in turn; ``ablate.runner.stages`` says how they hand over and how steps are numbered.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import socket
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from ablate.ablations import added_params, apply_variant, build_model, count_params, plugins
from ablate.ablations.flops import flops_per_token
from ablate.ablations.memory import resolved_precision
from ablate.config import RunConfig, TrainConfig
from ablate.errors import RunInterrupted
from ablate.layout import CHECKPOINT
from ablate.provenance import collect
from ablate.result import RunEvent, RunResult, write_result
from ablate.runner.callbacks import RunMonitor
from ablate.runner.data import Batches, cache_dir_for, heldout_windows, load_data, row_bos
from ablate.runner.evaluate import perplexity, probe, probe_windows
from ablate.runner.fingerprints import Fingerprints
from ablate.runner.launch import local_ranks, node_count, ranks_exist
from ablate.runner.module import LitDecoder
from ablate.runner.parallel import full_state, is_sharded, resume_path, strategy_for
from ablate.runner.stages import (
    Stage,
    benchmark_scores,
    final_checkpoint,
    finish_stage,
    plan_stages,
    stage_start,
    start_point,
)
from ablate.runner.tokenizers import Tokenizer, get_tokenizer
from ablate.stats.stability import DivergenceDetector, SpikeDetector

log = logging.getLogger(__name__)

BENCH_SEED = 0  # benchmark examples are the same for every run (and every run seed) of a grid


class StepBatches(IterableDataset[dict[str, int | torch.Tensor]]):
    """Yields, for t = start .. steps - 1, this rank's rows of batch ``offset + t`` as ``accumulate``
    micro-batches ``{"step": offset + t, "micro": i, "tokens": [rows / world / accumulate, T + 1]}``
    (``offset``: the global number of a later training stage's first step), plus ``"mask"`` (the rows' loss
    mask over ``tokens[:, 1:]``) and ``"count"`` (the masked targets of the whole global batch) when a
    training source has ``loss: answer``."""

    def __init__(self, batches: Batches, start: int, steps: int, rank: int = 0, world: int = 1,
                 offset: int = 0, accumulate: int = 1):
        self.batches, self.start, self.steps, self.rank, self.world = batches, start, steps, rank, world
        self.offset, self.accumulate = offset, accumulate

    def __iter__(self) -> Iterator[dict[str, int | torch.Tensor]]:
        for t in range(self.offset + self.start, self.offset + self.steps):
            rows, mask = self.batches.rows(t)
            mine = rows[self.rank:: self.world]
            size = len(mine) // self.accumulate
            for i in range(self.accumulate):
                tokens = torch.from_numpy(mine[i * size:(i + 1) * size])
                item: dict[str, int | torch.Tensor] = {"step": t, "micro": i, "tokens": tokens}
                if mask is not None:
                    part = mask[self.rank:: self.world][i * size:(i + 1) * size]
                    item["mask"] = torch.from_numpy(np.ascontiguousarray(part))
                    item["count"] = torch.tensor(float(mask.sum()))
                yield item


def checkpoint_step(path: Path) -> int:
    """The number of optimizer steps a checkpoint holds (within its training stage)."""
    return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"])


@dataclass
class _Trained:
    """A stage's outcome: what the evaluation after the last stage needs."""

    model: torch.nn.Module
    trainer: L.Trainer
    monitor: RunMonitor
    precision: str
    heldout: dict[str, np.ndarray]
    fit_s: float


InputCheck = Callable[[RunConfig, Fingerprints], None]  # raises when a run's data is not what its id says


def run_one(config: RunConfig, run_dir: str | os.PathLike[str], *, run_id: str,
            on_step: Callable[[Mapping[str, float | None]], None] | None = None,
            stop: threading.Event | None = None, callbacks: Sequence[L.Callback] = (),
            check_inputs: InputCheck | None = None) -> RunResult:
    """Train, evaluate and probe ``config`` in ``run_dir``; write ``run_dir/result.json`` atomically.

    Resumes from ``run_dir/checkpoints/last.ckpt`` when present (``resumed_from`` = its step, plus a
    ``resumed`` event). ``on_step(dict(step, loss, lr, grad_norm, tokens_per_s))`` is called after every step
    on rank 0 (with ``val_ppl`` and the held-out scores added on each evaluation step of ``eval.every``).
    Setting ``stop`` saves a checkpoint at the current step and raises ``RunInterrupted``. A run whose loss
    diverges ends with status ``diverged`` (no evaluation); a crash writes nothing and re-raises.
    ``callbacks``: extra Lightning callbacks, called after the run's own monitor in every hook.
    ``check_inputs(config, fingerprints)``: before training, raises when the data is not what the run's id
    says (the executors pass ``ablate.grid.identity.check_current``: the grid sits above the runner).

    With ``config.stages`` the stages train one after the other, each from the previous one's final weights;
    step numbers are global across stages, and evaluation follows the last stage (``ablate.runner.stages``).

    ``train.devices > 1``: one process per device. Started here (``ablate.runner.launch``: this process is
    rank 0) unless a launcher started them (Slurm's ``srun``, torchrun); only rank 0 writes ``result.json``.
    """
    if config.train.devices > 1 and not ranks_exist():
        job = {"run_id": run_id, "config": config.model_dump(mode="json")}
        with local_ranks(config.train.devices, Path(run_dir), job):
            return _run_one(config, run_dir, run_id=run_id, on_step=on_step, stop=stop, callbacks=callbacks,
                            check_inputs=check_inputs)
    return _run_one(config, run_dir, run_id=run_id, on_step=on_step, stop=stop, callbacks=callbacks,
                    check_inputs=check_inputs)


def _same_inputs(config: RunConfig, cache_dir: Path, check_inputs: InputCheck | None) -> None:
    """The data is what the run's id says (``check_inputs``), else a RunError; the fingerprints kept."""
    fingerprints = Fingerprints(cache_dir)
    if check_inputs is not None:
        check_inputs(config, fingerprints)
    fingerprints.save()


def _run_one(config: RunConfig, run_dir: str | os.PathLike[str], *, run_id: str,
             on_step: Callable[[Mapping[str, float | None]], None] | None, stop: threading.Event | None,
             callbacks: Sequence[L.Callback], check_inputs: InputCheck | None) -> RunResult:
    t_start = time.perf_counter()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _quiet_lightning()
    stages = plan_stages(config)
    first, resume = start_point(run_dir, stages)
    _same_inputs(config, cache_dir_for(run_dir), check_inputs)
    tokenizer = get_tokenizer(config.data, apply_variant(config.model, config.variant),
                              cache_dir_for(run_dir))
    ckpt = run_dir / CHECKPOINT
    resumed_from = None
    if resume:
        resumed_from = stages[first].first_step + checkpoint_step(ckpt)
    elif first:
        resumed_from = stages[first].first_step  # restarted between two stages
    fit_s = 0.0
    for stage in stages[first:]:
        trained = _train_stage(stage, config, run_dir, tokenizer, resume=resume and stage.index == first,
                               resumed_from=resumed_from if stage.index == first else None, started=started,
                               on_step=on_step, stop=stop, callbacks=callbacks)
        fit_s += trained.fit_s
        monitor, trainer = trained.monitor, trained.trainer
        if monitor.interrupted_at is not None:
            raise RunInterrupted(f"stopped after step {stage.first_step + monitor.interrupted_at} of "
                                 f"{stages[-1].end}; checkpoint saved in {ckpt}")
        if monitor.diverged_at is not None:
            break
        if stage.index < len(stages) - 1:
            if trainer.is_global_zero:
                finish_stage(run_dir, stage.index)
            trainer.strategy.barrier()
    if resumed_from is not None and not any(
        e.kind == "resumed" and e.step == resumed_from for e in monitor.events
    ):
        # the checkpoint was at the last step
        monitor.events.append(RunEvent(kind="resumed", step=resumed_from))

    final = stage.config
    model, precision, heldout = trained.model, trained.precision, trained.heldout
    if is_sharded(final.train, trainer.world_size):  # evaluated whole, on rank 0
        state = full_state(model)  # collective: every rank takes part, rank 0 receives
        if trainer.is_global_zero:
            model = build_model(apply_variant(final.model, final.variant))
            model.load_state_dict(state)
    gpu = torch.cuda.is_available()
    status = "diverged" if monitor.diverged_at is not None else "done"
    device = torch.device("cuda", trainer.local_rank) if gpu else torch.device("cpu")
    model.to(device)
    summary = _train_summary(config, stages, monitor)
    probes = None
    if status == "done" and trainer.is_global_zero:
        summary.update(_evaluate(final, model, heldout, device, precision))
        if final.eval.probes and heldout:
            probes = probe(model, probe_windows(heldout, final.eval.probe_tokens, final.data.seq_len),
                           hist_bins=final.eval.hist_bins, device=device, precision=precision)
            summary.update(probes.summary())
        if final.eval.benchmarks:
            summary.update(benchmark_scores(model, tokenizer, final, seed=BENCH_SEED, device=device))
    for key in ("val_ppl", "gate_score", "f_attn", "m_act"):
        summary.setdefault(key, None)
    wall = monitor.train_wall_s + (time.perf_counter() - t_start - fit_s)
    summary["wall_s"] = round(wall, 3)
    device_name = torch.cuda.get_device_name(device) if gpu else "cpu"
    result = RunResult(
        run_id=run_id, config=config.model_dump(mode="json"), status=status, summary=summary,
        metrics=monitor.metrics, probes=probes.layers if probes else {},
        histograms=probes.histograms if probes else {}, histogram_edges=probes.edges if probes else [],
        events=sorted(monitor.events, key=lambda e: e.step), resumed_from=resumed_from,
        started=monitor.started, finished=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(), device=device_name,
        provenance=collect(device_name, plugin_init=getattr(model, "plugin_init", None)),
    )
    if trainer.is_global_zero:
        write_result(result, run_dir)
    return result


def _train_stage(stage: Stage, config: RunConfig, run_dir: Path, tokenizer: Tokenizer, *, resume: bool,
                 resumed_from: int | None, started: str,
                 on_step: Callable[[Mapping[str, float | None]], None] | None, stop: threading.Event | None,
                 callbacks: Sequence[L.Callback]) -> _Trained:
    """Train one stage: resumed from ``last.ckpt``, or started from the previous stage's final checkpoint
    (stage 0: from the init)."""
    cfg = stage.config
    tc, dc = cfg.train, cfg.data
    model_cfg = apply_variant(cfg.model, cfg.variant)
    data = load_data(dc, batch_size=tc.batch_size, seed=config.seed, vocab_size=model_cfg.vocab_size,
                     tokenizer=tokenizer, cache_dir=cache_dir_for(run_dir))
    bos = row_bos(dc, tokenizer)
    heldout = {name: heldout_windows(arr, cfg.eval.heldout_tokens, dc.seq_len, bos=bos)
               for name, arr in data.heldout.items()}

    gpu = torch.cuda.is_available()
    precision = resolved_precision(tc.precision, gpu)
    nodes = node_count()
    strategy, trainer_precision = strategy_for(tc.model_copy(update={"precision": precision}), nodes=nodes)
    torch.manual_seed(config.seed)
    model = build_model(model_cfg, seed=config.seed)
    lit = LitDecoder(model, tc, compile=tc.compile, run_config=config.model_dump(mode="json"),
                     stage=stage.index, precision=precision,
                     plugin_origin=plugins.origin(model_cfg.plugin.arm) if model_cfg.plugin else None)

    ckpt = run_dir / CHECKPOINT
    trainer = L.Trainer(
        accelerator="gpu" if gpu else "cpu", devices=tc.devices // nodes, num_nodes=nodes, strategy=strategy,
        precision=trainer_precision, max_steps=tc.steps, max_epochs=-1, accumulate_grad_batches=tc.accumulate,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, use_distributed_sampler=False, default_root_dir=str(run_dir),
    )

    def val_scores() -> dict[str, float]:
        dev = lit.device
        ppl = [perplexity(model, w, batch_size=eval_rows(tc), device=dev, precision=precision)
               for w in heldout.values()]
        return {"val_ppl": float(np.mean(ppl))} if ppl else {}

    monitor = RunMonitor(cfg, ckpt, on_step=on_step, stop=stop, evaluate=val_scores,
                         step_offset=stage.first_step)
    monitor.started, monitor.resumed_from = started, resumed_from
    if stage.index and not resume:  # a later stage: the previous one's final weights and the record so far
        state, record = stage_start(final_checkpoint(run_dir, stage.index - 1), monitor.state_key, model)
        model.load_state_dict(state)
        if record is not None:
            monitor.load_state_dict(record)
        # a new length, data or schedule moves the loss: a new trend for spikes, a new best for divergence
        monitor.spikes = SpikeDetector(tc.spike_window, tc.spike_sigma)
        monitor.divergence = DivergenceDetector.for_run(tc)
    trainer.callbacks.append(monitor)  # type: ignore[attr-defined]  # Lightning sets it, undeclared
    # extra Lightning callbacks (e.g. tune's pruning), run after the monitor
    trainer.callbacks.extend(callbacks)  # type: ignore[attr-defined]  # as above
    done = checkpoint_step(ckpt) if resume else 0
    dataset = StepBatches(data.train, done, tc.steps, trainer.global_rank, trainer.world_size,
                          offset=stage.first_step, accumulate=tc.accumulate)
    loader = DataLoader(dataset, batch_size=None, pin_memory=gpu)
    t_fit = time.perf_counter()
    trainer.fit(lit, train_dataloaders=loader, ckpt_path=str(resume_path(ckpt)) if resume else None)
    return _Trained(model, trainer, monitor, precision, heldout, time.perf_counter() - t_fit)


def _train_summary(config: RunConfig, stages: list[Stage], monitor: RunMonitor) -> dict[str,
                                                                                        float | int | None]:
    losses = monitor.metrics["loss"]
    tps = [v for v in monitor.metrics["tokens_per_s"] if v is not None]
    steps = monitor.metrics["step"]
    tokens = [st.config.train.batch_size * st.config.data.seq_len
              * sum(s is not None and st.first_step <= s < st.end for s in steps) for st in stages]
    model = apply_variant(config.model, config.variant)
    return {
        "steps": len(steps),
        "tokens": sum(tokens),
        "flops": float(sum(n * flops_per_token(model, st.config.data.seq_len) for n, st in zip(tokens, stages,
                                                                                                strict=True))),
        "train_loss": losses[-1] if losses else None,
        "loss_spikes": sum(e.kind == "loss_spike" for e in monitor.events),
        "tokens_per_s": statistics.median(tps) if tps else None,
        "params": count_params(apply_variant(config.model, config.variant)).total,
        "added_params": added_params(config.model, config.variant),
    }


def eval_rows(tc: TrainConfig) -> int:
    """Rows per forward pass when scoring: a training micro-batch's, which is known to fit in memory."""
    return tc.micro_batch_size or tc.batch_size // tc.devices


def _evaluate(config: RunConfig, model: nn.Module, heldout: dict[str, np.ndarray], device: torch.device,
              precision: str) -> dict[str, float | None]:
    ppl = {f"ppl/{name}": perplexity(model, windows, batch_size=eval_rows(config.train), device=device,
                                     precision=precision) for name, windows in heldout.items()}
    out: dict[str, float | None] = dict(ppl)
    if heldout:
        vals = list(ppl.values())
        out["val_ppl"] = float(np.mean(vals)) if all(map(math.isfinite, vals)) else None
    return out


def _quiet_lightning() -> None:
    """Lightning's banner lines and hints about workers are noise in a run's log."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*(IterableDataset|mid-epoch|fault-tolerant|srun|LeafSpec).*")
