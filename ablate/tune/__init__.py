"""``ablate tune``: a learning-rate (or any numeric field, or a command grid's numeric parameter) search per
grid cell with Optuna, in the results store's own database, trials trained as ordinary runs by ``ablate
run``'s worker pool; then each variant's best and largest stable value, and the grid's seeds at the best one
(``--then-run``).

- ``search.py``: the command, ``tune(path, sets, TuneOptions(...)) -> TuneReport``; ``options.py`` what it is
  asked and answers; ``tuner.py`` the studies, rounds and probes on an executor's session.
- ``protocol.py``: best / largest stable value and the bracketing search, pure.
- ``space.py``: the search space, the grid's cells, study names, trial configs, pure.
- ``trials.py``: what a trial is for each trainer (ablate's own model, a command grid).
- ``studies.py`` / ``storage.py``: the studies in the store's database; pruners.
- ``execute.py`` / ``job.py`` / ``pruning.py``: the trials on the worker pool, with Optuna's Lightning
  pruning; ``command_trial.py``: a command grid's trials, pruned from the metric stream its command prints.
- ``dashboard.py``: optuna-dashboard over the same storage.

Importing this package imports nothing: the report of ``ablate tune``'s results reads ``protocol.py`` without
Optuna, the executors or torch.
"""
