"""A model's vocabulary from its tokenizer: how many ids a tokenizer can have, known from the config alone,
and the vocabulary a grid's run gets when it leaves ``model.vocab_size`` out."""

from __future__ import annotations

from collections.abc import Mapping

from ablate.ablations.presets import PRESETS

BYTE_IDS = 257  # the byte tokenizer: 256 bytes and an end-of-document id
# a vocabulary taken from the tokenizer is padded to this, as litgpt pads (faster matmuls)
VOCAB_MULTIPLE = 64


def padded_vocab(ids: int) -> int:
    """``ids`` rounded up to a multiple of ``VOCAB_MULTIPLE``.

    >>> padded_vocab(1000), padded_vocab(257), padded_vocab(320)
    (1024, 320, 320)
    """
    return -(-ids // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def tokenizer_ids(tokenizer: str, bpe_vocab_size: int) -> int | None:
    """The most ids a tokenizer can have, known from the config alone: ``byte`` 257, ``bpe`` its
    ``bpe_vocab_size``; None when only its files say (``hf:``) or it follows the model's (``bpe`` at 0)."""
    if tokenizer == "byte":
        return BYTE_IDS
    if tokenizer == "bpe" and bpe_vocab_size:
        return bpe_vocab_size
    return None


def vocab_from_tokenizer(raw: object) -> object:
    """A run config as a grid gives it (a mapping, before validation), with ``model.vocab_size`` taken from
    the tokenizer (padded: ``padded_vocab``) when the grid leaves it out and its preset's is too small for the
    tokenizer's ids (``bpe_vocab_size: 1000`` on the tiny preset's 320 gives 1024). The value is written into
    the config, so the run records it and its id covers it as if the grid had set it; a config whose model
    held its tokenizer is left as it is, so no id of a run that could train changes (the ones that change
    could not train: the runner refused their vocabulary)."""
    if not isinstance(raw, Mapping):
        return raw
    model, data = raw.get("model", {}), raw.get("data", {})
    if not isinstance(model, Mapping) or not isinstance(data, Mapping) or "vocab_size" in model:
        return raw
    name = model.get("preset", "tiny")
    preset = PRESETS.get(name, {}) if isinstance(name, str) else {}  # else validation says
    bpe = data.get("bpe_vocab_size", 0)
    # else validation says
    ids = tokenizer_ids(data.get("tokenizer", "byte"), bpe) if type(bpe) is int else None
    held = preset.get("vocab_size")
    if ids is None or not isinstance(held, int) or ids <= held:
        return raw
    return {**raw, "model": {**model, "vocab_size": padded_vocab(ids)}}
