"""``RunConfig``: the one complete description of a run (model, data, train, eval, variant, seed).

Everything that changes a run's behaviour is a field here, with a documented default. The resolved config
(``run.model_dump(mode="json")``) is what MLflow records as params and what the store keeps; the run id hashes
its fields that differ from their defaults, with ``CONFIG_VERSION`` (``ablate/grid/ids.py``). Importing this
package never imports torch.

Adding a field: give it a default that keeps today's behaviour; no run id changes. Then record it:
``python -m ablate.grid.defaults --record``. Changing a default's value (or a preset's, or a rule that fills
an omitted field): bump ``CONFIG_VERSION`` (``ablate/config/fields.py``), record, and tell users to run
``ablate db rehash``.

Identity fields (``identity_field``) say what a run read outside its config (its data files' fingerprints):
ablate fills them when a grid is loaded, a grid file may not set them, and the run id covers them
(``ablate/grid/identity.py``).

Modules: ``fields`` (the base model, ``Int``, identity fields, ``CONFIG_VERSION``), ``sections`` (source,
data, train, eval), ``run`` (``RunConfig`` and its training stages), ``vocab`` (a vocabulary from the
tokenizer).
"""

from ablate.config.fields import CONFIG_VERSION, Int, identity_field, is_shorthand, shorthand
from ablate.config.run import (
    STAGE_FIXED_DATA_FIELDS,
    STAGE_MODEL_FIELDS,
    RunConfig,
    stage_configs,
    total_steps,
)
from ablate.config.sections import BUILTIN_CORPORA, DataConfig, EvalConfig, SourceConfig, TrainConfig
from ablate.config.vocab import BYTE_IDS, VOCAB_MULTIPLE, padded_vocab, tokenizer_ids, vocab_from_tokenizer

__all__ = [
    "BUILTIN_CORPORA",
    "BYTE_IDS",
    "CONFIG_VERSION",
    "STAGE_FIXED_DATA_FIELDS",
    "STAGE_MODEL_FIELDS",
    "VOCAB_MULTIPLE",
    "DataConfig",
    "EvalConfig",
    "Int",
    "RunConfig",
    "SourceConfig",
    "TrainConfig",
    "identity_field",
    "is_shorthand",
    "padded_vocab",
    "shorthand",
    "stage_configs",
    "tokenizer_ids",
    "total_steps",
    "vocab_from_tokenizer",
]
