"""Data that cannot work, found before anything trains: ``check_data(runs, source=)``.

``ablate plan`` and ``ablate run`` resolve every data source of every run (each training stage's too) up
front, without tokenizing anything: a named task or corpus exists, and under the byte tokenizer one example of
a task fits each of its lengths; a user's path matches files, and they are readable; and each source holds at
least ``seq_len + 1`` tokens for its split (one training row, one held-out window).
The token count is exact for token shards, and for text under the byte tokenizer (its ids are the UTF-8 bytes,
plus one end-of-document token per document); for a learned tokenizer, whose tokens each cover one byte or
more, the file sizes give an upper bound, so what fails here cannot work, and what passes may still be too
short for a tokenizer that packs many bytes per token (the run then fails and says so).

A failure is one ``ConfigError``: the grid file, the source's field path, the value, what would work.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from ablate.config import DataConfig, RunConfig, SourceConfig, stage_configs
from ablate.errors import ConfigError
from ablate.runner.corpora import Split, stdlib_files, user_files
from ablate.runner.data import read_shard
from ablate.runner.tasks import TASKS, parse_task_spec, task_examples
from ablate.runner.tokenizers import check_tokenizer

_STREAMS = ("arithmetic", "bigram-backcopy")
_STDLIB_SURELY = 65_536  # tokens that 1% of the standard library's files surely hold (10 MB of .py at 90%)


def check_data(runs: Iterable[Any], *, source: str | os.PathLike[str] | None = None) -> None:
    """Raise ``ConfigError`` for the first data source of ``runs`` (PlannedRuns or RunConfigs) that cannot
    work.

    Each distinct data config is checked once, so a 10,000-run grid costs what its few data configs cost.
    """
    for i, data in _distinct_data(runs):
        _check(data, where=f"{source}: " if source else "", stage=i)


def _distinct_data(runs: Iterable[Any]) -> Iterator[tuple[int, DataConfig]]:
    """``(stage, data)`` of each distinct data config of ``runs`` (each stage's too), the first time it comes.
    A planned grid's runs share their data sections' objects (``ablate.grid.expand``), so a run is dumped
    only when it holds one not seen before."""
    seen_objects: dict[int, DataConfig] = {}  # holding each one: an id is not reused while it is here
    seen: set[str] = set()
    for run in runs:
        config: RunConfig = getattr(run, "config", run)
        for i, stage in enumerate(stage_configs(config) if config.stages else [config]):
            if id(stage.data) in seen_objects:
                continue
            seen_objects[id(stage.data)] = stage.data
            key = stage.data.model_dump_json()
            if key not in seen:
                seen.add(key)
                yield i, stage.data


def check_tokenizers(runs: Iterable[Any], *, source: str | os.PathLike[str] | None = None) -> None:
    """Raise ``ConfigError`` for the first run whose tokenizer cannot be made or does not fit its model's
    vocabulary (``tokenizers.check_tokenizer``: an ``hf:`` one is loaded from this machine's files; one that
    is not here is an ``InputMissingError``, which ``ablate plan`` only warns of, as of missing data). Each
    distinct tokenizer and vocabulary once; stages keep both (``STAGE_FIXED_DATA_FIELDS``)."""
    seen: set[tuple[Any, ...]] = set()
    for run in runs:
        config: RunConfig = getattr(run, "config", run)
        data, model = config.data, config.model
        key = (data.tokenizer, data.bpe_vocab_size, model.vocab_size, data.tokenizer == "bpe" and all(
            s.kind == "tokens" for s in data.train))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_tokenizer(data, model)
        except ConfigError as exc:
            field = exc.where or "data.tokenizer"  # InputMissingError stays one: plan only warns of it
            raise type(exc)(str(exc).removeprefix(f"{field}: "),
                            where=f"{source}: {field}" if source else field) from None


def _check(data: DataConfig, *, where: str, stage: int) -> None:
    at = f" (training stage {stage})" if stage else ""
    for i, src in enumerate(data.train):
        _source(src, "train", data, f"{where}data.train.{i}", at)
    for name, src in data.heldout.items():
        _source(src, "heldout", data, f"{where}data.heldout.{name}", at)


def _source(src: SourceConfig, split: Split, data: DataConfig, where: str, at: str) -> None:
    need = data.seq_len + 1
    if src.kind == "task":
        _task(str(src.name), byte=data.tokenizer == "byte", where=where)
        tokens, exact = data.stream_tokens, True
        what = f"task {src.name!r} is cut at data.stream_tokens = {data.stream_tokens} tokens"
    elif src.kind == "builtin" and src.name in _STREAMS:
        tokens, exact = data.stream_tokens, True
        what = f"the {src.name!r} stream is cut at data.stream_tokens = {data.stream_tokens} tokens"
    elif src.kind == "builtin":
        if need <= _STDLIB_SURELY and 0.01 <= data.heldout_fraction <= 0.99:
            return  # each split of the standard library holds far more (measuring it walks the library: ~2 s)
        # python-code under the byte tokenizer is its bytes; python-docs is a part of the same files
        tokens, exact = (
            _stdlib_bytes(split, data.heldout_fraction),
            data.tokenizer == "byte" and src.name == "python-code",
        )
        what = f"the {split} split of {src.name!r} holds {'' if exact else 'at most '}{tokens} tokens"
    else:
        files = _files(src, where)
        tokens, exact = _user_tokens(src, files, data)
        what = (f"{src.path!r} ({len(files)} file{'s' * (len(files) != 1)}) holds "
                f"{'' if exact else 'at most '}{tokens} tokens")
    if tokens < need:
        raise ConfigError(f"{what}{at}, fewer than data.seq_len + 1 = {need} (one row of seq_len tokens and "
                          "its next token): use a smaller data.seq_len or more data", where=where)


def _task(spec: str, *, byte: bool, where: str) -> None:
    """A ``kind: task`` spec names a task, and under the byte tokenizer (whose lengths are exact: an example
    that cannot fit fails every run) one example fits each of its lengths (its fixed part, needles and
    query)."""
    try:
        name, lengths = parse_task_spec(spec)
        if byte:
            for length in lengths or TASKS[name].default_lengths:
                task_examples(name, seed=0, length=length, n=1)
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix(f"{exc.where}: "), where=f"{where}.name") from None


def _files(src: SourceConfig, where: str) -> list[Path]:
    try:
        files = user_files(src)
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix(f"{exc.where}: "), where=f"{where}.path") from None
    for path in files:
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{str(path)!r} is not readable (permissions)", where=f"{where}.path")
    return files


def _user_tokens(src: SourceConfig, files: list[Path], data: DataConfig) -> tuple[int, bool]:
    """(tokens, exact) of a user's source, from the files' sizes alone."""
    if src.kind == "tokens":
        return sum(len(read_shard(p, src.dtype)) for p in files), True
    size = sum(p.stat().st_size for p in files)
    if src.kind == "text":  # one document per file, each ended by an end-of-document token
        return size + len(files), data.tokenizer == "byte"
    return size, False  # JSON lines and saved datasets: their text is at most the bytes that hold it


@cache
def _stdlib_bytes(split: Split, fraction: float) -> int:
    """Bytes of the standard library's files in ``split``: the built-in corpora's size (``python-docs`` is a
    part of the same files, so this bounds it too)."""
    return sum(path.stat().st_size + 1 for _, path in stdlib_files(split, fraction))


def heldout_warnings(runs: Iterable[Any], *, source: str | os.PathLike[str] | None = None) -> list[str]:
    """One line for each held-out set of ``runs`` that reads a training source's files (only built-in corpora
    are split into train and held-out: a user's file is read whole by every split that names it), and for a
    saved dataset with no held-out split named by both. Each distinct data config is looked at once."""
    out: list[str] = []
    for _, data in _distinct_data(runs):
        out += [line for line in _overlaps(data, f"{source}: " if source else "") if line not in out]
    return out


def _overlaps(data: DataConfig, where: str) -> list[str]:
    def files(src: SourceConfig) -> set[Path]:
        if src.kind not in ("text", "jsonl", "tokens", "hf"):
            return set()
        try:
            return {p.resolve() for p in user_files(src)}
        except (ConfigError, OSError):
            return set()  # check_data says what is wrong

    train = [(i, files(src)) for i, src in enumerate(data.train)]
    out = []
    for name, src in data.heldout.items():
        held = files(src)
        for i, tfiles in train:
            shared = held & tfiles
            if not shared or (src.kind == "hf" and _has_heldout_split(Path(str(src.path)))):
                continue
            out.append(f"{where}data.heldout.{name} reads the training data of data.train.{i} ({len(shared)} "
                       f"file{'s' * (len(shared) != 1)}, e.g. {min(shared)}): only built-in corpora are "
                       "split into train and held-out, so its perplexity is measured on text the model "
                       "trained on; give the held-out set its own file")
    return out


def _has_heldout_split(folder: Path) -> bool:
    """Does a dataset saved with ``save_to_disk`` have a split the held-out sets read (not ``train``)?"""
    import json

    try:
        splits = json.loads((folder.expanduser() / "dataset_dict.json").read_text()).get("splits", [])
    except (OSError, ValueError, AttributeError):
        return False
    return any(s in splits for s in ("validation", "test", "heldout"))
