"""YAML as ablate reads every file a user writes (grid files, ``--set`` values, a command trainer's grid): a
safe loader that refuses a key written twice in one mapping (PyYAML silently keeps the last) and reads numbers
as YAML 1.2 does (``1e-2`` is a float; PyYAML's YAML 1.1 reads it as a string, so ``1e-2`` and ``1.0e-2``
would be two runs). Here, at the config's layer, so the model grids (``ablate.grid``) and the command grids
(``ablate.trainers``) read one way.

>>> read_yaml("lr: [1e-2, 1.0e-2, 0.01, 0x10]", "g.yaml")
{'lr': [0.01, 0.01, 0.01, 16]}
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ablate.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses a key written twice in one mapping (PyYAML silently keeps the last) and
    reads numbers as YAML 1.2 does (``_yaml_12_numbers``: ``1e-2`` is a float, as every other YAML reader of
    today has it). Merge keys (``<<: *defaults``, ``<<: [*a, *b]``) work as in SafeLoader: a key written
    beside a merge overrides the merged one, and only the keys written in the mapping itself are checked for
    repeats."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # SafeLoader's flatten_mapping merges it in, under the keys written here
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a mapping key must be a scalar, got {key!r}", key_node.start_mark
                ) from None
            if dup:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


# Numbers as YAML 1.2 reads them (PyYAML reads YAML 1.1, where `1e-2` and `1.0e2` are strings, `010` is 8):
# an int is decimal, 0o octal or 0x hex; a float has a point or an exponent (with or without its sign)
_INT_12 = r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"
_FLOAT_12 = (r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
             r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _yaml_12_numbers(loader: type[yaml.SafeLoader]) -> None:
    """Make ``loader`` resolve plain scalars to ints and floats as YAML 1.2's core schema does."""
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in _NUMBER_TAGS]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    # ints first: the float pattern also matches a plain integer
    loader.add_implicit_resolver(_NUMBER_TAGS[0], re.compile(_INT_12), list("-+0123456789"))
    loader.add_implicit_resolver(_NUMBER_TAGS[1], re.compile(_FLOAT_12), list("-+0123456789."))
    loader.add_constructor(_NUMBER_TAGS[0], _int_12)


def _int_12(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    body = text.lstrip("+-")
    base = {"0o": 8, "0x": 16}.get(body[:2], 10)
    value = int(body[2:] if base != 10 else body, base)
    return -value if text.startswith("-") else value


_yaml_12_numbers(_StrictLoader)


def read_yaml(text: str, where: str) -> Any:
    """The YAML ``text`` (of ``where``: a file, ``--set K``), or one ``ConfigError`` line with its line
    number."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{line}malformed YAML: {problem}", where=where) from None
    except RecursionError:
        raise ConfigError("malformed YAML: nested too deeply", where=where) from None
