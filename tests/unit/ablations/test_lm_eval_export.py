"""A real client nobody here wrote: lm-eval's own ``hf`` model, pointed at a folder ``ablate export`` wrote,
scores ablate's offline tasks with the same loglikelihoods (and greedy generations) as the project's adapter
on the run's checkpoint, request by request. Weights at O(1) scale (tests/export_runs.py)."""

from __future__ import annotations

import pytest
from export_runs import make_run

TASKS = ["ablate_mqar", "ablate_niah_single", "ablate_vt"]


def _samples(res: dict) -> dict[tuple[str, int], list]:
    """``(task, doc_id) -> [response, ...]`` of one lm-eval run with ``log_samples``."""
    return {(task, s["doc_id"]): [r for r in s["filtered_resps"]] for task, samples in res["samples"].items()
            for s in samples}


@pytest.mark.parametrize("variant", ["sdpa-headwise"])
def test_lm_eval_hf_model_on_the_export_equals_the_adapter(tmp_path, monkeypatch, variant: str):
    import lm_eval

    from ablate.layout import run_dir
    from ablate.runner.export import export_run
    from ablate.runner.lm_eval_adapter import flat_metrics, lm_eval_class, task_manager

    rid, _, _ = make_run(tmp_path, variant=variant, data={"seq_len": 256})
    out = tmp_path / "export"
    export_run(tmp_path, rid, out)
    manager = task_manager(TASKS)
    common = dict(tasks=TASKS, task_manager=manager, limit=2, log_samples=True, bootstrap_iters=0)
    theirs = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(out), "dtype": "float32", "device": "cpu"}, batch_size=4,
        **common)
    ours = lm_eval.simple_evaluate(model=lm_eval_class()(pretrained=str(run_dir(tmp_path, rid)),
                                                         batch_size=4),
                                   **common)
    assert theirs["n-samples"] == ours["n-samples"]
    a, b = _samples(theirs), _samples(ours)
    assert a.keys() == b.keys() and len(a) == 2 * len(TASKS)
    compared = 0
    for key, responses in a.items():
        for x, y in zip(responses, b[key], strict=True):
            if isinstance(x, str):  # ablate_vt: the greedy continuation
                assert x == y, key
            else:  # (loglikelihood, is_greedy) per choice, or one
                x, y = (x, y) if isinstance(x, list | tuple) and isinstance(x[0], list | tuple) else ([x],
                                                                                                      [y])
                for (lp_x, greedy_x), (lp_y, greedy_y) in zip(x, y, strict=True):
                    assert lp_x == pytest.approx(lp_y, abs=1e-4, rel=1e-6), key
                    assert bool(greedy_x) == bool(greedy_y), key
                    compared += 1
    assert compared >= 2 * 2  # every choice of every MQAR example, and the needles' loglikelihoods
    assert flat_metrics(theirs) == pytest.approx(flat_metrics(ours), rel=1e-4)  # perplexity: exp of a sum
