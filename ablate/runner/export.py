"""``ablate export``: a run directory's checkpoint as a Hugging Face folder: the weights
(``ablate.ablations.export`` picks the transformers class), the tokenizer the run trained with, and a model
card (``README.md``) with the variant, its config and its measured numbers.

The folder is assembled beside ``--out`` and moved in only when complete, so a refused or failed export leaves
nothing behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from ablate import layout
from ablate.ablations import apply_variant, get_variant
from ablate.ablations.config import ModelConfig
from ablate.ablations.export import QWEN3_NEXT, export_hf, hf_target
from ablate.config import RunConfig
from ablate.errors import UserInputError, one_of
from ablate.result import RESULT_FILE, read_result
from ablate.runner.checkpoints import load_run_model

CARD = "README.md"
# result.json summary keys shown first in the card, in this order; every other key follows, sorted
_CARD_KEYS = ("steps", "tokens", "train_loss", "val_ppl", "loss_spikes", "gate_score", "f_attn", "m_act",
              "params", "added_params", "tokens_per_s", "wall_s")


def export_run(home: str | os.PathLike[str], run_id: str, out: str | os.PathLike[str], *, fmt: str = "hf"
               ) -> tuple[str, str]:
    """Export run ``run_id`` (or the one run it begins) of ``home`` into ``out`` (``fmt``: hf); return the
    run's id and a line saying what was written."""
    if fmt != "hf":
        raise UserInputError(one_of(fmt, ["hf"], what="export format"))
    if Path(out).exists() and not Path(out).is_dir():
        raise UserInputError(f"--out {out}: exists and is not a folder")
    run_dir = layout.find_run_dir(home, run_id)  # a run id or its first characters, as show and diff take
    run_id = run_dir.name
    if (run_dir / RESULT_FILE).is_file() and (kind := read_result(run_dir).config.get("trainer")) is not None:
        raise UserInputError(f"run {run_id}: ablate export is for runs of ablate's own model; this run was "
                             f"trained by a {kind} trainer (its grid's trainer: section)")
    model, tokenizer, config = load_run_model(run_dir)
    cfg = apply_variant(config.model, config.variant)
    target = hf_target(cfg)  # refuses, before anything is written, what no transformers class can express
    with layout.atomic_dir(Path(out)) as tmp:
        export_hf(model, cfg, tmp, max_positions=config.data.seq_len, eos_id=tokenizer.eos_id)
        tokenizer.save_pretrained(tmp)
        (tmp / CARD).write_text(model_card(run_id, config, cfg, target, _summary(run_dir)))
        for path in tmp.iterdir():  # safetensors writes its file 0600: every file as its siblings are
            layout.default_mode(path)
    return run_id, f"{target}, tokenizer '{config.data.tokenizer}', model card {CARD}"


def _summary(run_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """``(status, summary)`` from the run's ``result.json``; None while it has not finished."""
    if not (run_dir / RESULT_FILE).is_file():
        return None
    result = read_result(run_dir)
    return result.status, result.summary


def _notes(cfg: ModelConfig, target: str) -> list[str]:
    """How the folder's architecture maps ablate's, where it is not a plain renaming."""
    if target != QWEN3_NEXT:
        return [f"Weights are ablate's under {target}'s names: the same function."]
    notes = [
        "The paper's G1 gate is Qwen3-Next's full-attention gate: `q_proj` emits, per head, the query rows "
        "then the gate rows (`[q_h ; g_h]`), and the attention output is multiplied by `sigmoid(gate)` "
        "before `o_proj`.",
        "Every layer is `full_attention` (no linear attention) and `partial_rotary_factor` is 1.0: every "
        "dimension of a head rotates (transformers would default it to 0.25).",
        "RMSNorm weights are stored as `w - 1`, because Qwen3-Next's norms scale by `1 + w`.",
    ]
    gate = cfg.gate  # Qwen3-Next holds the G1 gate
    if gate is not None and gate.granularity == "headwise":
        notes.append("**Headwise gate written as elementwise:** ablate's gate has one score per head; "
                     "Qwen3-Next's has one per head and dimension, so each head's gate row is repeated over "
                     f"its {cfg.head_dim} dimensions. The function is the same; fine-tuning in transformers "
                     "may let the rows drift apart, and the model is then no longer headwise.")
    if gate is not None and gate.shared:
        notes.append("**Head-shared gate written per head:** ablate averages the heads' gate logits; every "
                     "head's gate rows here are that average (the same function).")
    if cfg.is_moe:
        notes.append("Qwen3-Next's MoE block always has a shared expert: here it is zero-width, so it adds "
                     "nothing.")
    return notes


def model_card(run_id: str, config: RunConfig, cfg: ModelConfig, target: str,
               summary: tuple[str, dict[str, Any]] | None) -> str:
    """The folder's ``README.md``: what was trained, how it maps to ``target``, and what it measured."""
    variant = get_variant(config.variant)
    lines = [
        "---", "library_name: transformers", "tags: [ablate, gated-attention]", "---", "",
        f"# {config.variant} (ablate run `{run_id}`)", "",
        f"{variant.description[:1].upper()}{variant.description[1:]}. Trained with ablate, in an ablation "
        f"study of \"Gated Attention for Large Language Models\" (arXiv 2505.06708): preset `{cfg.preset}`, "
        f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} query / {cfg.n_kv_heads} key-value "
        f"heads of {cfg.head_dim}, {config.data.seq_len}-token context, seed "
        f"{config.seed}." + (f" Paper rows: {', '.join(variant.paper)}." if variant.paper else ""), "",
        f"## Architecture: `{target}`", "", *[f"- {n}" for n in _notes(cfg, target)], "",
        "## Tokenizer", "",
        f"`{config.data.tokenizer}`: `AutoTokenizer.from_pretrained` on this folder encodes text to the ids "
        "the run trained on (no special tokens are added); documents were separated by the end-of-text "
        "token.",
        "", "## Measured", "",
    ]
    if summary is None:
        lines.append("The run had not finished when this was exported: no measured numbers.")
    else:
        status, values = summary
        keys = [k for k in _CARD_KEYS if k in values] + sorted(k for k in values if k not in _CARD_KEYS)
        lines += [f"Status `{status}`. From the run's `result.json`:", "", "| metric | value |",
                  "| --- | --- |"]
        lines += [f"| {k} | {_fmt(values[k])} |" for k in keys]
    lines += ["", "## Run config", "", "```yaml",
              yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False).rstrip(), "```", "",
              "## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              'model = AutoModelForCausalLM.from_pretrained("<this folder>")',
              'tokenizer = AutoTokenizer.from_pretrained("<this folder>")', "```", "",
              "`lm_eval --model hf --model_args pretrained=<this folder>` scores it with "
              "lm-evaluation-harness.", ""]
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
