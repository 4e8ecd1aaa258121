"""TOML text from a dict of tables, so that ``hcr.Runtime(dict)`` goes through the same parser (and
the same error messages, naming the key) as a TOML file.

Nested dicts are tables, lists of dicts arrays of tables (``[[backend]]``), everything else values:
str, bool, int, float, os.PathLike (a string), and lists of those.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Mapping

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: Any, path: list[str]) -> str:
    if not isinstance(key, str):
        raise TypeError(f"config: key {key!r} under {'.'.join(path) or 'the top level'} "
                        "is not a string")
    return key if _BARE.match(key) else json.dumps(key, ensure_ascii=False)


def _is_table(v: Any) -> bool:
    return isinstance(v, Mapping)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, Mapping) for x in v)


def _value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, os.PathLike):
        return json.dumps(os.fspath(v), ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, where) for x in v) + "]"
    if isinstance(v, Mapping):  # a table inside an array of values: an inline table
        items = ", ".join(f"{_key(k, [where])} = {_value(x, where + '.' + str(k))}"
                          for k, x in v.items())
        return "{" + items + "}"
    if hasattr(v, "item") and callable(v.item):  # a NumPy scalar
        return _value(v.item(), where)
    raise TypeError(f"config: {where} = {v!r}: a {type(v).__name__} is not a TOML value "
                    "(str, bool, int, float, list or dict)")


def _table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    subtables = []
    for k, v in table.items():
        key = _key(k, path)
        if _is_table(v) or _is_table_array(v):
            subtables.append((k, v))
        else:
            lines.append(f"{key} = {_value(v, '.'.join(path + [k]))}")
    for k, v in subtables:
        header = ".".join(_key(p, path) for p in path + [k])
        if _is_table(v):
            lines.append(f"\n[{header}]")
            _table(v, path + [k], lines)
        else:
            for item in v:
                lines.append(f"\n[[{header}]]")
                _table(item, path + [k], lines)


def dumps(config: Mapping[str, Any]) -> str:
    """The TOML text of ``config`` (a dict of tables)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict of tables, got {type(config).__name__}")
    lines: list[str] = []
    _table(config, [], lines)
    return "\n".join(lines) + "\n"
