"""Trainers: what trains one run of a grid. ``command`` runs the researcher's own training command (any
program), with its parameters rendered into the command line, its metrics read from what it prints or writes,
and its whole process group stopped on a cancel."""
