"""``data.row_start``: where training rows and held-out windows begin (a random position, a fixed BOS, a
document)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from ablate.config import DataConfig, SourceConfig
from ablate.errors import ConfigError
from ablate.runner.data import Batches, heldout_windows, load_data, token_array
from ablate.runner.tokenizers import ByteTokenizer

EOS = ByteTokenizer.eos_id
DOCS = ["alpha beta gamma delta", "epsilon zeta eta", "theta iota kappa lambda mu", "nu xi omicron pi rho"]


def data_cfg(tmp_path, row_start: str, seq_len: int = 8) -> DataConfig:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for i, d in enumerate(DOCS):
        (folder / f"{i}.txt").write_text(d)
    src = SourceConfig(kind="text", path=str(folder))
    return DataConfig(train=[src], heldout={"text": src}, seq_len=seq_len, row_start=row_start)


def load(tmp_path, row_start: str, seq_len: int = 8, seed: int = 0):
    return load_data(data_cfg(tmp_path, row_start, seq_len), batch_size=64, seed=seed, vocab_size=320,
                     tokenizer=ByteTokenizer(), cache_dir=tmp_path / "cache")


def stream() -> np.ndarray:
    return np.array([i for d in DOCS for i in [*d.encode(), EOS]])


def is_window(row: np.ndarray, tokens: np.ndarray) -> bool:
    n = len(row)
    return any(np.array_equal(tokens[s:s + n], row) for s in range(len(tokens) - n + 1))


def test_random_rows_are_plain_windows(tmp_path):
    rows = load(tmp_path, "random").train.batch(0)
    assert rows.shape == (64, 9)
    assert all(is_window(r, stream()) for r in rows)
    assert len({int(r[0]) for r in rows}) > 5  # the first token is whatever the window starts with


def test_bos_rows_start_with_the_fixed_token_then_a_window(tmp_path):
    data = load(tmp_path, "bos")
    rows = data.train.batch(3)
    assert rows.shape == (64, 9) and (rows[:, 0] == EOS).all()
    assert all(is_window(r[1:], stream()) for r in rows)
    assert len({tuple(r[1:3]) for r in rows}) > 5  # the windows after it still start anywhere
    assert np.array_equal(rows, load(tmp_path, "bos").train.batch(3))  # a pure function of (seed, step)
    held = heldout_windows(data.heldout["text"], 32, 8, bos=EOS)
    assert held.shape == (4,
                          9) and (held[:, 0] == EOS).all() and all(is_window(r[1:], stream()) for r in held)


def test_document_rows_start_at_a_document(tmp_path):
    rows = load(tmp_path, "document").train.batch(0)
    tokens = stream()
    doc_starts = {bytes(d.encode()[:4]) for d in DOCS[1:]}  # the first document has no eos before it
    assert rows.shape == (64, 9) and (rows[:, 0] == EOS).all()
    assert {bytes(r[1:5].astype(np.uint8)) for r in rows} == doc_starts
    assert all(is_window(r, tokens) for r in rows)


def test_document_rows_need_one_token_shard(tmp_path):
    for i in range(2):
        np.arange(100, dtype=np.uint16).tofile(tmp_path / f"shard{i}.bin")
    cfg = DataConfig(train=[SourceConfig(kind="tokens", path=str(tmp_path / "shard*.bin"))],
                     row_start="document")
    with pytest.raises(ConfigError, match="row_start 'document' needs one token shard, .* has 2; join them"):
        token_array(cfg.train[0], "train", ByteTokenizer(), cfg, tmp_path / "cache")


def test_a_row_start_that_does_not_exist_is_refused():
    with pytest.raises(ValidationError, match="row_start\n  Input should be 'random', 'bos' or 'document'"):
        DataConfig(row_start="first")


def test_bos_applies_to_plain_sources_only(tmp_path):
    """A source whose rows already start at an example (a task, or ``document``) keeps its full-length
    windows."""
    from ablate.runner.data import TokenArray

    plain = TokenArray([np.arange(50, 80)], "plain")
    examples = TokenArray([np.arange(0, 40)], "examples", starts=np.array([0, 10, 20]))
    b = Batches([plain, examples], [1.0, 1.0], seq_len=8, batch_size=32, seed=0, vocab_size=320, bos=EOS)
    rows = b.batch(0)
    from_plain = rows[:, 1] >= 50
    assert (rows[from_plain, 0] == EOS).all() and from_plain.any()
    assert set(rows[~from_plain, 0].tolist()) <= {0, 10, 20} and (~from_plain).any()
