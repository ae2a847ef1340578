"""The runner: one ``RunConfig`` -> a trained, evaluated and probed run directory with ``result.json``.

Importing this package is cheap (no torch, no Lightning): ``run_one`` imports them when called.

- ``run_one(config, run_dir, *, run_id, on_step=None, stop=None) -> RunResult`` (see ``ablate.runner.run``)
- ``RunInterrupted``: raised by ``run_one`` after ``stop`` was set and a checkpoint was saved.
- ``ablate.runner.tokenizers.get_tokenizer(data_cfg, model_cfg, cache_dir) -> Tokenizer``
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ablate.errors import RunInterrupted

if TYPE_CHECKING:
    import lightning as L

    from ablate.config import RunConfig
    from ablate.result import RunResult
    from ablate.runner.fingerprints import Fingerprints


def run_one(config: RunConfig, run_dir: str | os.PathLike[str], *, run_id: str,
            on_step: Callable[[Mapping[str, float | None]], None] | None = None,
            stop: threading.Event | None = None, callbacks: Sequence[object] = (),
            check_inputs: Callable[[RunConfig, Fingerprints], None] | None = None) -> RunResult:
    """Train, evaluate and probe one run into ``run_dir`` (resuming from its checkpoint); see
    ``ablate.runner.run.run_one``; ``callbacks`` are Lightning callbacks (typed ``object`` here, so that a
    caller need not import Lightning); ``check_inputs(config, fingerprints)`` raises when the data is not what
    the run's id says (the executors pass ``ablate.grid.identity.check_current``)."""
    from ablate.runner.run import run_one as _run_one

    return _run_one(config, run_dir, run_id=run_id, on_step=on_step, stop=stop,
                    callbacks=cast("Sequence[L.Callback]", callbacks), check_inputs=check_inputs)


__all__ = ["RunInterrupted", "run_one"]
