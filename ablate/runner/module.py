"""The Lightning module: next-token loss (plus the MoE auxiliary losses), AdamW, warm-up + cosine schedule,
gradient clipping that also measures the gradient norm.

A step's batch may come as several micro-batches (``train.micro_batch_size``): Lightning accumulates their
gradients, dividing each returned loss by their number, so the step's gradient is that of the whole batch.
A batch with a ``"mask"`` (``[b, T]`` bool over the targets; ``loss: answer`` task sources) is scored on the
masked targets only: the loss is the mean over the masked targets of the whole global batch (each
micro-batch's sum is divided by the global batch's ``"count"``, times the world size and the number of
micro-batches, so the accumulation's mean, DDP's gradient mean and the monitor's loss mean give exactly that).
A batch without a mask is scored on every target.

Weight decay applies to matrices (``ndim >= 2``) except embeddings (and a head tied to them); norms, biases,
gate biases and embeddings are not decayed, the usual GPT-2/nanoGPT grouping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import nn
from torch.optim import Optimizer

from ablate.ablations.gates import QueryGateProjection, split_query_gate
from ablate.ablations.model import Decoder, ModelOutput
from ablate.config import TrainConfig
from ablate.runner.parallel import checkpoint_blocks, is_sharded, shard_model

if TYPE_CHECKING:
    from lightning.pytorch.core.optimizer import LightningOptimizer
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """LR multiplier at ``step`` (0-based): linear warm-up over ``warmup_frac * steps`` steps, then cosine
    decay from 1 to ``min_lr_ratio`` at the last step.

    >>> cfg = TrainConfig(steps=100, warmup_frac=0.1, min_lr_ratio=0.1)
    >>> [round(lr_factor(s, cfg), 3) for s in (0, 9, 10, 99)]
    [0.1, 1.0, 1.0, 0.1]
    """
    warmup = int(cfg.warmup_frac * cfg.steps)
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, cfg.steps - 1 - warmup))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def param_groups(model: nn.Module, weight_decay: float, *,
                 decay_embeddings: bool = False) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices, none on norms and biases, and on embeddings only with
    ``decay_embeddings`` (each parameter once)."""
    embeddings = (
        set() if decay_embeddings else {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    )
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (decay if p.ndim >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def stack_per_head_gates(checkpoint: dict[str, Any], model: nn.Module, *,
                         decay_embeddings: bool = False) -> int:
    """A Lightning checkpoint from before the contiguous G1 layout (a fused gate's rows per head under
    ``q_proj.weight``), reordered in place to ``QueryGateProjection``'s rows: the weights and the AdamW
    moments, so that the run resumes exactly. Returns how many projections it reordered (0: a checkpoint of
    today)."""
    state, n = checkpoint.get("state_dict", {}), 0
    flat = [p for group in param_groups(model, 0.0,
                                        decay_embeddings=decay_embeddings) for p in group["params"]]
    index = {id(p): i for i, p in enumerate(flat)}  # the optimizer's state is keyed by this order
    for name, module in model.named_modules():
        old = f"model.{name}.weight"
        if not isinstance(module, QueryGateProjection) or old not in state:
            continue
        rows = torch.arange(state[old].shape[0])[:, None]
        order = torch.cat(split_query_gate(rows, module.rows[0] // module.head_dim, module.head_dim))[:, 0]
        state[f"model.{name}.proj.weight"] = state.pop(old)[order]
        for opt in checkpoint.get("optimizer_states", []):
            moments = opt.get("state", {}).get(index[id(module.proj.weight)], {})
            for key, value in moments.items():
                if torch.is_tensor(value) and value.shape[:1] == order.shape:  # exp_avg, exp_avg_sq; not step
                    moments[key] = value[order]
        n += 1
    return n


class LitDecoder(L.LightningModule):
    """Trains ``model`` on ``{"step", "tokens": [B, T + 1]}`` batches; keeps the last loss and gradient norm
    as tensors (read once per step by the monitor, after the optimizer step, so the GPU is not stalled
    mid-step)."""

    def __init__(self, model: Decoder, train_cfg: TrainConfig, *, compile: bool = False,
                 run_config: dict[str, object] | None = None, stage: int = 0, precision: str = "32-true",
                 plugin_origin: str | None = None):
        super().__init__()
        self.run_config = run_config  # saved in every checkpoint, so a run directory loads on its own
        # and where its plugin arm's module was imported from (ablate.ablations.plugins.origin), so it loads
        # without the grid file
        self.plugin_origin = plugin_origin
        self.stage = stage  # the training stage (ablate.runner.stages) the checkpoints belong to
        self.model = model
        self.compile_steps, self.precision = compile, precision
        # configure_model compiles it (or, sharded, each block)
        self.step_fn: Callable[[torch.Tensor], ModelOutput] = model.forward
        self.train_cfg = train_cfg
        self.last_loss: torch.Tensor | None = None
        self.last_grad_norm: torch.Tensor | None = None
        self._configured = False

    def configure_model(self) -> None:
        """Activation checkpointing, then (sharded runs) FSDP2 per block and on the root, and compilation;
        once."""
        if self._configured:
            return
        self._configured = True
        if self.train_cfg.activation_checkpointing:
            checkpoint_blocks(self.model)
        if is_sharded(self.train_cfg, self.trainer.world_size):
            mesh = cast("DeviceMesh", self.device_mesh)  # sharded: Lightning's ModelParallelStrategy made it
            shard_model(self.model, mesh["data_parallel"], precision=self.precision,
                        compile=self.compile_steps)
            # through the module: FSDP's hooks gather the root's parameters
            self.step_fn = self.model.__call__
        elif self.compile_steps:
            # a bound method, not a module attribute: the compiled wrapper must not enter the state dict twice
            self.step_fn = torch.compile(self.model.forward)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens = batch["tokens"]  # (b, T + 1): one micro-batch of this rank's rows
        out = self.step_fn(tokens[:, :-1])
        logits, targets = out.logits.flatten(0, 1).float(), tokens[:, 1:].flatten()
        mask = batch.get("mask")  # (b, T) bool over the targets, or None: every target counts
        if mask is None:
            loss = F.cross_entropy(logits, targets)
        # the masked targets' sum over the global batch's count, scaled back up by the means taken after it
        else:
            losses = F.cross_entropy(logits, targets, reduction="none")
            world = self.trainer.world_size if self._trainer is not None else 1
            count = batch["count"] if "count" in batch else mask.sum()  # a lone batch: its own count
            scale = world * self.train_cfg.accumulate / count.clamp_min(1)
            loss = (losses * mask.flatten().to(losses.dtype)).sum() * scale
        # the step's loss: the mean over its micro-batches (Lightning divides what is returned by their
        # number)
        micro = int(batch.get("micro", 0))
        # sharded: reduce-scatter once, after the last one
        if hasattr(self.model, "set_requires_gradient_sync"):
            cast("FSDPModule", self.model).set_requires_gradient_sync(micro + 1 == self.train_cfg.accumulate)
        part = loss.detach() / self.train_cfg.accumulate
        self.last_loss = part if micro == 0 else cast(torch.Tensor, self.last_loss) + part  # set by micro 0
        return loss + out.aux_loss

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        cfg = self.train_cfg
        opt = torch.optim.AdamW(param_groups(self.model, cfg.weight_decay,
                                             decay_embeddings=cfg.decay_embeddings),
                                lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                eps=cfg.eps)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer | LightningOptimizer,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Lightning's step, then the gradients freed at once. Lightning zeroes them only between the next
        step's forward and its backward, so a step's gradients (4 bytes a parameter) stayed alive through the
        next forward, at the step's memory peak: 6.4 of the 49.0 GiB of the dense 1.7B baseline at sequence
        length 4096 on an H200 (``bench/gpu_memory_holders.py``), which the memory plan does not count."""
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        optimizer.zero_grad(set_to_none=True)

    def configure_gradient_clipping(self, optimizer: Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        max_norm = self.train_cfg.grad_clip or math.inf  # 0 = no clipping, but the norm is still measured
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        # sharded gradients: each rank's partial norm, reduced over the ranks
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        self.last_grad_norm = norm

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.run_config is not None:
            checkpoint["run_config"] = self.run_config
        if self.plugin_origin is not None:
            checkpoint["plugin_origin"] = self.plugin_origin
        checkpoint["stage"] = self.stage
        checkpoint["rng"] = {"torch": torch.get_rng_state(),
                             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        stack_per_head_gates(checkpoint, self.model, decay_embeddings=self.train_cfg.decay_embeddings)
        rng = checkpoint.get("rng") or {}
        if rng.get("torch") is not None:
            torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
