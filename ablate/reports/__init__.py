"""Reports: the paper's Tables 1-6 and Figures 1-7 regenerated from the store, with statistics over seeds.

- ``spec``/``rows``/``tables``: pure builders over the store's ``runs`` DataFrame -> ``Table``;
- ``render``: markdown, LaTeX (booktabs), CSV, HTML; ``figures``: PNG; ``scorecard``: the paper's claims;
- ``data``/``api``/``page``: the thin layer that reads a Store and writes ``ablate report``'s outputs.

Importing this package imports neither pandas nor matplotlib.
"""

from ablate.reports.api import TARGETS, report_all, report_figures, report_table, write_report
from ablate.reports.tables import build_table

__all__ = ["TARGETS", "build_table", "report_all", "report_figures", "report_table", "write_report"]
