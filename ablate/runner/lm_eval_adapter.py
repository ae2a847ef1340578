"""lm-evaluation-harness bridge: an ``lm_eval`` model class (registered as ``ablate``) over an ablate model.

``AblateLM(model=..., tokenizer=...)`` wraps a model in memory; ``AblateLM(pretrained=RUN_DIR)`` loads a run's
final checkpoint (``lm_eval --model ablate --model_args pretrained=ablate-runs/runs/<id>``). It is lm-eval's
own ``TemplateLM``: requests are encoded by lm-eval's rules (trailing spaces of a context move to the
continuation, an empty context is the end-of-text token, rolling windows start with it), exactly as lm-eval's
``hf`` model encodes them for the same model exported by ``ablate export``, so both give the same
loglikelihoods. ``evaluate_lm_eval`` runs lm-eval tasks (any task lm-eval knows, ablate's offline ``ablate_*``
tasks, and YAML files under ``include_path``) and flattens the metrics to ``bench/<task>/<metric>``.

lm_eval is imported only when a class or an evaluation is asked for (``lm_eval_class()``), never at import.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

from ablate.errors import UserInputError, did_you_mean
from ablate.runner.checkpoints import load_run_model
from ablate.runner.lm_eval_tasks import TASKS_DIR

if TYPE_CHECKING:
    import torch

    from ablate.runner.tokenizers import Tokenizer

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 2048
DEFAULT_MAX_GEN_TOKS = 256

# What ablate reads of lm-eval's results dict (``simple_evaluate``'s): per task, its metrics (``acc,none``: a
# number, or a string as ``alias``), which of them are better higher, and how many examples it scored.
LmEvalResults = TypedDict("LmEvalResults", {
    "results": dict[str, dict[str, object]],
    "higher_is_better": dict[str, dict[str, bool]],
    "n-samples": dict[str, dict[str, int]],
}, total=False)
# a loglikelihood request as lm-eval hands it to ``_loglikelihood_tokens``: ((context, continuation) or None
# for a rolling window, context ids, continuation ids)
TokenRequest = tuple[tuple[str, str] | None, list[int], list[int]]


class RollingRequest(Protocol):
    """An lm-eval ``Instance`` of ``loglikelihood_rolling``: ``args == (text,)``."""

    args: tuple[str]


class GenerateRequest(Protocol):
    """An lm-eval ``Instance`` of ``generate_until``: ``args == (context, generation kwargs)``, the kwargs a
    task's YAML gives (``until``, ``max_gen_toks``, sampling options: any YAML values)."""

    args: tuple[str, dict[str, Any] | None]


def _logits(model: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    out = model(idx)
    logits: torch.Tensor = out.logits if hasattr(out, "logits") else out
    return logits


def continuation_logprobs(model: torch.nn.Module, pairs: Sequence[tuple[list[int], list[int]]], *,
                          device: torch.device | str,
                          pad_id: int) -> list[tuple[float, bool]]:
    """For each ``(context_ids, continuation_ids)`` (context non-empty): the summed log-probability of the
    continuation after the context, and whether greedy decoding would produce it. One right-padded batch."""
    import torch

    seqs = [c + t for c, t in pairs]
    width = max(len(s) for s in seqs) - 1
    idx = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        idx[i, : len(s) - 1] = torch.tensor(s[:-1], dtype=torch.long)
    logp = _logits(model, idx.to(device)).float().log_softmax(-1).cpu()  # [B, T, V]
    out = []
    for i, (c, t) in enumerate(pairs):
        rows = logp[i, len(c) - 1: len(c) - 1 + len(t)]  # the positions that predict the continuation
        target = torch.tensor(t, dtype=torch.long)
        out.append((float(rows.gather(-1, target[:, None]).sum()), bool((rows.argmax(-1) == target).all())))
    return out


def greedy_generate(model: torch.nn.Module, prompt: list[int], *, max_new: int, device: torch.device | str,
                    stop: Sequence[str], eos_id: int, decode: Callable[[list[int]], str]) -> str:
    """Greedy continuation of ``prompt`` until ``eos_id``, any ``stop`` string, or ``max_new`` tokens; the
    text before the first stop string."""
    import torch

    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    new: list[int] = []
    text = ""
    for _ in range(max_new):
        nxt = int(_logits(model, ids)[0, -1].argmax())
        if nxt == eos_id:
            break
        new.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]], device=device)], dim=1)
        text = decode(new)
        if any(s and s in text for s in stop):
            break
    for s in stop:
        if s and s in text:
            text = text[: text.index(s)]
    return text


