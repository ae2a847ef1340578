"""The local executor's own options: none (``--jobs``, ``--devices``, ``--threads`` are every executor's)."""

from __future__ import annotations

from ablate.options import Option

ABOUT = "a pool of workers here"  # --executor's help: local (a pool of workers here)

OPTIONS: tuple[Option, ...] = ()
