"""``ablate export RUN_ID --format hf``: a run directory's checkpoint as a transformers folder that loads with
the run's logits, a tokenizer that encodes the run's corpus to the ids it trained on (byte, BPE, Hugging
Face), and a model card; refusals exit 2 and write nothing."""

from __future__ import annotations

import os

import pytest
import torch
from export_runs import make_run
from typer.testing import CliRunner

from ablate.cli import app

SUMMARY = {"steps": 300, "tokens": 1_228_800, "train_loss": 1.234, "val_ppl": 3.456, "ppl/prose": 3.5,
           "bench/mqar": 42.0, "gate_score": 0.31, "wall_s": 60.0}
CORPUS = ("def gate(x):\n    return x * sigmoid(x @ W)  # élément par élément\n\n"
          "Attention sinks form on the first token.<|endoftext|>Then a new document: 1 + 2 = 3.\n") * 20


def _hf_tokenizer_dir(tmp_path):
    """A Hugging Face tokenizer folder on this machine (what `data.tokenizer: hf:<path>` names): a small
    byte-level BPE trained here, saved by transformers."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([CORPUS], trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    path = tmp_path / "hf-tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(path))
    return path


@pytest.mark.parametrize("variant,tokenizer", [("baseline", "byte"), ("sdpa-elementwise", "bpe"),
                                               ("sdpa-headwise", "hf")])
def test_export_loads_with_the_runs_logits_and_tokenizer(tmp_path, monkeypatch, variant: str, tokenizer: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ablate.runner.checkpoints import load_run_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    spec = {"byte": "byte", "bpe": "bpe", "hf": f"hf:{_hf_tokenizer_dir(tmp_path)}"}[tokenizer]
    data = {"tokenizer": spec, "seq_len": 128, "train": [{"kind": "text", "path": str(corpus)}],
            "heldout": {}}
    home = tmp_path / "home"
    rid, _, _ = make_run(home, variant=variant, data=data, summary=SUMMARY)
    out = tmp_path / "export"
    res = CliRunner().invoke(app, ["export", rid, "--format", "hf", "--out", str(out), "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert f"exported {rid} (hf) to {out}" in res.output and f"tokenizer '{spec}'" in res.output

    model, run_tok, config = load_run_model(home / "runs" / rid)  # the run's own model, from its checkpoint
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    assert hf.config.max_position_embeddings == 128 and hf.config.eos_token_id == run_tok.eos_id
    idx = torch.randint(0, run_tok.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(idx).logits
        assert ours.abs().max() > 1.0
        assert (hf(idx).logits - ours).abs().max().item() < 1e-4

    hf_tok = AutoTokenizer.from_pretrained(out)
    sample = CORPUS[:1500]
    assert hf_tok(sample)["input_ids"] == run_tok.encode(sample)  # no special tokens added, the same ids
    assert hf_tok.eos_token_id == run_tok.eos_id and hf_tok.decode(run_tok.encode("héllo")) == "héllo"

    card = (out / "README.md").read_text()
    assert f"# {variant} (ablate run `{rid}`)" in card and f"variant: {variant}" in card
    assert "| val_ppl | 3.456 |" in card and "| bench/mqar | 42 |" in card and "Status `done`" in card
    assert ("Headwise gate written as elementwise" in card) == (variant == "sdpa-headwise")
    assert ("Qwen3NextForCausalLM" in card) == (variant != "baseline")


def test_unfinished_run_exports_without_numbers(tmp_path):
    """Also: the run named by its first characters, as show and diff take it; every file of the folder with
    the mode open() gives a new file (model.safetensors too)."""
    rid, _, _ = make_run(tmp_path, variant="sdpa-elementwise")
    res = CliRunner().invoke(app, ["export", rid[:5], "--out", str(tmp_path / "x"), "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"exported {rid} (hf)" in res.output
    assert "had not finished when this was exported" in (tmp_path / "x" / "README.md").read_text()
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "x").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~umask}, modes


def test_an_ambiguous_run_prefix_names_the_candidates(tmp_path):
    rid, _, _ = make_run(tmp_path)
    twin = rid[:-1] + ("0" if rid[-1] != "0" else "1")
    (tmp_path / "runs" / twin).mkdir()
    res = CliRunner().invoke(app, ["export", rid[:4], "--out", str(tmp_path / "x"), "--home", str(tmp_path)])
    both = ", ".join(sorted([rid, twin]))
    assert res.exit_code == 2 and f"run '{rid[:4]}' is ambiguous: it begins {both}" in res.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("variant,match", [
    ("sdpa-additive-silu", "model.gate.combine: cannot export gate.combine='additive' to Hugging Face"),
    ("v-elementwise", "model.gate.position: cannot export gate.position='G2'"),
    ("switch-v-4top4", "model.switch: cannot export switch="),
    ("sandwich-norm", "model.sandwich_norm: cannot export sandwich_norm=True"),
], ids=["additive", "value-gate", "switch-heads", "sandwich-norm"])
def test_inexpressible_arms_are_refused_and_nothing_is_written(tmp_path, variant: str, match: str):
    rid, _, _ = make_run(tmp_path, variant=variant)
    out = tmp_path / "export"
    res = CliRunner().invoke(app, ["export", rid, "--out", str(out), "--home", str(tmp_path)])
    assert res.exit_code == 2 and match in " ".join(res.output.split())
    assert not out.exists() and not list(tmp_path.glob(".export.*"))


@pytest.mark.parametrize("args,match", [
    (["export", "zzz", "--out", "x"], "no run 'zzz'"),
    (["export", "RID", "--out", "x", "--format", "gguf"], "--format: unknown format 'gguf'; allowed: hf"),
    (["export", "RID", "--out", "afile"], "afile: exists and is not a folder"),
], ids=["unknown-run", "unknown-format", "out-is-a-file"])
def test_bad_input_is_one_line(tmp_path, args, match):
    rid, _, _ = make_run(tmp_path)
    (tmp_path / "afile").write_text("keep me")
    args = [a.replace("RID", rid) for a in args]
    res = CliRunner().invoke(app, [*args[:3], str(tmp_path / args[3]), *args[4:], "--home", str(tmp_path)])
    assert res.exit_code == 2 and match in " ".join(res.output.split())
    assert (tmp_path / "afile").read_text() == "keep me" and not (tmp_path / "x").exists()
