"""Tokenizers: byte-level (the default, no files), a BPE trained on the run's training split and cached, or a
Hugging Face tokenizer by name when it is already on this machine (never downloaded).

All three share one small protocol, ``Tokenizer``: ``encode``, ``decode``, ``vocab_size``, ``eos_id`` and a
``name`` that identifies the exact vocabulary (it is part of every token-cache key). Documents are joined with
``eos_id`` after each one.

>>> tok = ByteTokenizer()
>>> tok.decode(tok.encode("héllo")), tok.vocab_size, tok.eos_id
('héllo', 257, 256)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from ablate.ablations.config import ModelConfig
from ablate.config import DataConfig, padded_vocab, tokenizer_ids
from ablate.errors import ConfigError, InputMissingError, did_you_mean
from ablate.layout import atomic_path
from ablate.runner.corpora import corpus_version, documents

if TYPE_CHECKING:
    import tokenizers
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
BPE_TRAIN_CHARS = 16_000_000  # text the BPE is trained on at most, split evenly over the training sources


@runtime_checkable
class Tokenizer(Protocol):
    """What the runner and the benchmark tasks need from a tokenizer."""

    name: str
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def save_pretrained(self, out: str | os.PathLike[str]) -> None: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, ``eos_id`` 256: needs no files, covers every text."""

    name = "byte"
    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def save_pretrained(self, out: str | os.PathLike[str]) -> None:
        """Write this tokenizer into ``out`` as ``tokenizers`` JSON that
        ``AutoTokenizer.from_pretrained(out)`` reads: a byte-level BPE without merges whose id for each byte
        is the byte's value, ``EOS`` 256. Text that spells ``EOS`` stays bytes (``split_special_tokens``), as
        here."""
        import tokenizers
        from tokenizers import decoders, models, pre_tokenizers
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        vocab = {char: byte for byte, char in bytes_to_unicode().items()} | {EOS: self.eos_id}
        tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([tokenizers.AddedToken(EOS, special=True)])
        _save_fast(tok, EOS, out, split_special_tokens=True)


