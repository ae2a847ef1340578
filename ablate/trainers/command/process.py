"""A training command running in a process group of its own, its output read as it comes, and stopped whole.

- The command's group is led by ``guard.py``, which starts the command and ends everything below it if this
  process dies, even by SIGKILL (a parent-death signal, set on the guard and checked against the race with
  this process's exit), or when the command ends and leaves processes behind. The guard is started from one
  thread that lives as long as this process, since the parent-death signal fires when the thread that started
  the child exits.
- ``stop()`` sends SIGTERM to the whole group (DataLoader workers; torchrun's agent, which passes it to its
  ranks), then SIGKILL after a grace period to the group and to every process below the guard (torchrun's
  ranks are sessions of their own, out of the group's reach).
- Each stdout line goes to a callback (the metrics parser) as it is printed; the last lines of stderr are
  kept for the run's failure message.

>>> import sys
>>> lines = []
>>> outcome = run([sys.executable, "-c", "print('step 1: loss 2.5')"], cwd=".", env=None,
...               on_stdout=lines.append)
>>> lines, outcome.exit_code, outcome.reason
(['step 1: loss 2.5'], 0, None)
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ablate.trainers.command.guard import descendants, group_members

log = logging.getLogger(__name__)

GUARD = Path(__file__).with_name("guard.py")
LINE_CHARS = 2000  # a kept stderr line is cut to this
_POLL_S = 0.05
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ablate-spawn")  # a thread that outlives runs


@dataclass(frozen=True)
class CommandOutcome:
    """How a command ended: its exit code (``-N`` when signal N killed it; None when it never started), its
    wall time, the last lines of its stderr, and why it failed (None when it exited 0 and was not stopped)."""

    exit_code: int | None
    wall_s: float
    stderr_tail: tuple[str, ...]
    reason: str | None

    @property
    def ok(self) -> bool:
        """Did the command exit 0 by itself?"""
        return self.reason is None


def describe_exit(code: int) -> str:
    """``exited with status 1`` or ``was killed by SIGKILL``."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class CommandProcess:
    """One command, started in a new process group (``start``), read live, waited for (``wait``) and
    stoppable from any thread (``stop``)."""

    def __init__(self, argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None,
                 on_stdout: Callable[[str], None] | None = None,
                 on_stderr: Callable[[str], None] | None = None,
                 tail_lines: int = 50, grace_s: float = 10.0):
        self.argv, self.cwd, self.env = list(argv), Path(cwd), None if env is None else dict(env)
        self.on_stdout, self.on_stderr = on_stdout, on_stderr
        self.grace_s = grace_s
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._popen: subprocess.Popen[bytes] | None = None
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._start_error: str | None = None
        self._started = self._ended = 0.0
        self._outcome: CommandOutcome | None = None

    @property
    def pgid(self) -> int | None:
        """The process group's id (the guard's pid), once started."""
        return self._popen.pid if self._popen is not None else None

    def start(self) -> CommandProcess:
        """Start the command; a command that cannot start (a missing folder) ends at once with that reason."""
        self._started = time.monotonic()
        argv = [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(self.grace_s), "--", *self.argv]
        spawned = _spawner.submit(subprocess.Popen, argv, cwd=self.cwd, env=self.env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        try:
            self._popen = spawned.result()
        except OSError as exc:
            self._start_error = f"the command could not be started: {exc}"
            self._ended = time.monotonic()
            return self
        except BaseException:  # Ctrl-C as it starts: it starts all the same, and ``stop`` must reach it
            with contextlib.suppress(Exception):
                self._popen = spawned.result()
            raise
        assert self._popen.stdout is not None and self._popen.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self._popen.stdout, self._stdout_line), daemon=True,
                             name="ablate-stdout"),
            threading.Thread(target=self._read, args=(self._popen.stderr, self._stderr_line), daemon=True,
                             name="ablate-stderr")]
        for reader in self._readers:
            reader.start()
        return self

    def stop(self, reason: str = "stopped", grace_s: float | None = None) -> None:
        """Stop the whole group: SIGTERM, then SIGKILL to what is left after ``grace_s`` (default: the
        process's). Returns when no process of the group is left. The first reason given is the run's."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
        if self._popen is not None:
            self._end_group(self.grace_s if grace_s is None else grace_s)

    def wait(self, timeout: float | None = None) -> CommandOutcome | None:
        """The outcome once the command has ended and its group is gone, or None after ``timeout`` seconds."""
        if self._outcome is not None:
            return self._outcome
        if self._popen is not None:
            try:
                code: int | None = self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
            self._ended = time.monotonic()
            if group_members(self._popen.pid):  # the command left processes behind: stop them too
                self._end_group(self.grace_s)
            for reader in self._readers:
                reader.join(timeout=5.0)  # a process that left the group may still hold the pipes
        else:
            code = None
        self._outcome = CommandOutcome(code, round(self._ended - self._started, 3), tuple(self.stderr_tail),
                                self._reason(code))
        return self._outcome

    def _reason(self, code: int | None) -> str | None:
        if self._start_error is not None:
            return self._start_error
        if self._stop_reason is not None:
            return self._stop_reason
        assert code is not None
        return None if code == 0 else f"the command {describe_exit(code)}"

    def _end_group(self, grace_s: float) -> None:
        """SIGTERM to the group; after ``grace_s``, SIGKILL to it and to every process below the guard (a
        launcher's workers in sessions of their own); return once none is left."""
        assert self._popen is not None
        pgid = self._popen.pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            for pid in descendants(pgid) if sig == signal.SIGKILL else ():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait_s
            while group_members(pgid) or descendants(pgid):
                if time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_S)
            else:
                return

    def _read(self, pipe: IO[bytes], handle: Callable[[str], None]) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                handle(raw.decode("utf-8", "replace").rstrip("\r\n"))

    def _stdout_line(self, line: str) -> None:
        if self.on_stdout is None:
            return
        try:
            for part in line.split("\r") if "\r" in line else (line,):  # a progress bar's redraws
                self.on_stdout(part)
        except Exception as exc:  # a failing handler stops the run, never the reading of its output
            log.exception("reading the command's output failed")
            self.on_stdout = None
            why = f"reading its output failed: {exc!r}"
            threading.Thread(target=self.stop, args=(why,), daemon=True).start()

    def _stderr_line(self, line: str) -> None:
        line = line.rsplit("\r", 1)[-1][-LINE_CHARS:]
        self.stderr_tail.append(line)
        if self.on_stderr is not None:
            self.on_stderr(line)


def run(argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None,
        on_stdout: Callable[[str], None] | None = None, every: Callable[[], None] | None = None,
        every_s: float = 1.0, tail_lines: int = 50, grace_s: float = 10.0) -> CommandOutcome:
    """Run a command to its end: ``every()`` is called each ``every_s`` seconds while it runs (a JSONL file
    read, a live status, a pruning check that may call ``stop``). Any exception here, Ctrl-C included, stops
    the whole group before it goes on up."""
    proc = CommandProcess(argv, cwd=cwd, env=env, on_stdout=on_stdout, tail_lines=tail_lines, grace_s=grace_s)
    try:
        proc.start()
        while (outcome := proc.wait(timeout=every_s)) is None:
            if every is not None:
                every()
        if every is not None:
            every()  # what the command wrote last
        return outcome
    except BaseException:
        proc.stop("stopped: interrupted")
        raise


@contextlib.contextmanager
def stop_on_signals(proc: CommandProcess,
                    signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Within the block, ``signals`` stop ``proc``'s group (from a thread of their own, so the handler returns
    at once) instead of their usual effect. Call it from the main thread, as Python's signal handlers are."""

    def handler(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        threading.Thread(target=proc.stop, args=(f"stopped by {name}",), daemon=True).start()

    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
