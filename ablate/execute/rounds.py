"""What every runner of rounds shares (the local pool's ``LocalRunner``, Ray's ``RayRunner``): its lifecycle's
run directories and its live display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from rich.console import Console

from ablate.execute.display import GridDisplay
from ablate.execute.lifecycle import Lifecycle


class ShownRounds:
    """What every runner of rounds shares (``executor.Runner``): its lifecycle's run directories and its live
    display, made at the first ``expect``; a context manager (``close`` stops the display). A subclass sets
    ``lifecycle``, ``title``, ``console``, ``progress_every_s`` and ``width``."""

    lifecycle: Lifecycle
    title: str
    console: Console
    progress_every_s: float | None
    display: GridDisplay | None = None

    @property
    def width(self) -> int:
        raise NotImplementedError

    def run_dir(self, run_id: str) -> Path:
        """A run's directory in the lifecycle's home."""
        return self.lifecycle.run_dir(run_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live display."""
        if self.display is not None:
            self.display.__exit__(None, None, None)
            self.display = None

    def expect(self, n: int) -> None:
        """Tell the progress display ``n`` more jobs are coming."""
        if self.display is None:
            self.display = GridDisplay(self.title, 0, self.console, workers=self.width,
                                       every_s=self.progress_every_s).__enter__()
        self.display.expect(n)
