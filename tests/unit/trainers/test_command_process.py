"""A training command's processes (ablate/trainers/command/process.py), with real processes: a script that
starts a multiprocessing worker (as a DataLoader does) which starts a process of its own, stopped by
``stop()``, by SIGINT and SIGTERM to the process that runs it, and by that process's SIGKILL; each time /proc
must show no process of the group left. Conditions are polled with long deadlines (the suite runs on busy
machines), never asserted after a fixed sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ablate.trainers.command.process import CommandProcess, run

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 120.0

FAMILY = """\
import json, multiprocessing as mp, os, signal, subprocess, sys, time

def publish(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)

def worker(out):
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    publish(out + ".worker", [os.getpid(), grandchild.pid])
    time.sleep(600)

if __name__ == "__main__":
    out = sys.argv[1]
    if "--stubborn" in sys.argv:  # ignored, in this process and (inherited) in its children
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mp.get_context("fork").Process(target=worker, args=(out,)).start()
    while not os.path.exists(out + ".worker"):
        time.sleep(0.01)
    with open(out + ".worker") as f:
        publish(out, [os.getpid(), *json.load(f)])
    print("ready", flush=True)
    if "--exit" in sys.argv:
        os._exit(0)  # leaves its worker and the worker's process behind
    time.sleep(600)
"""

RUNNER = """\
import json, sys
from ablate.trainers.command.process import CommandProcess, run, stop_on_signals

mode, argv = sys.argv[1], sys.argv[2:]
if mode == "handlers":
    proc = CommandProcess(argv, cwd=".", env=None, grace_s=5).start()
    with stop_on_signals(proc):
        outcome = None
        while outcome is None:
            outcome = proc.wait(timeout=0.1)
    print(json.dumps([outcome.exit_code, outcome.reason]))
else:  # plain run(): Ctrl-C is a KeyboardInterrupt; SIGTERM and SIGKILL end this process at once
    try:
        run(argv, cwd=".", env=None, grace_s=5)
    except KeyboardInterrupt:
        print(json.dumps("interrupted"))
        sys.exit(130)
"""


def stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgrp)`` of ``pid`` from /proc, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])


def alive(pid: int) -> bool:
    """Is ``pid`` a process that still runs (a zombie holds nothing: it only waits to be reaped)?"""
    s = stat(pid)
    return s is not None and s[0] not in ("Z", "X")


def group(pgid: int) -> list[int]:
    """The live processes of group ``pgid``."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if (s := stat(p)) is not None and s[2] == pgid and s[0] not in ("Z", "X")]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout:.0f} s: {what}")
        time.sleep(0.05)


def family(tmp_path: Path, *flags: str) -> tuple[list[str], Path]:
    (tmp_path / "family.py").write_text(FAMILY)
    out = tmp_path / "pids.json"
    return [sys.executable, str(tmp_path / "family.py"), str(out), *flags], out


def started(out: Path) -> tuple[list[int], int]:
    """The family's pids (script, worker, the worker's process) and their group, once all three run."""
    wait_until(out.exists, "the script's family started")
    pids = json.loads(out.read_text())
    groups = {s[2] for p in pids if (s := stat(p)) is not None}
    assert len(pids) == 3 and all(alive(p) for p in pids) and len(groups) == 1, (pids, groups)
    return pids, groups.pop()


def stacks(pid: int) -> str:
    """The Python stacks of every thread of ``pid`` (``py-spy dump``), or why they could not be read."""
    spy = Path(sys.executable).with_name("py-spy")
    try:
        out = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stacks: {exc})"
    return out.stdout + out.stderr


def assert_all_gone(pids: list[int], pgid: int) -> None:
    wait_until(lambda: not any(alive(p) for p in pids) and not group(pgid),
               f"processes left: {[p for p in pids if alive(p)]}, group {pgid}: {group(pgid)}")


@pytest.mark.parametrize(("flags", "exit_code"), [((), -signal.SIGTERM), (("--stubborn",), -signal.SIGKILL)],
                         ids=["sigterm", "ignores-sigterm"])
