"""Completion hints: literal runs inside a grammar's lexemes (a pattern's ``abc``) and short strings
that match the constraint's patterns (``0.0.0`` for ``\\d+\\.\\d+\\.\\d+``), which the completion
search tries to spell. Computed once per grammar, filed in its tables."""

from __future__ import annotations

import re
from typing import Any

from radixlm.constrained.pattern.samples import samples


def completion_hints(grammar: Any) -> bytes:
    """``grammar``'s hints (``b""`` for grammars of other cores, which have no Lark text)."""
    tables = getattr(grammar, "tables", None)
    if tables is None or not hasattr(grammar, "lark"):
        return b""
    return tables.get("completion_hints", lambda: _hints(grammar.lark, grammar.kind, grammar.spec))


def _hints(lark: str, kind: str, spec: Any) -> bytes:
    runs = re.findall(r"\(([A-Za-z0-9_:./@-]{1,32})\)", lark)
    runs += [s for p in _patterns(kind, spec) for s in samples(p)[:1]
             if s and all(0x20 <= ord(c) < 0x7F and c not in '"\\' for c in s)]
    return "".join(dict.fromkeys(runs)).encode()


def _patterns(kind: str, spec: Any, limit: int = 64) -> list[str]:
    """The regexes a constraint names: its ``pattern`` keywords (JSON schemas) or itself."""
    if kind == "regex":
        return [spec] if isinstance(spec, str) else []
    out: list[str] = []
    todo = [spec] if kind == "json_schema" else []
    while todo and len(out) < limit:
        node = todo.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                out.append(node["pattern"])
            todo.extend(v for k, v in node.items() if k not in ("enum", "const", "examples", "default"))
        elif isinstance(node, list):
            todo.extend(node)
    return out
