"""Needle in a haystack, in RULER's four families (Hsieh et al. 2024, "RULER: What's the Real Context Size of
Your Long-Context Language Models?").

Needles read ``The magic number for quiet-river is 4821067.``: keys are word pairs, values 7-digit numbers.

- ``single``: one needle; its value is asked for.
- ``multikey``: four needles with different keys (three are distractors); one key is asked for.
- ``multivalue``: four needles with the same key; all four values are asked for, in the order they appear.
- ``multiquery``: four needles with different keys; all four are asked for, in a shuffled order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from ablate.runner.tasks.example import Example
from ablate.runner.tasks.haystack import Counter, build_prompt, sample_keys, sample_numbers

VALUE_DIGITS = 7
N_NEEDLES = 4


def _needle(key: str, value: str) -> str:
    return f"The magic number for {key} is {value}. "


def _one(rng: random.Random, length: int, count: Counter, filler: Iterator[str], *, task: str,
         distractors: int) -> Example:
    keys = sample_keys(rng, 1 + distractors)
    values = sample_numbers(rng, len(keys), VALUE_DIGITS)
    needles = [_needle(k, v) for k, v in zip(keys, values, strict=True)]
    rng.shuffle(needles)
    query = f"What is the magic number for {keys[0]}? It is "
    prompt = build_prompt(rng, length=length, count=count, needles=needles, query=query, answer=values[0],
                          filler=filler, task=task)
    return Example(prompt, values[0])


def single(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """One needle, asked for by its key."""
    return _one(rng, length, count, filler, task="niah-single", distractors=0)


def multikey(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """One asked-for needle among three distractor needles with other keys."""
    return _one(rng, length, count, filler, task="niah-multikey", distractors=N_NEEDLES - 1)


def multivalue(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """Four values for one key; the answer lists them all, in order of appearance."""
    (key,) = sample_keys(rng, 1)
    values = sample_numbers(rng, N_NEEDLES, VALUE_DIGITS)
    answer = ", ".join(values)
    query = f"What are all the magic numbers for {key}? They are "
    prompt = build_prompt(rng, length=length, count=count, needles=[_needle(key, v) for v in values],
                          query=query, answer=answer, filler=filler, task="niah-multivalue")
    return Example(prompt, answer)


def multiquery(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """Four needles with different keys; the answer gives every value, in the (shuffled) order asked."""
    keys = sample_keys(rng, N_NEEDLES)
    values = dict(zip(keys, sample_numbers(rng, N_NEEDLES, VALUE_DIGITS), strict=True))
    needles = [_needle(k, values[k]) for k in keys]
    asked = rng.sample(keys, len(keys))
    answer = ", ".join(values[k] for k in asked)
    query = f"What are the magic numbers for {', '.join(asked[:-1])} and {asked[-1]}? They are "
    prompt = build_prompt(rng, length=length, count=count, needles=needles, query=query, answer=answer,
                          filler=filler, task="niah-multiquery")
    return Example(prompt, answer)
