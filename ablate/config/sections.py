"""The sections of a run's config: its data sources (``SourceConfig``), what it reads (``DataConfig``), how it
trains (``TrainConfig``) and what is measured after (``EvalConfig``). ``RunConfig`` (``ablate.config.run``)
holds one of each, with the model's section (``ablate.ablations.config.ModelConfig``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ablate.config.fields import Int, Strict, identity_field
from ablate.errors import one_of

BUILTIN_CORPORA = ("python-code", "python-docs", "arithmetic", "bigram-backcopy")


class SourceConfig(Strict):
    """One data source.

    - ``builtin``: ``name`` is ``python-code`` (the running Python's standard library source), ``python-docs``
      (its documentation text: pydoc topics and docstrings), ``arithmetic`` or ``bigram-backcopy`` (synthetic
      streams; see ``ablate.runner.corpora``).
    - ``text``: ``path`` is a file, directory or glob of text files.
    - ``jsonl``: ``path`` (file or glob) of JSON lines; ``field`` holds the text.
    - ``tokens``: ``path`` (file or glob) of flat pre-tokenized binary shards; ``dtype`` uint16 or uint32.
    - ``hf``: ``path`` is a Hugging Face ``datasets`` folder saved with ``save_to_disk``; ``field`` holds the
      text.
    - ``task``: ``name`` is an offline benchmark task whose examples are the stream. Its training rows start
      at an example (``[eos] + prompt + answer``, the following examples packed after it up to the row's end)
      and, with ``loss: answer`` (its default), only the answer tokens count in the loss.
    """

    kind: Literal["builtin", "text", "jsonl", "tokens", "hf", "task"] = Field(
        "builtin", description="where the text comes from: builtin (name), text, jsonl, tokens or hf (path), "
                               "task (name)")
    name: str | None = Field(None, description="builtin: the corpus; task: the benchmark task (mqar, "
                                               "niah-single@1k)")
    path: str | None = Field(None, description="text, jsonl, tokens: a file, a directory or a glob; hf: a "
                                               "folder saved with datasets' save_to_disk")
    field: str = Field("text", description="jsonl, hf: the key (column) that holds each document's text")
    dtype: Literal["uint16", "uint32"] = Field("uint16", description="tokens: the shards' token type")
    weight: float = Field(1.0, gt=0, description="mixture weight among the training sources")
    fingerprint: str | None = identity_field(
        "ablate.runner.fingerprints:fill_source",
        "filled by ablate when the grid is loaded (a grid file never sets it): the hash of what the source "
        "reads (its files' contents; a built-in corpus: the Python version and the standard library files it "
        "is read from; None for a synthetic stream or a task, which ablate's code makes). A relative path is "
        "made absolute at the same time.")
    loss: Literal["all", "answer"] = Field(
        None,  # type: ignore[arg-type]  # a sentinel: _loss_default resolves it by kind before validation
        description="which tokens of this source's training rows the loss is on: 'all' (every token) or "
                    "'answer' (only the answer tokens of task examples, as zoology trains MQAR: the rest of "
                    "the row is context). Default: 'answer' for a 'task' source, 'all' otherwise; 'answer' "
                    "needs a 'task' source. Held-out perplexity always scores every token.",
    )

    @model_validator(mode="before")
    @classmethod
    def _loss_default(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("loss") is None:
            data = {**data, "loss": "answer" if data.get("kind") == "task" else "all"}
        return data

    @model_validator(mode="after")
    def _needs(self) -> SourceConfig:
        if self.kind in ("builtin", "task") and not self.name:
            raise ValueError(f"a '{self.kind}' source needs 'name'")
        if self.kind in ("text", "jsonl", "tokens", "hf") and not self.path:
            raise ValueError(f"a '{self.kind}' source needs 'path'")
        if self.loss == "answer" and self.kind != "task":
            raise ValueError(f"loss 'answer' needs a 'task' source (a '{self.kind}' source has no answers); "
                             "use loss 'all'")
        if self.kind == "builtin" and self.name not in BUILTIN_CORPORA:
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


class DataConfig(Strict):
    """What the model reads: the training mixture, the named held-out sets, the tokenizer and sequence length.

    Built-in sources are split into train and held-out by a stable hash of each file, so a held-out set named
    after a built-in source never overlaps its training split.
    """

    train: list[SourceConfig] = Field(default_factory=_default_train, min_length=1)
    heldout: dict[str, SourceConfig] = Field(default_factory=_default_heldout)
    tokenizer: str = Field("byte",
                           description="'byte', 'bpe' (trained on the training split), or 'hf:<name>'")
    tokenizer_fingerprint: str | None = identity_field(
        "ablate.runner.fingerprints:fill_tokenizer",
        "filled by ablate when the grid is loaded: the hash of an 'hf:' tokenizer's files (a local folder's "
        "path is made absolute); None for 'byte', and for 'bpe', which is what it is trained from "
        "(data.train)")
    bpe_vocab_size: Int = Field(0, ge=0, description="BPE vocabulary; 0 = the model's vocab_size")
    seq_len: Int = Field(256, ge=8)
    row_start: Literal["random", "bos", "document"] = Field(
        "random",
        description="how a training row and a held-out window begin: 'random' (at any position of the "
                    "source), 'bos' (a fixed first token, the tokenizer's eos id, then seq_len tokens from "
                    "any position) or 'document' (at a document start: the eos before it, then the document "
                    "and those after it). A fixed first token is what attention sinks form on (Gu et al. "
                    "2024). Task sources always start at an example ([eos] + prompt + answer).",
    )
    heldout_fraction: float = Field(0.1, gt=0, lt=1, description="share of built-in files held out")
    stream_tokens: Int = Field(
        2_000_000, ge=1, description="tokens taken per split from an endless source (arithmetic, tasks)"
    )


class TrainConfig(Strict):
    """How the model is trained: AdamW, linear warm-up then cosine decay to ``lr * min_lr_ratio``.

    Weight decay applies to weight matrices only: embeddings (and a head tied to them; unless
    ``decay_embeddings``), norms and biases are not decayed. ``steps`` and every step number count optimizer
    steps; ``batch_size`` is the global batch (split evenly over ``devices``, and on each device into
    micro-batches of ``micro_batch_size`` rows whose gradients are accumulated: the step and its loss are the
    same, only the peak memory changes).
    """

    steps: Int = Field(300, ge=1)
    batch_size: Int = Field(16, ge=1)
    micro_batch_size: Int = Field(
        0, ge=0, description="rows per device per forward/backward; batch_size / (devices x "
                             "micro_batch_size) micro-batches are accumulated into one optimizer step (0 = "
                             "batch_size / devices: none)",
    )
    lr: float = Field(3e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_frac: float = Field(0.05, ge=0, lt=1, description="share of steps spent warming up")
    weight_decay: float = Field(0.1, ge=0)
    decay_embeddings: bool = Field(
        False, description="decay the token embedding (and a head tied to it) too, as AdamW with a single "
                           "parameter group does; otherwise only weight matrices are decayed")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, ge=0, description="max gradient norm; 0 = no clipping")
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = Field(
        "auto", description="'auto' = fp32 on CPU, bf16-mixed on GPU"
    )
    compile: bool = False
    checkpoint_every: Int = Field(100, ge=1)
    devices: Int = Field(1, ge=1)
    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "auto", description="'fsdp': parameters, gradients and optimizer state sharded over the devices "
                            "(FSDP2, one unit per decoder block); 'ddp' or 'auto': replicated"
    )
    activation_checkpointing: bool = Field(
        False, description="keep only each decoder block's input for the backward pass and recompute the "
                           "rest (less activation memory, about a third more compute)"
    )
    spike_window: Int = Field(50, ge=2, description="trailing steps a loss spike is measured against")
    spike_sigma: float = Field(6.0, gt=0,
                               description="a spike is a loss above mean + sigma * std of the window")
    diverge_factor: float = Field(2.0, gt=1, description="loss above factor x its best ...")
    diverge_patience: Int = Field(50, ge=1, description="... for this many steps ends the run as diverged")
    diverge_margin: float = Field(0.0, ge=0, description="... and only while at least this many nats above "
                                                         "its best (0: the factor alone; e.g. 0.5 for a loss "
                                                         "that falls near zero)")

    @model_validator(mode="after")
    def _batch_splits(self) -> TrainConfig:
        per_device, rest = divmod(self.batch_size, self.devices)
        if rest:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by devices {self.devices}")
        if self.strategy == "fsdp" and self.precision == "16-mixed":
            raise ValueError("precision '16-mixed' cannot shard (FSDP2 has no fp16 loss scaling here); use "
                             "'bf16-mixed' or '32-true' with strategy 'fsdp'")
        if self.micro_batch_size and per_device % self.micro_batch_size:
            raise ValueError(f"micro_batch_size {self.micro_batch_size} does not divide the per-device batch "
                             f"{per_device} (batch_size {self.batch_size} / devices {self.devices})")
        return self

    @property
    def accumulate(self) -> int:
        """Micro-batches per optimizer step on each device (1 = no gradient accumulation)."""
        return self.batch_size // self.devices // (self.micro_batch_size or self.batch_size // self.devices)


class EvalConfig(Strict):
    """What is measured after training, on held-out data, with fixed token budgets."""

    heldout_tokens: Int = Field(32768, ge=1, description="tokens scored per held-out set")
    probes: bool = True
    probe_tokens: Int = Field(4096, ge=1, description="held-out tokens the probes look at")
    hist_bins: Int = Field(20, ge=2, description="bins of the gate-score histogram on [0, 1]")
    benchmarks: list[str] = Field(default_factory=list, description="offline benchmark tasks to score")
    bench_multiples: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list,
        description="score benchmarks named without lengths at these multiples of the (last) training length",
    )
    yarn_factor: Annotated[float, Field(gt=1)] | Literal["auto"] | None = Field(
        None,
        description="also score benchmarks with YaRN RoPE scaling over the training length: a fixed factor "
                    "(the paper: 4), or 'auto' = each length / training length; None = no YaRN scoring",
    )
    every: Int = Field(0, ge=0,
                       description="evaluate val PPL every N steps during training (0 = only at the end)")


