"""What every config section is built from: the strict base model, an int that refuses booleans, the identity
fields that ablate fills, the mark on a validator that only spells out shorthand, and ``CONFIG_VERSION``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

# What a field left out of a config means: bumped by hand when a default's value changes (ablate/grid/ids.py).
# 2: data sources and hf: tokenizers carry fingerprints of their files, relative paths are made absolute.
CONFIG_VERSION = 2


def _not_a_bool(value: object) -> object:
    # pydantic reads true as 1 in an int field: `seed: [true]` would silently be seed 1
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not a boolean")
    return value


Int = Annotated[int, BeforeValidator(_not_a_bool)]


def identity_field(filled_by: str, description: str) -> Any:
    """A field that ablate fills when a grid is loaded, by calling ``filled_by`` ("module:function", given the
    model that holds the field and a resolver; it returns the fields to update), never set by a grid file. The
    run id covers it; the stem id (``grid.identity.stem_id``) does not, so a change of it reads as stale."""
    # Any, as pydantic's own Field: the declaration stands for the field's value in the class body
    return Field(None, description=description, json_schema_extra={"identity": True, "filled_by": filled_by})


_Validator = TypeVar("_Validator", bound=Callable[..., object])


def shorthand(fn: _Validator) -> _Validator:
    """Mark a ``before`` model validator that only spells a grid's shorthand out into the model's own fields
    (a resolved config's dump passes through it unchanged): it fills no omitted field, so run ids
    (``ablate.grid.ids``) compare the model's fields with their defaults instead of re-validating it without
    each field, which for ``RunConfig`` would cost a validation of the whole run per field."""
    fn.__dict__["__ablate_shorthand__"] = True  # a function attribute, as functools marks a wrapper
    return fn


def is_shorthand(fn: object) -> bool:
    """Whether ``fn`` (a validator's function, or the classmethod around it) was marked with ``shorthand``."""
    return bool(getattr(getattr(fn, "__func__", fn), "__ablate_shorthand__", False))


class Strict(BaseModel):
    """A config section: unknown keys are errors, and a validated section never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
