"""Where documents come from: the built-in corpora (this Python's own source and docs, an arithmetic stream)
and the user's files (text, JSONL, Hugging Face ``datasets`` on disk). Nothing is downloaded, ever.

A source yields documents (strings) for a split, ``train`` or ``heldout``:

- ``python-code``: every ``.py`` file of the running Python's standard library (test suites and
  ``site-packages`` left out), one document per file, in path order.
- ``python-docs``: English prose from the same installation: each ``pydoc`` topic, and each file's module,
  class and function docstrings (one document per file).
- ``arithmetic``: an endless stream of small sums, differences and products (``"417 + 86 = 503"``).
- ``bigram-backcopy``: an endless stream of the Bigram-Backcopy task (Guo et al. 2024, "Active-dormant
  attention heads"): letters drawn from a fixed bigram table, except that after a trigger digit (``0``, ``1``,
  ``2``; 8% of positions) the next letter copies the one before the trigger. Only that copy needs attention;
  at every other position a head has nothing to fetch and, in softmax attention, must park its attention
  somewhere: the first token, given a fixed one (``data.row_start: bos``). A setting where attention sinks
  form within minutes.
- user ``text``/``jsonl``/``hf`` sources are read whole for whichever split names them (give held-out sets
  their own files); a saved ``DatasetDict`` gives its ``train`` split to training and its ``validation``
  (else ``test``) split to held-out sets.

Built-in files are split by a stable hash of their path relative to the standard library, so the split is
the same on every machine with the same Python, and ``python-code`` and ``python-docs`` hold out the same
files (a docstring is never trained on while its file's code is held out).
``kind: tokens`` sources have no documents: they are read as token arrays by ``ablate.runner.data``.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import random
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from ablate.config import BUILTIN_CORPORA, SourceConfig
from ablate.errors import ConfigError, did_you_mean, one_of
from ablate.runner.tasks import Example, task_documents, task_stream

Split = Literal["train", "heldout"]
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}
# Endless streams are seeded by the split, never by the run, so every run of a grid reads the same data.
STREAM_SEEDS: dict[str, int] = {"train": 7_919_000_001, "heldout": 7_919_000_002}


def is_stream(src: SourceConfig) -> bool:
    """True for an endless source (the synthetic streams, a benchmark task), which is cut at a token
    budget."""
    return src.kind == "task" or (src.kind == "builtin" and src.name in ("arithmetic", "bigram-backcopy"))


def is_heldout(key: str, fraction: float) -> bool:
    """The stable split: ``key`` (a relative path or topic name) is held out when its hash falls below
    ``fraction``.

    >>> is_heldout("json/decoder.py", 0.1) == is_heldout("json/decoder.py", 0.1)
    True
    """
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def stdlib_dir() -> Path:
    """The running Python's standard library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources() -> list[tuple[str, Path]]:
    """``(relative path, path)`` of every standard library ``.py`` file the built-in corpora read (both
    splits), in path order. The skipped folders are never entered (a system Python's ``site-packages`` can be
    large)."""
    lib = stdlib_dir()
    found = []
    for root, dirs, files in os.walk(lib):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        found += [Path(root, f) for f in files if f.endswith(".py")]
    return [(path.relative_to(lib).as_posix(), path) for path in sorted(found)]


def stdlib_files(split: Split, fraction: float) -> list[tuple[str, Path]]:
    """``(relative path, path)`` of the standard library's ``.py`` files in ``split``, in path order."""
    return [(rel, path) for rel, path in stdlib_sources() if is_heldout(rel,
                                                                        fraction) == (split == "heldout")]


def corpus_version(src: SourceConfig) -> str:
    """What a source's content depends on besides its config (the Python version, user files' sizes and
    mtimes): part of the token cache key, so a changed file is re-read."""
    if src.kind == "builtin":
        return f"python-{sys.version}"
    if src.kind == "task":
        return "task"
    return ";".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in user_files(src))


def documents(src: SourceConfig, split: Split, fraction: float) -> Iterator[str]:
    """The documents of one source for ``split`` (an endless iterator for streams)."""
    if src.kind == "builtin":
        if src.name == "python-code":
            return (_read(path) for _, path in stdlib_files(split, fraction))
        if src.name == "python-docs":
            return _python_docs(split, fraction)
        if src.name == "arithmetic":
            return _arithmetic(random.Random(STREAM_SEEDS[split]))
        if src.name == "bigram-backcopy":
            return _bigram_backcopy(random.Random(STREAM_SEEDS[split]))
        raise ConfigError(one_of(src.name, BUILTIN_CORPORA, what="built-in corpus"), where="data.source.name")
    if src.kind == "text":
        return (_read(p) for p in user_files(src))
    if src.kind == "jsonl":
        return _jsonl(src)
    if src.kind == "hf":
        return _hf(src, split)
    if src.kind == "task":
        assert src.name is not None  # SourceConfig requires it of a task source
        return task_documents(src.name, seed=STREAM_SEEDS[split])
    raise ConfigError(f"a '{src.kind}' source has token arrays, not documents", where="data.source.kind")


