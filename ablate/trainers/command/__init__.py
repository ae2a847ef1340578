"""A training command as a trainer: the grid's ``trainer:`` section (``spec``), the run's parameters
(``params``), the command line and environment of one run (``render``, with ``template`` for placeholders),
its metrics read from stdout or a JSONL file (``parse``), the process group that runs it (``process``, led by
the ``guard`` script) and the identity of its code (``code``).
A command grid file's runs and their ids: ``grid``, ``identity`` (its YAML read by
``ablate.config.yamlfile``).

Each module is pure but for what it says: ``process`` and ``guard`` start and signal processes, ``code`` reads
the repository, ``render.check`` looks at the disk and PATH, ``parse.JsonlTail`` reads a file."""
