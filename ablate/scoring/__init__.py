"""Stored runs scored again after training: ``ablate eval`` scores finished runs with lm-evaluation-harness
(``harness``), ``ablate probe`` measures their probes again from their checkpoints (``probes``); both choose
their runs the same way (``select``).

It sits above the store, which it writes, and the runner, whose checkpoints and lm-eval model it loads.
Importing this package imports nothing: ``select`` is light, so that a usage error is said before torch is
imported.
"""
