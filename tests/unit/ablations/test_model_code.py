"""Provenance's model-code hash sees what a model computes only: imports and type annotations do not count,
and a run stored under the hash of the earlier normalization reads as trained by the same model code."""

from __future__ import annotations

import pytest

from ablate.provenance import SAME_MODEL, code_of, differing, spread_warning

PLAIN = """
def scale(x, k=2):
    y = k * x
    return y
"""


@pytest.mark.parametrize("typed", [
    # an import at the top, and annotations on the arguments, the return and a local
    "import torch\nfrom torch import Tensor\n\ndef scale(x: Tensor, k: int = 2) -> Tensor:\n"
    "    y: Tensor = k * x\n    return y\n",
    # the import moved into the function; `from __future__`
    "from __future__ import annotations\n\ndef scale(x, k=2):\n    import torch\n"
    "    y = k * x\n    return y\n",
    # an import for the type checker only; a cast for it
    "from typing import TYPE_CHECKING, cast\nif TYPE_CHECKING:\n    from torch import Tensor\n\n"
    "def scale(x: 'Tensor', k=2):\n    y = cast('Tensor', k * x)\n    return y\n",
    # a name declared with its type before its value
    "def scale(x, k=2):\n    z: int\n    y = k * x\n    return y\n",
], ids=["annotations", "moved-import", "type-checking", "declaration"])
def test_imports_and_annotations_leave_the_code_as_it_was(typed: str) -> None:
    assert code_of(typed) == code_of(PLAIN)


@pytest.mark.parametrize("changed", [
    PLAIN.replace("k=2", "k=3"),
    PLAIN.replace("k * x", "k + x"),
    PLAIN + "\n\nclass Extra:\n    pass\n",
    PLAIN.replace("y = k * x", "y = k * x\n    y = y.float()"),
], ids=["default", "operator", "class", "statement"])
def test_what_a_model_computes_still_counts(changed: str) -> None:
    assert code_of(changed) != code_of(PLAIN)


def test_a_run_stored_under_the_earlier_hash_reads_as_the_same_model_code() -> None:
    """Runs trained before imports and annotations stopped counting store the earlier normalization's hash of
    the code they trained under; it compares equal to the present hash of that same code."""
    old, new = next(iter(SAME_MODEL.items()))
    before = {"config_version": 2, "model_code": old, "torch": "2.13.0"}
    after = {"config_version": 2, "model_code": new, "torch": "2.13.0"}
    assert spread_warning([before, after], what="table1") is None
    assert differing(before, after) == []
    other = {**after, "model_code": "0123456789ab"}
    assert "different model code" in (spread_warning([before, other], what="table1") or "")
    assert differing(before, other) == [{"field": "model_code", "a": old, "b": "0123456789ab"}]
