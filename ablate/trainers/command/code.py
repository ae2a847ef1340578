"""The identity of a command's code, part of its runs' identity: a run trained on other code is another run.

- In a git repository: the commit, plus a hash of what is not committed (the diff of tracked files against
  the commit, and the untracked files git does not ignore), over the whole repository, since a script imports
  from anywhere in it. Outputs written into the repository change it unless git ignores them.
- With ``trainer.code``: a hash of the files it lists (globs relative to cwd), instead.
- Outside any repository: a hash of the ``*.py`` files under cwd (hidden folders, caches and virtual
  environments left out), and the description says so.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import ConfigError

_SKIPPED = {"__pycache__", "node_modules", "site-packages"}


@dataclass(frozen=True)
class CodeIdentity:
    """``value`` enters the run id (``git:<commit>``, ``git:<commit>+<diff hash>``, ``files:<hash>``,
    ``py:<hash>``); ``about`` says in words what it covers."""

    value: str
    about: str


def code_identity(cwd: Path, files: Sequence[str] = ()) -> CodeIdentity:
    """The identity of the code a command runs in ``cwd``: of the files ``files`` lists when given, else of
    cwd's git repository, else of cwd's ``*.py`` files."""
    if files:
        paths = _listed(cwd, files)
        return CodeIdentity(f"files:{_hash_files(cwd, paths)}", f"{len(paths)} file(s) listed in "
                                                                f"trainer.code")
    root = _git(cwd, "rev-parse", "--show-toplevel")
    if root is None:
        paths = sorted(p for p in cwd.rglob("*.py") if not _skipped(p.relative_to(cwd)))
        return CodeIdentity(f"py:{_hash_files(cwd, paths)}",
                            f"no git repository at {cwd}: a hash of its {len(paths)} .py files")
    top = Path(root.decode().strip())
    commit = (_git(top, "rev-parse", "--verify", "-q", "HEAD") or b"").decode().strip() or "none"
    diff = _git(top, "diff", "HEAD", "--binary") if commit != "none" else b""
    untracked = (_git(top, "ls-files", "--others", "--exclude-standard", "-z") or b"").split(b"\0")
    extra = sorted(top / name.decode() for name in untracked if name)
    if not diff and not extra:
        return CodeIdentity(f"git:{commit}", f"git commit {commit[:12]} of {top}")
    h = hashlib.sha256(diff or b"")
    h.update(_hash_files(top, extra).encode())
    dirty = h.hexdigest()[:16]
    about = f"git commit {commit[:12]} of {top}, with uncommitted changes ({len(extra)} untracked files)"
    return CodeIdentity(f"git:{commit}+{dirty}", about)


def _git(cwd: Path, *args: str) -> bytes | None:
    """git's output, or None outside a repository (or with no git installed)."""
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, check=False)
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None


def _listed(cwd: Path, patterns: Iterable[str]) -> list[Path]:
    paths: set[Path] = set()
    for pattern in patterns:
        found = [p for p in cwd.glob(pattern) if p.is_file()]
        if not found:
            raise ConfigError(f"trainer.code: {pattern!r} matches no file in {cwd}")
        paths.update(found)
    return sorted(paths)


def _skipped(relative: Path) -> bool:
    parts = relative.parts[:-1]
    return any(part.startswith(".") or part in _SKIPPED for part in parts)


def _hash_files(root: Path, paths: Iterable[Path]) -> str:
    """sha256 over each file's path (relative to ``root``) and contents."""
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"<unreadable>")  # a dangling link, a file that went away
        h.update(b"\0")
    return h.hexdigest()[:16]
