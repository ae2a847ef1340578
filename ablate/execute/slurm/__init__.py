"""The Slurm executor: one job array per grid, through submitit."""
