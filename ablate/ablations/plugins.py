"""Arms from the user's code: a module that a grid names by import path, filling one slot of the decoder.

The protocol (docs/internals.md, "plugins"): the class a ``PluginArm.arm`` names (``module:Class``) is an
``nn.Module`` with

- ``slot``, the slot it fills, where the built-in model holds SDPA or an identity:

  - ``"weights"``: the attention weights (``ablate.ablations.weights``), in place of softmax:
    ``forward(q, k, v, probe) -> (y, p | None)``, ``q [B, q, T, dk]``, ``k``/``v`` ``[B, k, T, dk]``, causal;
    ``p [B, q, T, T]`` when ``probe`` (F-Attn reads it); a ``forward`` with a parameter ``x`` also gets the
    block's normed input ``[B, T, d]`` (as the built-in arms whose weights depend on the token do);
  - ``"gate"``: a gate at one of the paper's positions, called as the catalogue's gates are
    (``ablate.ablations.gates.gate_for``): ``forward(y, x) -> (y', scores | None)``, ``x [B, T, d]`` the
    block's normed input and ``y`` the tensor gated: G1 the SDPA output ``[B, T, q, dk]``, G2 the values and
    G3 the keys ``[B, T, k, dk]``, G4 the queries ``[B, T, q, dk]``, G5 the output after W_o ``[B, T, d]``.
    Its position is the class's ``position`` (``"G1"`` .. ``"G5"``), or the ``position`` argument when its
    ``Args`` has one (the grid then chooses it). ``scores`` (any shape; values in [0, 1] for the histogram)
    are its gate statistics;
  - ``"attn_out"``: the block's attention output, after W_o, G5 and the sandwich norm, before the clip and the
    residual add: ``forward(a, x) -> (a', scores | None)``, ``a`` and ``x`` ``[B, T, d]`` (a G5 gate's
    shapes);

- ``Args``: a pydantic model of its arguments (the grid's ``args``, validated when the grid is loaded);
- ``__init__(self, args: Args, cfg: ModelConfig)``;
- optionally ``init``, whose initial weights it trains from (``inits``):

  - ``"own"`` (the default): what its ``__init__`` made, untouched by the decoder's init; what it draws
    comes from the global generator, which the runner seeds with the run's seed before building the model;
  - ``"ablate"``: the decoder's init, as for the built-in modules: every ``nn.Linear`` weight in it drawn
    from N(0, ``cfg.init_std``) (under ``per-parameter``, keyed by its qualified name and shape, so a weight
    of the same name and shape as a catalogue arm's starts equal to it), its biases zeroed, every other
    parameter as its ``__init__`` made it.

  "own" is the default whether or not the class sets anything itself: the module trains as
  ``Class(args, cfg)`` builds it in plain PyTorch, and a rule that guessed from the code whether its author
  set a weight would be wrong without a word. A plain ``nn.Linear`` then starts from PyTorch's own init
  (uniform, std ``1/sqrt(3 fan_in)``), not N(0, init_std): declare ``init = "ablate"`` for the decoder's.

Its parameters are the model's, so they are counted (and ``match_params`` re-widens the FFN around them), and
what it saves for the backward pass is measured for the memory estimate (``saved_bytes``). A gate plugin
cannot sit where the config's own gate (``model.gate``) does.

Safety: only modules a grid lists in ``plugins:``, or that an installed package registers under the
``ablate.arms`` entry points (``name = "module:Class"``, after which ``arm: name`` works too), are imported
(``check``). They are found on the import path (``PYTHONPATH``) and beside the grid file (``beside``: its
folder goes at the end of the import path, so a file there never shadows an installed module). Identity: the
arm's ``version`` is filled when the grid is loaded (``fill_version``): its distribution's version when the
module comes from an installed package, else ``sha256:`` of its source files, so a changed plugin changes the
run id, and the init its class asks for (``;init=own``, ``arm_version``). A run's checkpoint keeps the folder
its arm was imported from (``origin``), so its weights load later without the grid file, and only with the
code they trained with (``check_version``). Importing this module never imports torch or any plugin.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, cast, get_args

from pydantic import BaseModel, ValidationError

from ablate.ablations.config import GatePosition, ModelConfig, PluginArm
from ablate.errors import ConfigError, RunError, did_you_mean

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

ENTRY_POINTS = "ablate.arms"
# the folders of the grid files loaded here, for this process and the ones it starts (workers, Slurm tasks)
PLUGIN_PATH = "ABLATE_PLUGIN_PATH"
SLOTS = ("weights", "gate", "attn_out")
INITS = ("own", "ablate")  # a plugin class's ``init``; the first is the default
POSITIONS: tuple[str, ...] = get_args(GatePosition)


@functools.cache  # read once per process: a grid asks for each of its runs
def registered() -> dict[str, str]:
    """``{name: "module:Class"}`` of the arms installed packages register under ``ablate.arms``."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}


