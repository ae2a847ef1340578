"""Token arrays and batches: every source becomes a flat array of token ids, and the batch at step t is a pure
function of (seed, t).

- A text source is tokenized once (documents joined by ``eos_id``) and cached as ``.npy`` under
  ``cache_dir/tokens/`` (key: source config, split, tokenizer, corpus version), then memory-mapped.
- A ``tokens`` source memory-maps flat ``uint16``/``uint32`` shards: nanoGPT's headerless ``.bin`` files, or
  modded-nanogpt's (a 256 x int32 header: magic 20240520, version, token count, then the tokens).
- An endless source (arithmetic, a task) is cut at ``data.stream_tokens`` tokens per split.
- Row b of the batch at step t: the rng seeded with ``(seed, t)`` picks a source by mixture weight, then a
  window start uniformly among that source's ``seq_len + 1``-token windows. No state is carried from step
  to step, so a run resumed at step t reads exactly what an uninterrupted run would.
- Held-out sets are scored on fixed windows spread evenly over the set (``heldout_windows``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ablate.config import DataConfig, SourceConfig
from ablate.errors import ConfigError, RunError
from ablate.runner.corpora import Split, corpus_version, documents, is_stream, user_files
from ablate.runner.tokenizers import ByteTokenizer, Tokenizer

log = logging.getLogger(__name__)

MODDED_NANOGPT_MAGIC = 20240520
_HEADER_INTS = 256


def cache_dir_for(run_dir: Path) -> Path:
    """Where tokenizers and token arrays are cached: ``$ABLATE_CACHE``, else ``<home>/cache`` for a run directory
    laid out as ``<home>/runs/<run_id>``, else ``$ABLATE_HOME/cache``, else ``run_dir/cache``."""
    if os.environ.get("ABLATE_CACHE"):
        return Path(os.environ["ABLATE_CACHE"])
    if run_dir.parent.name == "runs":
        return run_dir.parent.parent / "cache"
    if os.environ.get("ABLATE_HOME"):
        return Path(os.environ["ABLATE_HOME"]) / "cache"
    return run_dir / "cache"


class TokenArray:
    """One source's tokens as one or more flat segments (arrays or memory maps), addressed by window."""

    def __init__(self, segments: list[np.ndarray], label: str):
        self.segments = [s for s in segments if len(s)]
        self.label = label
        self.n_tokens = int(sum(len(s) for s in self.segments))

    def n_windows(self, length: int) -> int:
        """How many distinct start positions a ``length``-token window has (never crossing a segment end)."""
        return int(sum(max(0, len(s) - length + 1) for s in self.segments))

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``[len(starts), length]`` int64 windows; ``starts`` index the ``n_windows(length)`` positions."""
        counts = np.array([max(0, len(s) - length + 1) for s in self.segments])
        bounds = np.cumsum(counts)
        starts = np.asarray(starts, dtype=np.int64)
        seg_of = np.searchsorted(bounds, starts, side="right")
        offsets = starts - np.concatenate([[0], bounds])[seg_of]
        out = np.empty((len(starts), length), dtype=np.int64)
        for seg in np.unique(seg_of):
            rows = np.flatnonzero(seg_of == seg)
            out[rows] = self.segments[seg][offsets[rows, None] + np.arange(length)]  # (rows, length) gather
        return out


def read_shard(path: Path, dtype: str) -> np.ndarray:
    """A flat token shard as a read-only memory map, skipping modded-nanogpt's 256-int32 header when present."""
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


