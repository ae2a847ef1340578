"""A run directory's checkpoint back as a model: for export, lm-evaluation-harness and analysis.

``run_dir/checkpoints/last.ckpt`` is a Lightning checkpoint; its ``state_dict`` keys are the decoder's with a
``model.`` prefix, and it carries the resolved run config (``run_config``), so an unfinished run loads too. A
run with training stages loads as the stage of its checkpoint (``stage``), and the config returned is that
stage's effective config (``ablate.config.stage_configs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ablate.ablations import apply_variant, build_model, plugins
from ablate.config import RunConfig, stage_configs
from ablate.errors import RunError
from ablate.layout import CHECKPOINT
from ablate.result import RESULT_FILE, read_result
from ablate.runner.data import cache_dir_for
from ablate.runner.parallel import decoder_state
from ablate.runner.tokenizers import Tokenizer, get_tokenizer


def load_run_model(run_dir: str | Path, *, device: Any = "cpu") -> tuple[torch.nn.Module, Tokenizer,
                                                                         RunConfig]:
    """``(model in eval mode on device, tokenizer, run config)`` from a run directory's last checkpoint."""
    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise RunError(f"{run_dir}: no checkpoint at {CHECKPOINT} (the run has not trained yet)")
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if "run_config" in ckpt:
        config = RunConfig.model_validate(ckpt["run_config"])
    elif (run_dir / RESULT_FILE).is_file():
        config = RunConfig.model_validate(read_result(run_dir).config)
    else:
        raise RunError(f"{path}: the checkpoint holds no run config and there is no {RESULT_FILE} beside it")
    if ckpt.get("stage"):  # a later training stage: its own RoPE base (ablate.runner.stages)
        config = stage_configs(config)[int(ckpt["stage"])]
    model_cfg = apply_variant(config.model, config.variant)
    if model_cfg.plugin is not None:  # its module found where it was when the run trained, its code the same
        if ckpt.get("plugin_origin"):
            plugins.search(ckpt["plugin_origin"])
        plugins.check_version(model_cfg.plugin, str(run_dir))
    model = build_model(model_cfg)
    model.load_state_dict(decoder_state(path, model))  # a sharded checkpoint is read without a process group
    tokenizer = get_tokenizer(config.data, model_cfg, cache_dir_for(run_dir))
    return model.to(device).eval(), tokenizer, config
