"""Where a run came from: the software that trained it, its device, and the commit of the grid's repository.

One owner for a run's provenance, recorded beside its result (``result.json``'s ``provenance``, the store's
``runs.provenance``, MLflow tags ``provenance.<key>``), shown by ``ablate show`` and compared by ``ablate
diff``:

- ``ablate``, ``torch``, ``lightning``, ``python``: the versions that trained it; ``cuda``: torch's CUDA build
  (None on a CPU build); ``device``: what it trained on (``cpu`` or the GPU's name);
- ``model_code``: a hash of the model's code (``ablate/ablations/*.py``, its syntax tree without docstrings,
  so comments, docstrings and layout do not count; not the modules that count, plan, export or import arms,
  ``NOT_MODEL``): two runs of one config whose model code differs may not compare, even at one ablate
  version;
- ``config_version``: the ``CONFIG_VERSION`` its id was computed under;
- ``git_commit`` and ``git_dirty``: the commit of the git repository holding the grid file, and whether its
  tracked files had uncommitted changes (absent where the grid is not in a repository, or git is missing);
- ``plugin_init``: for a plugin arm's run, ``{module's qualified name: "own" | "ablate"}``, whether each of
  the plugin's modules trained from the weights its ``__init__`` made or from the decoder's draws
  (``ablate.ablations.plugins.inits``; absent without a plugin).

The grid's commit is read once, by the process that opens the grid (``announce``), and reaches the workers it
starts (local, Slurm, torchrun ranks) through the environment variable ``ABLATE_GRID_SOURCE``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from ablate import __version__
from ablate.config import CONFIG_VERSION

SOURCE_ENV = "ABLATE_GRID_SOURCE"
# what must agree for runs to compare in one table: the id scheme and the model's code
COMPARABLE = ("config_version", "model_code")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# the modules of ablate/ablations that say what ablate counts, plans, exports and imports, not what a model
# computes: a change to them leaves every model as it was (a module added there counts as model code)
NOT_MODEL = ("catalogue.py", "export.py", "flops.py", "memory.py", "meta_counts.py", "plugins.py")


# A run stores the hash of the model code it trained under. Hashes that name one model's code compare as one
# (``comparable``): ``{old hash: the hash it equals}``.
# a9b79855457b is the model code of ablate/ablations at commit 876e701 under the old normalization, which
# counted imports and type annotations; the present one (``code_of``) leaves them out, and that same code
# reads 69309cefe87b under it. Without the entry, every run trained before that change would read as trained
# by a different model from every run trained after it.
SAME_MODEL = {"a9b79855457b": "69309cefe87b"}


@functools.cache
def model_code() -> str:
    """A short hash of the model's code (``ablate/ablations/*.py`` but ``NOT_MODEL``, by name and what each
    computes: ``code_of``)."""
    return code_hash(Path(__file__).parent / "ablations")


def code_hash(folder: Path, *, leave_out: Iterable[str] = NOT_MODEL) -> str:
    """A short hash of the ``*.py`` modules of ``folder`` but ``leave_out``, by name and ``code_of``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.glob("*.py") if p.name not in set(leave_out)):
        digest.update(path.name.encode() + b"\0" + code_of(path.read_text()).encode() + b"\0")
    return digest.hexdigest()[:12]


def code_of(source: str) -> str:
    """What a module computes, apart from how it is written: its syntax tree without docstrings, comments,
    line positions, layout, imports or type annotations (``typing.cast`` included), written the same way by
    every Python version.

    >>> code_of('def f(x):\\n    "Double."\\n    return 2 * x  # twice') == code_of("def f(x): return 2*x")
    True
    >>> code_of("import torch\\ndef f(x: torch.Tensor) -> int:\\n    y: int = 2 * x\\n    return y"
    ...         ) == code_of("def f(x):\\n    import torch\\n    y = 2 * x\\n    return y")
    True
    >>> code_of("def f(x): return 2 * x") == code_of("def f(x): return 3 * x")
    False
    """
    return _dump(_Computation().visit(ast.parse(source)))


