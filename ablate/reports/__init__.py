"""Reports: the paper's Tables 1-6 and Figures 1-7 regenerated from the store, with statistics over seeds.

- ``spec``/``rows``/``tables``: pure builders over the store's ``runs`` DataFrame -> ``Table``;
- ``render``: markdown, LaTeX (booktabs), CSV, HTML; ``figures``: PNG; ``scorecard``: the paper's claims;
- ``data``/``api``/``page``: the thin layer that reads a Store and writes ``ablate report``'s outputs.

Importing this package imports neither pandas nor matplotlib.
"""

from typing import Any

__all__ = ["TARGETS", "build_table", "report_all", "report_figures", "report_table", "write_report"]


def __getattr__(name: str) -> Any:
    """The package's names, imported when first used: the CLI reads ``reports.registry`` at start-up without
    importing the builders."""
    if name == "build_table":
        from ablate.reports.tables import build_table

        return build_table
    if name == "TARGETS":
        from ablate.reports.registry import TARGETS

        return TARGETS
    if name in __all__:
        from ablate.reports import api

        return getattr(api, name)
    raise AttributeError(f"module 'ablate.reports' has no attribute {name!r}")
