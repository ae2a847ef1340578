"""Does starting two arms from the same weights (``model.init_rng: per-parameter``) make their paired
difference less noisy than today's draw (``sequential``)? Measured on the project's own settings, through
``ablate run``.

For each setting (the quick start, the lite study, the sinks study) it writes one grid with the setting's base
unchanged, its arms (the baseline, G1 ``sdpa-elementwise``, and for sinks ``softmax-off-by-one``), both inits
as an axis (``model.init_rng``) and ``--seeds`` seeds, and trains it with ``ablate run --jobs``. Then, per
setting, init and comparison, a grid of the same runs at the seeds ``[0, 1]`` goes through ``ablate run
--until-resolved --compare ARM --metric M --max-seeds SEEDS``, which adds seeds in order and so reuses the
trained ones: the seeds it needed (or did not reach) is read from its verdict line.

Printed from the store (``ablate.store.Store.runs_frame``), per comparison and init: the mean and the
standard deviation of the paired difference (arm - baseline, paired by seed), the arms' correlation across
seeds with its Fisher-z 95% interval, the ratio of the two inits' SDs (per-parameter / sequential) with a 95%
bootstrap interval (seeds resampled jointly: both inits share each seed's data order), the seeds a t test at
alpha 0.05 needs for 80% power at the measured effect and spread (``ablate.reports.stats.seeds_needed``), and
the ``--until-resolved`` outcome. Runs are content addressed: a rerun trains only what is missing, so
``--seeds`` can grow.

    python bench/init_pairing.py --home /tmp/pairing --seeds 20 --jobs 2     # ~2-3 h on 2 shared cores
    python bench/init_pairing.py --home /tmp/pairing --seeds 20 --table-only  # the table from the store
    python bench/init_pairing.py --home /tmp/pairing --settings quickstart --seeds 4   # a quick look
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ablate import studies
from ablate.stats.power import needs_text, seeds_needed
from ablate.store import Store

ROOT = Path(__file__).resolve().parent.parent
INITS = ("sequential", "per-parameter")
REFERENCE = "baseline"
BOOTSTRAP_DRAWS = 4000


@dataclass(frozen=True)
class Setting:
    """A study's setting: its grid file (whose ``base`` is used unchanged), the arms trained, and the
    comparisons read (an arm against the baseline on a metric)."""

    source: str  # a shipped study's name
    arms: tuple[str, ...]
    comparisons: tuple[tuple[str, str], ...]  # (arm, metric)


SETTINGS = {
    "quickstart": Setting("quickstart", (REFERENCE, "sdpa-elementwise"),
                          (("sdpa-elementwise", "val_ppl"),)),
    "lite": Setting("lite", (REFERENCE, "sdpa-elementwise"),
                    (("sdpa-elementwise", "f_attn"),)),
    # sinks.yaml's base is lite.yaml's: its baseline and G1 runs are lite's, trained once in one store
    "sinks": Setting("sinks", (REFERENCE, "sdpa-elementwise", "softmax-off-by-one"),
                     (("sdpa-elementwise", "m_act"), ("softmax-off-by-one", "f_attn"))),
}


def base_of(setting: Setting) -> dict:
    return yaml.safe_load(studies.find(setting.source).read_text())["base"]


def write_grid(path: Path, name: str, base: dict, axes: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"name": name, "base": base, "grid": axes}, sort_keys=False))
    return path


def ablate(args: list[str], home: Path, log: Path, sets: list[str]) -> str:
    """Run ``ablate ARGS`` with this tree's package (``--set`` each of ``sets``), its output appended to
    ``log``; its stdout."""
    cmd = [str(Path(sys.executable).with_name("ablate")), *args, "--home", str(home),
           *(a for s in sets for a in ("--set", s))]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}  ({time.perf_counter() - t0:.0f} s, exit {done.returncode})\n"
                f"{done.stdout}{done.stderr}\n")
    if done.returncode:
        raise SystemExit(f"ablate {' '.join(args)} failed (exit {done.returncode}); see {log}")
    return done.stdout


def train(name: str, setting: Setting, seeds: int, work: Path, home: Path, jobs: int, log: Path,
          sets: list[str]) -> None:
    base = base_of(setting)
    grid = write_grid(work / f"pairing-{name}.yaml", f"pairing-{name}", base,
                      {"seed": list(range(seeds)), "variant": list(setting.arms),
                       "model.init_rng": list(INITS)})
    ablate(["run", str(grid), "--jobs", str(jobs), "--no-mlflow"], home, log, sets)


def until_resolved(name: str, setting: Setting, seeds: int, work: Path, home: Path, log: Path,
                   sets: list[str]) -> dict[tuple[str, str, str], str]:
    """(init, arm, metric) -> what ``--until-resolved`` said: ``resolved at look k, n=N seeds`` or
    ``unresolved at n=N``."""
    out = {}
    for init in INITS:
        for arm, metric in setting.comparisons:
            base = base_of(setting)
            base["model"] = {**base.get("model", {}), "init_rng": init}
            grid = write_grid(work / f"pairing-{name}-{init}-{arm}-{metric}.yaml",
                              f"pairing-{name}-{init}-{arm}-{metric}", base,
                              {"variant": [REFERENCE, arm], "seed": [0, 1]})
            said = ablate(["run", str(grid), "--until-resolved", "--compare", arm, "--metric", metric,
                           "--max-seeds", str(seeds), "--round", "2", "--no-mlflow"], home, log, sets)
            found = re.search(r"resolved at look (\d+), n=(\d+) seeds|unresolved at n=(\d+)", said)
            out[(init, arm, metric)] = found.group(0) if found else "?"
    return out


@dataclass
class Row:
    setting: str
    arm: str
    metric: str
    init: str
    n: int
    mean: float
    sd: float
    corr: float
    corr_lo: float
    corr_hi: float
    diffs: np.ndarray


def fisher_z(r: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Fisher-z interval of a correlation ``r`` over ``n`` pairs."""
    from scipy.stats import norm

    if n < 4 or abs(r) >= 1:
        return (float("nan"), float("nan"))
    z, half = math.atanh(r), norm.ppf(0.5 + level / 2) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def read_rows(store: Store, name: str, setting: Setting, seeds: int) -> list[Row]:
    frame = store.runs_frame(grid=f"pairing-{name}")
    frame = frame[frame["status"] == "done"]
    rows = []
    for arm, metric in setting.comparisons:
        for init in INITS:
            at = frame[(frame["model.init_rng"] == init) & (frame["seed"] < seeds)]
            ref = at[at["variant"] == REFERENCE].set_index("seed")[metric]
            treat = at[at["variant"] == arm].set_index("seed")[metric]
            both = sorted(set(ref.dropna().index) & set(treat.dropna().index))
            b, t = ref.loc[both].to_numpy(float), treat.loc[both].to_numpy(float)
            d = t - b
            r = float(np.corrcoef(b, t)[0, 1]) if len(both) > 2 else float("nan")
            rows.append(Row(name, arm, metric, init, len(both), float(d.mean()) if len(d) else float("nan"),
                            float(d.std(ddof=1)) if len(d) > 1 else float("nan"), r, *fisher_z(r, len(both)),
                            d))
    return rows


