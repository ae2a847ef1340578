"""The Slurm executor: one job array per grid, through submitit.

``options`` declares its own ``ablate run`` options (``--partition``, ``--time``, ...), ``executor`` holds
``SLURM``, the object its registry entry names (``ablate.execute.registry``); ``submit`` submits and follows
the array, ``task`` is what each array task runs, ``queue`` what squeue and scancel say. Importing this
package imports nothing (the command line reads ``options`` at start-up).
"""
