"""One benchmark example: a prompt, and the answer its greedy continuation must reproduce exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from ablate.ablations.model import ModelOutput


@dataclass(frozen=True)
class Example:
    """``prompt`` ends with the answer prefix; ``answer`` is the exact text that should follow it."""

    prompt: str
    answer: str

    @property
    def text(self) -> str:
        """The whole example as one training document."""
        return self.prompt + self.answer


class Encoder(Protocol):
    """What generating and scoring the tasks need of a tokenizer (``ablate.runner.tokenizers.Tokenizer`` has
    it): its ids for a text, and the end-of-text id."""

    eos_id: int

    def encode(self, text: str) -> list[int]: ...


class CausalLM(Protocol):
    """What scoring needs of a model: ``model(idx [B, T])`` -> logits ``[B, T, V]``, or an output holding them
    (a ``Decoder``'s ``ModelOutput``)."""

    def __call__(self, idx: torch.Tensor) -> torch.Tensor | ModelOutput: ...
