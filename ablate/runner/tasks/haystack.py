"""What the retrieval tasks are built from: keys, values, filler sentences, and one prompt builder.

A prompt is filler sentences (RULER's repeated noise, or sentences of held-out text) with needles inserted at
random sentence boundaries, in order, followed by the query. Lengths are counted by a ``count(str) -> int``
(tokens of the evaluation tokenizer, or UTF-8 bytes when there is none), so an example fits ``length`` tokens:
an end-of-text token before the prompt, the prompt, the answer.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterable, Iterator

from ablate.errors import ConfigError

Counter = Callable[[str], int]

# RULER's noise haystack (Hsieh et al. 2024): the same five sentences, repeated.
NOISE = ("The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ",
         "There and back again. ")

_ADJECTIVES = (
    "amber", "bold", "brave", "bright", "calm", "clever", "cold", "crisp", "dark", "eager", "early", "fair",
    "fancy", "gentle", "glad", "golden", "grand", "green", "happy", "hidden", "humble", "icy", "jolly",
    "kind", "late", "lively", "lucky", "mellow", "misty", "noble", "proud", "quick", "quiet", "rapid",
    "rough", "royal", "rusty", "sharp", "shiny", "silent", "silver", "sleepy", "smooth", "solid", "sunny",
    "swift", "tall", "tiny", "warm", "wild", "wise", "young",
)
_NOUNS = (
    "anchor", "apple", "arrow", "badge", "basket", "beacon", "bridge", "candle", "canyon", "castle", "cedar",
    "cloud", "comet", "copper", "crown", "desert", "dragon", "falcon", "feather", "forest", "garden",
    "glacier", "harbor", "island", "jacket", "kettle", "ladder", "lantern", "meadow", "mirror", "mountain",
    "needle", "ocean", "orchard", "otter", "pebble", "pepper", "pillow", "planet", "pocket", "rabbit",
    "river", "rocket", "saddle", "shadow", "spider", "tiger", "tunnel", "valley", "violin", "wagon", "willow",
)
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = "abcdefghijklmnopqrstuvwxyz"


def byte_count(text: str) -> int:
    """Length in UTF-8 bytes: the byte tokenizer's token count."""
    return len(text.encode("utf-8"))


def cached(count: Counter, limit: int = 65536) -> Counter:
    """``count`` memoised (up to ``limit`` entries, then started afresh): filler sentences repeat, and
    tokenizers are slow."""
    memo: dict[str, int] = {}

    def counted(text: str) -> int:
        if text not in memo:
            if len(memo) >= limit:
                memo.clear()
            memo[text] = count(text)
        return memo[text]

    return counted


def sample_keys(rng: random.Random, k: int) -> list[str]:
    """``k`` distinct word keys such as ``quiet-river`` (2,704 possible)."""
    keys: set[str] = set()
    out: list[str] = []
    while len(out) < k:
        key = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
        if key not in keys:
            keys.add(key)
            out.append(key)
    return out


def sample_numbers(rng: random.Random, k: int, digits: int) -> list[str]:
    """``k`` distinct ``digits``-digit numbers (no leading zero), as text."""
    return [str(v) for v in rng.sample(range(10 ** (digits - 1), 10**digits), k)]


def sample_names(rng: random.Random, k: int, letters: int, alphabet: str = _UPPER) -> list[str]:
    """``k`` distinct names of ``letters`` characters from ``alphabet`` (variable names, MQAR keys)."""
    names: set[str] = set()
    out: list[str] = []
    while len(out) < k:
        name = "".join(rng.choice(alphabet) for _ in range(letters))
        if name not in names:
            names.add(name)
            out.append(name)
    return out


LOWER = _LOWER


def sentences(filler: Iterable[str] | None) -> Iterator[str]:
    """An endless stream of filler sentences: RULER's noise when ``filler`` is None, else the sentences of the
    given documents (held-out text), cycled."""
    if filler is None:
        return itertools.cycle(NOISE)

    def split() -> Iterator[str]:
        for doc in filler:
            for sent in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                if sent:
                    yield sent + " "

    return itertools.cycle(split())


def build_prompt(
    rng: random.Random,
    *,
    length: int,
    count: Counter,
    needles: list[str],
    query: str,
    answer: str,
    filler: Iterator[str],
    task: str,
) -> str:
    """Filler sentences up to ``length`` tokens with ``needles`` inserted (in order) at random sentence
    boundaries, then ``query``. The example (end-of-text + prompt + answer) fits in ``length`` tokens."""
    fixed = 1 + count(query) + count(answer) + sum(count(n) for n in needles)
    budget = length - fixed
    if budget < 0:
        raise ConfigError(f"length {length} is too short for task '{task}': it needs at least {fixed} tokens",
                          where="eval.benchmarks")
    hay: list[str] = []
    used = 0
    for sent in filler:
        c = count(sent)
        if used + c > budget:
            break
        hay.append(sent)
        used += c
    for i, pos in enumerate(sorted(rng.randint(0, len(hay)) for _ in needles)):
        hay.insert(pos + i, needles[i])  # +i: earlier insertions shift the later boundaries
    return "".join(hay) + query
