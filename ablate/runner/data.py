"""Token arrays and batches: every source becomes a flat array of token ids, and the batch at step t is a pure
function of (seed, t).

- A text source is tokenized once (documents joined by ``eos_id``) and cached as ``.npy`` under
  ``cache_dir/tokens/`` (key: source config, split, tokenizer, corpus version), then memory-mapped; under a
  lock beside it, so that workers starting together on one source tokenize it once (the others wait, then read
  it).
- A ``tokens`` source memory-maps flat ``uint16``/``uint32`` shards: nanoGPT's headerless ``.bin`` files, or
  modded-nanogpt's (a 256 x int32 header: magic 20240520, version, token count, then the tokens).
- An endless source (arithmetic, a task) is cut at ``data.stream_tokens`` tokens per split.
- A ``task`` source's training split is a stream of whole examples, each ``[eos] + prompt + answer`` (as
  ``tasks.scoring.encode_example`` encodes them for scoring), with the positions where examples start and a
  mask of the answer tokens, cached beside the tokens. Its rows start at an example start (never mid-example);
  the examples after it are packed into the rest of the row (no padding), the last one cut at the row's end.
  With ``loss: answer`` only the answer tokens of the row (of every example in it) are loss targets; the
  held-out split of a task source is plain text, scored on every token.
- Row b of the batch at step t: the rng seeded with ``(seed, t)`` picks a source by mixture weight, then a
  window start uniformly among that source's ``seq_len + 1``-token windows (for a task source: among the
  example starts whose row fits). No state is carried from step to step, so a run resumed at step t reads
  exactly what an uninterrupted run would.
- ``data.row_start`` says where a row begins (training rows and held-out windows alike; task sources always
  start at an example): ``random`` anywhere; ``bos`` with a fixed first token (the tokenizer's eos id)
  followed by a ``seq_len``-token window from anywhere; ``document`` at the eos that precedes a document (the
  source's example starts are then its eos positions), the following documents packed after it.
- ``Batches.rows(t)`` gives the tokens and, when a source has ``loss: answer``, the ``[B, seq_len]`` loss mask
  over the targets ``tokens[:, 1:]`` (True everywhere on rows of the other sources).
- Held-out sets are scored on fixed windows spread evenly over the set (``heldout_windows``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ablate import layout
from ablate.config import DataConfig, SourceConfig
from ablate.errors import ConfigError, RunError
from ablate.layout import atomic_path, file_lock
from ablate.runner.corpora import Split, corpus_version, documents, is_stream, task_examples_of, user_files
from ablate.runner.tasks.scoring import encode_example
from ablate.runner.tokenizers import ByteTokenizer, Tokenizer

log = logging.getLogger(__name__)

MODDED_NANOGPT_MAGIC = 20240520
_HEADER_INTS = 256


def cache_dir_for(run_dir: Path) -> Path:
    """Where tokenizers and token arrays are cached: ``$ABLATE_CACHE``, else ``<home>/cache`` for a run
    directory laid out as ``<home>/runs/<run_id>``, else ``$ABLATE_HOME/cache``, else ``run_dir/cache``."""
    if os.environ.get("ABLATE_CACHE"):
        return Path(os.environ["ABLATE_CACHE"])
    if run_dir.parent.name == layout.RUNS_DIR:
        return run_dir.parent.parent / "cache"
    if os.environ.get("ABLATE_HOME"):
        return Path(os.environ["ABLATE_HOME"]) / "cache"
    return run_dir / "cache"


class TokenArray:
    """One source's tokens as one or more flat segments (arrays or memory maps), addressed by window.

    With ``starts`` (one segment only; the sorted positions where examples start) windows start only there;
    with ``mask`` (bool, as long as the tokens) ``mask_windows`` gives the loss mask of those windows.
    """

    def __init__(self, segments: list[np.ndarray], label: str, *, starts: np.ndarray | None = None,
                 mask: np.ndarray | None = None):
        self.segments = [s for s in segments if len(s)]
        self.label = label
        self.n_tokens = int(sum(len(s) for s in self.segments))
        if starts is not None and len(self.segments) > 1:
            raise ValueError("example starts need a single segment")
        self.starts, self.mask = starts, mask

    def n_windows(self, length: int) -> int:
        """How many distinct start positions a ``length``-token window has (never crossing a segment end)."""
        if self.starts is not None:
            return int(np.searchsorted(self.starts, self.n_tokens - length, side="right"))
        return int(sum(max(0, len(s) - length + 1) for s in self.segments))

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``[len(starts), length]`` int64 windows; ``starts`` index the ``n_windows(length)`` positions."""
        if self.starts is not None:
            pos = self.starts[np.asarray(starts, dtype=np.int64)].astype(np.int64)
            return cast(np.ndarray, self.segments[0][pos[:, None] + np.arange(length)].astype(np.int64))
        counts = np.array([max(0, len(s) - length + 1) for s in self.segments])
        bounds = np.cumsum(counts)
        starts = np.asarray(starts, dtype=np.int64)
        seg_of = np.searchsorted(bounds, starts, side="right")
        offsets = starts - np.concatenate([[0], bounds])[seg_of]
        out: np.ndarray = np.empty((len(starts), length), dtype=np.int64)
        for seg in np.unique(seg_of):
            rows = np.flatnonzero(seg_of == seg)
            out[rows] = self.segments[seg][offsets[rows, None] + np.arange(length)]  # (rows, length) gather
        return out

    def mask_windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``[len(starts), length]`` bool: the loss mask of ``windows(starts, length)`` (all True without
        one)."""
        if self.mask is None:
            return np.ones((len(starts), length), dtype=bool)
        assert self.starts is not None  # a mask comes with its examples' starts (_example_array)
        pos = self.starts[np.asarray(starts, dtype=np.int64)].astype(np.int64)
        return cast(np.ndarray, self.mask[pos[:, None] + np.arange(length)].astype(bool))


def read_shard(path: Path, dtype: str) -> np.ndarray:
    """A flat token shard as a read-only memory map, skipping modded-nanogpt's 256-int32 header when
    present."""
    size = path.stat().st_size
    item = np.dtype(dtype).itemsize
    if size >= _HEADER_INTS * 4:
        header = np.fromfile(path, dtype=np.int32, count=3)
        if header[0] == MODDED_NANOGPT_MAGIC:
            n = int(header[2])
            if _HEADER_INTS * 4 + n * item > size:
                raise ConfigError(f"{path}: header says {n} tokens but the file is {size} bytes",
                                  where="data.source.path")
            return np.memmap(path, dtype=dtype, mode="r", offset=_HEADER_INTS * 4, shape=(n,))
    if size % item:
        raise ConfigError(f"{path}: {size} bytes is not a whole number of {dtype} tokens; wrong dtype?",
                          where="data.source.dtype")
    return np.memmap(path, dtype=dtype, mode="r") if size else np.zeros(0, dtype=dtype)


def token_array(src: SourceConfig, split: Split, tok: Tokenizer, data_cfg: DataConfig,
                cache_dir: Path) -> TokenArray:
    """The tokens of ``src`` for ``split``: shards memory-mapped, text tokenized once and cached."""
    label = src.name or src.path or src.kind
    if src.kind == "tokens":
        shards = [read_shard(p, src.dtype) for p in user_files(src)]
        if data_cfg.row_start == "document":
            if len(shards) > 1:
                raise ConfigError(f"row_start 'document' needs one token shard, {label!r} has {len(shards)}; "
                                  "join them or use row_start 'bos'", where="data.row_start")
            return TokenArray(shards, label, starts=np.flatnonzero(shards[0] == tok.eos_id))
        return TokenArray(shards, label)
    budget = data_cfg.stream_tokens if is_stream(src) else None
    examples = src.kind == "task" and split == "train"
    key = json.dumps([src.model_dump(mode="json", exclude={"weight", "loss", "fingerprint"}), split,
                      data_cfg.heldout_fraction,
                      tok.name, budget, corpus_version(src)] + (["examples"] if examples else []),
                      sort_keys=True)
    path = cache_dir / "tokens" / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.npy"
    lock = path.with_suffix(".lock")  # workers on one source: one tokenizes it, the others wait and read it
    if examples:
        with file_lock(lock):
            return _example_array(src, tok, budget, path, label)
    with file_lock(lock):
        if not path.is_file():
            arr = _tokenize(documents(src, split, data_cfg.heldout_fraction), tok, budget)
            log.info("tokenized %s (%s): %d tokens -> %s", label, split, len(arr), path)
            with atomic_path(path) as tmp:
                np.save(tmp, arr)
    tokens = np.load(path, mmap_mode="r")
    if data_cfg.row_start == "document":  # rows start at the eos before a document
        return TokenArray([tokens], label, starts=np.flatnonzero(tokens == tok.eos_id))
    return TokenArray([tokens], label)


def _tokenize(docs: Iterable[str], tok: Tokenizer, budget: int | None) -> np.ndarray:
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
    parts: list[np.ndarray] = []
    total, chunk = 0, list[str]()

    eos = np.array([tok.eos_id], dtype=dtype)

    def flush() -> int:
        n = 0
        if isinstance(tok, ByteTokenizer):  # fast path: the bytes are the ids
            encoded: Sequence[np.ndarray | list[int]] = [np.frombuffer(doc.encode("utf-8"), dtype=np.uint8)
                                                         for doc in chunk]
        else:
            encoded = tok.encode_batch(chunk)
        for ids in encoded:
            parts.append(np.asarray(ids, dtype=dtype))
            parts.append(eos)
            n += len(ids) + 1
        chunk.clear()
        return n

    for doc in docs:
        chunk.append(doc)
        if len(chunk) == 256:
            total += flush()
            if budget is not None and total >= budget:
                break
    if chunk:
        total += flush()
    arr = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return arr[:budget] if budget is not None else arr


def _example_array(src: SourceConfig, tok: Tokenizer, budget: int | None, path: Path,
                   label: str) -> TokenArray:
    """A task source's training split: whole examples back to back, their starts and answer mask (cached as
    ``<key>.npy``, ``<key>.starts.npy``, ``<key>.mask.npy``; the tokens are written last)."""
    starts_path, mask_path = path.with_suffix(".starts.npy"), path.with_suffix(".mask.npy")
    if not path.is_file():
        dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
        ids: list[int] = []
        mask: list[bool] = []
        starts: list[int] = []
        for ex in task_examples_of(src, "train"):
            prompt, answer = encode_example(tok, ex)
            if budget is not None and len(ids) + len(prompt) + len(answer) > budget and starts:
                break
            starts.append(len(ids))
            ids += prompt + answer
            mask += [False] * len(prompt) + [True] * len(answer)
        log.info("encoded %s (train): %d examples, %d tokens -> %s", label, len(starts), len(ids), path)
        for p, arr in ((starts_path, np.asarray(starts, dtype=np.int64)),
                       (mask_path, np.asarray(mask, dtype=bool)), (path, np.asarray(ids, dtype=dtype))):
            with atomic_path(p) as tmp:
                np.save(tmp, arr)
    return TokenArray([np.load(path, mmap_mode="r")], label, starts=np.load(starts_path),
                      mask=np.load(mask_path, mmap_mode="r") if src.loss == "answer" else None)


class Batches:
    """The training mixture: ``batch(t)`` is ``[batch_size, seq_len + 1]`` int64, a pure function of (seed,
    t).

    With ``bos`` (a token id) a row of a source without example starts is ``bos`` then a ``seq_len``-token
    window.
    """

    def __init__(self, sources: list[TokenArray], weights: list[float], *, seq_len: int, batch_size: int,
                 seed: int, vocab_size: int, bos: int | None = None):
        self.sources, self.seq_len, self.batch_size, self.seed = sources, seq_len, batch_size, seed
        self.vocab_size, self.bos = vocab_size, bos
        self.p = np.asarray(weights, dtype=np.float64) / sum(weights)
        self.n_windows = np.array([s.n_windows(self._length(s)) for s in sources], dtype=np.int64)
        for s, n in zip(sources, self.n_windows, strict=True):
            if n < 1:
                raise ConfigError(f"training source {s.label!r} has {s.n_tokens} tokens, fewer than "
                                  f"seq_len + 1 = {seq_len + 1}", where="data.train")
        self.masked = any(s.mask is not None for s in sources)  # does any row have a loss mask?
        for s in sources:
            if s.mask is not None and s.starts is not None and len(s.starts) > 1:
                first = int(s.starts[1]) - int(s.starts[0])
                if first > seq_len + 1:
                    log.warning("training source %r: an example is %d tokens, longer than seq_len + 1 = %d; "
                                "rows cut it before its answer, which then carries no "
                                "loss", s.label, first, seq_len + 1)

    def _length(self, src: TokenArray) -> int:
        """The window a row of ``src`` reads: one token shorter when the row begins with ``bos``."""
        return self.seq_len + 1 - (self.bos is not None and src.starts is None)

    def batch(self, step: int) -> np.ndarray:
        """The rows of step ``step``; the same (seed, step) always gives the same rows."""
        return self.rows(step)[0]

    def rows(self, step: int) -> tuple[np.ndarray, np.ndarray | None]:
        """``(tokens [B, seq_len + 1] int64, loss mask [B, seq_len] bool over tokens[:, 1:], or None when
        every target counts)`` of step ``step``, a pure function of (seed, step)."""
        rng = np.random.default_rng([self.seed, step])
        which = rng.choice(len(self.sources), size=self.batch_size, p=self.p)
        starts = rng.integers(0, self.n_windows[which])
        out: np.ndarray = np.empty((self.batch_size, self.seq_len + 1), dtype=np.int64)
        mask: np.ndarray | None = np.ones((self.batch_size, self.seq_len + 1),
                                          dtype=bool) if self.masked else None
        for i, src in enumerate(self.sources):
            rows = np.flatnonzero(which == i)
            if len(rows):
                out[rows, -self._length(src):] = src.windows(starts[rows], self._length(src))
                if self._length(src) == self.seq_len:
                    out[rows, 0] = self.bos
                if mask is not None and src.mask is not None:
                    mask[rows] = src.mask_windows(starts[rows], self.seq_len + 1)
        if out.max() >= self.vocab_size:
            raise RunError(f"step {step}: token id {int(out.max())} >= model.vocab_size {self.vocab_size}; "
                           "the token shards were made with a larger vocabulary")
        return out, (np.ascontiguousarray(mask[:, 1:]) if mask is not None else None)


def heldout_windows(arr: TokenArray, n_tokens: int, seq_len: int, *, bos: int | None = None) -> np.ndarray:
    """``[N, seq_len + 1]`` fixed windows spread evenly over a held-out set, N = ceil(n_tokens / seq_len),
    at most as many as fit without overlap; with ``bos`` (and no example starts) each is ``bos`` then a
    ``seq_len``-token window, as the training rows are."""
    length = seq_len + 1 - (bos is not None and arr.starts is None)
    fit = arr.n_tokens // length
    if fit < 1 or arr.n_windows(length) < 1:
        raise ConfigError(f"held-out set {arr.label!r} has {arr.n_tokens} tokens, fewer than seq_len + 1 = "
                          f"{length}", where="data.heldout")
    n = min(-(-n_tokens // seq_len), fit)
    starts = np.linspace(0, arr.n_windows(length) - 1, n).astype(np.int64)
    windows = arr.windows(starts, length)
    if length == seq_len:
        windows = np.concatenate([np.full((len(windows), 1), bos, dtype=windows.dtype), windows], axis=1)
    return windows


def row_bos(data_cfg: DataConfig, tokenizer: Tokenizer) -> int | None:
    """The fixed first token of every row (``row_start: bos``: the tokenizer's eos id), else None."""
    return tokenizer.eos_id if data_cfg.row_start == "bos" else None


@dataclass
class Data:
    """Everything a run reads: the tokenizer, the training mixture and the named held-out sets."""

    tokenizer: Tokenizer
    train: Batches
    heldout: dict[str, TokenArray]


def load_data(data_cfg: DataConfig, *, batch_size: int, seed: int, vocab_size: int, tokenizer: Tokenizer,
              cache_dir: Path) -> Data:
    """Tokenize (or load from the cache) every source of ``data_cfg`` and build the training mixture."""
    train = [token_array(s, "train", tokenizer, data_cfg, cache_dir) for s in data_cfg.train]
    batches = Batches(train, [s.weight for s in data_cfg.train], seq_len=data_cfg.seq_len,
                      batch_size=batch_size, seed=seed, vocab_size=vocab_size,
                      bos=row_bos(data_cfg, tokenizer))
    heldout = {name: token_array(s, "heldout", tokenizer, data_cfg,
                                 cache_dir) for name, s in data_cfg.heldout.items()}
    return Data(tokenizer, batches, heldout)
