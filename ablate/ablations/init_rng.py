"""The model's initial weights: N(0, init_std) for every matrix the decoder initialises, drawn in one of two
ways.

``model.init_rng`` chooses how the random numbers are drawn:

- ``sequential`` (the default): one stream, the global torch generator seeded with the run's seed, consumed
  module by module in build order. Two arms at one seed share no weight: an arm that adds a module shifts the
  stream for everything built after it (and every ``nn.Linear`` constructor draws too).
- ``per-parameter``: each parameter its own generator, keyed by (the run's seed, the parameter's qualified
  name, its shape). A weight two arms both have (same name, same shape) is then identical at step 0, whatever
  else either arm adds and in whatever order modules are built; a tensor whose shape differs between arms (a
  widened FFN) gets its own stream. A weight that holds several logical parameters (the G1 gate fused into the
  query projection, ``Attention.init_parts``) draws each block of rows under its unfused name, so the query
  rows equal the baseline's ``q_proj.weight``.

Which parameters are drawn is the same either way (``drawn``): every ``nn.Linear`` weight (its bias zeroed),
every ``nn.Embedding`` weight and the mixture of experts' stacked weights. Every other parameter keeps the
value its module gave it: norms start at one, zero-initialised gates and sink logits at zero.

``keep`` names modules (by qualified name) that neither way touches, their submodules included: a plugin
arm's module keeps what its ``__init__`` made unless its class declares ``init = "ablate"``
(``plugins.inits``). What such a module drew it drew from the global generator while the model was built
(the runner seeds it with the run's seed first), so it is reproducible at a seed. Under ``sequential`` the
stream then skips the kept modules' weights: the modules drawn after them take other numbers than they would
with ``init = "ablate"`` (an arm with a plugin shares no draw with the baseline under ``sequential`` either
way, as every ``nn.Linear`` constructor draws from the same stream); under ``per-parameter`` nothing else
moves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch
from torch import nn

from ablate.ablations.layers import MoE

Parts = dict[str, list[tuple[str, int]]]  # a parameter's local name -> [(logical local name, rows), ...]


def drawn(module: nn.Module) -> list[str]:
    """The local names of ``module``'s parameters that the init draws from N(0, init_std)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        return ["weight"]
    if isinstance(module, MoE):
        return ["gate_up", "down"]
    return []


def _kept(model: nn.Module, keep: Iterable[str]) -> set[int]:
    """The ids of the modules named in ``keep`` and of every module below them."""
    return {id(m) for name in keep for m in model.get_submodule(name).modules()}


def init_sequential(model: nn.Module, std: float, keep: Iterable[str] = ()) -> None:
    """Today's init: every module in ``model.apply`` order (children first) from the global generator, but
    the modules ``keep`` names (and those below them)."""
    kept = _kept(model, keep)
    model.apply(lambda m: None if id(m) in kept else _init_from_stream(m, std))


def _init_from_stream(module: nn.Module, std: float) -> None:
    # Meta tensors (parameter counting) are left alone: normal_ on the meta device imports torch._dynamo,
    # which would add seconds to `ablate plan`.
    if any(p.is_meta for p in module.parameters(recurse=False)):
        return
    for name in drawn(module):
        nn.init.normal_(getattr(module, name), std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def stream_seed(seed: int, name: str, shape: tuple[int, ...]) -> int:
    """The generator seed of the parameter ``name`` of ``shape`` in a run of ``seed`` (63 bits of a SHA-256).

    >>> stream_seed(0, "embed.weight", (320, 64)) == stream_seed(0, "embed.weight", (320, 64))
    True
    >>> stream_seed(0, "embed.weight", (320, 64)) != stream_seed(0, "embed.weight", (320, 128))
    True
    """
    key = f"{seed}/{name}/{'x'.join(map(str, shape))}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1


def keyed_normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    """N(0, std) of ``shape`` (float32, on the CPU) from the generator keyed by (seed, name, shape)."""
    gen = torch.Generator().manual_seed(stream_seed(seed, name, shape))
    # on the CPU explicitly: build_model(device=...) makes new tensors on its device by default
    return torch.empty(shape, device="cpu").normal_(0.0, std, generator=gen)


def parts_of(model: nn.Module) -> Parts:
    """Every parameter of ``model`` that holds several logical ones, by qualified name: its blocks of rows
    under their logical qualified names (what a module's ``init_parts`` declares, e.g. ``Attention``'s fused
    G1 projection)."""
    parts: Parts = {}
    for prefix, module in model.named_modules():
        for local, pieces in getattr(module, "init_parts", dict)().items():
            parts[_join(prefix, local)] = [(_join(prefix, logical), rows) for logical, rows in pieces]
    return parts


def logical_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s parameters by logical name: a fused parameter split into its blocks (``parts_of``), each
    under its unfused name, so that two arms' common weights can be compared name by name."""
    parts = parts_of(model)
    return {logical: block.detach() for name, param in model.named_parameters()
            for logical, block in _blocks(name, param, parts)}


def _blocks(name: str, param: torch.Tensor, parts: Parts) -> list[tuple[str, torch.Tensor]]:
    """``[(logical name, its rows of param)]``: the blocks of a parameter that holds several (``parts``), else
    ``[(name, param)]``."""
    if name not in parts:
        return [(name, param)]
    pieces = parts[name]
    return [(logical, block) for (logical, _), block in
            zip(pieces, param.split([rows for _, rows in pieces]), strict=True)]  # type: ignore[no-untyped-call]  # unannotated in torch


def init_per_parameter(model: nn.Module, std: float, seed: int, keep: Iterable[str] = ()) -> None:
    """Draw every parameter that ``drawn`` names from its own keyed generator (see the module docstring),
    but in the modules ``keep`` names (and those below them). Tied weights are drawn once, under the first
    name ``named_modules`` reaches (the embedding's)."""
    parts = parts_of(model)
    kept = _kept(model, keep)
    seen: set[int] = set()
    with torch.no_grad():
        for prefix, module in model.named_modules():
            if id(module) in kept or any(p.is_meta for p in module.parameters(recurse=False)):
                continue
            for local in drawn(module):
                param = getattr(module, local)
                if id(param) in seen:
                    continue
                seen.add(id(param))
                for logical, block in _blocks(_join(prefix, local), param, parts):
                    block.copy_(keyed_normal(seed, logical, tuple(block.shape), std))
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
