"""A tiny model trained briefly with plain PyTorch on a task stream scores well above chance on the matching task.

The configuration is the easiest there is: MQAR with one key:value pair (``mqar@16``), where the answer's two
digits (chance: 1%) are recalled by looking back at the stated pair. q/k norm is off: at head_dim 16 it caps the
attention logits at 4 x its weight, and the copy then takes several times longer to form (measured on this task).
"""

from __future__ import annotations

import itertools

import torch

from ablate.ablations import build_model
from ablate.ablations.config import ModelConfig
from ablate.runner.tasks import evaluate_tasks, task_documents
from ablate.runner.tokenizers import ByteTokenizer

SPEC, LENGTH, BATCH, MAX_STEPS = "mqar@16", 16, 64, 900


def _batches(tok: ByteTokenizer):
    docs = task_documents(SPEC, seed=0, tokenizer=tok)
    while True:
        rows = torch.full((BATCH, LENGTH + 1), tok.eos_id)
        for row, doc in zip(rows, itertools.islice(docs, BATCH), strict=True):
            ids = [tok.eos_id, *tok.encode(doc), tok.eos_id][: LENGTH + 1]
            row[: len(ids)] = torch.tensor(ids)
        yield rows


def test_tiny_model_learns_recall():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add overhead
    try:
        tok = ByteTokenizer()
        torch.manual_seed(1)
        model = build_model(ModelConfig(preset="tiny", qk_norm=False))
        before = evaluate_tasks(model, tok, [SPEC], seed=0, n=100)["bench/mqar"]
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        acc = before
        for step, rows in enumerate(_batches(tok), start=1):
            logits = model(rows[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 100 == 0:
                acc = evaluate_tasks(model, tok, [SPEC], seed=0, n=100)["bench/mqar"]
                model.train()
                if acc >= 60 or step >= MAX_STEPS:
                    break
    finally:
        torch.set_num_threads(threads)
    assert before <= 5.0  # untrained: chance is 1%
    assert acc >= 30.0, f"after {step} steps: {acc}%"
