"""A grid file's YAML, read as ablate reads its own grid files: a safe loader that refuses a key written twice
in one mapping (PyYAML silently keeps the last) and reads numbers as YAML 1.2 does (``1e-2`` is a float;
PyYAML's YAML 1.1 reads it as a string, so ``1e-2`` and ``1.0e-2`` would be two runs).

>>> read_yaml("lr: [1e-2, 1.0e-2, 0.01]", "g.yaml")
{'lr': [0.01, 0.01, 0.01]}
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ablate.errors import ConfigError


class _Loader(yaml.SafeLoader):
    """A safe loader that refuses a key written twice in one mapping and reads numbers as YAML 1.2 does
    (``1e-2`` is a float; PyYAML's YAML 1.1 reads it as a string), as ablate's own grid files are read."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a mapping key must be a scalar, got {key!r}", key_node.start_mark) from None
            if dup:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice",
                                                        key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
# ints first: the float pattern also matches a plain integer; 0x1f, 0o17 and 1_000 are strings here
_Loader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT, re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    assert isinstance(node, yaml.ScalarNode)  # the resolver tags scalars only
    return int(str(loader.construct_scalar(node)))


_Loader.add_constructor(_INT, _int)


def read_yaml(text: str, source: str) -> Any:
    """The YAML ``text`` of the file ``source``, or one ``ConfigError`` line with the line number."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{line}malformed YAML: {problem}", where=source) from None
    except RecursionError:
        raise ConfigError("malformed YAML: nested too deeply", where=source) from None