def _save_fast(tok: tokenizers.Tokenizer, eos: str, out: str | os.PathLike[str], **kwargs: object) -> None:
    """Save a ``tokenizers.Tokenizer`` as a transformers fast tokenizer (``tokenizer.json`` + its config),
    with ``eos`` as the end-of-text and padding token."""
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos,
                            **kwargs).save_pretrained(str(out))


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` (a trained BPE) or a ``transformers`` tokenizer, behind the protocol."""

    def __init__(self, name: str, tok: tokenizers.Tokenizer | PreTrainedTokenizerBase, eos_id: int,
                 vocab_size: int):
        self.name, self._tok, self.eos_id, self.vocab_size = name, tok, eos_id, vocab_size

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        import tokenizers

        if isinstance(self._tok, tokenizers.Tokenizer):
            return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]
        return cast(list[list[int]], self._tok(texts, add_special_tokens=False)["input_ids"])  # transformers'

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids))

    def save_pretrained(self, out: str | os.PathLike[str]) -> None:
        """Write this tokenizer into ``out`` as ``AutoTokenizer.from_pretrained(out)`` reads it."""
        import tokenizers

        if isinstance(self._tok, tokenizers.Tokenizer):  # a trained BPE: its tokenizers JSON
            eos = self._tok.id_to_token(self.eos_id)
            assert eos is not None  # eos_id is the trained EOS token's id
            _save_fast(self._tok, eos, out)
        else:  # a Hugging Face tokenizer: itself
            self._tok.save_pretrained(str(out))


def get_tokenizer(data_cfg: DataConfig, model_cfg: ModelConfig,
                  cache_dir: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer ``data_cfg.tokenizer`` names, checked against the model's vocabulary.

    ``byte``; ``bpe`` (trained on the training split at ``bpe_vocab_size`` or the model's ``vocab_size``,
    cached as ``cache_dir/tokenizers/bpe-<hash>.json``, so every run of a grid shares one); ``hf:<name or
    path>`` (a Hugging Face tokenizer already in the local cache or a local folder; nothing is downloaded).
    """
    spec = data_cfg.tokenizer
    check_spec(spec)
    if spec == "byte":
        tok: Tokenizer = ByteTokenizer()
    elif spec == "bpe":
        tok = _bpe(data_cfg, data_cfg.bpe_vocab_size or model_cfg.vocab_size, Path(cache_dir))
    else:
        tok = _hf(spec[3:])
    check_vocab(tok.vocab_size, tok.name, model_cfg)
    return tok


def check_spec(spec: str) -> None:
    """``data.tokenizer`` names a tokenizer: ``byte``, ``bpe`` or ``hf:<name or folder>`` (exact case)."""
    if spec in ("byte", "bpe") or (spec.startswith("hf:") and len(spec) > 3):
        return
    raise ConfigError(f"unknown tokenizer {spec!r}{did_you_mean(spec.lower(), ['byte', 'bpe'])}; allowed: "
                      "'byte', 'bpe', 'hf:<name>'", where="data.tokenizer")


def check_vocab(ids: int, name: str, model_cfg: ModelConfig) -> None:
    """The model's embedding holds every id of the tokenizer ``name``."""
    if ids > model_cfg.vocab_size:
        raise ConfigError(
            f"tokenizer {name!r} has {'up to ' if name == 'bpe' else ''}{ids} ids but model.vocab_size is "
            f"{model_cfg.vocab_size}; set model.vocab_size >= {ids} ({padded_vocab(ids)} is a multiple of "
            "64), or leave it out for a byte or bpe tokenizer: ablate then takes "
            "that", where="model.vocab_size")


def check_tokenizer(data_cfg: DataConfig, model_cfg: ModelConfig) -> None:
    """What ``get_tokenizer`` would refuse, found without training or tokenizing anything: the name, a BPE's
    training text and size, an ``hf:`` tokenizer loaded from this machine's files, and the model's vocabulary
    holding its ids. The run's preflight (``runner.preflight.check_tokenizers``)."""
    check_spec(data_cfg.tokenizer)
    if data_cfg.tokenizer == "bpe":
        _bpe_can_train(data_cfg, data_cfg.bpe_vocab_size or model_cfg.vocab_size)
    ids = tokenizer_ids(data_cfg.tokenizer, data_cfg.bpe_vocab_size)
    if ids is None and data_cfg.tokenizer.startswith("hf:"):
        ids = _hf(data_cfg.tokenizer[3:]).vocab_size
    if ids is not None:
        check_vocab(ids, "bpe" if data_cfg.tokenizer == "bpe" else data_cfg.tokenizer, model_cfg)


def _bpe_can_train(data_cfg: DataConfig, vocab_size: int) -> None:
    if not [s for s in data_cfg.train if s.kind != "tokens"]:
        raise ConfigError("tokenizer 'bpe' needs a text source in data.train to learn from",
                          where="data.tokenizer")
    if vocab_size < 257:
        raise ConfigError(f"a byte-level BPE needs at least 257 ids, got {vocab_size}",
                          where="data.bpe_vocab_size")


def _bpe(data_cfg: DataConfig, vocab_size: int, cache_dir: Path) -> Tokenizer:
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    _bpe_can_train(data_cfg, vocab_size)
    text_sources = [s for s in data_cfg.train if s.kind != "tokens"]
    key = json.dumps([vocab_size, data_cfg.heldout_fraction, BPE_TRAIN_CHARS,
                      [(s.model_dump(mode="json", exclude={"fingerprint"}),
                        corpus_version(s)) for s in text_sources]],
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = cache_dir / "tokenizers" / f"bpe-{digest}.json"
    if not path.is_file():
        log.info("training a %d-id BPE on the training split -> %s", vocab_size, path)
        budget = BPE_TRAIN_CHARS // len(text_sources)

        def texts() -> Iterator[str]:
            for src in text_sources:
                used = 0
                for doc in documents(src, "train", data_cfg.heldout_fraction):
                    yield doc[: budget - used]
                    used += len(doc)
                    if used >= budget:  # endless streams stop here too
                        break

        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts(), trainer=trainer)
        with atomic_path(path) as tmp:
            tok.save(str(tmp))
    tok = tokenizers.Tokenizer.from_file(str(path))
    eos_id = tok.token_to_id(EOS)
    assert eos_id is not None  # EOS is the trainer's special token
    return HFTokenizer(f"bpe-{digest}", tok, eos_id, tok.get_vocab_size())


def _hf(name: str) -> Tokenizer:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InputMissingError(f"tokenizer {name!r} is not available locally (nothing is downloaded; put it "
                          f"in the Hugging Face cache or give a local folder): {exc.__class__.__name__}",
                          where="data.tokenizer") from None
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    if eos is None:
        raise ConfigError(f"tokenizer {name!r} has no end-of-text token", where="data.tokenizer")
    return HFTokenizer(f"hf:{name}", tok, int(eos), len(tok))
