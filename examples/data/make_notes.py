"""Writes notes-train.jsonl and notes-heldout.jsonl: the own-data example's corpus (docs/data.md).

A study's lab notebook, one JSON object per line with the text under "text": invented, seeded, and small
enough to keep in the repository. Your own data replaces it; any JSON lines with a text field will do.

    python examples/data/make_notes.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

VARIANTS = ["the baseline", "the elementwise gate", "the headwise gate", "the value gate", "sandwich norm"]
WHAT = ["loss fell smoothly", "the loss spiked once and recovered", "training diverged near the end",
        "held-out perplexity was lower than the baseline's", "the gate scores stayed sparse",
        "the first token drew most of the attention", "no attention sink formed"]
THEN = ["We keep this setting.", "We will run two more seeds before we trust it.",
        "The next run halves the learning rate.", "It matches what the paper reports at scale.",
        "This is a toy scale; the direction matters more than the size."]


def note(rng: random.Random, day: int) -> str:
    """One notebook entry: a few sentences about one run."""
    variant, lr, steps = rng.choice(VARIANTS), rng.choice(["1e-3", "3e-3", "8e-3", "1.6e-2"]), rng.choice(
        [200, 300, 600, 1200])
    ppl = rng.uniform(6.0, 14.0)
    sentences = [f"Day {day}: we trained {variant} at learning rate {lr} for {steps} steps.",
                 f"Its {rng.choice(WHAT)}, and {rng.choice(WHAT)}.",
                 f"Held-out perplexity ended at {ppl:.2f} on seed {rng.randint(0, 4)}.", rng.choice(THEN)]
    return " ".join(sentences)


def main() -> None:
    rng = random.Random(20250514)
    here = Path(__file__).parent
    for name, days in (("notes-train.jsonl", range(1, 241)), ("notes-heldout.jsonl", range(241, 281))):
        with (here / name).open("w") as fh:
            for day in days:
                fh.write(json.dumps({"id": day, "text": note(rng, day)}) + "\n")


if __name__ == "__main__":
    main()
