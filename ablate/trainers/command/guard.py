"""The first process of a training command's process group, run as a script (``python -I -S guard.py PARENT
-- COMMAND...``): it starts the command and ends the whole group if ablate dies.

Why a process of its own: a parent-death signal reaches only the process that set it, so set on the command
it would kill the script and leave its DataLoader workers and torchrun's ranks running. Set here, it makes
this process kill the whole group (``SIGKILL``), workers included. It is set with ``prctl(PR_SET_PDEATHSIG)``
and then the parent is checked, since ablate may have died before it was set. The signal fires when the
*thread* that started this process exits, so ``process`` starts it from a thread that lives as long as ablate.

SIGTERM and SIGINT to the group reach the command directly; here they only wait for it, so that the command's
exit status is this process's (a command killed by a signal makes this process die by the same signal).
Nothing is imported from ablate: the script starts in a few tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_GONE = signal.SIGHUP  # the parent-death signal; the group has no terminal that would send it


def _end_group(signum: int = 0, frame: object = None) -> None:
    """ablate is gone: kill the whole group, this process included (only the group this process leads, in
    case it was started some other way)."""
    os.killpg(0, signal.SIGKILL) if os.getpgrp() == os.getpid() else os.kill(os.getpid(), signal.SIGKILL)


def _wait_only(signum: int, frame: object) -> None:
    """The group was asked to stop: the command got the signal too; keep waiting for it."""


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(PARENT_GONE))
    if os.getppid() != parent:  # ablate died before the signal was set: nobody would send it
        _end_group()


def main(argv: list[str]) -> int:
    """Start ``argv[3:]`` (after ``PARENT --``), wait for it, and exit as it did."""
    parent, command = int(argv[1]), argv[3:]
    signal.signal(PARENT_GONE, _end_group)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _wait_only)
    _die_with_parent(parent)
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
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