def sd_ratio(seq: np.ndarray, per: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """SD(per-parameter) / SD(sequential) with a 95% bootstrap interval, seeds resampled jointly (both arrays
    in seed order, the same seeds)."""
    n = min(len(seq), len(per))
    seq, per = seq[:n], per[:n]
    idx = rng.integers(0, n, size=(BOOTSTRAP_DRAWS, n))
    ratios = per[idx].std(axis=1, ddof=1) / seq[idx].std(axis=1, ddof=1)
    lo, hi = np.nanpercentile(ratios[np.isfinite(ratios)], [2.5, 97.5])
    return float(per.std(ddof=1) / seq.std(ddof=1)), float(lo), float(hi)


def table(rows: list[Row], resolved: dict[tuple[str, str, str, str], str]) -> str:
    rng = np.random.default_rng(0)
    lines = ["| setting | arm - baseline, metric | init | n | mean Δ | SD of Δ | corr [95%, Fisher z] | "
             "SD ratio per-param/seq [95% boot] | seeds for 80% power | --until-resolved |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by = {(r.setting, r.arm, r.metric, r.init): r for r in rows}
    for r in rows:
        ratio = ""
        if r.init == "per-parameter":
            seq = by[(r.setting, r.arm, r.metric, "sequential")]
            if min(len(seq.diffs), len(r.diffs)) > 2:
                x, lo, hi = sd_ratio(seq.diffs, r.diffs, rng)
                ratio = f"{x:.2f} [{lo:.2f}, {hi:.2f}]"
        need = needs_text(seeds_needed(r.mean, r.sd)) if r.n > 1 and r.sd > 0 else "-"
        lines.append(f"| {r.setting} | {r.arm}, {r.metric} | {r.init} | {r.n} | {r.mean:+.4g} | {r.sd:.3g} | "
                     f"{r.corr:+.2f} [{r.corr_lo:+.2f}, {r.corr_hi:+.2f}] | {ratio} | {need} | "
                     f"{resolved.get((r.setting, r.init, r.arm, r.metric), '')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="the ABLATE_HOME of the measurement")
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--table-only", action="store_true",
                    help="train nothing (nor --until-resolved): the table from the store")
    ap.add_argument("--no-until-resolved", action="store_true", help="skip the --until-resolved runs")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE",
                    help="ablate run's --set on every grid (a smoke test: --set train.steps=10)")
    args = ap.parse_args()
    work, log = args.home / "pairing-grids", args.home / "pairing.log"
    work.mkdir(parents=True, exist_ok=True)
    resolved: dict[tuple[str, str, str, str], str] = {}
    for name in args.settings:
        t0 = time.perf_counter()
        if not args.table_only:
            train(name, SETTINGS[name], args.seeds, work, args.home, args.jobs, log, args.sets)
            print(f"{name}: trained in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        if not (args.no_until_resolved or args.table_only):
            said = until_resolved(name, SETTINGS[name], args.seeds, work, args.home, log, args.sets)
            resolved.update({(name, *k): v for k, v in said.items()})
    with Store.open(home=args.home) as store:
        rows = [r for name in args.settings for r in read_rows(store, name, SETTINGS[name], args.seeds)]
        walls = {name: store.runs_frame(grid=f"pairing-{name}") for name in args.settings}
    print(table(rows, resolved))
    for name, frame in walls.items():
        done = frame[(frame["status"] == "done") & (frame["seed"] < args.seeds)]
        print(f"{name}: {len(done)} runs done, {done['wall_s'].sum() / 60:.0f} min of run wall time (median "
              f"{done['wall_s'].median():.0f} s a run)")


if __name__ == "__main__":
    main()
