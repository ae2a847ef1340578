"""Numbers counted from a model built on the meta device (its parameters, its matmul weights), kept on disk.

Counting builds the model, which imports torch: a second of CPU before ``ablate plan`` can print anything. So
each count is kept between processes, keyed by the model config's JSON, in one file per version of this
package's code (any change to a file of ``ablate/ablations`` starts a new file, so a count never outlives the
code that made it): ``$ABLATE_CACHE/meta_counts-<version>.json``, else ``~/.cache/ablate/``. Planning a grid
whose models were counted before (by an earlier plan or run) never imports torch. An unwritable cache only
means counting again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from ablate.layout import atomic_write

log = logging.getLogger(__name__)
T = TypeVar("T")


@functools.cache
def counts_file() -> Path:
    """This code version's file of counts."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    cache = os.environ.get("ABLATE_CACHE")
    root = (
        Path(cache) if cache else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate"
    )
    return root / f"meta_counts-{digest.hexdigest()[:16]}.json"


@functools.cache
def _known() -> dict[str, object]:
    try:
        return dict(json.loads(counts_file().read_text()))
    except (OSError, ValueError):
        return {}


def kept(kind: str) -> Callable[[Callable[[str], T]], Callable[[str], T]]:
    """Decorate ``fn(cfg_json) -> value`` (JSON-able) so its values are cached in memory and on disk."""

    def decorate(fn: Callable[[str], T]) -> Callable[[str], T]:
        @functools.lru_cache(maxsize=4096)
        @functools.wraps(fn)
        def counted(cfg_json: str) -> T:
            known, key = _known(), f"{kind}:{cfg_json}"
            if key in known:
                return cast(T, known[key])  # what fn returned, read back from the JSON it was saved as
            value = fn(cfg_json)
            known[key] = value
            _save(known)
            return value

        return counted

    return decorate


def _save(known: dict[str, object]) -> None:
    try:
        atomic_write(counts_file(), json.dumps(known))
    except OSError as exc:
        log.debug("model counts not kept on disk: %s", exc)
