"""The first process of a training command's process group, run as a script (``python -I -S guard.py PARENT
GRACE -- COMMAND...``): it starts the command, and no process the command started outlives it or ablate.

Why a process of its own:
- A parent-death signal reaches only the process that set it: set on the command, it would kill the script and
  leave its DataLoader workers running. Set here, it makes this process end everything below it. It is set
  with ``prctl(PR_SET_PDEATHSIG)`` and then the parent is checked, since ablate may have died before it was
  set. The signal fires when the *thread* that started this process exits, so ``process`` starts it from a
  thread that lives as long as ablate.
- Some launchers put their workers in sessions of their own (torchrun's ranks are each a session), which a
  signal to the group misses; and when a launcher dies, its workers are orphaned. This process is a child
  subreaper (``PR_SET_CHILD_SUBREAPER``): orphans below it become its children, never init's, so it can always
  find and end them.

SIGTERM and SIGINT to the group reach the command directly; here they only wait for it, so that the command's
exit status is this process's (a command killed by a signal makes this process die by the same signal). When
the command ends, what it left behind gets SIGTERM, then SIGKILL after GRACE seconds. If ablate dies, the
same happens to everything below this process, then this process kills its group.

Nothing is imported from ablate: the script starts in a few tens of milliseconds, and ``process`` imports the
``/proc`` readers from here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36  # linux/prctl.h
PARENT_GONE = signal.SIGHUP  # the parent-death signal; the group has no terminal that would send it
_POLL_S = 0.05


def processes() -> dict[int, tuple[bytes, int, int]]:
    """``pid -> (state, ppid, pgrp)`` of every process, from ``/proc`` (empty where there is none)."""
    table: dict[int, tuple[bytes, int, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        stat = f.read()
                except OSError:
                    continue  # it ended while we looked
                fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
                table[int(name)] = fields[0], int(fields[1]), int(fields[2])
    return table


def _live(state: bytes) -> bool:
    return state not in (b"Z", b"X")  # a zombie holds no memory: it only waits to be reaped


def descendants(root: int) -> list[int]:
    """The live processes below ``root``, parents before their children."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        todo += children.get(pid, [])
        if _live(table[pid][0]):
            out.append(pid)
    return out


def group_members(pgid: int) -> list[int]:
    """The live processes of group ``pgid``: from ``/proc`` on Linux; elsewhere ``[pgid]`` while any is
    left."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    return [pid for pid, (state, _, pgrp) in processes().items() if pgrp == pgid and _live(state)]


def end_descendants(grace_s: float) -> None:
    """SIGTERM to every process below this one, then SIGKILL to what is left after ``grace_s``; orphans that
    come to this process meanwhile (as a subreaper) are reaped."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _reap() and descendants(os.getpid()):
            time.sleep(_POLL_S)


def _reap() -> bool:
    """Reap the children that have ended; True (to go on polling)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    return True


def _end_all(grace_s: float) -> None:
    """ablate is gone: end everything below this process, then its group, this process included (only the
    group it leads, in case it was started some other way)."""
    end_descendants(grace_s)
    os.killpg(0, signal.SIGKILL) if os.getpgrp() == os.getpid() else os.kill(os.getpid(), signal.SIGKILL)


def _wait_only(signum: int, frame: object) -> None:
    """The group was asked to stop: the command got the signal too; keep waiting for it."""


def main(argv: list[str]) -> int:
    """Start ``argv[4:]`` (after ``PARENT GRACE --``), wait for it, end what it left, and exit as it did."""
    parent, grace_s, command = int(argv[1]), float(argv[2]), argv[4:]
    signal.signal(PARENT_GONE, lambda signum, frame: _end_all(grace_s))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _wait_only)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
        libc.prctl(PR_SET_PDEATHSIG, int(PARENT_GONE))
    if os.getppid() != parent:  # ablate died before the signal was set: nobody would send it
        _end_all(0.0)
    pid = os.fork()
    if pid == 0:
        for sig in (PARENT_GONE, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"ablate: cannot run {command[0]!r}: {exc.strerror}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    end_descendants(grace_s)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
