"""Exact regexes of bounded JSON numbers: every decimal the regex accepts passes ``jsonschema``'s
float comparison, and every short decimal that passes is accepted (``-0`` forms aside)."""

from __future__ import annotations

import itertools
import json
import random
import re

import jsonschema
import pytest
from radixlm.constrained.pattern.numbers import number_range_regex

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

BOUNDS = [None, 0, 1, -1, 0.5, 0.0001, 0.1, 2.25, -2.25, 10, 11.999, -0.3]


def _candidates() -> list[str]:
    rng = random.Random(0)
    out = {str(i) for i in range(-40, 40)}
    out |= {"0.0001", "0.00009", "0.1", "0.10", "0.1000000000000000001", "0.09999999999999999999",
            "2.2499999999999999", "11.999", "11.9990", "11.99901", "-0.30", "-0.2999"}
    for _ in range(1000):
        whole = rng.choice(["0", "1", "2", "3", "9", "10", "11", "12"])
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 5)))
        out.add(("-" if rng.random() < 0.4 else "") + whole + "." + frac)
    return sorted(out)


CANDIDATES = _candidates()


@pytest.mark.parametrize("lo,hi", list(itertools.product(BOUNDS, BOUNDS)), ids=lambda b: str(b))
def test_decimal_ranges_are_exact(lo, hi):
    for lo_x, hi_x in itertools.product([False, True], repeat=2):
        if (lo is None and lo_x) or (hi is None and hi_x):
            continue
        schema: dict = {"type": "number"}
        if lo is not None:
            schema["exclusiveMinimum" if lo_x else "minimum"] = lo
        if hi is not None:
            schema["exclusiveMaximum" if hi_x else "maximum"] = hi
        rx = number_range_regex(lo, lo_x, hi, hi_x)
        pattern = re.compile(rx) if rx is not None else None
        validator = jsonschema.Draft202012Validator(schema)
        for text in CANDIDATES:
            accepted = bool(pattern and pattern.fullmatch(text))
            valid = validator.is_valid(json.loads(text))
            assert not accepted or valid, f"{text} accepted for {schema} by {rx}"
            if valid and not text.startswith("-0") and len(text.partition(".")[2]) <= 15:
                assert accepted, f"{text} is valid for {schema} but rejected by {rx}"


def test_empty_and_tiny_ranges():
    assert number_range_regex(0.5, False, 0.25, False) is None
    assert number_range_regex(0.5, True, 0.5, False) is None
    assert re.fullmatch(number_range_regex(0.5, False, 0.5, False), "0.50")
    assert re.fullmatch(number_range_regex(0.0001, False, 0.1, False), "0.05")
    # an exclusive bound whose neighbours collapse to it as doubles stays sound
    rx = number_range_regex(0.1, True, None, False)
    assert not re.fullmatch(rx, "0.10000000000000000001") and re.fullmatch(rx, "0.1000001")
