"""The Ray executor: one Ray task per run on a Ray cluster, or on a Ray instance started here.

``options`` declares its own options (``--ray-address``), ``executor`` holds ``RAY``, the object its registry
entry names (``ablate.execute.registry``); ``cluster`` joins or starts the cluster, ``runner`` deals the
tasks, ``task`` is what each one runs. Importing this package imports nothing, Ray least of all (the command
line reads ``options`` at start-up)."""
