"""What holds the GPU's memory at a run's training peak: the live allocations at that moment, by the Python
code that made them.

It trains a short run through ``ablate``'s runner (Lightning, as ``ablate run`` does) with PyTorch's memory
history recorded, replays the allocator's trace to the moment of the largest allocated total before the run's
end-of-run work, and prints the largest live allocations with the first Python frames that made them. Used to
find the 2.7 GiB that the runner holds beyond the plain step at the 1.7B model's peak (docs/gpu.md).

    python bench/gpu_memory_holders.py [--preset paper-dense-1.7b] [--seq 4096] [--steps 2] [--top 12]
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import run_config  # noqa: E402  (bench/ is not a package)
from gpu_memory_phases import GiB, parser  # noqa: E402


def frames_of(event: dict) -> str:
    """The first Python frames of an allocation that are not PyTorch's own, innermost first."""
    py = [f for f in event.get("frames", []) if str(f.get("filename", "")).endswith(".py")]
    mine = [f for f in py if "/torch/" not in f["filename"]] or py
    return " < ".join(f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in mine[:5])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    cfg = run_config({"preset": args.preset}, args.variant, args, steps=args.steps, batch_size=1,
                     seq_len=args.seq, compile=False)
    from ablate.runner import run_one

    stepped: list[int] = []  # the peak allocated at each step's end
    ended: list[float] = []  # and when (microseconds since the epoch, as the trace's events)

    torch.cuda.memory._record_memory_history(max_entries=2_000_000)

    def on_step(row: dict) -> None:
        if "loss" in row:
            torch.cuda.synchronize()
            stepped.append(torch.cuda.max_memory_allocated())
            ended.append(time.time() * 1e6)

    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as d:
        result = run_one(cfg, Path(d) / "run", run_id="holders", on_step=on_step)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"run {result.status}; peak read at each step (GiB): {[round(x / GiB, 2) for x in stepped]}")
    trace = snap["device_traces"][0]
    if ended and all("time_us" in e for e in trace) and any(e["time_us"] <= ended[-1] for e in trace):
        trace = [e for e in trace if e["time_us"] <= ended[-1]]  # up to the last step's end
    else:
        print("(the trace's events carry no usable time: the peak is looked for under the last step's)")
    total, best, best_at = 0, 0, 0
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            total += e["size"]
        elif e["action"] == "free_completed":
            total -= e["size"]
        # not the end-of-run work
        if total > best and (not stepped or total <= stepped[-1]):
            best, best_at = total, i
    live: dict[int, dict] = {}
    for e in trace[: best_at + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    print(f"the trace's largest allocated total before the run's end: {best / GiB:.2f} GiB (event {best_at} "
          f"of {len(trace)}); live there: {len(live)}")
    by_site: dict[str, list[int]] = collections.defaultdict(list)
    for e in live.values():
        by_site[frames_of(e)].append(e["size"])
    rows = sorted(by_site.items(), key=lambda kv: -sum(kv[1]))
    for site, sizes in rows[: args.top]:
        print(f"{sum(sizes) / GiB:7.2f} GiB in {len(sizes):5d} allocation(s), largest "
              f"{max(sizes) / GiB:.2f}: {site}")


if __name__ == "__main__":
    main()
