"""Reports: the paper's Tables 1-6 and Figures 1-7 regenerated from the store, with statistics over seeds.

- ``spec``/``rows``/``tables``: pure builders over the store's ``runs`` DataFrame -> ``Table``
  (``tables.build_table``);
- ``render``: markdown, LaTeX (booktabs), CSV, HTML; ``figures``: PNG; ``scorecard``: the paper's claims;
- ``data``/``api``/``files``/``page``: the thin layer that reads a Store and writes ``ablate report``'s
  outputs (``api.report_table``, ``api.report_scorecard``, ``api.report_compare``, ``files.report_figures``,
  ``files.report_all``);
- ``names``: every report by name (``TARGETS``), what the command line offers; ``registry``: how each is made.

Importing this package imports neither pandas nor matplotlib.
"""

from ablate.reports.names import TARGETS

__all__ = ["TARGETS"]
