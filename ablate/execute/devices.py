"""Worker slots: which device each worker of the local pool uses, and how many CPU threads it may take.

One worker per CUDA device by default (``jobs_per_device`` packs several small jobs onto one GPU); without a GPU,
``jobs`` CPU workers split the cores between them. ``parse_devices`` and ``plan_slots`` are pure: the caller says
how many GPUs and cores there are (``gpu_count()`` counts them here).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: ``device`` is ``"cpu"``, ``"cuda:<i>"`` or ``"cuda:<i>,<j>,..."`` (a run on several
    GPUs); ``threads`` its torch CPU threads."""

    index: int
    device: str
    threads: int

    @property
    def cuda_visible(self) -> str:
        """The worker's ``CUDA_VISIBLE_DEVICES``: its GPU(s), or none at all for a CPU worker."""
        return self.device.split(":", 1)[1] if self.device.startswith("cuda:") else ""


def gpu_count() -> int:
    """Visible CUDA devices, without importing torch in this process when there can be none."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not Path("/proc/driver/nvidia").exists():
        return 0
    import torch

    return torch.cuda.device_count()


def parse_devices(spec: str | None, n_gpus: int) -> list[str]:
    """``--devices``: ``cpu``, ``cuda`` (every GPU), or a comma list of ``cuda:<i>`` / ``<i>``.

    >>> parse_devices("0,cuda:2", n_gpus=4)
    ['cuda:0', 'cuda:2']
    """
    if spec is None or spec.strip() == "":
        return [f"cuda:{i}" for i in range(n_gpus)] or ["cpu"]
    spec = spec.strip().lower()
    if spec == "cpu":
        return ["cpu"]
    if spec in ("cuda", "gpu", "all"):
        if n_gpus == 0:
            raise ConfigError(f"'{spec}' asks for GPUs but none is visible; allowed here: cpu", where="--devices")
        return [f"cuda:{i}" for i in range(n_gpus)]
    devices: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        index = part.removeprefix("cuda:")
        if not index.isdigit():
            raise ConfigError(f"'{part}' is not a device; allowed: cpu, cuda, or a comma list of cuda:<i> or <i>",
                              where="--devices")
        if int(index) >= n_gpus:
            raise ConfigError(f"device {part!r} does not exist: {n_gpus} GPU(s) visible", where="--devices")
        if f"cuda:{index}" not in devices:
            devices.append(f"cuda:{int(index)}")
    if not devices:
        raise ConfigError("no device given; allowed: cpu, cuda, or a comma list of cuda:<i>", where="--devices")
    return devices


def plan_slots(*, devices: list[str], jobs: int | None, jobs_per_device: int, cpu_count: int,
               per_run: int = 1) -> list[Slot]:
    """The pool's worker slots.

    On GPUs: ``jobs_per_device`` workers per device, or ``jobs`` workers dealt round-robin over them. On CPU: ``jobs`` workers (default 1),
    each with ``cpu_count // jobs`` torch threads (at least one). Runs of ``per_run`` devices (``train.devices``)
    get that many GPUs per worker (``cuda:0,1,2,3``: the worker sees them all and its run starts a process on each).

    >>> [s.threads for s in plan_slots(devices=["cpu"], jobs=2, jobs_per_device=1, cpu_count=8)]
    [4, 4]
    """
    if jobs is not None and jobs < 1:
        raise ConfigError(f"{jobs} workers asked for; allowed: 1 or more", where="--jobs")
    if jobs_per_device < 1:
        raise ConfigError(f"{jobs_per_device} jobs per device; allowed: 1 or more", where="--jobs-per-device")
    cpu_count = max(1, cpu_count)
    if devices == ["cpu"]:
        n = jobs or 1
        return [Slot(i, "cpu", max(1, cpu_count // n)) for i in range(n)]
    if per_run > 1:  # a worker per group of per_run GPUs
        if len(devices) < per_run:
            raise ConfigError(f"runs with train.devices = {per_run} need {per_run} GPUs, {len(devices)} given "
                              f"({', '.join(devices)}); set train.devices to at most {len(devices)}", where="--devices")
        devices = ["cuda:" + ",".join(d.split(":", 1)[1] for d in devices[i:i + per_run])
                   for i in range(0, len(devices) - per_run + 1, per_run)]
    n = jobs or len(devices) * jobs_per_device
    threads = max(1, cpu_count // n)
    return [Slot(i, devices[i % len(devices)], threads) for i in range(n)]


def crowding(slots: list[Slot], *, cpu_count: int, jobs_per_device: int = 1) -> str | None:
    """A warning when the workers outnumber what runs them: CPU workers beyond the cores (each gets one
    thread, and they take turns), or GPU workers beyond the GPUs times ``jobs_per_device`` (they share a
    device nobody asked them to share). None when each has its own.

    >>> crowding([Slot(i, "cpu", 1) for i in range(100)], cpu_count=2).split(":")[0]
    '100 workers on 2 CPU cores'
    """
    cpu = [s for s in slots if s.device == "cpu"]
    if len(cpu) > max(1, cpu_count):
        return (f"{len(cpu)} workers on {cpu_count} CPU cores: they take turns, each slower than one worker "
                f"per core would be; --jobs {cpu_count} gives each its own core")
    gpus = {g for s in slots if s.device != "cpu" for g in s.cuda_visible.split(",")}
    gpu_workers = len(slots) - len(cpu)
    if gpus and gpu_workers > len(gpus) * jobs_per_device:
        own = len(gpus) * jobs_per_device
        return (f"{gpu_workers} workers on {len(gpus)} GPU(s): they share them; --jobs {own} gives each its "
                "own (--jobs-per-device packs small runs onto a GPU on purpose)")
    return None