class _Computation(ast.NodeTransformer):
    """Drops from a syntax tree what does not change what it computes: docstrings, imports (``if
    TYPE_CHECKING:`` blocks too), annotations and ``cast``."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                node.body = body[1:]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None
        if isinstance(node, ast.arg):
            node.annotation = None
        return super().generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None

    def visit_If(self, node: ast.If) -> ast.AST | None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
        return None if name == "TYPE_CHECKING" else self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        plain: ast.AST = self.visit(ast.Assign(targets=[node.target], value=node.value))
        return plain

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "cast" and len(node.args) == 2 and not node.keywords:
            value: ast.AST = self.visit(node.args[1])
            return value
        return self.generic_visit(node)


def _dump(node: object) -> str:
    """``ast.dump`` without the fields that are None or empty, whose defaults differ between Python versions
    (3.12 added ``type_params``; 3.13 leaves out empty fields)."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_dump(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_dump(item) for item in node)}]"
    return repr(node)


def comparable(key: str, value: object) -> object:
    """A provenance value as runs compare on it: a model code's hash as ``SAME_MODEL`` maps it.

    >>> comparable("model_code", "a9b79855457b") == comparable("model_code", SAME_MODEL["a9b79855457b"])
    True
    """
    return SAME_MODEL.get(value, value) if key == "model_code" and isinstance(value, str) else value


@functools.cache
def software() -> dict[str, str | int | None]:
    """The versions of this process's software, and the model code's hash (imports torch)."""
    import torch  # here, not at the top: ablate show and diff read provenance without training

    return {"ablate": __version__, "torch": torch.__version__, "lightning": _version("lightning"),
            "cuda": torch.version.cuda, "python": platform.python_version(), "model_code": model_code(),
            "config_version": CONFIG_VERSION}


def git_source(path: str | os.PathLike[str]) -> dict[str, str | bool | None]:
    """``{"git_commit": ..., "git_dirty": ...}`` of the git repository holding ``path``; ``{}`` when there is
    none (or no git).

    >>> git_source("/")
    {}
    """
    folder = Path(path).resolve()
    folder = folder if folder.is_dir() else folder.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                                  timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "-q", "HEAD")
    if not commit:
        return {}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def announce(grid_file: str | os.PathLike[str] | None) -> None:
    """Read the grid file's repository commit once and hand it to the workers this process starts."""
    source = git_source(grid_file) if grid_file is not None and Path(grid_file).exists() else {}
    os.environ[SOURCE_ENV] = json.dumps(source)


def collect(device: str, plugin_init: Mapping[str, str] | None = None) -> dict[str, object]:
    """This run's provenance (see the module docstring): the software, ``device``, the grid's commit and,
    for a plugin arm, the init each of its modules got (``plugin_init``, ``Decoder.plugin_init``)."""
    try:
        source = json.loads(os.environ.get(SOURCE_ENV) or "{}")
    except ValueError:
        source = {}
    plugin = {"plugin_init": dict(plugin_init)} if plugin_init else {}
    return {**software(), "device": device, **(source if isinstance(source, dict) else {}), **plugin}


def differing(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The provenance keys whose values differ between two runs, as ``{field, a, b}`` rows (sorted); two model
    codes' hashes that ``SAME_MODEL`` makes one do not differ.

    >>> differing({"torch": "2.13.0", "python": "3.11.9"}, {"torch": "2.14.0", "python": "3.11.9"})
    [{'field': 'torch', 'a': '2.13.0', 'b': '2.14.0'}]
    """
    a, b = a or {}, b or {}
    return [{"field": k, "a": a.get(k), "b": b.get(k)} for k in sorted({*a, *b})
            if comparable(k, a.get(k)) != comparable(k, b.get(k))]


def spread_warning(provenances: Iterable[Mapping[str, Any] | None], *, what: str) -> str | None:
    """One line when the runs compared in ``what`` span more than one config version or model code, else None.

    Runs recorded before provenance existed (None) are left out of the check; model codes' hashes are compared
    as ``SAME_MODEL`` maps them.

    >>> spread_warning([{"config_version": 2, "model_code": "a"}, {"config_version": 2, "model_code": "b"}],
    ...                what="table1")  # doctest: +ELLIPSIS
    'table1 compares runs trained by different model code (a, b): their differences may be the code, ...'
    >>> spread_warning([{"config_version": 2, "model_code": "a"}, None], what="table1") is None
    True
    """
    known = [p for p in provenances if p]
    spread = {key: sorted({str(comparable(key, p.get(key))) for p in known if p.get(key) is not None})
              for key in COMPARABLE}
    names = {"config_version": "config versions", "model_code": "model code"}
    parts = [f"{names[key]} ({', '.join(values)})" for key, values in spread.items() if len(values) > 1]
    if not parts:
        return None
    return (f"{what} compares runs trained by different {' and '.join(parts)}: their differences may be the "
            "code, not the arms")
