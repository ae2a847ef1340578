"""Run directories for the export and lm-eval tests (not collected by pytest): a checkpoint laid out as the
runner leaves it, with every weight drawn at O(1) scale so that a wrong weight mapping cannot hide under a
tolerance.

At the 0.02 init every gate score is ~0.5 and every logit ~0, so a swapped or mis-scaled tensor changes the
logits by less than 1e-4; here norm scales are 1 + 0.3 N(0, 1), embeddings N(0, 1), and every matrix
N(0, 1 / fan_in), which keeps activations, gate logits and logits O(1)..O(10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ablate.ablations import apply_variant, build_model
from ablate.config import RunConfig
from ablate.grid.ids import run_id as config_run_id
from ablate.layout import CHECKPOINT, run_dir
from ablate.result import RunResult, write_result


def o1_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Redraw every parameter of ``model`` at O(1) scale (in place); returns it in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norm scales (and any bias)
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # Linear weights are [out, in]; MoE stacks are [E, in, out]
                fan_in = p.shape[-2] if name.endswith(("ffn.gate_up", "ffn.down")) else p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)
    return model.eval()


def make_run(home: Path, *, variant: str = "baseline", model: dict[str, Any] | None = None,
             data: dict[str, Any] | None = None, summary: dict[str, Any] | None = None,
             seed: int = 0) -> tuple[str, torch.nn.Module, RunConfig]:
    """A run directory under ``home`` with an O(1)-weight checkpoint and, given ``summary``, a finished
    ``result.json``: ``(run_id, the model, its run config)``."""
    config = RunConfig(model={"preset": "tiny", **(model or {})}, variant=variant, data=data or {}, seed=seed)
    rid = config_run_id(config)
    torch.manual_seed(seed)
    net = o1_weights(build_model(apply_variant(config.model, config.variant)), seed)
    path = run_dir(home, rid) / CHECKPOINT
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
                "run_config": config.model_dump(mode="json")}, path)
    if summary is not None:
        write_result(RunResult(run_id=rid, config=config.model_dump(mode="json"), status="done",
                               summary=summary),
                     run_dir(home, rid))
    return rid, net, config
