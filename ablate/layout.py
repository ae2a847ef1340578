"""Where things live in ``ABLATE_HOME``, and how a file is written so that a reader never sees half of it.

Defined once here and called from everywhere else:

- ``run_dir(home, run_id)``: ``$ABLATE_HOME/runs/<run_id>``, a run's directory (checkpoints, ``result.json``,
  ``train.log``, ``error.txt``).
- ``CHECKPOINT``: the run directory's resumable checkpoint, ``checkpoints/last.ckpt``.
- ``atomic_path(final)``: a temporary path beside ``final`` that becomes ``final`` (``os.replace``) only when
  the block that writes it succeeds (a write that fails for want of space is a ``DiskFullError`` naming
  ``final``: ``disk_full``); ``atomic_write(final, data)`` for text or bytes; ``atomic_dir(out)`` for a
  folder of files (an export).
- ``runs_dir(home)``: ``$ABLATE_HOME/runs``, where every run directory lives; ``usable_home(home)`` checks,
  before anything starts, that it can hold them (one line, exit 2, otherwise).
- ``file_lock(path)``: a blocking lock, so that processes that want one file made at once make it once.
- ``pick_run(ref, found)``: the one run a run id or its first characters names (``find_run_dir`` among the
  run directories; the store's ``resolve_run`` among its runs).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ablate.errors import DiskFullError, UserInputError

RUNS_DIR = "runs"
CHECKPOINT = Path("checkpoints") / "last.ckpt"


def runs_dir(home: str | os.PathLike[str]) -> Path:
    """The directory holding every run directory of ``home``."""
    return Path(home) / RUNS_DIR


def usable_home(home: str | os.PathLike[str]) -> Path:
    """``home``, proven able to hold run directories (its ``runs`` folder made, a file made and removed there,
    then the folders it made removed again: a check leaves nothing); a ``UserInputError`` naming the folder
    and the reason when it is a file, or cannot be created or written."""
    home = Path(home)
    runs = runs_dir(home)
    if home.exists() and not home.is_dir():
        raise UserInputError(f"ABLATE_HOME {home} is a file, not a directory: point --home (or ABLATE_HOME) "
                             "at a directory for run directories and the default stores")
    made = [p for p in (runs, *runs.parents) if not p.exists()]
    try:
        for attempt in range(5):  # another process checking the same new home may remove the folder just made
            runs.mkdir(parents=True, exist_ok=True)
            try:
                fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=runs)
                break
            except FileNotFoundError:
                if attempt == 4:
                    raise
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserInputError(f"ABLATE_HOME {home} cannot hold run directories ({runs}: "
                             f"{exc.strerror or exc}): use a writable --home (or ABLATE_HOME)") from None
    finally:
        for path in made:  # innermost first
            with contextlib.suppress(OSError):
                path.rmdir()
    return home


def run_dir(home: str | os.PathLike[str], run_id: str) -> Path:
    """A run's directory under ``home``.

    >>> str(run_dir("ablate-runs", "0123abcd4567"))
    'ablate-runs/runs/0123abcd4567'
    """
    return runs_dir(home) / run_id


def pick_run(ref: str, found: Iterable[str], *, where: str) -> str:
    """The run ``ref`` names among ``found`` (the ids that begin with it): itself, or the one id it begins (as
    git does with commits). A ``UserInputError`` otherwise, naming the candidates or saying where none was
    found. ``show``, ``diff``, ``eval`` (through the store) and ``export`` (through the run directories) all
    resolve so.

    >>> pick_run("07d8", ["07d81c2e9f00"], where="the store")
    '07d81c2e9f00'
    """
    ref, found = ref.strip(), sorted(i for i in found if i.startswith(ref.strip()))
    if ref and ref in found:
        return ref
    if ref and len(found) == 1:
        return found[0]
    if ref and found:
        raise UserInputError(f"run {ref!r} is ambiguous: it begins {', '.join(found)}; give more of the id")
    raise UserInputError(f"no run {ref!r} in {where} (see `ablate runs`)")


def find_run_dir(home: str | os.PathLike[str], ref: str) -> Path:
    """The run directory of ``home`` that ``ref`` (a run id or its first characters) names (``pick_run``)."""
    runs = runs_dir(home)
    found = [p.name for p in runs.glob(f"{glob.escape(ref.strip())}*") if p.is_dir()] if ref.strip() else []
    return run_dir(home, pick_run(ref, found, where=str(runs)))


FULL_BELOW = 1 << 20  # a write that failed where less than this is free failed for want of space


def disk_full(exc: BaseException, path: str | os.PathLike[str]) -> DiskFullError | None:
    """``exc``, raised by a write to ``path``, as the ``DiskFullError`` it is when the disk is full: an ENOSPC
    or EDQUOT anywhere in its chain, or a failed write (numpy and torch report a short one without an errno)
    where under ``FULL_BELOW`` bytes are left. None for any other failure. Look before the partial file is
    removed."""
    if isinstance(exc, DiskFullError):
        return exc
    path = Path(path).absolute()
    seen: set[int] = set()
    cause: BaseException | None = exc
    errno_full = False
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        errno_full = errno_full or getattr(cause, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        cause = cause.__cause__ or cause.__context__
    where = next((p for p in (path, *path.parents) if p.exists()), None)
    usage = shutil.disk_usage(where) if where is not None else None
    short = isinstance(exc, OSError | RuntimeError) and usage is not None and usage.free < FULL_BELOW
    if not (errno_full or short):
        return None
    room = f" ({_mb(usage.free)} free of {_mb(usage.total)})" if usage is not None else ""
    return DiskFullError(f"no space left on device: cannot write {path}{room}; free some space there, or "
                         "give ablate a larger disk (--home, ABLATE_CACHE)")


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temporary path in ``final``'s directory (same suffix); rename it onto ``final`` on
    success.

    >>> import tempfile, numpy as np                                # doctest: +SKIP
    >>> with atomic_path(Path(d) / "tokens.npy") as tmp:            # doctest: +SKIP
    ...     np.save(tmp, arr)
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{final.suffix}", dir=final.parent)
    # mkstemp makes 0600; the final file gets what open() would have given it
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    tmp = Path(name)
    with partial_removed(tmp, final):
        yield tmp
        os.replace(tmp, final)


@contextlib.contextmanager
def partial_removed(tmp: str | os.PathLike[str], final: str | os.PathLike[str]) -> Iterator[None]:
    """Around the writing of ``tmp``, which is to become ``final``: when it fails, ``tmp`` is removed, and a
    failure for want of space is raised as the ``DiskFullError`` that names ``final``."""
    try:
        yield
    except BaseException as exc:
        full = disk_full(exc, final)  # looked at before the partial file is removed
        Path(tmp).unlink(missing_ok=True)
        if full is not None:
            raise full from exc
        raise


def default_mode(path: str | os.PathLike[str]) -> None:
    """Give ``path`` the mode ``open()`` gives a new file (0644 under the usual umask), whatever wrote it (a
    library that writes through a private temporary file leaves 0600)."""
    os.chmod(path, 0o666 & ~_umask())


def atomic_write(final: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``final`` atomically (flushed to disk before the rename); return ``final``."""
    with atomic_path(final) as tmp, open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(final)


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block, waiting while another
    process holds it: for a file that must be made once however many processes want it at the same moment (a
    shared source tokenized into the cache, a new MLflow store); the others wait, then find it made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """``with atomic_dir(out) as tmp``: what is written into ``tmp`` lands in ``out`` only when the block
    succeeds (``out`` is created, or its same-named files replaced; other files in it are kept)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; the folder gets what mkdir() would have given it
    try:
        yield tmp
        if not out.exists():
            os.replace(tmp, out)
        else:
            for path in sorted(tmp.iterdir()):
                os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@functools.cache
def _umask() -> int:
    """The process's umask (read once: reading it means setting it, which is not thread-safe)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
