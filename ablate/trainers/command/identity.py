"""A command run's identity: its run id, and its stem (the id without the code).

The run id is the first 12 hex digits (as ablate's own run ids) of the sha256 of the canonical JSON
(``params.canonical``: keys sorted, ``1e-2`` = ``1.0e-2``, an int apart from a float) of::

    {"code": <CodeIdentity.value>, "params": <the run's parameters, seed left out>, "seed": <seed>,
     "trainer": {command, args_style, bools, seed_arg, shell, env, cwd: as the grid file writes them},
     "version": "command/1"}

What is in it is what decides what trains: the command line and how ``{args}`` is written, the folder and
environment the command runs in, the parameters, the seed and the code. What is left out:

- ``metrics``, ``objective`` and ``summary``: reading the same output another way does not change what
  trained, so a run is not trained again for it;
- ``resume``: a resumed run goes on being the same run;
- ``gpus`` and the devices an executor gives: where a run trains, as for ablate's own runs;
- ``trainer.code``: the globs it lists count through the code identity's value;
- the grid's name and the arm's name: a renamed arm, or a run that two grids share, is the same run (two
  arms with the same parameters are refused when the grid is read).

The stem is the same hash without ``code``. Runs of one stem differ only in the code they ran, so a planned
run that the store lacks, whose stem it holds under another id, is new because the code changed
(``changed_by_code``), and ``ablate plan`` can say so. ``VERSION`` changes when this rule does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from ablate.trainers.command.params import Params, canonical
from ablate.trainers.command.spec import CommandSpec

ID_LENGTH = 12  # as ablate.grid.ids.ID_LENGTH (a test holds them equal)
VERSION = "command/1"
TRAINER_FIELDS = ("command", "args_style", "bools", "seed_arg", "shell", "env", "cwd")


def trainer_key(spec: CommandSpec) -> Params:
    """The trainer's fields that change what runs, as the grid file writes them.

    >>> from ablate.trainers.command.spec import load_spec
    >>> key = trainer_key(load_spec({"command": "python t.py {args}", "metrics": {"stdout": True},
    ...                              "objective": {"metric": "loss", "better": "lower"}}))
    >>> sorted(key) == sorted(TRAINER_FIELDS), key["seed_arg"]
    (True, 'seed')
    """
    env: Params = dict(spec.env)
    return {"command": spec.command, "args_style": spec.args_style, "bools": spec.bools,
            "seed_arg": spec.seed_arg, "shell": spec.shell, "env": env, "cwd": spec.cwd}


def identity(spec: CommandSpec, params: Params, seed: int, code: str | None) -> Params:
    """What a run id hashes (``code=None``: what its stem hashes): the reference the fast path of
    ``Identifier`` must equal."""
    out: Params = {"params": params, "seed": seed, "trainer": trainer_key(spec), "version": VERSION}
    if code is not None:
        out["code"] = code
    return out


def digest(text: str) -> str:
    """The id of a canonical JSON text: its sha256's first ``ID_LENGTH`` hex digits."""
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


class Identifier:
    """Run and stem ids for one grid's runs. The trainer's and the code's JSON are written once; a run adds
    its parameters' canonical JSON (written once per set of parameters, shared by its seeds) and its seed,
    so an id costs two string joins and two hashes.

    >>> from ablate.trainers.command.spec import load_spec
    >>> spec = load_spec({"command": "python t.py {args}", "metrics": {"stdout": True},
    ...                   "objective": {"metric": "loss", "better": "lower"}})
    >>> ids = Identifier(spec, "git:abc")
    >>> ids.ids(canonical({"lr": 0.01}), 0) == (digest(canonical(identity(spec, {"lr": 1e-2}, 0, "git:abc"))),
    ...                                         digest(canonical(identity(spec, {"lr": 1.0e-2}, 0, None))))
    True
    """

    def __init__(self, spec: CommandSpec, code: str):
        # keys in sorted order: code, params, seed, trainer, version (what json.dumps(sort_keys=True) writes)
        self._head = '{"code":' + json.dumps(code, ensure_ascii=False) + ',"params":'
        self._tail = ',"trainer":' + canonical(trainer_key(spec)) + ',"version":' + json.dumps(VERSION) + "}"

    def ids(self, params_json: str, seed: int) -> tuple[str, str]:
        """``(run id, stem id)`` of the run with parameters ``params_json`` (``canonical(params)``) and
        ``seed``."""
        rest = params_json + ',"seed":' + str(seed) + self._tail
        return digest(self._head + rest), digest('{"params":' + rest)


def changed_by_code(planned: Iterable[tuple[str, str]], stored: Iterable[tuple[str, str]]
                    ) -> dict[str, str]:
    """The planned runs that are new because the code changed: ``{planned id: stored id}`` for each planned
    ``(run id, stem id)`` whose id the store lacks while it holds its stem under another id (``stored``: the
    store's ``(run id, stem id)`` pairs; the last one of a stem wins, so pass them oldest first).

    >>> changed_by_code([("new1", "s1"), ("same", "s2"), ("new3", "s3")], [("old1", "s1"), ("same", "s2")])
    {'new1': 'old1'}
    """
    stored_ids: set[str] = set()
    by_stem: dict[str, str] = {}
    for run_id, stem in stored:
        stored_ids.add(run_id)
        by_stem[stem] = run_id
    return {run_id: by_stem[stem] for run_id, stem in planned
            if run_id not in stored_ids and stem in by_stem and by_stem[stem] != run_id}