def test_stop_ends_the_whole_group(tmp_path: Path, flags: tuple[str, ...], exit_code: int) -> None:
    argv, out = family(tmp_path, *flags)
    proc = CommandProcess(argv, cwd=tmp_path, env=None, grace_s=1.0 if flags else 30.0).start()
    pids, pgid = started(out)
    assert pgid == proc.pgid != os.getpgrp() and pgid in group(pgid)  # the guard leads the group
    proc.stop("cancelled")
    assert not group(pgid) and not any(alive(p) for p in pids)  # stop() returns once they are gone
    outcome = proc.wait()
    assert outcome is not None and (outcome.exit_code, outcome.reason) == (exit_code, "cancelled")


def test_what_a_command_leaves_behind_is_stopped(tmp_path: Path) -> None:
    argv, out = family(tmp_path, "--exit")
    proc = CommandProcess(argv, cwd=tmp_path, env=None, grace_s=30.0).start()
    outcome = proc.wait()
    pids = json.loads(out.read_text())
    assert outcome is not None and outcome.ok and outcome.exit_code == 0
    assert proc.pgid is not None
    assert_all_gone(pids, proc.pgid)


@pytest.mark.parametrize(("mode", "sig"), [
    ("handlers", signal.SIGINT), ("handlers", signal.SIGTERM),
    ("run", signal.SIGINT), ("run", signal.SIGTERM), ("run", signal.SIGKILL)],
    ids=lambda v: v if isinstance(v, str) else signal.Signals(v).name)
def test_a_signal_to_the_runner_leaves_no_process(tmp_path: Path, mode: str, sig: signal.Signals) -> None:
    argv, out = family(tmp_path)
    (tmp_path / "runner.py").write_text(RUNNER)
    runner = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), mode, *argv], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True,
                              # Python's own SIGINT handler, whatever this process inherited (a shell's
                              # background job runs with SIGINT ignored, and so would the runner)
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        pids, pgid = started(out)
        guard = stat(pgid)
        assert guard is not None and guard[1] == runner.pid  # the group's leader is the runner's child
        runner.send_signal(sig)
        try:
            said, _ = runner.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:  # what it was doing, for the next look (py-spy ships with ray)
            raise AssertionError(f"the runner did not end after {sig.name}:\n{stacks(runner.pid)}") from None
    finally:
        if runner.poll() is None:
            runner.kill()
    assert_all_gone(pids, pgid)
    if mode == "handlers":  # stopped through the group: SIGTERM, and the command's status comes back
        assert json.loads(said) == [-signal.SIGTERM, f"stopped by {sig.name}"] and runner.returncode == 0
    elif sig == signal.SIGINT:
        assert json.loads(said) == "interrupted" and runner.returncode == 130
    else:  # the runner died at once; the parent-death signal ended the group
        assert runner.returncode == -sig


