"""Fingerprints of what a run reads outside its config: the fillers of its identity fields
(``ablate.grid.identity``).

- A file's fingerprint is the sha256 of its bytes. ``Fingerprints`` keeps them by absolute path with the
  file's size and mtime, in memory and in ``<cache>/fingerprints.json``: a file is read again only when its
  size or mtime changed, so planning 10,000 runs reads each distinct file at most once, and a second plan
  reads none. A file modified in the last few seconds is not written to the cache (its mtime may not yet tell
  a later change).
- A ``text``/``jsonl``/``tokens``/``hf`` source (``fill_source``): its path made absolute (a relative one is
  read from the directory ablate runs in), and the hash of its files' fingerprints with their names relative
  to the folder or glob they were found under.
- A built-in corpus read from files (``python-code``, ``python-docs``): the Python version and the standard
  library files both are read from. A synthetic stream or a task has none: ablate's code makes it.
- An ``hf:`` tokenizer (``fill_tokenizer``): a local folder's path made absolute, and the hash of the
  tokenizer's files (the folder's files, weights left out), found where transformers would find them (a local
  folder, else the Hugging Face cache; nothing is downloaded). A ``bpe`` tokenizer is what it is trained from:
  ``data.train``.

Nothing here tokenizes or opens a dataset. What is not here (a path that matches no file) is an
``InputMissingError``: loading a grid leaves the fingerprint None (the data check then says what is wrong),
``ablate db rehash`` cannot carry the run.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ablate.config import DataConfig, SourceConfig
from ablate.errors import ConfigError, InputMissingError
from ablate.layout import atomic_write
from ablate.runner.corpora import stdlib_sources, user_files

log = logging.getLogger(__name__)

FINGERPRINT_LENGTH = 16  # hex digits kept (64 bits)
CACHE_FILE = "fingerprints.json"
SETTLE_S = 2.0  # a file modified this recently is hashed but not cached
USER_KINDS = ("text", "jsonl", "tokens", "hf")
FILE_CORPORA = ("python-code", "python-docs")  # built-in corpora read from the standard library's files
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf",
                   ".npz")

_MEMORY: dict[str, tuple[int, int, str]] = {}  # path -> (size, mtime_ns, sha256): shared by every instance


class Fingerprints:
    """File fingerprints, cached by (path, size, mtime) in memory and, given ``cache_dir``, on disk."""

    def __init__(self, cache_dir: Path | None = None, *, home: Path | None = None):
        self.cache_file = Path(cache_dir) / CACHE_FILE if cache_dir is not None else None
        self.home = home  # the cache is written only once it exists (planning creates no home)
        self._disk: dict[str, list[Any]] | None = None
        self._new: dict[str, list[Any]] = {}
        self._builtin: str | None = None

    @classmethod
    def for_home(cls, home: Path) -> Fingerprints:
        """The fingerprints of a home: cached in ``$ABLATE_CACHE``, else ``<home>/cache`` (as token arrays
        are), written only when the home exists."""
        if os.environ.get("ABLATE_CACHE"):
            return cls(Path(os.environ["ABLATE_CACHE"]))
        return cls(Path(home) / "cache", home=Path(home))

    def file(self, path: Path) -> str:
        """The sha256 (hex) of ``path``'s bytes, read only when its size or mtime is not the cached one."""
        key = str(path)
        st = path.stat()
        mem = _MEMORY.get(key)
        if mem is not None and mem[:2] == (st.st_size, st.st_mtime_ns):
            return mem[2]
        disk = self._on_disk().get(key)
        if disk is not None and tuple(disk[:2]) == (st.st_size, st.st_mtime_ns):
            digest = str(disk[2])
        else:
            with path.open("rb") as fh:
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
            if time.time() - st.st_mtime > SETTLE_S:
                self._new[key] = [st.st_size, st.st_mtime_ns, digest]
        _MEMORY[key] = (st.st_size, st.st_mtime_ns, digest)
        return digest

    def files(self, files: list[Path], base: Path) -> str:
        """One fingerprint of several files: their names relative to ``base`` and their contents."""
        lines = sorted(f"{_relative(p, base)}\t{self.file(p)}" for p in files)
        return _short("\n".join(lines))

    def builtin(self) -> str:
        """The fingerprint of the corpora read from the standard library: the Python version and its files."""
        if self._builtin is None:
            lines = [f"python {sys.version}", *(f"{rel}\t{self.file(p)}" for rel, p in stdlib_sources())]
            self._builtin = _short("\n".join(lines))
        return self._builtin

    def save(self) -> None:
        """Write what was hashed since the last save into the disk cache (merged with what another process
        wrote meanwhile); nothing when there is no cache, nothing new, no home yet, or the cache cannot be
        written."""
        if self.cache_file is None or not self._new or (self.home is not None and not self.home.is_dir()):
            return
        merged = {**_read_cache(self.cache_file), **self._new}
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.cache_file, json.dumps({"version": 1, "files": merged}, separators=(",", ":")))
        except OSError as exc:  # a cache: the next command hashes again
            log.info("cannot write the fingerprint cache %s: %s", self.cache_file, exc)
            return
        self._disk, self._new = merged, {}

    def _on_disk(self) -> dict[str, list[Any]]:
        if self._disk is None:
            self._disk = _read_cache(self.cache_file) if self.cache_file is not None else {}
        return self._disk


