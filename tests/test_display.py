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