def test_a_thread_that_starts_a_command_may_end_first(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (f"import os, time\nprint('up', flush=True)\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n")
    lines: list[str] = []
    procs: list[CommandProcess] = []

    def start() -> None:  # a thread that ends while the command runs (a parent-death signal set by then)
        procs.append(CommandProcess([sys.executable, "-c", script], cwd=tmp_path, env=None,
                                    on_stdout=lines.append).start())
        wait_until(lambda: lines == ["up"], "the command printed")

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()  # a parent-death signal tied to this thread would fire now
    time.sleep(0.5)  # not an assertion: time for a wrongly tied signal to act, so that the test can fail
    go.touch()
    outcome = procs[0].wait()
    assert outcome is not None and outcome.ok


def test_output_is_read_as_it_comes(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (f"import os, sys, time\nprint('step 1: loss 2.5')\nprint('half', end='', flush=True)\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\nprint(' done')\n")
    lines: list[str] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = CommandProcess([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          on_stdout=lines.append).start()
    wait_until(lambda: lines == ["step 1: loss 2.5"], "the first line arrived while the command runs")
    assert proc.wait(timeout=0) is None
    go.touch()
    outcome = proc.wait()
    assert outcome is not None and outcome.ok and lines == ["step 1: loss 2.5", "half done"]


def test_exit_status_and_the_stderr_tail(tmp_path: Path) -> None:
    script = ("import sys\nfor i in range(100): print(f'warning {i}', file=sys.stderr)\n"
              "print('progress 10%\\rprogress 100%', file=sys.stderr)\nsys.exit(3)\n")
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env=None, tail_lines=3)
    assert outcome.exit_code == 3 and outcome.reason == "the command exited with status 3"
    assert outcome.stderr_tail == ("warning 98", "warning 99", "progress 100%") and outcome.wall_s > 0


def test_commands_that_cannot_start(tmp_path: Path) -> None:
    missing = run(["no-such-program-here"], cwd=tmp_path, env=None)
    assert missing.exit_code == 127 and missing.reason == "the command exited with status 127"
    assert missing.stderr_tail == ("ablate: cannot run 'no-such-program-here': No such file or directory",)
    nowhere = run([sys.executable, "-c", "pass"], cwd=tmp_path / "gone", env=None)
    assert nowhere.exit_code is None and nowhere.reason is not None
    assert nowhere.reason.startswith("the command could not be started: [Errno 2] No such file or directory")


def test_a_failing_output_handler_stops_the_run(tmp_path: Path) -> None:
    def handler(line: str) -> None:
        raise ValueError(f"cannot read {line!r}")

    script = "import time\nprint('hello', flush=True)\ntime.sleep(600)\n"
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env=None, on_stdout=handler, grace_s=30.0)
    assert outcome.reason == "reading its output failed: ValueError(\"cannot read 'hello'\")"
    assert outcome.exit_code == -signal.SIGTERM


RANK = """\
import os, sys, time
path = os.path.join(sys.argv[1], f"rank{os.environ['RANK']}")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "runner-sigkill"])
def test_torchrun_ranks_in_sessions_of_their_own_are_ended(tmp_path: Path, how: str) -> None:
    """torchrun starts each rank in a session of its own, out of reach of a signal to the group; with its
    agent killed, they would run on."""
    (tmp_path / "rank.py").write_text(RANK)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(tmp_path / "rank.py"), str(tmp_path)]
    ranks = [tmp_path / "rank0", tmp_path / "rank1"]
    if how == "stop":
        proc = CommandProcess(argv, cwd=tmp_path, env=None, grace_s=60.0).start()
        wait_until(lambda: all(r.exists() for r in ranks), "torchrun started two ranks")
        pids = [int(r.read_text()) for r in ranks]
        assert all(alive(p) for p in pids) and proc.pgid not in {stat(p)[2] for p in pids}  # type: ignore[index]
        proc.stop("cancelled")
        assert proc.wait() is not None
    else:
        (tmp_path / "runner.py").write_text(RUNNER)
        runner = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), "run", *argv], cwd=tmp_path,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            wait_until(lambda: all(r.exists() for r in ranks), "torchrun started two ranks")
            pids = [int(r.read_text()) for r in ranks]
            runner.kill()
            runner.wait(timeout=DEADLINE_S)
        finally:
            if runner.poll() is None:
                runner.kill()
    wait_until(lambda: not any(alive(p) for p in pids), f"ranks left: {[p for p in pids if alive(p)]}")


def test_an_orphan_in_a_session_of_its_own_is_ended(tmp_path: Path) -> None:
    """A command that starts a process in a new session and exits orphans it out of its group's reach; the
    guard, a child subreaper, adopts it and ends it."""
    out = tmp_path / "orphan"
    script = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\n"
              "                     start_new_session=True)\n"
              f"open({str(out)!r}, 'w').write(str(p.pid))\n")
    outcome = run([sys.executable, "-c", script], cwd=tmp_path, env=None, grace_s=30.0)
    orphan = int(out.read_text())
    try:
        assert outcome.ok
        wait_until(lambda: not alive(orphan), f"the orphan {orphan} still runs")
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)
