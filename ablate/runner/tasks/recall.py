"""Tracking and recall tasks: RULER's variable tracking, and zoology's multi-query associative recall (MQAR).

- ``vt``: a chain of assignments ``VAR QPRSZ = 52718.``, ``VAR ABCDE = QPRSZ.``, ... (four hops, five
  variables) hidden in the haystack; the answer names every variable holding the value, in chain order.
- ``mqar`` (Arora et al. 2023, "Zoology"): key-value pairs ``ab:42 cd:17 ...``, then the same keys queried in
  a shuffled order, each followed by its value; the last query's value is the answer. As a training document
  every query is a recall exercise. The number of pairs grows with the length; there is no filler.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from ablate.errors import ConfigError
from ablate.runner.tasks.example import Example
from ablate.runner.tasks.haystack import LOWER, Counter, build_prompt, sample_names, sample_numbers

VT_HOPS = 4
VT_NAME_LETTERS = 5
VT_VALUE_DIGITS = 5
MQAR_KEY_LETTERS = 2
MQAR_VALUE_DIGITS = 2


def variable_tracking(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """One chain of ``VT_HOPS`` assignments; the answer lists the chain's variables, space separated."""
    names = sample_names(rng, VT_HOPS + 1, VT_NAME_LETTERS)
    (value,) = sample_numbers(rng, 1, VT_VALUE_DIGITS)
    needles = [f"VAR {names[0]} = {value}. "] + [f"VAR {b} = {a}. " for a, b in itertools.pairwise(names)]
    answer = " ".join(names)
    query = f"Which variables equal {value}? They are: "
    prompt = build_prompt(rng, length=length, count=count, needles=needles, query=query, answer=answer,
                          filler=filler, task="vt")
    return Example(prompt, answer)


def _pair(key: str, value: str) -> str:
    return f"{key}:{value} "


def mqar(rng: random.Random, length: int, count: Counter, filler: Iterator[str]) -> Example:
    """As many key-value pairs as fit in ``length`` (each appears twice: stated, then queried)."""
    del filler  # MQAR's context is the pairs themselves
    max_pairs = min(len(LOWER) ** MQAR_KEY_LETTERS, 10**MQAR_VALUE_DIGITS)
    keys: list[str] = []
    values: list[str] = []
    used = 1 + count("\n")  # end-of-text and the separator
    while len(keys) < max_pairs:
        (key,) = sample_names(rng, 1, MQAR_KEY_LETTERS, LOWER)
        if key in keys:
            continue
        value = f"{rng.randrange(10**MQAR_VALUE_DIGITS):0{MQAR_VALUE_DIGITS}d}"
        cost = 2 * count(_pair(key, value))
        if used + cost > length:
            break
        keys.append(key)
        values.append(value)
        used += cost
    if not keys:
        raise ConfigError(f"length {length} is too short for task 'mqar'", where="eval.benchmarks")
    stated = "".join(_pair(k, v) for k, v in zip(keys, values, strict=True))
    order = rng.sample(range(len(keys)), len(keys))
    asked = "".join(_pair(keys[i], values[i]) for i in order[:-1])
    last = order[-1]
    return Example(f"{stated}\n{asked}{keys[last]}:", values[last])
