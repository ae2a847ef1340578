"""The built-in Bigram-Backcopy stream: its rule (a trigger digit, then a copy of the letter before it), its
rates, and that it is the same for every run and differs between the splits."""

from __future__ import annotations

import itertools
import re

from ablate.config import SourceConfig
from ablate.runner.corpora import BACKCOPY_DOC_LEN, LETTERS, TRIGGERS, bigram_table, documents, is_stream

SRC = SourceConfig(kind="builtin", name="bigram-backcopy")


def docs(split: str, n: int = 20) -> list[str]:
    return list(itertools.islice(documents(SRC, split, 0.1), n))


def test_every_trigger_is_followed_by_the_letter_before_it():
    text = "".join(docs("train"))
    assert set(text) <= set(LETTERS + TRIGGERS) and is_stream(SRC)
    copies = [(m.group(1), m.group(3)) for m in re.finditer(r"(?=([a-z])([012])([a-z]))", text)]
    assert copies and all(before == after for before, after in copies)
    share = sum(text.count(t) for t in TRIGGERS) / len(text)
    assert 0.06 < share < 0.09  # a trigger at 8% of the draws (each also adds its copy)


def test_letters_follow_the_fixed_bigram_table():
    table = bigram_table()
    assert table == bigram_table() and sorted(table) == list(LETTERS)
    text = re.sub(r"[012][a-z]", "", "".join(docs("train", 50)))  # drop each trigger and its copy
    likely = {c: {x for x, w in zip(*table[c], strict=True) if w >= 1.0} for c in LETTERS}
    pairs = list(zip(text, text[1:], strict=False))
    # 15 of 16.1 weight on the 4 likely successors
    assert sum(b in likely[a] for a, b in pairs) / len(pairs) > 0.85


def test_the_stream_is_fixed_per_split():
    train, heldout = docs("train", 3), docs("heldout", 3)
    assert train == docs("train", 3) and train != heldout
    # a copy may end it
    assert all(BACKCOPY_DOC_LEN <= len(d) <= BACKCOPY_DOC_LEN + 1 for d in train + heldout)
