"""The trainers a grid file may name, as known before any of them is imported: the grid section that chooses
each one, its job function, its options and what it can report, the way ``ablate.execute.registry`` declares
the executors.

A run's stored config says which trainer made it (``trainer: command``; a config without the key is ablate's
own model, as every run made before there was a choice), so the store, the executors and the reports ask
``trainer_of(config)`` and never look at the fields of one trainer's config. A third trainer (a Python
callable, for example) is one subpackage with its config model, its job function and its planner
(``ablate.grid.planning.GridPlanner``: its grid files and its stored runs), and one entry here.

Declarations (and the YAML reader): no import of a trainer's code, so ``ablate --help`` and ``ablate runs``
read it for free.

>>> trainer_of({"variant": "baseline", "seed": 0}).name, trainer_of({"trainer": "command"}).job
('model', 'ablate.execute.command_job:train_command')
>>> TRAINERS["command"].refusal("report table1").split(";")[0]
"report table1 is for grids of ablate's own model"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ablate.config.yamlfile import read_yaml
from ablate.errors import ConfigError
from ablate.options import Option

MODEL, COMMAND = "model", "command"
KEY = "trainer"  # a grid file's section that names a trainer, and a run config's field that says which


@dataclass(frozen=True)
class Trainer:
    """One trainer: ``section``, the top-level key of a grid file that chooses it (None: the default, a grid
    without one); ``job``, the job function that trains one of its runs (``module:function``, imported only
    in the processes that train); ``reports``, the reports it can feed (None: every one); ``model_commands``:
    whether ``export``, ``probe`` and ``eval`` can read its runs; ``options``: those only it reads;
    ``planner``: what plans its grid files (``module:attribute``, an ``ablate.grid.planning.GridPlanner``);
    ``one_process_per_device``: whether a run of N devices is N processes that an executor starts (the model's
    ranks, one Slurm task each), else one process that uses them all (a command, whose ``torchrun`` starts
    its own ranks); ``logs_to_mlflow``: whether its process may log into MLflow itself, so each run's MLflow
    run is opened before the process starts (``MLFLOW_RUN_ID``); ``objective``: where its stored configs,
    flattened, keep the objective metric and which way is better (None: its metrics are ablate's declared
    ones, each with its own direction)."""

    name: str
    about: str
    section: str | None
    job: str
    planner: str
    reports: frozenset[str] | None = None
    model_commands: bool = True
    options: tuple[Option, ...] = ()
    one_process_per_device: bool = True
    logs_to_mlflow: bool = False
    objective: tuple[str, str] | None = None

    def can_report(self, report: str) -> bool:
        """Can a report of this name read this trainer's runs?"""
        return self.reports is None or report in self.reports

    def refusal(self, what: str) -> str:
        """The one line that says ``what`` (a report, a command) is not for this trainer's runs."""
        can = ", ".join(sorted(self.reports or ()))
        return (f"{what} is for grids of ablate's own model; this is a {self.name} grid ({KEY}: "
                f"{self.name}): its reports are {can}")


TRAINERS: dict[str, Trainer] = {
    MODEL: Trainer(MODEL, "ablate's own decoder (Lightning), its arms from the variant catalogue", None,
                   "ablate.execute.training:train", "ablate.grid.model_planning:MODEL_PLANNER"),
    COMMAND: Trainer(COMMAND, "your own training command: its parameters rendered into the command line, its "
                              "metrics read from what it prints or writes", KEY,
                     "ablate.execute.command_job:train_command",
                     "ablate.grid.command_planning:COMMAND_PLANNER",
                     reports=frozenset({"compare", "figures", "all", "lr"}), model_commands=False,
                     one_process_per_device=False, logs_to_mlflow=True,
                     objective=("spec.objective.metric", "spec.objective.better")),
}


def trainer_of(config: Mapping[str, object]) -> Trainer:
    """The trainer that made (or makes) a run, from its stored config."""
    name = config.get(KEY, MODEL)
    found = TRAINERS.get(str(name))
    if found is None:
        raise ConfigError(f"{KEY}: unknown trainer {name!r}; known: {', '.join(TRAINERS)}")
    return found


def file_trainer(raw: Mapping[object, object]) -> Trainer:
    """The trainer a grid file's top-level mapping chooses: the first whose section it has, else the
    default."""
    return next((t for t in TRAINERS.values() if t.section is not None and t.section in raw), TRAINERS[MODEL])


def text_trainer(text: str) -> Trainer:
    """The trainer of a grid file's text (the default when the text is no mapping or cannot be read: its own
    loader then says why).

    >>> text_trainer("{name: g, trainer: {command: python t.py}}").name, text_trainer("name: g").name
    ('command', 'model')
    """
    try:
        raw = read_yaml(text, "<grid>")
    except ConfigError:
        return TRAINERS[MODEL]
    return file_trainer(raw) if isinstance(raw, Mapping) else TRAINERS[MODEL]
