"""One benchmark example: a prompt, and the answer its greedy continuation must reproduce exactly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """``prompt`` ends with the answer prefix; ``answer`` is the exact text that should follow it."""

    prompt: str
    answer: str

    @property
    def text(self) -> str:
        """The whole example as one training document."""
        return self.prompt + self.answer
