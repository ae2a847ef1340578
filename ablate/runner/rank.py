"""A rank > 0 of a run on several local devices: ``python -m ablate.runner.rank SPEC``, started by rank 0
(``launch.local_ranks``), trains the run described in SPEC beside it and exits with ``launch.INTERRUPTED``
when the run was stopped (its checkpoint saved)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from ablate.config import RunConfig
from ablate.errors import RunInterrupted
from ablate.runner.launch import INTERRUPTED
from ablate.runner.run import run_one


def main(spec_path: str) -> int:
    """A rank > 0: train the run described in ``spec_path`` (``{"run_id", "config", "run_dir"}``)."""
    spec = json.loads(Path(spec_path).read_text())
    logging.basicConfig(level=logging.WARNING)
    try:
        run_one(RunConfig.model_validate(spec["config"]), spec["run_dir"], run_id=spec["run_id"])
    except RunInterrupted:
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