def catalogue_rows() -> list[dict[str, object]]:
    """``ablate variants``' rows of the registered arms (nothing imported): the source is the entry point."""
    return [dict(name=name, description=f"plugin arm {value} (an installed {ENTRY_POINTS!r} entry point)",
                 paper=[], changes={"plugin": {"arm": name}}, requires_moe=False, act_func="-",
                 score_shape="-", source=f"plugin: {value}") for name, value in sorted(registered().items())]


def target(arm: str) -> str:
    """``module:Class`` of an arm: itself, or what an entry point of that name points at."""
    return arm if ":" in arm else registered().get(arm, arm)


def module_of(arm: str) -> str:
    return target(arm).partition(":")[0]


def imports(arms: Iterable[str]) -> list[str]:
    """The modules loading ``arms`` imports, sorted (what ``ablate plan`` lists)."""
    return sorted({module_of(a) for a in arms})


class Arm(Protocol):
    """What ``load`` checks a plugin arm's class has (the module docstring lists it)."""

    slot: ClassVar[str]
    Args: ClassVar[type[BaseModel]]

    def __init__(self, args: BaseModel, cfg: ModelConfig) -> None: ...


def beside(grid_file: str | os.PathLike[str]) -> None:
    """Make the plugin modules beside a grid file importable, as a script's own modules are: its folder is
    added to ``ABLATE_PLUGIN_PATH``, which this process and the ones it starts put at the end of their import
    path before they import an arm (``load``)."""
    search(Path(grid_file).resolve().parent)


def search(folder: str | os.PathLike[str]) -> None:
    """Add ``folder`` to ``ABLATE_PLUGIN_PATH`` (``beside``; a trained run's ``origin``)."""
    folder = str(folder)
    known = [p for p in os.environ.get(PLUGIN_PATH, "").split(os.pathsep) if p]
    if folder not in known:
        os.environ[PLUGIN_PATH] = os.pathsep.join([*known, folder])


def origin(arm: str) -> str | None:
    """The folder an arm's module was imported from, to be found there again when its run's checkpoint is
    loaded with no grid file at hand (``ablate probe``, ``ablate eval``): the folder above its top package;
    None for a module of an installed distribution, which is on the import path anyway."""
    module = module_of(arm)
    top = module.partition(".")[0]
    if importlib.metadata.packages_distributions().get(top):
        return None
    path = Path(importlib.import_module(top).__file__ or "")
    return str((path.parent.parent if path.name == "__init__.py" else path.parent).resolve())


def check_version(spec: PluginArm, where: str) -> None:
    """A RunError when the arm's code is no longer the code ``spec`` was trained with (its ``version``):
    probing or evaluating its weights with other code would give numbers of neither."""
    now = arm_version(spec.arm)
    if spec.version is not None and now != spec.version:
        raise RunError(f"{where}: the plugin arm {spec.arm!r} has other code than it trained with "
                       f"(model.plugin.version {spec.version} then, {now} now): restore that code, or train "
                       "the run again")


