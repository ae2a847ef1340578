"""A small character-level transformer on input.txt: a training script of the kind ablate runs as a command.

It knows nothing of ablate: it reads its flags with argparse and prints its losses,

    step 100: train 2.3100, val 2.4012

which the grid's `metrics.stdout` regex reads. `--gate` puts a sigmoid gate, computed from the block's input,
on each attention output (the arm the grid compares with the baseline).

    python train.py --max_iters=200 --seed=0 --gate=True
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


def flag(text: str) -> bool:
    """A bool flag as ablate writes it (`--gate=True`), or as a person would (`--gate=1`, `--gate=false`)."""
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def options() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(Path(__file__).with_name("input.txt")))
    p.add_argument("--out_dir", default="out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_iters", type=int, default=200)
    p.add_argument("--eval_interval", type=int, default=50)
    p.add_argument("--eval_iters", type=int, default=8)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--block_size", type=int, default=32)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_head", type=int, default=2)
    p.add_argument("--n_embd", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--gate", type=flag, default=False)
    p.add_argument("--gate_init", type=float, default=0.0, help="the gate's bias at the start")
    p.add_argument("--compile", type=flag, default=False)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, gate: bool, gate_init: float):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.gate = nn.Linear(n_embd, n_embd) if gate else None
        if self.gate is not None:
            nn.init.zeros_(self.gate.weight)
            nn.init.constant_(self.gate.bias, gate_init)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(C, dim=2)
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(h))  # the gate reads the block's input, per channel
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class CharModel(nn.Module):
    def __init__(self, vocab: int, a: argparse.Namespace):
        super().__init__()
        self.tok = nn.Embedding(vocab, a.n_embd)
        self.pos = nn.Embedding(a.block_size, a.n_embd)
        self.blocks = nn.Sequential(*(Block(a.n_embd, a.n_head, a.gate, a.gate_init)
                                      for _ in range(a.n_layer)))
        self.ln = nn.LayerNorm(a.n_embd)
        self.head = nn.Linear(a.n_embd, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))  # (B, T, C)
        logits = self.head(self.ln(self.blocks(x)))  # (B, T, vocab)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def main() -> None:
    a = options()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    text = Path(a.data).read_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    split = int(0.9 * len(data))
    splits = {"train": data[:split], "val": data[split:]}

    def batch(name: str) -> tuple[torch.Tensor, torch.Tensor]:
        d = splits[name]
        ix = torch.randint(len(d) - a.block_size - 1, (a.batch_size,))
        x = torch.stack([d[i:i + a.block_size] for i in ix])
        return x, torch.stack([d[i + 1:i + 1 + a.block_size] for i in ix])

    model = CharModel(len(chars), a)
    step_fn = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        out = {name: sum(step_fn(*batch(name)).item() for _ in range(a.eval_iters)) / a.eval_iters
               for name in splits}
        model.train()
        return out

    started = time.time()
    for step in range(a.max_iters + 1):
        if step % a.eval_interval == 0 or step == a.max_iters:
            losses = evaluate()
            print(f"step {step}: train {losses['train']:.4f}, val {losses['val']:.4f}")
        if step == a.max_iters:
            break
        lr = a.lr * 0.5 * (1 + math.cos(math.pi * step / a.max_iters))  # cosine to zero
        for group in opt.param_groups:
            group["lr"] = lr
        loss = step_fn(*batch("train"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    Path(a.out_dir).mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), Path(a.out_dir) / "model.pt")
    print(f"done in {time.time() - started:.1f}s")


if __name__ == "__main__":
    main()