@functools.cache
def lm_eval_class() -> type:
    """The ``lm_eval.api.model.TemplateLM`` subclass for ablate models, registered in lm_eval as
    ``ablate``."""
    import lm_eval.models  # noqa: F401 - lm-eval's own models first: its registry loads them only while empty
    import torch
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    @register_model("ablate")
    class AblateLM(TemplateLM):  # type: ignore[misc]  # lm_eval is untyped: its classes are Any here
        """An ablate model + tokenizer for lm-evaluation-harness: loglikelihood (lm-eval's encoding), rolling
        loglikelihood, greedy generation. Inputs longer than ``max_length`` tokens are cut from the left."""

        def __init__(self, model: torch.nn.Module | None = None, tokenizer: Tokenizer | None = None, *,
                     pretrained: str | None = None, device: str = "cpu", batch_size: int | str = 8,
                     max_length: int | None = None, max_gen_toks: int = DEFAULT_MAX_GEN_TOKS, **_: object):
            super().__init__()
            if pretrained is not None:
                model, tokenizer, cfg = load_run_model(Path(pretrained), device=device)
                max_length = max_length or cfg.data.seq_len
            if model is None or tokenizer is None:
                raise ValueError("AblateLM needs model= and tokenizer=, or pretrained=<run directory>")
            self.model, self.tok = model.eval(), tokenizer
            self._device = torch.device(device)
            self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8
            self.max_length = int(max_length or DEFAULT_MAX_LENGTH)
            self.max_gen_toks = int(max_gen_toks)

        @property
        def eot_token_id(self) -> int:
            return self.tok.eos_id

        def tok_encode(self, string: str, add_special_tokens: bool | None = None, **_: object) -> list[int]:
            # ablate's tokenizers add no special tokens
            return list(self.tok.encode(string)) if string else []

        def _loglikelihood_tokens(self, requests: list[TokenRequest], disable_tqdm: bool = False,
                                  **ignored: object) -> list[tuple[float, bool]]:
            results = self._score([(c or [self.eot_token_id], t) for _, c, t in requests])
            for (args, _, _), res in zip(requests, results, strict=True):
                if args is not None:
                    self.cache_hook.add_partial("loglikelihood", args, res)
            return results

        def _score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
            cut = []
            for c, t in pairs:  # keep at most max_length + 1 tokens: max_length inputs
                keep = max(self.max_length + 1 - len(t), 1)
                cut.append((c[-keep:], t[-self.max_length:]))
            order = sorted(range(len(cut)), key=lambda i: -len(cut[i][0]) - len(cut[i][1]))
            results: list[tuple[float, bool]] = [(0.0, False)] * len(cut)
            with torch.inference_mode():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start: start + self.batch_size]
                    scored = continuation_logprobs(self.model, [cut[i] for i in chunk], device=self._device,
                                                   pad_id=self.eot_token_id)
                    for i, r in zip(chunk, scored, strict=True):
                        results[i] = r
            return results

        def loglikelihood_rolling(self, requests: list[RollingRequest],
                                  disable_tqdm: bool = False) -> list[float]:
            out = []
            for req in requests:
                (text,) = req.args
                windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                    self.tok_encode(text), prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                    context_len=1)]
                total = sum(lp for lp, _ in self._score(windows))
                self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
                out.append(total)
            return out

        def generate_until(self, requests: list[GenerateRequest], disable_tqdm: bool = False) -> list[str]:
            out = []
            for req in requests:
                context, kwargs = req.args
                kwargs = dict(kwargs or {})
                until = kwargs.get("until") or []
                until = [until] if isinstance(until, str) else list(until)
                max_new = int(kwargs.get("max_gen_toks", self.max_gen_toks))
                prompt = (self.tok_encode(context) or [self.eot_token_id])[-max(self.max_length - max_new,
                                                                                1):]
                with torch.inference_mode():
                    text = greedy_generate(self.model, prompt, max_new=max_new, device=self._device,
                                           stop=until, eos_id=self.eot_token_id, decode=self.tok.decode)
                self.cache_hook.add_partial("generate_until", req.args, text)
                out.append(text)
            return out

    return AblateLM


def make_lm(model: torch.nn.Module, tokenizer: Tokenizer, **kwargs: str | int | None) -> Any:
    """An ``AblateLM`` over an in-memory model and tokenizer (``kwargs``: device, batch_size,
    max_length, ...)."""
    return lm_eval_class()(model=model, tokenizer=tokenizer, **kwargs)


# lm-eval metrics that are fractions of examples: ``bench/<task>`` shows them in %, as ablate's own benchmarks
FRACTION_METRICS = ("acc", "acc_norm", "acc_mutual_info", "exact_match", "em", "f1")


def _metric_name(key: str) -> str:
    metric, _, filt = key.partition(",")
    return metric if filt in ("", "none") else f"{metric}.{filt}"


def task_manager(tasks: Sequence[str],
                 include_path: str | Path | Sequence[str | os.PathLike[str]] | None = None) -> Any:
    """lm-eval's ``TaskManager`` over ablate's offline tasks (``ablate.runner.lm_eval_tasks``) and
    ``include_path``; lm-eval's own catalogue (thousands of YAMLs, seconds to index) only when a task is in
    neither. An unknown task or a missing folder is a UserInputError."""
    from lm_eval.tasks import TaskManager

    given = [] if include_path is None else [include_path] if isinstance(include_path,
                                                                         str | Path) else include_path
    for path in given:
        if not Path(path).is_dir():
            raise UserInputError(f"--include-path {path}: not a directory of lm-eval task YAMLs")
    paths = [str(TASKS_DIR), *map(str, given)]
    manager = TaskManager(include_path=paths, include_defaults=False)
    if not all(t in manager.all_tasks for t in tasks):
        manager = TaskManager(include_path=paths)
    for task in tasks:
        if task not in manager.all_tasks:
            raise UserInputError(f"unknown lm-eval task {task!r}{did_you_mean(task, manager.all_tasks)}: not "
                                 "one of lm-eval's, ablate's offline ablate_* tasks, or a YAML under "
                                 "--include-path")
    return manager


