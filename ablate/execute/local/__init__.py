"""The local executor: a pool of long-lived worker processes on this machine.

``options`` declares its own ``ablate run`` options (none), ``executor`` holds ``LOCAL``, the object its
registry entry names (``ablate.execute.registry``); ``runner``, ``pool`` and ``worker`` are the pool itself.
Importing this package imports nothing (the command line reads ``options`` at start-up).
"""