def _searched() -> list[str]:
    """The grids' folders (``beside``), put at the end of the import path: never before an installed
    module."""
    folders = [p for p in os.environ.get(PLUGIN_PATH, "").split(os.pathsep) if p]
    added = [p for p in folders if p not in sys.path]
    if added:
        sys.path.extend(added)
        importlib.invalidate_caches()
    return folders


def load(arm: str) -> type[Arm]:
    """The class ``arm`` names; a ConfigError naming the module and the exception when it cannot be
    imported (and, when it is not found, where ablate looked)."""
    module, _, name = target(arm).partition(":")
    if not name:
        raise ConfigError(f"plugin arm {arm!r} is neither module:Class nor a name registered under the "
                          f"{ENTRY_POINTS!r} entry points "
                          f"({', '.join(sorted(registered())) or 'none installed'})",
                          where="model.plugin.arm")
    folders = _searched()
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is one line
        looked = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module.partition(".")[0]:
            where = f"beside the grid file ({', '.join(folders)})" if folders else "beside the grid file"
            looked = (f" (looked on PYTHONPATH and {where}: put the module beside the grid file, or add its "
                      "folder to PYTHONPATH)")
        raise ConfigError(f"cannot import plugin module {module!r}: {type(exc).__name__}: {exc}{looked}",
                          where="model.plugin.arm") from None
    cls: type[Arm] | None = getattr(mod, name, None)
    if cls is None:
        arms = sorted(k for k, v in vars(mod).items()
                      if isinstance(v, type) and getattr(v, "slot", None) in SLOTS)
        listed = f"; its arms: {', '.join(arms)}" if arms else ""
        raise ConfigError(f"plugin module {module!r} has no {name!r}{did_you_mean(name, arms)}{listed}",
                          where="model.plugin.arm")
    slot, args = getattr(cls, "slot", None), getattr(cls, "Args", None)
    if slot not in SLOTS or not (isinstance(args, type) and issubclass(args, BaseModel)):
        raise ConfigError(f"plugin arm {arm!r} must declare slot = one of {list(SLOTS)} (has {slot!r}) and "
                          "Args, a pydantic model of its arguments", where="model.plugin.arm")
    init = getattr(cls, "init", INITS[0])
    if init not in INITS:
        raise ConfigError(f"plugin arm {arm!r} declares init = {init!r}: one of {list(INITS)} (own: the "
                          "weights its __init__ makes; ablate: the decoder's N(0, init_std) draws), or "
                          f"none for {INITS[0]!r}", where="model.plugin.arm")
    return cls


def inits(model: torch.nn.Module, cfg: ModelConfig) -> dict[str, str]:
    """``{qualified name: "own" | "ablate"}`` of the plugin arm's modules in ``model`` (an ``nn.Module``
    built from ``cfg``): the init each of them gets (the class's ``init``, the module docstring); empty
    without a plugin. The decoder's init leaves the "own" ones alone; a run records this in its
    provenance."""
    if cfg.plugin is None:
        return {}
    cls = load(cfg.plugin.arm)
    init = str(getattr(cls, "init", INITS[0]))
    return {name: init for name, module in model.named_modules() if isinstance(module, cls)}


def arguments(spec: PluginArm) -> BaseModel:
    """``spec.args`` validated by the arm's ``Args``; a ConfigError naming the argument and what is wrong."""
    try:
        return load(spec.arm).Args.model_validate(spec.args)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{spec.arm}: {err['msg']} (got {err.get('input')!r})",
                          where=f"model.plugin.args{'.' + loc if loc else ''}") from None