def token_array(src: SourceConfig, split: Split, tok: Tokenizer, data_cfg: DataConfig, cache_dir: Path) -> TokenArray:
    """The tokens of ``src`` for ``split``: shards memory-mapped, text tokenized once and cached."""
    label = src.name or src.path or src.kind
    if src.kind == "tokens":
        return TokenArray([read_shard(p, src.dtype) for p in user_files(src)], label)
    budget = data_cfg.stream_tokens if is_stream(src) else None
    key = json.dumps([src.model_dump(mode="json", exclude={"weight"}), split, data_cfg.heldout_fraction, tok.name,
                      budget, corpus_version(src)], sort_keys=True)
    path = cache_dir / "tokens" / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.npy"
    if not path.is_file():
        arr = _tokenize(documents(src, split, data_cfg.heldout_fraction), tok, budget)
        log.info("tokenized %s (%s): %d tokens -> %s", label, split, len(arr), path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, arr)
        os.replace(tmp, path)
    return TokenArray([np.load(path, mmap_mode="r")], label)


def _tokenize(docs, tok: Tokenizer, budget: int | None) -> np.ndarray:
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
    parts: list[np.ndarray] = []
    total, chunk = 0, []

    eos = np.array([tok.eos_id], dtype=dtype)

    def flush() -> int:
        n = 0
        if isinstance(tok, ByteTokenizer):  # fast path: the bytes are the ids
            encoded = [np.frombuffer(doc.encode("utf-8"), dtype=np.uint8) for doc in chunk]
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


class Batches:
    """The training mixture: ``batch(t)`` is ``[batch_size, seq_len + 1]`` int64, a pure function of (seed, t)."""

    def __init__(self, sources: list[TokenArray], weights: list[float], *, seq_len: int, batch_size: int,
                 seed: int, vocab_size: int):
        self.sources, self.seq_len, self.batch_size, self.seed = sources, seq_len, batch_size, seed
        self.vocab_size = vocab_size
        self.p = np.asarray(weights, dtype=np.float64) / sum(weights)
        self.n_windows = np.array([s.n_windows(seq_len + 1) for s in sources], dtype=np.int64)
        for s, n in zip(sources, self.n_windows, strict=True):
            if n < 1:
                raise ConfigError(f"training source {s.label!r} has {s.n_tokens} tokens, fewer than "
                                  f"seq_len + 1 = {seq_len + 1}", where="data.train")

    def batch(self, step: int) -> np.ndarray:
        """The rows of step ``step``; the same (seed, step) always gives the same rows."""
        rng = np.random.default_rng([self.seed, step])
        which = rng.choice(len(self.sources), size=self.batch_size, p=self.p)
        starts = rng.integers(0, self.n_windows[which])
        out = np.empty((self.batch_size, self.seq_len + 1), dtype=np.int64)
        for i in range(len(self.sources)):
            rows = np.flatnonzero(which == i)
            if len(rows):
                out[rows] = self.sources[i].windows(starts[rows], self.seq_len + 1)
        if out.max() >= self.vocab_size:
            raise RunError(f"step {step}: token id {int(out.max())} >= model.vocab_size {self.vocab_size}; "
                           "the token shards were made with a larger vocabulary")
        return out


def heldout_windows(arr: TokenArray, n_tokens: int, seq_len: int) -> np.ndarray:
    """``[N, seq_len + 1]`` fixed windows spread evenly over a held-out set, N = ceil(n_tokens / seq_len),
    at most as many as fit without overlap."""
    length = seq_len + 1
    fit = arr.n_tokens // length
    if fit < 1 or arr.n_windows(length) < 1:
        raise ConfigError(f"held-out set {arr.label!r} has {arr.n_tokens} tokens, fewer than seq_len + 1 = "
                          f"{length}", where="data.heldout")
    n = min(-(-n_tokens // seq_len), fit)
    starts = np.linspace(0, arr.n_windows(length) - 1, n).astype(np.int64)
    return arr.windows(starts, length)


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
    batches = Batches(train, [s.weight for s in data_cfg.train], seq_len=data_cfg.seq_len, batch_size=batch_size,
                      seed=seed, vocab_size=vocab_size)
    heldout = {name: token_array(s, "heldout", tokenizer, data_cfg, cache_dir) for name, s in data_cfg.heldout.items()}
    return Data(tokenizer, batches, heldout)
