"""Transitional: ``job.py`` was split into ``job_function`` (JobContext, load_job, run_job), ``training``
(the training job: ``train``, ``prepare``) and ``last_attempt`` (``crashed``, ``finished_result``).

Kept only for ``executor.TRAIN_JOB`` (``"ablate.execute.job:train"``) and ``ablate.tune.job``, which still
name this module; delete it once they name ``ablate.execute.training``.
"""

from ablate.execute.training import prepare, train

__all__ = ["prepare", "train"]
