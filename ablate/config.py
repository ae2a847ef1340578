"""``RunConfig``: the one complete description of a run (model, data, train, eval, variant, seed).

Everything that changes a run's behaviour is a field here, with a documented default. The resolved config
(``run.model_dump(mode="json")``) is what the run id hashes, what MLflow records as params and what the store
keeps. Importing this module never imports torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ablate.ablations.config import ModelConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


BUILTIN_CORPORA = ("python-code", "python-docs", "arithmetic")


class SourceConfig(_Strict):
    """One data source.

    - ``builtin``: ``name`` is ``python-code`` (the running Python's standard library source), ``python-docs``
      (its documentation text: pydoc topics and docstrings) or ``arithmetic`` (a synthetic stream).
    - ``text``: ``path`` is a file, directory or glob of text files.
    - ``jsonl``: ``path`` (file or glob) of JSON lines; ``field`` holds the text.
    - ``tokens``: ``path`` (file or glob) of flat pre-tokenized binary shards; ``dtype`` uint16 or uint32.
    - ``hf``: ``path`` is a Hugging Face ``datasets`` folder saved with ``save_to_disk``; ``field`` holds the text.
    - ``task``: ``name`` is an offline benchmark task whose examples are the stream.
    """

    kind: Literal["builtin", "text", "jsonl", "tokens", "hf", "task"] = "builtin"
    name: str | None = None
    path: str | None = None
    field: str = "text"
    dtype: Literal["uint16", "uint32"] = "uint16"
    weight: float = Field(1.0, gt=0, description="mixture weight among the training sources")

    @model_validator(mode="after")
    def _needs(self) -> SourceConfig:
        if self.kind in ("builtin", "task") and not self.name:
            raise ValueError(f"a '{self.kind}' source needs 'name'")
        if self.kind in ("text", "jsonl", "tokens", "hf") and not self.path:
            raise ValueError(f"a '{self.kind}' source needs 'path'")
        if self.kind == "builtin" and self.name not in BUILTIN_CORPORA:
            from ablate.errors import one_of

            raise ValueError(one_of(self.name, BUILTIN_CORPORA, what="built-in corpus"))
        return self


def _default_train() -> list[SourceConfig]:
    return [
        SourceConfig(kind="builtin", name="python-docs", weight=1.0),
        SourceConfig(kind="builtin", name="python-code", weight=1.0),
    ]


def _default_heldout() -> dict[str, SourceConfig]:
    return {
        "prose": SourceConfig(kind="builtin", name="python-docs"),
        "code": SourceConfig(kind="builtin", name="python-code"),
    }


class DataConfig(_Strict):
    """What the model reads: the training mixture, the named held-out sets, the tokenizer and sequence length.

    Built-in sources are split into train and held-out by a stable hash of each file, so a held-out set named
    after a built-in source never overlaps its training split.
    """

    train: list[SourceConfig] = Field(default_factory=_default_train, min_length=1)
    heldout: dict[str, SourceConfig] = Field(default_factory=_default_heldout)
    tokenizer: str = Field("byte", description="'byte', 'bpe' (trained on the training split), or 'hf:<name>'")
    bpe_vocab_size: int = Field(0, ge=0, description="BPE vocabulary; 0 = the model's vocab_size")
    seq_len: int = Field(256, ge=8)
    heldout_fraction: float = Field(0.1, gt=0, lt=1, description="share of built-in files held out")
    stream_tokens: int = Field(
        2_000_000, ge=1, description="tokens taken per split from an endless source (arithmetic, tasks)"
    )


class TrainConfig(_Strict):
    """How the model is trained: AdamW, linear warm-up then cosine decay to ``lr * min_lr_ratio``.

    Weight decay applies to weight matrices only: embeddings (and a head tied to them), norms and biases are
    not decayed. ``steps`` and every step number count optimizer steps; ``batch_size`` is the global batch
    (split evenly over ``devices``).
    """

    steps: int = Field(300, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_frac: float = Field(0.05, ge=0, lt=1, description="share of steps spent warming up")
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0, description="max gradient norm; 0 = no clipping")
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = Field(
        "auto", description="'auto' = fp32 on CPU, bf16-mixed on GPU"
    )
    compile: bool = False
    checkpoint_every: int = Field(100, ge=1)
    devices: int = Field(1, ge=1)
    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    spike_window: int = Field(50, ge=2, description="trailing steps a loss spike is measured against")
    spike_sigma: float = Field(6.0, gt=0, description="a spike is a loss above mean + sigma * std of the window")
    diverge_factor: float = Field(2.0, gt=1, description="loss above factor x its best ...")
    diverge_patience: int = Field(50, ge=1, description="... for this many steps ends the run as diverged")


class EvalConfig(_Strict):
    """What is measured after training, on held-out data, with fixed token budgets."""

    heldout_tokens: int = Field(32768, ge=1, description="tokens scored per held-out set")
    probes: bool = True
    probe_tokens: int = Field(4096, ge=1, description="held-out tokens the probes look at")
    hist_bins: int = Field(20, ge=2, description="bins of the gate-score histogram on [0, 1]")
    benchmarks: list[str] = Field(default_factory=list, description="offline benchmark tasks to score")
    every: int = Field(0, ge=0, description="evaluate val PPL every N steps during training (0 = only at the end)")


class RunConfig(_Strict):
    """One run: the complete, validated description. ``variant`` names an entry of the catalogue."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    variant: str = "baseline"
    seed: int = Field(0, ge=0)
