"""The lm-eval adapter, offline: task YAMLs over a local JSONL file; its loglikelihoods equal a direct forward
pass encoded by lm-eval's rules (a context's trailing spaces join the continuation; an empty context is
end-of-text)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ablate.ablations import build_model
from ablate.ablations.config import ModelConfig
from ablate.runner.tokenizers import ByteTokenizer

DOCS = [
    {"question": "The sky is", "choices": [" blue", " green", " loud"], "label": 0,
     "text": "The sky is blue today."},
    {"question": "One, two,", "choices": [" three", " seven"], "label": 0,
     "text": "One, two, three, four, five."},
    {"question": "Cats say", "choices": [" woof", " meow"], "label": 1,
     "text": "Cats say meow; dogs say woof."},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm_eval")
    data = tmp / "toy.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    common = (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n  cache_dir: "
              f"{tmp / 'hf'}\ntest_split: test\n")
    (tmp / "mc.yaml").write_text(
        "task: ablate_toy_mc\n" + common + "output_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
        "doc_to_target: label\ndoc_to_choice: choices\ntarget_delimiter: ''\nmetric_list:\n  - metric: acc\n")
    (tmp / "ppl.yaml").write_text(
        "task: ablate_toy_ppl\n" + common + "output_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n")
    (tmp / "gen.yaml").write_text(
        "task: ablate_toy_gen\n" + common + "output_type: generate_until\ndoc_to_text: '{{question}}'\n"
        "doc_to_target: '{{choices[label]}}'\ngeneration_kwargs:\n  until: ['.']\n  max_gen_toks: 6\n"
        "metric_list:\n  - metric: exact_match\n")
    torch.manual_seed(0)
    model = build_model(ModelConfig(preset="tiny")).eval()
    return tmp, model, ByteTokenizer()


def _direct_logprob(model, tok, context: str, continuation: str) -> float:
    cut = len(context.rstrip())  # lm-eval moves the context's trailing spaces into the continuation
    ctx = tok.encode(context[:cut]) or [tok.eos_id]
    ids = ctx + tok.encode(context[cut:] + continuation)
    with torch.no_grad():
        logp = model(torch.tensor([ids[:-1]])).logits[0].log_softmax(-1)
    return sum(float(logp[i - 1, ids[i]]) for i in range(len(ctx), len(ids)))


def test_loglikelihoods_equal_direct_forward(setup):
    from lm_eval.api.instance import Instance

    from ablate.runner.lm_eval_adapter import make_lm

    _, model, tok = setup
    lm = make_lm(model, tok, batch_size=2)
    pairs = [(d["question"], c) for d in DOCS for c in d["choices"]] + [("", "Hello"), ("It is ", "42")]
    reqs = [Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)]
    got = lm.loglikelihood(reqs)
    for (ctx, cont), (lp, greedy) in zip(pairs, got, strict=True):
        assert lp == pytest.approx(_direct_logprob(model, tok, ctx, cont), abs=1e-4)
        assert isinstance(greedy, bool)
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (d["text"],), 0) for d in DOCS])
    for d, lp in zip(DOCS, rolling, strict=True):
        assert lp == pytest.approx(_direct_logprob(model, tok, "", d["text"]), abs=1e-4)
    # a window shorter than the text: every token is still scored once, with less context
    short = make_lm(model, tok, max_length=8).loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (DOCS[0]["text"],), 0)])[0]
    assert short < 0 and short != pytest.approx(rolling[0], abs=1e-4)


def test_simple_evaluate_over_local_yaml(setup, monkeypatch):
    from ablate.runner.lm_eval_adapter import evaluate_lm_eval

    tmp, model, tok = setup
    scores = evaluate_lm_eval(model, tok, ["ablate_toy_mc", "ablate_toy_ppl", "ablate_toy_gen"],
                              include_path=tmp)
    chosen = [max(range(len(d["choices"])),
                  key=lambda j: _direct_logprob(model, tok, d["question"], d["choices"][j]))
              for d in DOCS]
    expected_acc = sum(c == d["label"] for c, d in zip(chosen, DOCS, strict=True)) / len(DOCS)
    assert scores["bench/ablate_toy_mc/acc"] == pytest.approx(expected_acc)
    nll = sum(-_direct_logprob(model, tok, "", d["text"]) for d in DOCS)
    n_bytes = sum(len(d["text"].encode()) for d in DOCS)
    assert scores["bench/ablate_toy_ppl/bits_per_byte"] == pytest.approx(nll / n_bytes / math.log(2),
                                                                         rel=1e-4)
    assert 0.0 <= scores["bench/ablate_toy_gen/exact_match"] <= 1.0
    assert not any("stderr" in k for k in scores)


def test_generate_until_is_greedy_and_stops(setup):
    from lm_eval.api.instance import Instance

    from ablate.runner.lm_eval_adapter import make_lm

    _, model, tok = setup
    lm = make_lm(model, tok)
    (text,) = lm.generate_until([Instance("generate_until", {}, ("The sky is", {"max_gen_toks": 5}), 0)])
    ids = tok.encode("The sky is")
    with torch.no_grad():
        for _ in range(5):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    expected = tok.decode(ids[-5:])
    assert text == expected
    stop = expected[2] if len(expected) > 2 else None
    if stop:
        (cut,) = lm.generate_until([Instance("generate_until", {}, ("The sky is", {"until": [stop],
                                                                                 "max_gen_toks": 5}), 0)])
        assert cut == expected[: expected.index(stop)]
