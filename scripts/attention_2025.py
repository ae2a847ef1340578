"""The attention-2025 study's tables from the store: each arm's mean, and its paired delta against the
baseline and against G1 (sdpa-elementwise) over the seeds both have, with ablate's statistics (the paired t
interval; Holm over each table's arms). Until `ablate report compare` lands, docs/results.md's tables come
from here.

    ABLATE_HOME=... python scripts/attention_2025.py                  # markdown tables
    ABLATE_HOME=... python scripts/attention_2025.py --csv docs/data/attention-2025.csv   # + raw numbers
"""

from __future__ import annotations

import argparse
import math

import pandas as pd
from ablate.stats import Delta, correct, paired_delta

from ablate.store import Store

GRIDS = {"attention-2025": ("f_attn", "massive_ratio", "m_act", "val_ppl"),
         "attention-2025-text": ("val_ppl", "loss_spikes", "f_attn", "massive_ratio")}
REFERENCES = ("baseline", "sdpa-elementwise")
ORDER = ["baseline", "sdpa-elementwise", "sdpa-headwise", "sdpa-headwise-sparse", "diff-attention-matched",
         "diff-attention", "diff-v2", "forgetting-attention", "forgetting-attention-rope",
         "selective-attention", "sink-learned"]
RAW = ["grid", "variant", "train.lr", "seed", "status", "params", "f_attn", "m_act", "massive_ratio",
       "massive_first", "val_ppl", "loss_spikes", "wall_s", "run_id"]


def fmt(d: Delta, digits: int) -> str:
    if d.mean is None or d.lo is None or d.hi is None:
        return "-"
    p = d.p_adj if d.p_adj is not None else d.p
    text = f"{d.mean:+.{digits}f} [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}] (n={d.n}, p_Holm={p:.2g})"
    return f"**{text}**" if d.resolved else text


def per_seed(runs: pd.DataFrame, variant: str, metric: str) -> dict[int, float | None]:
    mine = runs[(runs["variant"] == variant) & runs["status"].isin(["done", "diverged"])]
    return {int(s): (None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v))
            for s, v in zip(mine["seed"], mine[metric], strict=True)}


def table(runs: pd.DataFrame, metric: str, digits: int) -> str:
    arms = sorted(set(runs["variant"]), key=lambda a: (ORDER.index(a) if a in ORDER else len(ORDER), a))
    rows = []
    deltas: dict[str, list[Delta]] = {ref: [] for ref in REFERENCES}
    for ref in REFERENCES:
        for arm in arms:
            deltas[ref].append(paired_delta(per_seed(runs, arm, metric), per_seed(runs, ref, metric)))
        deltas[ref] = correct([d if arm != ref else Delta(None, None, None, 0)
                               for arm, d in zip(arms, deltas[ref], strict=True)])
    for i, arm in enumerate(arms):
        values = [v for v in per_seed(runs, arm, metric).values() if v is not None]
        mean = sum(values) / len(values) if values else float("nan")
        rows.append(f"| {arm} | {mean:.{digits}f} | {len(values)} | "
                    + " | ".join(fmt(deltas[ref][i], digits) for ref in REFERENCES) + " |")
    head = (f"| arm | {metric} | n | Δ vs baseline [95% CI] | Δ vs G1 [95% CI] |\n"
            "| --- | ---: | ---: | ---: | ---: |")
    return "\n".join([head, *rows])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", help="also write every run's raw numbers here")
    args = p.parse_args()
    raw = []
    with Store.open() as store:
        for grid, metrics in GRIDS.items():
            if grid not in store.grids():
                continue
            runs = store.runs_frame(grid=grid)
            raw.append(runs.assign(grid=grid))
            for lr, at in runs.groupby("train.lr"):
                for metric in metrics:
                    digits = 3 if metric in ("f_attn", "val_ppl", "massive_first") else 1
                    print(f"\n### {grid}, lr {lr:g}: {metric}\n\n{table(at, metric, digits)}")
    if args.csv and raw:
        frame = pd.concat(raw)
        columns = [c for c in RAW if c in frame.columns]
        frame[columns].sort_values(["grid", "variant", "train.lr", "seed"]).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
