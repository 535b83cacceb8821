"""The flag table of docs/server.md states the defaults ``radixlm serve``'s parser has.

Each table row names its flags and, in its description, defaults written as ``default 30``,
``default `lpm```, ``default on`` or ``default `127.0.0.1` / `30000```; the k-th default belongs to
the row's k-th flag (``--no-X`` spellings skipped). Every such default is checked against the
argparse parser itself, so a changed default fails here until the documentation follows.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from radixlm.__main__ import build_parser

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"
_FLAG = re.compile(r"`(--[a-z0-9-]+)")
_DEFAULTS = re.compile(r"default:? (`[^`]+`(?: / `[^`]+`)?|on\b|off\b|-?[\d.]+(?: ?(?:MiB|s)\b)?(?![\d.]| x))")
_UNITS = {"MiB": 1 << 20}


def _serve_defaults() -> dict[str, object]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    return {opt: action.default for action in sub._actions for opt in action.option_strings}


def _documented() -> list[tuple[str, str]]:
    """``(flag, documented default)`` for every row of the flag table that states one per flag."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Flags"):]
    table = table[:table.index("\n\n", table.index("| flag |"))]
    pairs = []
    for row in table.splitlines()[2:]:
        cells = row.split(" | ")
        if len(cells) < 2:
            continue
        names = re.sub(r"\([^)]*\)", "", cells[0])  # "(or --model)", "(our --mem-fraction)": aliases
        flags = [f for f in _FLAG.findall(names) if not f.startswith("--no-")]
        values = []
        for found in _DEFAULTS.findall(cells[1]):
            values += [v.strip() for v in found.split(" / ")]
        if flags and len(values) == len(flags):
            pairs += zip(flags, values)
    return pairs


def _same(documented: str, default: object, flag: str) -> bool:
    value = documented.strip("`")
    if isinstance(default, bool):
        return value == ("on" if default else "off")
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        number, _, unit = value.partition(" ")
        scale = _UNITS.get(unit, 1) if flag.endswith("-bytes") else 1
        return float(number) * scale == float(default)
    return value == str(default)


def test_the_documented_defaults_are_the_parsers():
    defaults = _serve_defaults()
    pairs = _documented()
    assert len(pairs) >= 26, pairs  # the table is read: most rows state their default
    wrong = [f"{flag}: documented {value}, parser {defaults.get(flag)!r}" for flag, value in pairs
             if flag not in defaults or not _same(value, defaults[flag], flag)]
    assert not wrong, wrong