def _read_cache(path: Path) -> dict[str, list[Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_LENGTH]


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def absolute(path: str) -> str:
    """``path`` as an absolute path (``~`` expanded; relative to the working directory; symlinks resolved in
    its folders), a glob's pattern kept as written after its fixed folders.

    >>> absolute("/data/../data/train-*.bin")
    '/data/train-*.bin'
    """
    parts = Path(os.path.expanduser(path)).parts
    fixed = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
    head = Path(*parts[:fixed]) if fixed else Path(".")
    return str(Path(head.resolve(), *parts[fixed:]))


def glob_base(path: str) -> Path:
    """The folder a source's files are named relative to: the folder itself, a file's folder, a glob's fixed
    folders."""
    p = Path(path)
    if p.is_dir():
        return p
    parts = p.parts
    fixed = next((i for i, s in enumerate(parts) if glob.has_magic(s)), len(parts))
    return Path(*parts[:fixed]) if fixed < len(parts) else p.parent


def fill_source(src: SourceConfig, fingerprints: Fingerprints) -> dict[str, Any]:
    """A source's identity: ``{"fingerprint": ...}`` (and its ``path`` made absolute); see the module
    docstring."""
    if src.kind == "builtin":
        return {"fingerprint": fingerprints.builtin()} if src.name in FILE_CORPORA else {}
    if src.kind not in USER_KINDS or not src.path:
        return {}
    path = absolute(src.path)
    try:
        files = user_files(src.model_copy(update={"path": path}))
        return {"path": path, "fingerprint": fingerprints.files(files, glob_base(path))}
    except (ConfigError, OSError) as exc:
        why = str(exc).removeprefix(f"{getattr(exc, 'where', None)}: ")
        raise InputMissingError(f"cannot read {path!r}: {why}", where="data.source.path",
                                updates={"path": path}) from None


def fill_tokenizer(data: DataConfig, fingerprints: Fingerprints) -> dict[str, Any]:
    """An ``hf:`` tokenizer's identity: ``{"tokenizer_fingerprint": ...}`` (and a local folder's path made
    absolute); nothing for ``byte`` and ``bpe``."""
    spec = data.tokenizer
    if not spec.startswith("hf:") or len(spec) <= 3:
        return {}
    name = spec[3:]
    local = Path(os.path.expanduser(name))
    updates: dict[str, Any] = {}
    if local.is_dir():
        folder: Path | None = Path(absolute(name))
        updates["tokenizer"] = f"hf:{folder}"
    else:
        folder = _hub_folder(name)
    files = tokenizer_files(folder) if folder is not None else []
    if folder is None or not files:
        raise InputMissingError(f"tokenizer {spec!r} is not on this machine (a local folder, or the Hugging "
                                "Face cache)", where="data.tokenizer", updates=updates)
    return {**updates, "tokenizer_fingerprint": fingerprints.files(files, folder)}


def tokenizer_files(folder: Path) -> list[Path]:
    """A tokenizer folder's files (not its subfolders), model weights left out."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                  and not p.name.endswith(WEIGHT_SUFFIXES) and not p.name.endswith(".index.json"))


def _hub_folder(name: str) -> Path | None:
    """The Hugging Face cache's snapshot folder of ``name`` (as ``from_pretrained(local_files_only=True)``
    finds it), or None when it is not there."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for filename in ("tokenizer_config.json", "tokenizer.json", "config.json"):
        try:
            hit = try_to_load_from_cache(name, filename)
        except ValueError:  # not a repository id
            return None
        if isinstance(hit, str):
            return Path(hit).parent
    return None
