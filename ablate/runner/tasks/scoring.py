"""Scoring: exact match of the greedy continuation, batched, with the plain model forward (no KV cache).

Each example is encoded as ``[eos] + encode(prompt)`` (the end-of-text token stands where a document starts in
training) and its target is the answer's tokens as they come after the prompt in ``encode(prompt + answer)``.
Rows of a batch are right-padded: a causal model's logits at a row's own positions ignore the padding after
them, so every row reads its next token at its own position and all rows decode together.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ablate.runner.tasks.example import CausalLM, Encoder, Example
from ablate.runner.tasks.registry import TASKS, parse_task_spec, task_examples

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def encode_example(tokenizer: Encoder, ex: Example) -> tuple[list[int], list[int]]:
    """``([eos] + prompt tokens, answer tokens)``: the answer as tokenized in context when the prompt's tokens
    are a prefix of the whole example's, else on its own."""
    prompt = list(tokenizer.encode(ex.prompt))
    whole = list(tokenizer.encode(ex.prompt + ex.answer))
    target = whole[len(prompt):] if whole[: len(prompt)] == prompt and len(whole) > len(prompt) else None
    return [tokenizer.eos_id, *prompt], target or list(tokenizer.encode(ex.answer))


def _logits(model: CausalLM, idx: torch.Tensor) -> torch.Tensor:
    out = model(idx)
    return out.logits if hasattr(out, "logits") else out


def greedy_correct(model: CausalLM, rows: Sequence[tuple[list[int], list[int]]], *,
                   device: torch.device | str, pad_id: int) -> list[bool]:
    """For each ``(prompt_ids, target_ids)``: does greedy decoding of ``len(target_ids)`` tokens reproduce
    it?"""
    import torch

    b = len(rows)
    lens = torch.tensor([len(p) for p, _ in rows], device=device)
    k = max(len(t) for _, t in rows)
    buf = torch.full((b, int(lens.max()) + k), pad_id, dtype=torch.long, device=device)
    for i, (p, _) in enumerate(rows):
        buf[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    batch = torch.arange(b, device=device)
    for step in range(k):
        logits = _logits(model, buf[:, : int(lens.max()) + step])  # [B, T, V]
        buf[batch, lens + step] = logits[batch, lens + step - 1].argmax(-1)
    out = buf.cpu()
    return [out[i, len(p): len(p) + len(t)].tolist() == t for i, (p, t) in enumerate(rows)]


def score_examples(model: CausalLM, tokenizer: Encoder, examples: Iterable[Example], *,
                   device: torch.device | str = "cpu",
                   batch_size: int = 16) -> float:
    """Accuracy in % of ``model`` on ``examples``: exact match of the greedy continuation after each prompt.

    ``model(idx [B, T]) -> logits [B, T, V]`` (or an object with ``.logits``), causal. Put it in eval mode
    first.
    """
    import torch

    rows = sorted((encode_example(tokenizer, ex) for ex in examples), key=lambda r: len(r[0]))
    if not rows:
        return float("nan")
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            correct += sum(greedy_correct(model, rows[start: start + batch_size], device=device,
                                          pad_id=tokenizer.eos_id))
    return 100.0 * correct / len(rows)


def benchmark_plan(names: Iterable[str], lengths: Sequence[int] | None = None) -> dict[str, tuple[int, ...]]:
    """``{task: lengths}`` for specs like ``["mqar", "niah-single@256,512"]``: a spec's own lengths, else
    ``lengths``, else the task's defaults. Specs naming the same task merge their lengths."""
    plan: dict[str, tuple[int, ...]] = {}
    for spec in names:
        name, own = parse_task_spec(spec)
        chosen = own or tuple(lengths or ()) or TASKS[name].default_lengths
        plan[name] = tuple(sorted(set(plan.get(name, ())) | set(chosen)))
    return plan


def evaluate_tasks(model: CausalLM, tokenizer: Encoder, names: list[str], *, seed: int,
                   device: torch.device | str = "cpu",
                   lengths: list[int] | None = None, n: int = 50, batch_size: int = 16,
                   filler: Iterable[str] | None = None) -> dict[str, float]:
    """Score ``model`` on the benchmark tasks ``names`` (specs, see ``parse_task_spec``): accuracy in %.

    Returns ``{"bench/<task>@<len>": acc, ..., "bench/<task>": mean over its lengths}``. ``n`` examples per
    task and length, generated from ``seed`` (the same for every run of a grid, so runs are compared on the
    same examples). ``filler``: held-out documents for the haystack (RULER's noise sentences when None;
    re-iterated per task and length, so pass a list or another re-iterable). The model is put in eval mode and
    restored.
    """
    plan = benchmark_plan(names, lengths)
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    scores: dict[str, float] = {}
    try:
        for name, task_lengths in plan.items():
            accs = []
            for length in task_lengths:
                examples = task_examples(name, seed=seed, length=length, n=n, tokenizer=tokenizer,
                                         filler=filler)
                acc = score_examples(model, tokenizer, examples, device=device, batch_size=batch_size)
                scores[f"bench/{name}@{length}"] = acc
                accs.append(acc)
                log.info("bench/%s@%d = %.1f%% (n=%d)", name, length, acc, n)
            scores[f"bench/{name}"] = sum(accs) / len(accs)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    return scores