def check(spec: PluginArm, listed: Iterable[str], model: ModelConfig | None = None) -> None:
    """Refuse an arm whose module the grid does not list (nor an entry point registers), then load it,
    validate its arguments and (given the ``model`` it goes into) find its slot."""
    allowed = set(listed) | {module_of(v) for v in registered().values()}
    module = module_of(spec.arm)
    if module not in allowed:
        missing = [m for m in listed if m not in allowed - set(listed) and not _findable(m)]
        if did_you_mean(module, missing):  # the listed name is the typo, not the arm's module
            typo = difflib.get_close_matches(module, missing, n=1, cutoff=0.6)[0]
            raise ConfigError(
                f"the grid lists `plugins: [{typo}]`, but no module {typo!r} is beside the grid or on the "
                f"import path; plugin arm {spec.arm!r} is from module {module!r}: did you mean "
                f"`plugins: [{module}]`?", where="plugins")
        near = did_you_mean(module, allowed)
        raise ConfigError(f"plugin arm {spec.arm!r} is from module {module!r}{near}, which the grid does not "
                          f"list: add `plugins: [{module}]` (only listed modules and installed "
                          f"{ENTRY_POINTS!r} entry points are imported)", where="model.plugin.arm")
    arguments(spec)
    if model is not None:
        slot(model)


def _findable(module: str) -> bool:
    """Whether ``module`` can be imported from the import path (the grids' folders included), without
    importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def slot(cfg: ModelConfig) -> str | None:
    """Where ``cfg``'s plugin arm sits: ``"weights"``, a gate position ``"G1"`` .. ``"G5"``, ``"attn_out"``;
    None without one. A gate with no valid position, or at the position of ``cfg.gate``, is a ConfigError."""
    if cfg.plugin is None:
        return None
    cls = load(cfg.plugin.arm)
    if cls.slot != "gate":
        return str(cls.slot)
    position = getattr(arguments(cfg.plugin), "position", None) or getattr(cls, "position", None)
    if position not in POSITIONS:
        raise ConfigError(f"plugin arm {cfg.plugin.arm!r} fills slot 'gate' and must say where: position = "
                          f"one of {list(POSITIONS)} (has {position!r})", where="model.plugin.arm")
    if cfg.gate is not None and cfg.gate.position == position:
        raise ConfigError(f"plugin arm {cfg.plugin.arm!r} is a gate at {position}, where model.gate already "
                          "sits; remove model.gate or put the plugin's gate elsewhere",
                          where="model.plugin.arm")
    return str(position)


def version_of(module: str) -> str:
    """``dist==version`` when ``module`` comes from an installed distribution, else ``sha256:`` of its source
    (a package: every ``.py`` file below it, by relative path)."""
    top = module.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top)
    if dists:
        return f"{dists[0]}=={importlib.metadata.version(dists[0])}"
    mod = importlib.import_module(module)
    path = Path(mod.__file__ or "")
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(path.parent).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"sha256:{digest.hexdigest()[:16]}"


def arm_version(arm: str) -> str:
    """The arm's version as its runs record it: its code's (``version_of``) and the init its class asks for,
    ``sha256:0123456789abcdef;init=own``. Naming the init keeps runs from before a plugin kept its own init
    (when the decoder redrew every ``nn.Linear`` in it) under other ids than today's, so they are trained
    again rather than read as done: the same source trains differently since, and an installed package's
    version would not tell."""
    cls = load(arm)
    return f"{version_of(module_of(arm))};init={getattr(cls, 'init', INITS[0])}"


def fill_version(spec: PluginArm, resolver: object = None) -> dict[str, str]:
    """Identity filler (``ablate.grid.identity``): the arm's current version (``arm_version``)."""
    return {"version": arm_version(spec.arm)}


def build(cfg: ModelConfig) -> torch.nn.Module:
    """The plugin's module for ``cfg``, for the slot ``slot(cfg)`` names (torch is the plugin's import). The
    decoder calls a weights module ``forward(q, k, v, probe, x=x)``: a plugin whose ``forward`` takes no ``x``
    is built as a subclass that leaves it out (its parameters' names unchanged)."""
    assert cfg.plugin is not None
    cls = load(cfg.plugin.arm)
    forward = getattr(cls, "forward")  # noqa: B009 - the Arm protocol declares no forward (nn.Module's)
    if cls.slot == "weights" and "x" not in inspect.signature(forward).parameters:
        cls = _without_input(cls)
    return cast("torch.nn.Module", cls(arguments(cfg.plugin), cfg))  # an arm is an nn.Module (the docstring)


