"""The local worker pool on light job functions (no torch): dealing, crashes, dead workers, interrupts."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import pytest

from ablate.errors import RunError
from ablate.execute.devices import Slot, crowding, parse_devices, plan_slots
from ablate.execute.job_function import JobContext, JobInterrupted
from ablate.execute.local.pool import WorkerPool
from ablate.execute.locks import RunLock, holder_pid, is_locked
from ablate.execute.messages import Died, Failed, Finished, Interrupted, JobEvent, Killed, Progress, Started

# ---------------------------------------------------------------- jobs, and job functions the workers import
# by name


@dataclass(frozen=True)
class J:
    """A light job: what the job functions below read."""

    run_id: str
    value: int = 0
    crash: bool = False
    die: bool = False
    wait: bool = False


def echo(job: J, ctx: JobContext) -> dict:
    """Reports two steps and returns the job's value doubled, with the worker's pid and thread budget."""
    for step in (1, 2):
        ctx.progress([{"step": step}])
    return {"value": job.value * 2, "pid": os.getpid(), "omp": os.environ["OMP_NUM_THREADS"],
            "cuda": os.environ["CUDA_VISIBLE_DEVICES"]}


def mixed(job: J, ctx: JobContext) -> dict:
    """Crashes, dies or waits for a stop, as the job asks."""
    if job.crash:
        raise ValueError(f"bad value {job.value}")
    if job.die:
        os.kill(os.getpid(), signal.SIGKILL)
    if job.wait:
        ctx.started()
        deadline = time.monotonic() + 30
        while not ctx.stop.is_set():
            if time.monotonic() > deadline:
                return {"timed_out": True}
            time.sleep(0.02)
        raise JobInterrupted("stopped at a checkpoint")
    return {"value": job.value, "pid": os.getpid()}


def _job_fn(name: str) -> str:
    return f"{__name__}:{name}"


def _kinds(events: list[JobEvent]) -> list[tuple[str, str]]:
    return [(type(e).__name__.lower(), e.run_id) for e in events]


def _collect(pool: WorkerPool, jobs: list[J], **kw) -> tuple[list[JobEvent], list[J]]:
    events: list[JobEvent] = []
    left = pool.run(jobs, events.append, **kw)
    return events, left


# ---------------------------------------------------------------- tests


def test_two_workers_run_every_job_once_and_split_threads():
    slots = plan_slots(devices=["cpu"], jobs=2, jobs_per_device=1, cpu_count=4)
    with WorkerPool(slots, _job_fn("echo")) as pool:
        events, left = _collect(pool, [J(f"r{i}", i) for i in range(6)])
        pids = set(pool.pids)
    finished = {e.run_id: e.outcome for e in events if isinstance(e, Finished)}
    assert left == []
    assert {r: d["value"] for r, d in finished.items()} == {f"r{i}": 2 * i for i in range(6)}
    # long-lived: 6 jobs, <= 2 processes
    assert {d["pid"] for d in finished.values()} <= pids and len(pids) == 2
    assert {d["omp"] for d in finished.values()} == {"2"}
    assert {d["cuda"] for d in finished.values()} == {""}
    steps = [e for e in events if isinstance(e, Progress)]
    assert len(steps) == 12 and {e.last["step"] for e in steps} == {1, 2}


def test_a_crash_is_the_jobs_failure_and_a_dead_worker_is_replaced():
    jobs = [J("ok1", 1), J("boom", 7, crash=True), J("dies", 0, die=True), J("ok2", 2)]
    with WorkerPool([Slot(0, "cpu", 1)], _job_fn("mixed")) as pool:
        first = set(pool.pids)
        events, left = _collect(pool, jobs)
        after = set(pool.pids)
    assert _kinds(events) == [
        ("finished", "ok1"), ("failed", "boom"), ("died", "dies"), ("finished", "ok2")]
    assert (
        events[0].outcome["pid"] in first and events[-1].outcome["pid"] in after and first.isdisjoint(after)
    )
    failed = events[1]
    assert isinstance(failed, Failed) and failed.error == "ValueError: bad value 7"
    assert "Traceback" in failed.traceback and "in mixed" in failed.traceback
    assert isinstance(events[2], Died) and events[2].exitcode == -signal.SIGKILL


def test_first_interrupt_stops_jobs_cleanly_and_starts_nothing_new():
    slots = [Slot(0, "cpu", 1)]
    pool = WorkerPool(slots, _job_fn("mixed")).start()
    events: list[JobEvent] = []

    def on_event(e: JobEvent) -> None:
        events.append(e)
        if isinstance(e, Started):
            pool.interrupt()

    try:
        left = pool.run([J("long", wait=True), J("next", 1)], on_event)
    finally:
        pool.close()
    assert _kinds(events) == [("started", "long"), ("interrupted", "long")]
    assert isinstance(events[-1], Interrupted)
    assert (events[-1].started, events[-1].message) == (True, "stopped at a checkpoint")
    assert [j.run_id for j in left] == ["next"]


def test_second_interrupt_kills_at_once():
    pool = WorkerPool([Slot(0, "cpu", 1)], _job_fn("mixed")).start()
    events: list[JobEvent] = []

    def on_event(e: JobEvent) -> None:
        events.append(e)
        if isinstance(e, Started):
            pool.interrupt()
            pool.interrupt()

    try:
        pool.run([J("long", wait=True)], on_event)
    finally:
        pool.close()
    assert _kinds(events) == [("started", "long"), ("killed", "long")]
    assert isinstance(events[-1], Killed)


def test_a_job_module_that_cannot_import_is_one_error():
    with pytest.raises(RunError, match="could not start: ModuleNotFoundError"):
        with WorkerPool([Slot(0, "cpu", 1)], "ablate.no_such_module:train") as pool:
            pool.run([J("x")], lambda e: None)


@pytest.mark.parametrize(("spec", "n_gpus", "expected"), [
    (None, 0, ["cpu"]), (None, 2, ["cuda:0", "cuda:1"]), ("cpu", 2, ["cpu"]),
    ("1,cuda:0", 2, ["cuda:1", "cuda:0"]), ("cuda", 1, ["cuda:0"]),
])
def test_devices(spec, n_gpus, expected):
    assert parse_devices(spec, n_gpus) == expected


@pytest.mark.parametrize(("spec", "n_gpus", "match"), [
    ("cuda:3", 2, "device 'cuda:3' does not exist: 2 GPU"), ("cuda", 0, "none is visible"),
    ("tpu", 1, "not a device"),
])
def test_bad_devices(spec, n_gpus, match):
    with pytest.raises(Exception, match=match):
        parse_devices(spec, n_gpus)


def test_slots_on_gpus_and_cpu():
    gpu = plan_slots(devices=["cuda:0", "cuda:1"], jobs=None, jobs_per_device=2, cpu_count=16)
    assert [(s.device, s.threads, s.cuda_visible) for s in gpu] == [
        ("cuda:0", 4, "0"), ("cuda:1", 4, "1"), ("cuda:0", 4, "0"), ("cuda:1", 4, "1")]
    assert [s.threads for s in plan_slots(devices=["cpu"], jobs=3, jobs_per_device=1, cpu_count=2)] == [1, 1,
                                                                                                        1]
    with pytest.raises(Exception, match="--jobs: 0 workers"):
        plan_slots(devices=["cpu"], jobs=0, jobs_per_device=1, cpu_count=2)


def test_more_workers_than_cores_or_gpus_is_said():
    cpu = plan_slots(devices=["cpu"], jobs=100, jobs_per_device=1, cpu_count=2)
    assert crowding(cpu, cpu_count=2).startswith("100 workers on 2 CPU cores: they take turns")
    assert crowding(cpu[:2], cpu_count=2) is None and crowding(cpu[:1], cpu_count=1) is None
    gpus = ["cuda:0", "cuda:1"]
    assert crowding(plan_slots(devices=gpus, jobs=None, jobs_per_device=2, cpu_count=16), cpu_count=16,
                    jobs_per_device=2) is None  # packed on purpose
    assert crowding(plan_slots(devices=gpus, jobs=5, jobs_per_device=1, cpu_count=16), cpu_count=16) == (
        "5 workers on 2 GPU(s): they share them; --jobs 2 gives each its own (--jobs-per-device packs small "
        "runs onto a GPU on purpose)")


def test_run_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    lock = RunLock(tmp_path)
    assert not is_locked(tmp_path)
    assert lock.acquire()
    assert is_locked(tmp_path)  # a second open file description cannot take it
    assert holder_pid(tmp_path) == os.getpid()
    assert not RunLock(tmp_path).acquire()
    lock.release()
    assert not is_locked(tmp_path)


# ---------------------------------------------------------------- the CPUs this process may use (#25)


@pytest.mark.parametrize(("cpu_max", "affinity", "slurm", "usable"), [
    (None, 8, None, 8),  # no cgroup v2: the affinity mask
    ("max 100000\n", 8, None, 8),  # a cgroup without a quota
    ("200000 100000\n", 8, None, 2),  # a quota of 2 CPUs of time
    ("150000 100000\n", 8, None, 2),  # 1.5 CPUs: rounded up
    ("50000 100000\n", 8, None, 1),
    ("400000 100000\n", 3, None, 3),  # taskset -c 0-2 under a looser quota
    ("max 100000\n", 8, "4", 4),  # Slurm's --cpus-per-task
    ("garbage\n", 8, "", 8),
], ids=["no-cgroup", "no-quota", "quota-2", "quota-1.5", "quota-0.5", "affinity-3", "slurm-4", "unreadable"])
def test_usable_cpus_are_the_fewest_of_affinity_quota_and_slurm(tmp_path, monkeypatch, cpu_max, affinity,
                                                                slurm,
                                                                 usable):
    from ablate.execute.devices import usable_cpus

    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    env = {} if slurm is None else {"SLURM_CPUS_PER_TASK": slurm}
    assert usable_cpus(cpu_max=path, environ=env) == usable


def test_without_affinity_or_quota_the_machines_cores(tmp_path, monkeypatch):
    from ablate.execute.devices import usable_cpus

    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cpus(cpu_max=tmp_path / "none", environ={}) == 6


def test_threads_override_and_the_workers_in_words():
    from ablate.execute.devices import describe

    slots = plan_slots(devices=["cpu"], jobs=2, jobs_per_device=1, cpu_count=8, threads=3)
    assert [s.threads for s in slots] == [3, 3] and slots[0].label == "cpu, 3 threads"
    assert describe(slots) == "2 workers on cpu, 3 threads each"
    assert describe(plan_slots(devices=["cpu"], jobs=1, jobs_per_device=1,
                               cpu_count=1)) == "1 worker on cpu, 1 thread"
    gpu = plan_slots(devices=["cuda:0", "cuda:1"], jobs=None, jobs_per_device=1, cpu_count=16, threads=2)
    assert [s.label for s in gpu] == ["cuda:0, 2 threads", "cuda:1, 2 threads"]
    with pytest.raises(Exception, match="--threads: 0 threads per worker"):
        plan_slots(devices=["cpu"], jobs=1, jobs_per_device=1, cpu_count=2, threads=0)


@pytest.mark.parametrize(("load", "cpus", "environ", "expected"), [
    (7.0, 2, {}, {"OMP_WAIT_POLICY": "PASSIVE"}),  # oversubscribed already: threads that sleep when they wait
    (2.5, 4, {}, {}),  # room left: OpenMP's default (a quiet machine pays 2.2x for passive waits)
    (7.0, 2, {"OMP_WAIT_POLICY": "ACTIVE"}, {}),  # the user's own setting wins
])
def test_workers_wait_passively_only_on_an_oversubscribed_machine(load, cpus, environ, expected):
    from ablate.execute.devices import quiet_threads

    assert quiet_threads(load=load, cpus=cpus, environ=environ) == expected


def test_a_workers_wait_policy_from_the_environment_reaches_it(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with WorkerPool([Slot(0, "cpu", 1)], _job_fn("policy")) as pool:
        events, _ = _collect(pool, [J("r0")])
    assert [e.outcome for e in events if isinstance(e, Finished)] == ["ACTIVE"]


def policy(job: J, ctx: JobContext) -> str:
    """The worker's OpenMP wait policy."""
    return os.environ.get("OMP_WAIT_POLICY", "")


def visible(job: J, ctx: JobContext) -> dict:
    """The GPUs the worker sees, and what a command it started would get."""
    from ablate.execute.command_job import gpu_indices

    return {"cuda": os.environ["CUDA_VISIBLE_DEVICES"], "command": gpu_indices(ctx.slot)}


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("4,6", "6"), ("GPU-a,GPU-b", "GPU-b")])
def test_a_worker_sees_its_gpu_as_the_users_cuda_visible_devices_names_it(monkeypatch, given, expected):
    """A slot's ``cuda:1`` is the second GPU ablate sees: under ``CUDA_VISIBLE_DEVICES=4,6`` that is GPU 6,
    never GPU 1 (a GPU the user kept ablate off); a command the worker starts gets the same one. (No GPU is
    touched: the worker only sets the variable.)"""
    if given is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", given)
    with WorkerPool([Slot(0, "cuda:1", 1)], _job_fn("visible")) as pool:
        events, _ = _collect(pool, [J("r0")])
    assert [e.outcome for e in events if isinstance(e, Finished)] == [{"cuda": expected, "command": expected}]
