"""The Ray executor's own ``ablate run`` and ``ablate tune`` options, declared here so that the commands' help
lists them without importing the executor (``ablate.execute.registry``)."""

from __future__ import annotations

from ablate.options import Option

ABOUT = "one Ray task per run"  # --executor's help: ray (one Ray task per run)

OPTIONS = (
    Option("ray_address", "--ray-address", str, "the cluster to join (host:port) [default: $RAY_ADDRESS, "
           "else a Ray instance started here for this command]", refusal="an option of the Ray executor"),
)