@functools.cache  # one subclass per plugin class, so the modules built from it share it
def _without_input(cls: type[Arm]) -> type[Arm]:
    """``cls`` whose ``forward(q, k, v, probe, x=None)`` calls the plugin's ``forward(q, k, v, probe)``."""

    def forward(self: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, probe: bool = False,
                x: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = getattr(cls, "forward")(self, q, k, v, probe)  # noqa: B009 - Arm declares no forward
        return cast("tuple[torch.Tensor, torch.Tensor | None]", out)

    return type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def saved_bytes(cfg: ModelConfig, *, rows: int, seq_len: int, half: bool = False) -> int:
    """Bytes that one block's plugin module saves for its backward pass on ``rows x seq_len`` tokens, beyond
    what the block keeps without it; 0 without a plugin.

    Measured, not declared: the module alone, built and run forward on the meta device (no memory, the run's
    own shapes; in bf16 when ``half``, as the estimate takes every activation in the autocast dtype), with its
    slot's inputs (module docstring), under saved-tensor hooks; each tensor kept counts once, at its whole
    size. Left out, as the block holds them anyway: the module's parameters and buffers, the block's normed
    input ``x``, and a weights arm's ``q``, ``k``, ``v``. A gate that keeps the tensor it gates counts it: the
    block keeps the gated tensor in its place. A module that cannot run on the meta device counts 0, with a
    warning naming it.

    >>> saved_bytes(ModelConfig(preset="tiny"), rows=8, seq_len=64)
    0
    """
    where = slot(cfg)
    if where is None:
        return 0
    assert cfg.plugin is not None
    # the class: a module reloaded is new
    return _measure(load(cfg.plugin.arm), cfg, where, rows, seq_len, half)


@functools.lru_cache(maxsize=256)  # a plan's memory fix tries the same config at a few micro-batches
def _measure(cls: type[Arm], cfg: ModelConfig, where: str, rows: int, seq_len: int, half: bool) -> int:
    import torch

    dtype = torch.bfloat16 if half else torch.float32
    b, t, d, h, hk, dk = rows, seq_len, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim

    def tensor(*shape: int) -> torch.Tensor:
        return torch.empty(shape, device="meta", dtype=dtype, requires_grad=True)

    x = tensor(b, t, d)
    args: tuple[torch.Tensor | bool, ...]
    if where == "weights":
        args = (tensor(b, h, t, dk), tensor(b, hk, t, dk), tensor(b, hk, t, dk), False)  # q, k, v, probe
        known = [*args[:3]]
    else:
        gated = {"G1": (b, t, h, dk), "G4": (b, t, h, dk), "G2": (b, t, hk, dk), "G3": (b, t, hk, dk)}
        args, known = (tensor(*gated.get(where, (b, t, d))), x), [x]  # G5 and attn_out: [B, T, d]
    kept: dict[int, torch.Tensor] = {}  # by the storage's own tensor: a view kept counts its base, once

    def pack(saved: torch.Tensor) -> torch.Tensor:
        base = saved if saved._base is None else saved._base
        if id(base) not in skip:
            kept.setdefault(id(base), base)
        return saved

    try:
        with torch.device("meta"):
            module = build(cfg).to(dtype)
        skip = {id(v) for v in (*known, *module.parameters(), *module.buffers())}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
            module(*args)
    except Exception as exc:  # noqa: BLE001 - the user's code: the estimate goes on without it, and says so
        log.warning("plugin arm %s cannot run on the meta device (%s: %s): what it saves for the backward "
                    "pass is not in the memory estimate", f"{cls.__module__}:{cls.__qualname__}",
                    type(exc).__name__, exc)
        return 0
    return sum(v.numel() * v.element_size() for v in kept.values())
