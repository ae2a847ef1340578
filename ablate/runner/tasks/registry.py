"""The task registry, task specs (``name[@len,len,...]``), seeded example generation and training streams.

A spec names a task and, optionally, the context lengths it is generated at, in tokens of the evaluation
tokenizer: ``mqar``, ``niah-single@256,512``, ``vt@1k,2k`` (``k`` = 1024). Without lengths, a task is
generated at the lengths the caller gives, else at its own default. Generation is a pure function of (seed,
task, length, n, tokenizer): the same arguments give the same examples, on any machine.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ablate.errors import ConfigError, one_of
from ablate.runner.tasks import niah, recall
from ablate.runner.tasks.example import Encoder, Example
from ablate.runner.tasks.haystack import Counter, byte_count, cached, sentences

Maker = Callable[[random.Random, int, Counter, Iterator[str]], Example]


@dataclass(frozen=True)
class Task:
    """A benchmark task: ``make(rng, length, count, filler) -> Example`` builds one example of ``length``
    tokens."""

    name: str
    description: str
    make: Maker
    default_lengths: tuple[int, ...] = (256,)

    def generate(self, seed: int, n: int, length_tokens: int, tokenizer: Encoder | None = None,
                 filler: Iterable[str] | None = None) -> list[Example]:
        """``n`` examples of at most ``length_tokens`` tokens (end-of-text + prompt + answer), from ``seed``.

        Lengths are counted with ``tokenizer.encode`` (UTF-8 bytes when ``tokenizer`` is None). ``filler``:
        documents whose sentences form the haystack (held-out text); RULER's noise sentences when None.
        """
        rng = random.Random(seed)
        count = cached(byte_count if tokenizer is None else (lambda s: len(tokenizer.encode(s))))
        stream = sentences(filler)
        return [self.make(rng, length_tokens, count, stream) for _ in range(n)]


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("niah-single", "needle in a haystack: one key, one 7-digit value", niah.single),
        Task("niah-multikey", "needle in a haystack: one key asked among 3 distractor needles", niah.multikey,
             (512,)),
        Task("niah-multivalue", "needle in a haystack: all 4 values of one key", niah.multivalue, (512,)),
        Task("niah-multiquery", "needle in a haystack: the values of 4 keys", niah.multiquery, (512,)),
        Task("vt", "variable tracking: every variable in a 4-hop chain of assignments",
             recall.variable_tracking),
        Task("mqar", "multi-query associative recall (zoology): key:value pairs, then queries", recall.mqar,
             (128,)),
    )
}

_LENGTH = re.compile(r"^(\d+)(k?)$")


def parse_task_spec(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``"niah-single@256,1k"`` -> ``("niah-single", (256, 1024))``; ``"mqar"`` -> ``("mqar", None)``.

    Raises ConfigError for an unknown task (with a near match) or a malformed length.
    """
    name, _, lengths = spec.partition("@")
    name = name.strip()
    if name not in TASKS:
        raise ConfigError(one_of(name, TASKS, what="benchmark task"), where="eval.benchmarks")
    if not _:
        return name, None
    out: list[int] = []
    for part in lengths.split(","):
        m = _LENGTH.match(part.strip().lower())
        if not m or int(m.group(1)) < 1:
            raise ConfigError(f"bad length {part!r} in {spec!r}: use positive integers, optionally with k "
                              "(x1024), e.g. 'niah-single@256,1k'", where="eval.benchmarks")
        out.append(int(m.group(1)) * (1024 if m.group(2) else 1))
    return name, tuple(out)


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from ``seed`` and labels, stable across processes (unlike ``hash``)."""
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def task_examples(name: str, *, seed: int, length: int, n: int, tokenizer: Encoder | None = None,
                  filler: Iterable[str] | None = None) -> list[Example]:
    """The ``n`` evaluation examples of task ``name`` (no length spec) at ``length`` tokens for ``seed``."""
    if name not in TASKS:
        raise ConfigError(one_of(name, TASKS, what="benchmark task"), where="eval.benchmarks")
    return TASKS[name].generate(derive_seed(seed, "eval", name, length), n, length, tokenizer, filler)


def task_stream(name: str, *, seed: int, tokenizer: Encoder | None = None,
                filler: Iterable[str] | None = None) -> Iterator[Example]:
    """An endless stream of training examples for a ``kind: task`` data source.

    ``name`` may carry lengths (``mqar@64,128``); each example takes one of them at random (default: the
    task's own). Lengths count ``tokenizer`` tokens, or UTF-8 bytes without one. The stream's seeds are
    disjoint from the evaluation examples'.
    """
    base, lengths = parse_task_spec(name)
    task = TASKS[base]
    lengths = lengths or task.default_lengths
    rng = random.Random(derive_seed(seed, "train", base))
    count = cached(byte_count if tokenizer is None else (lambda s: len(tokenizer.encode(s))))
    stream = sentences(filler)
    while True:
        yield task.make(rng, rng.choice(lengths), count, stream)


def task_documents(name: str, *, seed: int, tokenizer: Encoder | None = None,
                   filler: Iterable[str] | None = None) -> Iterator[str]:
    """``task_stream``'s examples as training documents (prompt + answer)."""
    return (ex.text for ex in task_stream(name, seed=seed, tokenizer=tokenizer, filler=filler))
