"""``--where``: a boolean expression over run columns, parsed with ``ast`` into a whitelist and evaluated on
the runs DataFrame. Nothing of it ever reaches SQL, so SQL inside it is just a string that matches no run.

Grammar (Python expression syntax):

- columns: ``variant``, ``seed``, ``status``, dotted config fields ``train.lr``, ``model.gate.position``;
  names with a slash may be written bare (``ppl/code < 20``) or as ``col("ppl/code")`` (any column name works
  inside ``col(...)``);
- values: numbers, strings in quotes, ``True``/``False`` (``true``/``false``), ``None`` (``null``), and lists
  or tuples of those for ``in``/``not in``;
- comparisons ``== != < <= > >= in not in`` (chains like ``0.001 < train.lr <= 0.01`` too), ``is None`` /
  ``is not None`` (``== None`` means the same), combined with ``and``, ``or``, ``not`` and parentheses.

A comparison with a missing value (a run that has no ``ppl/code``) is false.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.errors import UserInputError, did_you_mean
from ablate.grid.paths import field_type, unwrap_optional

if TYPE_CHECKING:
    import pandas as pd

_CMP: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_CONSTANTS = {"true": True, "false": False, "null": None, "none": None}


@dataclass(frozen=True)
class Col:
    """A reference to a column of the runs table."""

    name: str


def _error(expr: str, message: str) -> UserInputError:
    return UserInputError(f"--where {expr!r}: {message}")


class Where:
    """A parsed ``--where`` expression. ``Where(text, known)`` checks every column against ``known``."""

    def __init__(self, text: str, known: Collection[str], *, open_prefixes: Collection[str] = ()):
        self.text = text
        self._known = set(known)
        self._open = tuple(open_prefixes)  # any name under these is fine (no run has such a column yet)
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise _error(text, f"not a valid expression ({exc.msg} at column {exc.offset}); e.g. "
                               "variant == 'sdpa-elementwise' and train.lr >= 0.004") from None
        self.columns: list[str] = []
        self._body = self._node(tree.body)

    # parsing: turn the ast into nested tuples of whitelisted operations
    def _node(self, node: ast.AST) -> Any:
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            return (op, [self._node(v) for v in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self._node(node.operand))
        if isinstance(node, ast.Compare):
            terms = [self._value(node.left), *(self._value(c) for c in node.comparators)]
            return ("cmp", [(type(op), terms[i], terms[i + 1]) for i, op in enumerate(node.ops)])
        value = self._value(node)
        if isinstance(value, Col):  # a bare boolean column, e.g. `model.qk_norm` (checked when evaluated)
            return ("bare", value)
        raise _error(self.text, f"{ast.unparse(node)!r} is not a comparison; write e.g. column == value")

    def _value(self, node: ast.AST) -> Any:
        if isinstance(node,
                      ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self._value(node.operand)
            if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self._value(e) for e in node.elts]
            if any(isinstance(i, (Col, list)) for i in items):
                raise _error(self.text, "a list may hold only values")
            return items
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "col":
            if len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                return self._column(node.args[0].value)
            raise _error(self.text, "col() takes one column name in quotes, e.g. col('ppl/code')")
        name = _dotted(node)
        if name is not None:
            if name not in self._known and name.lower() in _CONSTANTS:
                return _CONSTANTS[name.lower()]
            return self._column(name)
        raise _error(self.text, f"{ast.unparse(node)!r} is not allowed here; use column names, values, "
                                "comparisons, and/or/not (a column name with '-' or spaces: "
                                "col('bench/arc-e'))")

    def _column(self, name: str) -> Col:
        if name not in self._known and not (name.startswith(self._open) and len(name.split("/")) == 2):
            raise _error(self.text, f"unknown column {name!r}{did_you_mean(name, self._known)}; known "
                                    f"columns: {describe(self._known)}")
        self.columns.append(name)
        return Col(name)

    # evaluation on a DataFrame
    def mask(self, frame: pd.DataFrame) -> pd.Series:
        """A boolean Series: which rows of ``frame`` the expression selects."""
        return self._eval(self._body, frame)

    def _eval(self, node: Any, frame: pd.DataFrame) -> pd.Series:
        import pandas as pd

        kind, arg = node
        if kind in ("and", "or"):
            out = self._eval(arg[0], frame)
            for sub in arg[1:]:
                out = (out & self._eval(sub, frame)) if kind == "and" else (out | self._eval(sub, frame))
            return out
        if kind == "not":
            return ~self._eval(arg, frame)
        if kind == "bare":
            return self._bare(arg, frame)
        out = pd.Series(True, index=frame.index)
        for op, left, right in arg:
            out &= self._compare(op, left, right, frame)
        return out

    def _bare(self, col: Col, frame: pd.DataFrame) -> pd.Series:
        """A column alone is a condition only when it holds True/False (a missing value is false); anything
        else would filter by truthiness, which selects some columns' runs and none of others'."""
        import pandas as pd

        values = frame[col.name].dropna() if col.name in frame.columns else pd.Series(dtype=object)
        boolean = all(isinstance(v, bool) or type(v).__name__ == "bool_" for v in values) if len(values) \
            else _bool_field(col.name)
        if not boolean:
            raise _error(self.text, f"{col.name!r} alone is not a condition ({col.name} is not a true/false "
                                    f"column); compare it, e.g. {col.name} == ... or {col.name} is not None")
        if not len(values):
            return pd.Series(False, index=frame.index)
        return (
            frame[col.name].map(lambda v: v is True or (type(v).__name__ == "bool_" and bool(v))).astype(bool)
        )

    def _compare(self, op: type, left: Any, right: Any, frame: pd.DataFrame) -> pd.Series:
        import pandas as pd

        def side(v: Any) -> Any:
            if isinstance(v, Col):
                return frame[v.name] if v.name in frame.columns else pd.Series(None, index=frame.index,
                                                                               dtype=object)
            return v

        lhs, rhs = side(left), side(right)
        if op in (ast.Is, ast.IsNot) or (op in (ast.Eq, ast.NotEq) and (left is None or right is None)):
            if not (left is None or right is None):
                raise _error(self.text, "'is' compares only with None, e.g. error is not None")
            other = rhs if left is None else lhs
            isna = other.isna() if isinstance(other, pd.Series) else pd.Series(other is None,
                                                                               index=frame.index)
            return isna if op in (ast.Is, ast.Eq) else ~isna
        if op in (ast.In, ast.NotIn):
            if not isinstance(right, list) or not isinstance(lhs, pd.Series):
                raise _error(self.text, "'in' needs a column on the left and a list on the right, "
                                        "e.g. variant in ['baseline', 'sdpa-headwise']")
            hit = lhs.isin(right).fillna(False).astype(bool)
            return hit if op is ast.In else ~hit & lhs.notna()
        if isinstance(right, list) or isinstance(left, list):
            raise _error(self.text, "a list can only follow 'in' or 'not in'")
        try:
            result = _CMP[op](lhs, rhs)
        except TypeError as exc:
            raise _error(self.text, f"cannot compare {_show(left)} with {_show(right)} ({exc})") from None
        if not isinstance(result, pd.Series):
            return pd.Series(bool(result), index=frame.index)
        result = result.fillna(False).astype(bool)
        for s in (lhs, rhs):  # a missing value compares false, `!=` included
            if isinstance(s, pd.Series):
                result &= s.notna().to_numpy()
        return result


def _bool_field(name: str) -> bool:
    """Is ``name`` a config field of type bool (for a column no run has a value in yet)?"""
    try:
        return unwrap_optional(field_type(name)) is bool
    except (ValueError, KeyError, TypeError):
        return False


def describe(columns: Collection[str]) -> str:
    """Column names for a message, dotted ones grouped by their first part: ``a, b, train.{lr, steps}``."""
    plain = sorted(c for c in columns if "." not in c)
    groups: dict[str, list[str]] = {}
    for c in sorted(c for c in columns if "." in c):
        head, rest = c.split(".", 1)
        groups.setdefault(head, []).append(rest)
    return ", ".join([*plain, *(f"{h}.{{{', '.join(r)}}}" for h, r in groups.items())])


def _show(v: Any) -> str:
    return v.name if isinstance(v, Col) else repr(v)


def _dotted(node: ast.AST) -> str | None:
    """``train.lr`` -> "train.lr"; ``ppl/code`` -> "ppl/code"; anything else -> None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None and "/" not in base else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _dotted(node.left), _dotted(node.right)
        return f"{a}/{b}" if a is not None and b is not None else None
    return None