def task_examples_of(src: SourceConfig, split: Split) -> Iterator[Example]:
    """A ``task`` source's endless stream of examples (prompt, answer) for ``split``: ``documents`` gives the
    same examples as text."""
    assert src.name is not None  # SourceConfig requires it of a task source
    return task_stream(src.name, seed=STREAM_SEEDS[split])


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _python_docs(split: Split, fraction: float) -> Iterator[str]:
    import pydoc_data.topics

    for name in sorted(pydoc_data.topics.topics):
        if is_heldout(f"topic:{name}", fraction) == (split == "heldout"):
            yield pydoc_data.topics.topics[name]
    for _, path in stdlib_files(split, fraction):
        try:
            tree = ast.parse(_read(path))
        except (SyntaxError, ValueError):  # a few files are templates or another Python's grammar
            continue
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        docs = [d for node in ast.walk(tree) if isinstance(node, kinds) and (d := ast.get_docstring(node))]
        if docs:
            yield "\n\n".join(docs)


def _arithmetic(rng: random.Random) -> Iterator[str]:
    while True:
        lines = []
        for _ in range(8):
            a, b = rng.randrange(1000), rng.randrange(1000)
            op = rng.choice("+-*")
            c = a + b if op == "+" else a - b if op == "-" else a * b
            lines.append(f"{a} {op} {b} = {c}")
        yield "\n".join(lines)


LETTERS, TRIGGERS = "abcdefghijklmnopqrstuvwxyz", "012"
BACKCOPY_TRIGGER_P = 0.08
BACKCOPY_DOC_LEN = 512
_BIGRAM_SEED = 20241017  # the bigram table is part of the task: the same for both splits and every run


def bigram_table() -> dict[str, tuple[str, list[float]]]:
    """The Bigram-Backcopy task's fixed transition table: each letter's 4 likely successors (weights 8:4:2:1)
    and, rarely, any other letter."""
    rng = random.Random(_BIGRAM_SEED)
    table = {}
    for c in LETTERS:
        likely = rng.sample(LETTERS, 4)
        weights = [8.0 if x == likely[0] else 4.0 if x == likely[1] else 2.0 if x == likely[2] else
                   1.0 if x == likely[3] else 0.05 for x in LETTERS]
        table[c] = (LETTERS, weights)
    return table


def _bigram_backcopy(rng: random.Random) -> Iterator[str]:
    table = bigram_table()
    while True:
        out, prev = [], rng.choice(LETTERS)
        out.append(prev)
        while len(out) < BACKCOPY_DOC_LEN:
            if rng.random() < BACKCOPY_TRIGGER_P:
                out += [rng.choice(TRIGGERS), prev]  # the trigger, then the letter before it again
            else:
                letters, weights = table[prev]
                prev = rng.choices(letters, weights)[0]
                out.append(prev)
        yield "".join(out)


def user_files(src: SourceConfig) -> list[Path]:
    """The files a ``text``/``jsonl``/``tokens``/``hf`` path names: a file, every file under a directory, or a
    glob."""
    where = "data.source.path"
    assert src.path is not None  # SourceConfig requires it of these kinds
    path = Path(src.path).expanduser()
    if src.kind == "hf":
        if not path.is_dir():
            raise ConfigError(f"{src.path!r} is not a folder saved with datasets' save_to_disk", where=where)
        return sorted(p for p in path.rglob("*") if p.is_file())
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    else:
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
    if not files:
        raise ConfigError(f"no files match {src.path!r}", where=where)
    return files


def _jsonl(src: SourceConfig) -> Iterator[str]:
    for path in user_files(src):
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not JSON ({exc.msg})", where="data.source.path") from None
                if not isinstance(row, dict) or src.field not in row:
                    keys = sorted(row) if isinstance(row, dict) else []
                    raise ConfigError(f"{path}:{n}: no field {src.field!r}{_near(src.field, keys)}",
                                      where="data.source.field")
                yield str(row[src.field])


def _hf(src: SourceConfig, split: Split) -> Iterator[str]:
    import datasets

    assert src.path is not None  # SourceConfig requires it of an hf source
    try:
        ds = datasets.load_from_disk(str(Path(src.path).expanduser()))
    except FileNotFoundError as exc:
        raise ConfigError(f"{src.path!r} is not a saved dataset ({exc})", where="data.source.path") from None
    if isinstance(ds, datasets.DatasetDict):
        order = ["train"] if split == "train" else ["validation", "test", "heldout", "train"]
        name = next((s for s in order if s in ds), None)
        if name is None:
            raise ConfigError(f"{src.path!r} has splits {sorted(ds)}, none of {order}",
                              where="data.source.path")
        ds = ds[name]
    if src.field not in ds.column_names:
        raise ConfigError(f"{src.path!r} has no column {src.field!r}{_near(src.field, ds.column_names)}; "
                          f"columns: {', '.join(ds.column_names)}", where="data.source.field")
    for start in range(0, len(ds), 1024):
        yield from (str(t) for t in ds[start:start + 1024][src.field])


def _near(value: str, allowed: list[str]) -> str:
    return did_you_mean(value, allowed)
