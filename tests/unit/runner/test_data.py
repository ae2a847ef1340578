"""Data sources, tokenizers and batches, each loaded from files the test writes itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ablate.ablations import ModelConfig
from ablate.config import DataConfig, SourceConfig
from ablate.errors import ConfigError, RunError
from ablate.runner.corpora import documents, is_heldout, stdlib_files
from ablate.runner.data import (
    MODDED_NANOGPT_MAGIC,
    Batches,
    TokenArray,
    heldout_windows,
    load_data,
    token_array,
)
from ablate.runner.tokenizers import ByteTokenizer, get_tokenizer

TINY = ModelConfig(preset="tiny")
DOCS = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]


def tokens_of(src: SourceConfig, tmp_path, split="train", tok=None) -> np.ndarray:
    arr = token_array(src, split, tok or ByteTokenizer(), DataConfig(), tmp_path / "cache")
    return np.concatenate([np.asarray(s) for s in arr.segments])


def joined(docs: list[str]) -> list[int]:
    tok = ByteTokenizer()
    return [i for d in docs for i in [*tok.encode(d), tok.eos_id]]


def test_text_file_directory_and_glob(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, d in enumerate(DOCS):
        (docs / f"doc{i}.txt").write_text(d)
    (docs / "skip.md").write_text("not matched by the glob")
    one = tokens_of(SourceConfig(kind="text", path=str(docs / "doc1.txt")), tmp_path)
    assert one.tolist() == joined([DOCS[1]])
    globbed = tokens_of(SourceConfig(kind="text", path=str(docs / "doc*.txt")), tmp_path)
    assert globbed.tolist() == joined(DOCS)
    folder = tokens_of(SourceConfig(kind="text", path=str(docs)), tmp_path)
    assert folder.tolist() == joined([*DOCS, "not matched by the glob"])
    with pytest.raises(ConfigError, match="no files match"):
        tokens_of(SourceConfig(kind="text", path=str(docs / "nothing*.txt")), tmp_path)


def test_jsonl_field_and_errors(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps({"body": d, "id": i}) for i, d in enumerate(DOCS)) + "\n")
    assert tokens_of(SourceConfig(kind="jsonl", path=str(path), field="body"),
                     tmp_path).tolist() == joined(DOCS)
    with pytest.raises(ConfigError, match=r"data.jsonl:1: no field 'bdy' \(did you mean 'body'\?\)"):
        tokens_of(SourceConfig(kind="jsonl", path=str(path), field="bdy"), tmp_path)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
@pytest.mark.parametrize("header", [False, True], ids=["nanogpt", "modded-nanogpt"])
def test_token_shards(tmp_path, dtype, header):
    ids = [np.arange(100, dtype=dtype) + 7 * k for k in range(2)]
    for k, a in enumerate(ids):
        with open(tmp_path / f"shard_{k}.bin", "wb") as fh:
            if header:
                h = np.zeros(256, dtype=np.int32)
                h[:3] = [MODDED_NANOGPT_MAGIC, 1, len(a)]
                fh.write(h.tobytes())
            fh.write(a.tobytes())
    arr = token_array(SourceConfig(kind="tokens", path=str(tmp_path / "shard_*.bin"), dtype=dtype), "train",
                      ByteTokenizer(), DataConfig(), tmp_path)
    assert [np.asarray(s).tolist() for s in arr.segments] == [a.tolist() for a in ids]
    # windows never cross a shard boundary
    assert arr.n_windows(10) == 2 * 91
    assert arr.windows(np.array([0, 91, 181]), 10).tolist() == [ids[0][:10].tolist(), ids[1][:10].tolist(),
                                                                ids[1][90:].tolist()]


def test_token_shard_of_the_wrong_dtype_is_refused(tmp_path):
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(ConfigError, match="not a whole number of uint16 tokens"):
        tokens_of(SourceConfig(kind="tokens", path=str(tmp_path / "odd.bin")), tmp_path)


def test_token_ids_beyond_the_vocabulary_are_refused(tmp_path):
    big = TokenArray([np.full(100, 1000, dtype=np.uint16)], "big")
    with pytest.raises(RunError, match="token id 1000 >= model.vocab_size 320"):
        Batches([big], [1.0], seq_len=8, batch_size=2, seed=0, vocab_size=320).batch(0)


def test_hf_dataset_on_disk(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": DOCS}).save_to_disk(str(tmp_path / "flat"))
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": DOCS[:2]}),
            "validation": datasets.Dataset.from_dict({"text": DOCS[2:]}),
        }
    ).save_to_disk(str(tmp_path / "dd"))
    assert tokens_of(SourceConfig(kind="hf", path=str(tmp_path / "flat")), tmp_path).tolist() == joined(DOCS)
    dd = SourceConfig(kind="hf", path=str(tmp_path / "dd"))
    assert tokens_of(dd, tmp_path, "train").tolist() == joined(DOCS[:2])
    assert tokens_of(dd, tmp_path, "heldout").tolist() == joined(DOCS[2:])
    with pytest.raises(ConfigError, match="no column 'txt'"):
        tokens_of(SourceConfig(kind="hf", path=str(tmp_path / "flat"), field="txt"), tmp_path)


def test_builtin_corpora_split_by_file_hash():
    train, held = stdlib_files("train", 0.1), stdlib_files("heldout", 0.1)
    assert train and held and not {r for r, _ in train} & {r for r, _ in held}
    assert 0.03 < len(held) / (len(train) + len(held)) < 0.2
    assert all(is_heldout(r, 0.1) for r, _ in held) and not any("test" in r.split("/") for r, _ in train)
    code = next(documents(SourceConfig(kind="builtin", name="python-code"), "heldout", 0.1))
    assert code == held[0][1].read_text(encoding="utf-8", errors="replace")
    prose = documents(SourceConfig(kind="builtin", name="python-docs"), "train", 0.1)
    first = [next(prose) for _ in range(3)]
    assert all(len(d) > 20 for d in first)
    sums = next(documents(SourceConfig(kind="builtin", name="arithmetic"), "train", 0.1)).splitlines()
    assert len(sums) == 8
    for line in sums:
        lhs, rhs = line.split(" = ")
        assert eval(lhs) == int(rhs)  # noqa: S307 - the test's own generated text
    other = next(documents(SourceConfig(kind="builtin", name="arithmetic"), "heldout", 0.1)).splitlines()
    assert other != sums


def test_bpe_trained_on_the_training_split_and_cached(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(["the quick brown fox jumps over the lazy dog"] * 200))
    data = DataConfig(train=[SourceConfig(kind="text", path=str(corpus))], tokenizer="bpe",
                      bpe_vocab_size=300)
    tok = get_tokenizer(data, TINY, tmp_path)
    (cached,) = (tmp_path / "tokenizers").iterdir()
    assert tok.name == cached.stem and 257 < tok.vocab_size <= 300 and tok.eos_id < tok.vocab_size
    ids = tok.encode("the quick brown fox")
    assert tok.decode(ids) == "the quick brown fox" and len(ids) < len("the quick brown fox") / 2
    mtime = cached.stat().st_mtime_ns
    again = get_tokenizer(data, TINY, tmp_path)
    assert again.encode("lazy dog") == tok.encode("lazy dog") and cached.stat().st_mtime_ns == mtime


def test_tokenizer_errors(tmp_path):
    with pytest.raises(ConfigError,
                       match="model.vocab_size: tokenizer 'byte' has 257 ids but model.vocab_size is 100"):
        get_tokenizer(DataConfig(), ModelConfig(preset="tiny", vocab_size=100), tmp_path)
    with pytest.raises(ConfigError,
                       match="data.tokenizer: tokenizer 'no-such/tokenizer' is not available locally"):
        get_tokenizer(DataConfig(tokenizer="hf:no-such/tokenizer"), TINY, tmp_path)
    with pytest.raises(ConfigError, match="unknown tokenizer 'bytes'"):
        get_tokenizer(DataConfig(tokenizer="bytes"), TINY, tmp_path)


def test_batch_is_a_pure_function_of_seed_and_step(tmp_path):
    a = TokenArray([np.arange(1000, dtype=np.uint16) % 250], "a")
    b = TokenArray([np.full(500, 251, dtype=np.uint16)], "b")

    def make(seed):
        return Batches([a, b], [3.0, 1.0], seq_len=16, batch_size=400, seed=seed, vocab_size=320)

    first, second = make(0), make(0)
    assert np.array_equal(first.batch(5), second.batch(5))  # no state carried between calls
    assert np.array_equal(first.batch(7), make(0).batch(7))
    assert not np.array_equal(first.batch(5), first.batch(6)) and not np.array_equal(first.batch(5),
                                                                                     make(1).batch(5))
    share_b = np.mean(first.batch(3)[:, 0] == 251)
    assert 0.18 < share_b < 0.32  # mixture weights 3:1
    assert first.batch(3).shape == (400, 17) and first.batch(3).dtype == np.int64


def test_heldout_windows_are_fixed_and_spread(tmp_path):
    arr = TokenArray([np.arange(10_000, dtype=np.uint16) % 300], "h")
    w = heldout_windows(arr, 640, 64)
    assert w.shape == (10, 65) and np.array_equal(w, heldout_windows(arr, 640, 64))
    assert w[0, 0] == 0 and w[-1, -1] == (10_000 - 1) % 300
    with pytest.raises(ConfigError, match="held-out set 'short' has 10 tokens"):
        heldout_windows(TokenArray([np.zeros(10, dtype=np.uint16)], "short"), 640, 64)


def test_load_data_mixture_from_user_files(tmp_path):
    (tmp_path / "a.txt").write_text("hello world " * 50)
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "jsonl text " * 50}) + "\n")
    cfg = DataConfig(train=[SourceConfig(kind="text", path=str(tmp_path / "a.txt")),
                            SourceConfig(kind="jsonl", path=str(tmp_path / "b.jsonl"), weight=2.0)],
                     heldout={"a": SourceConfig(kind="text", path=str(tmp_path / "a.txt"))}, seq_len=16)
    data = load_data(cfg, batch_size=8, seed=0, vocab_size=320, tokenizer=ByteTokenizer(),
                     cache_dir=tmp_path / "c")
    assert list(data.heldout) == ["a"] and data.train.p.tolist() == pytest.approx([1 / 3, 2 / 3])
    text = ByteTokenizer().decode(data.train.batch(0)[0].tolist())
    assert "hello" in text or "jsonl" in text


def test_unknown_builtin_corpus_is_a_config_error():
    from pydantic import ValidationError

    with pytest.raises(ValidationError,
                       match=r"unknown built-in corpus 'python-doc' \(did you mean 'python-docs'\?\)"):
        SourceConfig(kind="builtin", name="python-doc")


def test_task_rows_start_at_an_example_and_mask_only_its_answer_tokens(tmp_path):
    import itertools

    from ablate.runner.corpora import STREAM_SEEDS
    from ablate.runner.tasks import encode_example, task_stream

    tok, length = ByteTokenizer(), 33
    (tmp_path / "a.txt").write_text("hello world " * 50)
    task = SourceConfig(kind="task", name="mqar@16,24")
    assert task.loss == "answer" and SourceConfig(kind="text", path="x").loss == "all"
    cfg = DataConfig(train=[task, SourceConfig(kind="text", path=str(tmp_path / "a.txt"))], heldout={},
                     seq_len=32, stream_tokens=3000)
    data = load_data(cfg, batch_size=64, seed=0, vocab_size=320, tokenizer=tok, cache_dir=tmp_path / "c")
    arr = data.train.sources[0]
    # the stream: whole examples [eos] + prompt + answer back to back, as scoring encodes them
    encoded = [encode_example(tok,
                              ex) for ex in itertools.islice(task_stream(task.name,
                                                                         seed=STREAM_SEEDS["train"]),
                                                                  len(arr.starts) + 5)]
    flat_ids = [i for p, a in encoded for i in p + a]
    flat_mask = [m for p, a in encoded for m in [False] * len(p) + [True] * len(a)]
    assert arr.n_windows(length) >= 100 and arr.n_windows(length) <= len(arr.starts)
    # a window starts at example k and packs the following ones after it
    for k in range(arr.n_windows(length)):
        at = int(arr.starts[k])
        assert at == sum(len(p) + len(a) for p, a in encoded[:k])
        assert arr.windows(np.array([k]), length)[0].tolist() == flat_ids[at: at + length]
        assert arr.mask_windows(np.array([k]), length)[0].tolist() == flat_mask[at: at + length]
    tokens, mask = data.train.rows(5)
    again = data.train.rows(5)
    # a pure function of (seed, step)
    assert np.array_equal(tokens, again[0]) and np.array_equal(mask, again[1])
    assert np.array_equal(tokens, data.train.batch(5)) and mask.shape == (64, 32) and mask.dtype == bool
    by_row = {tuple(arr.windows(np.array([k]), length)[0]): k for k in range(arr.n_windows(length))}
    n_task = 0
    for row, m in zip(tokens, mask, strict=True):
        if tuple(row) in by_row:  # a task row: the loss is on exactly its answer tokens (targets = row[1:])
            n_task += 1
            k = by_row[tuple(row)]
            expected = arr.mask_windows(np.array([k]), length)[0][1:]
            assert row[0] == tok.eos_id and m.tolist() == expected.tolist() and 2 <= m.sum() < 32
            assert all(chr(t).isdigit() for t in row[1:][m])
        else:  # a text row: every token
            assert "hello" in tok.decode(row.tolist()) and m.all()
    assert 16 <= n_task <= 48
    # loss 'all' on a task source: the same example-aligned rows, every token counts; no mask at all in the
    # batch
    every = DataConfig(train=[SourceConfig(kind="task", name="mqar@16,24", loss="all")], heldout={},
                       seq_len=32, stream_tokens=3000)
    plain = load_data(every, batch_size=8, seed=0, vocab_size=320, tokenizer=tok, cache_dir=tmp_path / "c")
    assert plain.train.rows(0)[1] is None and (plain.train.batch(0)[:, 0] == tok.eos_id).all()
    with pytest.raises(ValueError, match="loss 'answer' needs a 'task' source"):
        SourceConfig(kind="text", path="x", loss="answer")


def _tokenize_counting(src, cfg, cache, barrier, out) -> None:  # noqa: ANN001 - a forked child of the test below
    import ablate.runner.data as data

    calls, original = [], data._tokenize
    data._tokenize = lambda *a: calls.append(1) or original(*a)
    barrier.wait()  # both at once
    arr = data.token_array(src, "train", ByteTokenizer(), cfg, cache)
    out.put((len(calls), arr.n_tokens))


def test_two_processes_starting_together_tokenize_a_shared_source_once(tmp_path):
    """Two workers on one new source (#26: both tokenized it, each wrote half a cache file on a small disk):
    one tokenizes it under the cache's lock, the other waits and reads what it wrote."""
    import multiprocessing as mp

    corpus = tmp_path / "c.txt"
    corpus.write_text("the same shared source, read by two workers at once\n" * 40_000)  # 2 MB: 0.1 s to read
    src = SourceConfig(kind="text", path=str(corpus))
    cfg = DataConfig(train=[src], heldout={})
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_tokenize_counting, args=(src, cfg, tmp_path / "cache", barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert got == [(0, corpus.stat().st_size + 1), (1, corpus.stat().st_size + 1)]
    assert len(list((tmp_path / "cache" / "tokens").glob("*.npy"))) == 1
