"""A lock file per run directory: who is training a run right now, on this machine.

The worker that trains a run holds an ``flock`` on ``run_dir/.lock``; the kernel drops it when that process
dies, however it dies (``kill -9`` included). So a ``running`` run whose lock is free was cut off and can be
resumed at once, without waiting for its heartbeat to go stale, and two ``ablate run`` on one machine never
train the same run together.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class RunLock:
    """A non-blocking exclusive lock on one run directory (``acquire`` -> bool, ``release``; a context
    manager)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; ``False`` when another live process does."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        """Drop the lock (a no-op when not held)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(run_dir: Path) -> bool:
    """Whether a live process on this machine holds ``run_dir``'s lock."""
    if not (Path(run_dir) / LOCK_FILE).exists():
        return False
    lock = RunLock(run_dir)
    if lock.acquire():
        lock.release()
        return False
    return True


def holder_pid(run_dir: Path) -> int | None:
    """The pid the holder of ``run_dir``'s lock wrote into it (None when unreadable)."""
    try:
        text = (Path(run_dir) / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
