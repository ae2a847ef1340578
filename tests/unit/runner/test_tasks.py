"""Offline benchmark tasks: seeded generation, length specs, and the exact-match greedy scorer against a
perfect oracle, a random model and a nearly-right one (real logits tensors, the real scorer)."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from ablate.errors import ConfigError
from ablate.runner.tasks import (
    TASKS,
    Example,
    benchmark_plan,
    encode_example,
    evaluate_tasks,
    parse_task_spec,
    score_examples,
    task_documents,
    task_examples,
)
from ablate.runner.tasks.haystack import NOISE
from ablate.runner.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
VOCAB = 320  # the tiny preset's


def _length(name: str) -> int:
    return {"mqar": 128, "niah-single": 192, "vt": 192}.get(name, 384)  # small: fast, with some haystack


class Oracle(torch.nn.Module):
    """Logits that put all mass on each example's true next token (``flip_last``: except the answer's last);
    zeros (token 0) for a row that is no known example."""

    def __init__(self, examples: list[Example], *, flip_last: bool = False):
        super().__init__()
        self.seqs = []
        for ex in examples:
            prompt, target = encode_example(TOK, ex)
            if flip_last:
                target = [*target[:-1], (target[-1] + 1) % 256]
            self.seqs.append((torch.tensor(prompt), torch.tensor(prompt + target)))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        logits = torch.zeros(b, t, VOCAB)
        for prompt, full in self.seqs:
            if len(prompt) > t:
                continue
            for i in torch.nonzero((idx[:, : len(prompt)] == prompt).all(-1)).flatten().tolist():
                pos = torch.arange(len(prompt) - 1, min(t, len(full) - 1))
                logits[i, pos, full[pos + 1]] = 10.0
        return logits


class RandomModel(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return torch.randn(*idx.shape, VOCAB, generator=self.gen)


@pytest.mark.parametrize("name", list(TASKS), ids=list(TASKS))
def test_generation_is_seeded_and_fits(name):
    length = _length(name)
    a = task_examples(name, seed=3, length=length, n=6, tokenizer=TOK)
    b = task_examples(name, seed=3, length=length, n=6, tokenizer=TOK)
    c = task_examples(name, seed=4, length=length, n=6, tokenizer=TOK)
    assert a == b and a != c
    assert len({ex.prompt for ex in a}) == 6
    for ex in a:
        n_tokens = 1 + len(TOK.encode(ex.prompt)) + len(TOK.encode(ex.answer))
        assert length * 0.8 <= n_tokens <= length, n_tokens
        assert ex.answer and not ex.prompt.endswith(ex.answer)


@pytest.mark.parametrize("name", [n for n in TASKS if n.startswith("niah")], ids=lambda n: n)
def test_niah_values_are_needles(name):
    for ex in task_examples(name, seed=0, length=_length(name), n=5, tokenizer=TOK):
        values = ex.answer.split(", ")
        assert all(re.fullmatch(r"\d{7}", v) for v in values)
        for v in values:
            assert re.search(rf"The magic number for [a-z]+-[a-z]+ is {v}\. ", ex.prompt)
        assert len(re.findall(r"The magic number for", ex.prompt)) == (1 if name == "niah-single" else 4)
        hay = re.sub(r"The magic number for [a-z]+-[a-z]+ is \d{7}\. ", "", ex.prompt.rsplit("What", 1)[0])
        assert set(re.findall(r"[^.]+\. ", hay)) <= set(NOISE) and len(hay) > 20


def test_vt_chain_and_mqar_pairs():
    (ex,) = task_examples("vt", seed=1, length=256, n=1, tokenizer=TOK)
    names = ex.answer.split()
    value = re.search(r"equal (\d{5})\?", ex.prompt).group(1)
    assert len(names) == 5 and f"VAR {names[0]} = {value}." in ex.prompt
    assert all(f"VAR {b} = {a}." in ex.prompt for a, b in itertools.pairwise(names))
    (ex,) = task_examples("mqar", seed=1, length=128, n=1, tokenizer=TOK)
    stated, asked = ex.prompt.split("\n")
    pairs = dict(p.split(":") for p in stated.split())
    assert len(pairs) == (128 - 2) // 12 and pairs[asked.split()[-1].rstrip(":")] == ex.answer
    assert all(pairs[k] == v for k, v in (p.split(":") for p in asked.split()[:-1]))


def test_held_out_text_as_haystack():
    docs = ["Alpha beta gamma. Delta epsilon!", "Zeta eta theta? Iota kappa lambda."]
    (ex,) = TASKS["niah-single"].generate(0, 1, 200, TOK, filler=docs)
    hay = re.sub(r"The magic number for [a-z]+-[a-z]+ is \d{7}\. ", "", ex.prompt.rsplit("What", 1)[0])
    cycled = "Alpha beta gamma. Delta epsilon! Zeta eta theta? Iota kappa lambda. " * 10
    assert len(hay) > 60 and cycled.startswith(hay)


def test_specs():
    assert parse_task_spec("mqar") == ("mqar", None)
    assert parse_task_spec("niah-single@256, 1k") == ("niah-single", (256, 1024))
    assert benchmark_plan(["vt", "niah-single@512", "niah-single@256"], [128]) == {
        "vt": (128,), "niah-single": (256, 512)}
    assert benchmark_plan(["mqar"]) == {"mqar": TASKS["mqar"].default_lengths}
    with pytest.raises(ConfigError,
                       match=r"unknown benchmark task 'niah-singel' \(did you mean 'niah-single'\?\)"):
        parse_task_spec("niah-singel@256")
    with pytest.raises(ConfigError, match=r"eval.benchmarks: bad length 'x2'"):
        parse_task_spec("vt@256,x2")
    with pytest.raises(ConfigError, match="length 64 is too short for task 'niah-multivalue'"):
        task_examples("niah-multivalue", seed=0, length=64, n=1, tokenizer=TOK)


def test_documents_stream():
    docs = list(itertools.islice(task_documents("mqar@48,96", seed=0), 40))
    assert docs == list(itertools.islice(task_documents("mqar@48,96", seed=0), 40))
    assert docs != list(itertools.islice(task_documents("mqar@48,96", seed=1), 40))
    sizes = {len(d.encode()) + 1 for d in docs}
    assert max(sizes) <= 96 and min(sizes) <= 48 < max(sizes)
    evals = {ex.text for ex in task_examples("mqar", seed=0, length=48, n=50, tokenizer=TOK)}
    assert not evals & set(docs)


@pytest.mark.parametrize("name", list(TASKS), ids=list(TASKS))
def test_scorer_oracle_random_and_nearly_right(name):
    length = _length(name)
    examples = task_examples(name, seed=0, length=length, n=12, tokenizer=TOK)
    assert score_examples(Oracle(examples), TOK, examples, batch_size=5) == 100.0
    assert score_examples(Oracle(examples, flip_last=True), TOK, examples, batch_size=5) == 0.0
    assert score_examples(RandomModel(), TOK, examples, batch_size=5) == 0.0


def test_evaluate_tasks_keys_and_means():
    names = ["niah-single@128,192", "mqar@64"]
    examples = [ex for name, lengths in benchmark_plan(names).items() for length in lengths
                for ex in task_examples(name, seed=7, length=length, n=8, tokenizer=TOK)]
    half = examples[:8] + examples[16:]  # the oracle misses niah-single@192
    scores = evaluate_tasks(Oracle(half), TOK, names, seed=7, n=8, batch_size=4)
    assert scores == {"bench/niah-single@128": 100.0, "bench/niah-single@192": 0.0, "bench/niah-single": 50.0,
                      "bench/mqar@64": 100.0, "bench/mqar": 100.0}
