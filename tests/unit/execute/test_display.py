"""What ``ablate run`` shows while a grid runs: the ETA of its progress line, from the steps measured."""

from __future__ import annotations

import pytest
from rich.console import Console

from ablate.execute.display import GridDisplay


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_eta_is_the_measured_steps_pace_not_the_start_up():
    clock = Clock()
    display = GridDisplay("g", 2, Console(force_terminal=False), workers=1, every_s=30, clock=clock)
    display.started("r1", variant="baseline", seed=0, device="cpu", total_steps=100)
    clock.now = 10.0  # 10 s of start-up: the worker's data, the model, the first step
    display.step("r1", {"step": 0, "loss": 5.0})
    assert display.eta(clock.now) is None and "ETA" not in display.progress_line()  # one step: no pace yet
    clock.now = 11.0
    display.step("r1", {"step": 10, "loss": 4.0})  # then 10 steps a second
    # r1: 90 steps left at 0.1 s; the queued run: its start-up (10 s) and 100 steps (10 s)
    assert display.eta(clock.now) == pytest.approx(9.0 + 20.0)
    assert display.progress_line().endswith("; ETA 29s")
    clock.now = 20.0
    display.ended("r1", "done")  # took 20 s: the queued run is expected to take what it did
    display.started("r2", variant="baseline", seed=1, device="cpu", total_steps=100)
    assert display.eta(clock.now) == pytest.approx(20.0)


def test_an_ended_line_names_the_variant_seed_and_time_even_if_its_start_was_not_seen():
    """A Ray task may start and end between two looks at the store: its line takes the variant and seed from
    the job and the time from the task (``label``, ``took``), as a local run's line reads them from its
    start; an interrupted run that never started has no time."""
    import io

    clock = Clock()
    out = io.StringIO()
    display = GridDisplay("g", 3, Console(file=out, force_terminal=False, width=200), clock=clock)
    display.started("seen", variant="baseline", seed=0, device="cpu", total_steps=10)
    clock.now = 95.0
    display.ended("seen", "done", "loss 3.0441")  # local: the time since its start
    display.ended("unseen", "done", "loss 2.9716", label="sdpa-elementwise 1", took=7.4)  # a short Ray task
    display.ended("pending", "interrupted", "cancelled", label="baseline 2")
    assert out.getvalue().splitlines() == [
        "       done seen baseline 0 in 1m35s  loss 3.0441",
        "       done unseen sdpa-elementwise 1 in 7s  loss 2.9716",
        "interrupted pending baseline 2  cancelled"]
    assert display.took == [95.0, 7.4]  # both finished runs pace the ETA
