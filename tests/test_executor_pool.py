"""The local worker pool on light job functions (no torch): dealing, crashes, dead workers, interrupts."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ablate.errors import RunError
from ablate.execute.devices import Slot, parse_devices, plan_slots
from ablate.execute.locks import RunLock, is_locked
from ablate.execute.pool import PoolEvent, WorkerPool
from ablate.execute.worker import JobContext, JobInterrupted

# ---------------------------------------------------------------- job functions the workers import by name


def echo(job: dict, ctx: JobContext) -> dict:
    """Reports two steps and returns the job's value doubled, with the worker's pid and thread budget."""
    for step in (1, 2):
        ctx.emit("step", {"step": step})
    return {"value": job["value"] * 2, "pid": os.getpid(), "omp": os.environ["OMP_NUM_THREADS"],
            "cuda": os.environ["CUDA_VISIBLE_DEVICES"]}


def mixed(job: dict, ctx: JobContext) -> dict:
    """Crashes, dies or waits for a stop, as the job asks."""
    if job.get("crash"):
        raise ValueError(f"bad value {job['value']}")
    if job.get("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    if job.get("wait"):
        ctx.emit("started", {})
        deadline = time.monotonic() + 30
        while not ctx.stop.is_set():
            if time.monotonic() > deadline:
                return {"timed_out": True}
            time.sleep(0.02)
        raise JobInterrupted("stopped at a checkpoint")
    return {"value": job["value"], "pid": os.getpid()}


def _job_fn(name: str) -> str:
    return f"{__name__}:{name}"


def _collect(pool: WorkerPool, jobs: list[dict], **kw) -> tuple[list[PoolEvent], list[dict]]:
    events: list[PoolEvent] = []
    left = pool.run(jobs, events.append, **kw)
    return events, left


# ---------------------------------------------------------------- tests


def test_two_workers_run_every_job_once_and_split_threads():
    slots = plan_slots(devices=["cpu"], jobs=2, jobs_per_device=1, cpu_count=4)
    with WorkerPool(slots, _job_fn("echo")) as pool:
        events, left = _collect(pool, [{"run_id": f"r{i}", "value": i} for i in range(6)])
        pids = set(pool.pids)
    finished = {e.run_id: e.data for e in events if e.kind == "finished"}
    assert left == []
    assert {r: d["value"] for r, d in finished.items()} == {f"r{i}": 2 * i for i in range(6)}
    assert {d["pid"] for d in finished.values()} <= pids and len(pids) == 2  # long-lived: 6 jobs, <= 2 processes
    assert {d["omp"] for d in finished.values()} == {"2"}
    assert {d["cuda"] for d in finished.values()} == {""}
    steps = [e for e in events if e.kind == "step"]
    assert len(steps) == 12 and {e.data["step"] for e in steps} == {1, 2}


def test_a_crash_is_the_jobs_failure_and_a_dead_worker_is_replaced():
    jobs = [{"run_id": "ok1", "value": 1}, {"run_id": "boom", "value": 7, "crash": True},
            {"run_id": "dies", "value": 0, "die": True}, {"run_id": "ok2", "value": 2}]
    with WorkerPool([Slot(0, "cpu", 1)], _job_fn("mixed")) as pool:
        first = set(pool.pids)
        events, left = _collect(pool, jobs)
        after = set(pool.pids)
    assert [(e.kind, e.run_id) for e in events] == [
        ("finished", "ok1"), ("failed", "boom"), ("died", "dies"), ("finished", "ok2")]
    assert events[0].data["pid"] in first and events[-1].data["pid"] in after and first.isdisjoint(after)
    failed = events[1]
    assert failed.data["error"] == "ValueError: bad value 7"
    assert "Traceback" in failed.data["traceback"] and "in mixed" in failed.data["traceback"]
    assert events[2].data["exitcode"] == -signal.SIGKILL


def test_first_interrupt_stops_jobs_cleanly_and_starts_nothing_new():
    slots = [Slot(0, "cpu", 1)]
    pool = WorkerPool(slots, _job_fn("mixed")).start()
    events: list[PoolEvent] = []

    def on_event(e: PoolEvent) -> None:
        events.append(e)
        if e.kind == "started":
            pool.interrupt()

    try:
        left = pool.run([{"run_id": "long", "wait": True}, {"run_id": "next", "value": 1}], on_event)
    finally:
        pool.close()
    assert [(e.kind, e.run_id) for e in events] == [("started", "long"), ("interrupted", "long")]
    assert events[-1].data == {"started": True, "message": "stopped at a checkpoint"}
    assert [j["run_id"] for j in left] == ["next"]


def test_second_interrupt_kills_at_once():
    pool = WorkerPool([Slot(0, "cpu", 1)], _job_fn("mixed")).start()
    events: list[PoolEvent] = []

    def on_event(e: PoolEvent) -> None:
        events.append(e)
        if e.kind == "started":
            pool.interrupt()
            pool.interrupt()

    try:
        pool.run([{"run_id": "long", "wait": True}], on_event)
    finally:
        pool.close()
    assert [(e.kind, e.run_id) for e in events] == [("started", "long"), ("killed", "long")]


def test_a_job_module_that_cannot_import_is_one_error():
    with pytest.raises(RunError, match="could not start: ModuleNotFoundError"):
        with WorkerPool([Slot(0, "cpu", 1)], "ablate.no_such_module:train") as pool:
            pool.run([{"run_id": "x"}], lambda e: None)


@pytest.mark.parametrize(("spec", "n_gpus", "expected"), [
    (None, 0, ["cpu"]), (None, 2, ["cuda:0", "cuda:1"]), ("cpu", 2, ["cpu"]), ("1,cuda:0", 2, ["cuda:1", "cuda:0"]),
    ("cuda", 1, ["cuda:0"]),
])
def test_devices(spec, n_gpus, expected):
    assert parse_devices(spec, n_gpus) == expected


@pytest.mark.parametrize(("spec", "n_gpus", "match"), [
    ("cuda:3", 2, "device 'cuda:3' does not exist: 2 GPU"), ("cuda", 0, "none is visible"), ("tpu", 1, "not a device"),
])
def test_bad_devices(spec, n_gpus, match):
    with pytest.raises(Exception, match=match):
        parse_devices(spec, n_gpus)


def test_slots_on_gpus_and_cpu():
    gpu = plan_slots(devices=["cuda:0", "cuda:1"], jobs=None, jobs_per_device=2, cpu_count=16)
    assert [(s.device, s.threads, s.cuda_visible) for s in gpu] == [
        ("cuda:0", 4, "0"), ("cuda:1", 4, "1"), ("cuda:0", 4, "0"), ("cuda:1", 4, "1")]
    assert [s.threads for s in plan_slots(devices=["cpu"], jobs=3, jobs_per_device=1, cpu_count=2)] == [1, 1, 1]
    with pytest.raises(Exception, match="--jobs: 0 workers"):
        plan_slots(devices=["cpu"], jobs=0, jobs_per_device=1, cpu_count=2)


def test_run_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    lock = RunLock(tmp_path)
    assert not is_locked(tmp_path)
    assert lock.acquire()
    assert is_locked(tmp_path)  # a second open file description cannot take it
    assert not RunLock(tmp_path).acquire()
    lock.release()
    assert not is_locked(tmp_path)