def run_lm_eval(model: torch.nn.Module, tokenizer: Tokenizer, tasks: Sequence[str], *,
                include_path: str | Path | Sequence[str | os.PathLike[str]] | None = None,
                limit: int | float | None = None, num_fewshot: int | None = None, device: str = "cpu",
                batch_size: int = 8, max_length: int | None = None, seed: int = 0,
                log_samples: bool = False) -> LmEvalResults:
    """lm-evaluation-harness ``tasks`` on ``model``: lm-eval's own results dict (``results``, ``n-samples``,
    ``higher_is_better``, ``configs``, ...). Nothing is downloaded by ablate; a task whose data is not on this
    machine fails inside lm-eval."""
    import lm_eval

    lm = make_lm(model, tokenizer, device=device, batch_size=batch_size, max_length=max_length)
    with _quiet_git_hash(), _no_progress_bars():
        res = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), limit=limit, num_fewshot=num_fewshot,
                                      task_manager=task_manager(tasks, include_path), log_samples=log_samples,
                                      random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                                      fewshot_random_seed=seed, bootstrap_iters=0)
    return cast(LmEvalResults, dict(res or {}))  # lm-eval's dict, untyped


@contextlib.contextmanager
def _quiet_git_hash() -> Iterator[None]:
    """lm-eval records the working directory's git commit by running ``git describe`` with its stderr open:
    outside a repository that prints ``fatal: not a git repository`` on the user's screen. The same answer,
    quietly."""
    import subprocess

    from lm_eval import evaluator

    def quiet() -> str | None:
        try:
            out = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, check=False)
        except OSError:  # no git here
            return None
        return out.stdout.strip() or None

    saved = evaluator.get_git_commit_hash
    evaluator.get_git_commit_hash = quiet
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = saved


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """lm-eval draws a tqdm bar for each task's requests and their tokenizing, and datasets one for each split
    it reads: on ``ablate eval``'s screen they interleave with its one line per run, and in a log they are
    carriage-return noise. Off while lm-eval runs (ablate's lines say what it scored)."""
    from datasets.utils import logging as datasets_logging
    from lm_eval.api import model, task
    from tqdm import tqdm

    def silent(*args: object, **kwargs: object) -> object:
        return tqdm(*args, **{**kwargs, "disable": True})

    saved = model.tqdm, task.tqdm
    bars = datasets_logging.is_progress_bar_enabled()
    model.tqdm = task.tqdm = silent
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        model.tqdm, task.tqdm = saved
        if bars:
            datasets_logging.enable_progress_bar()


def flat_metrics(res: LmEvalResults) -> dict[str, float]:
    """``{"bench/<task>/<metric>": value}`` from lm-eval's results (stderr left out; ``acc,none`` becomes
    ``acc``, another filter ``metric.filter``)."""
    out: dict[str, float] = {}
    for task, metrics in res.get("results", {}).items():
        for key, value in metrics.items():
            if "," not in key or "_stderr" in key or not isinstance(value, int | float):
                continue
            out[f"bench/{task}/{_metric_name(key)}"] = float(value)
    return out


def primary_scores(res: LmEvalResults) -> dict[str, tuple[str, float]]:
    """Per task (and group) of lm-eval's results: ``(metric, score)``, its first higher-is-better metric (in
    the task's ``metric_list`` order), in % when it is a fraction of examples (``FRACTION_METRICS``)."""
    out: dict[str, tuple[str, float]] = {}
    for task, metrics in res.get("results", {}).items():
        better = res.get("higher_is_better", {}).get(task, {})
        for key, value in metrics.items():
            name = key.partition(",")[0]
            if "," not in key or "_stderr" in key or not isinstance(value,
                                                                    int | float) or not better.get(name):
                continue
            out[task] = (_metric_name(key), float(value) * (100.0 if name in FRACTION_METRICS else 1.0))
            break
    return out


def evaluate_lm_eval(model: torch.nn.Module, tokenizer: Tokenizer, tasks: list[str], *,
                     include_path: str | Path | None = None,
                     limit: int | float | None = None, num_fewshot: int | None = None, device: str = "cpu",
                     batch_size: int = 8, max_length: int | None = None, seed: int = 0) -> dict[str, float]:
    """Run lm-evaluation-harness ``tasks`` on ``model``: ``{"bench/<task>/<metric>": value}`` (see
    ``run_lm_eval`` and ``flat_metrics``)."""
    return flat_metrics(run_lm_eval(model, tokenizer, tasks, include_path=include_path, limit=limit,
                                    num_fewshot=num_fewshot, device=device, batch_size=batch_size,
                                    max_length=max_length, seed=seed))
