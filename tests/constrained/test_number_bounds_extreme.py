"""Number bounds at the edges of what JSON allows (2**53 - 1, 1e308, the largest double, 1e-300,
integers past the double range, negative ones, exclusive ones, with and without ``multipleOf``):
every schema compiles, every candidate text the schema's regex accepts passes ``jsonschema``, and
without ``multipleOf`` every valid candidate written with at most 15 fraction digits is accepted."""

from __future__ import annotations

import itertools
import json
import math
import re
from decimal import Decimal

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, compile_grammar, schema_to_grammar
from radixlm.constrained.testing.walks import schema_regex

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

MAX_DOUBLE = 1.7976931348623157e308
BIG = [2**53 - 1, 2**53, 2**53 + 1, 1e308, MAX_DOUBLE, 1e-300, 5e-324, 2**63, 10**330, 12345678901234567890]
BOUNDS = BIG + [-b for b in BIG]
KEYS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
DIVISORS = [None, 3, 0.5]


def _near(b: int | float) -> list[str]:
    """Decimal texts at, just inside and just outside the bound (both signs, with fractions)."""
    if isinstance(b, float) and b.is_integer():
        b = int(b)
    if isinstance(b, int):
        f = int(float(b)) if abs(b) <= MAX_DOUBLE else b  # the bound's double, as an int
        whole = [b + d for d in (-2, -1, 0, 1, 2)] + [f, f + 1, f - 1]
        out = [str(w) for w in whole] + [f"{w}.5" if w >= 0 else f"-{abs(w)}.5" for w in whole]
    else:
        e = Decimal(b)
        out = [format(e, "f"), format(e * 2, "f"), format(e / 2, "f")]
    return out + ["0", "1", "-1", "0.5", "-0.5", "7", "123456789012", "-123456789012", "0.000001"]


CANDIDATES = sorted({t for b in BOUNDS for t in _near(b)})


def _cases():
    for t, key, b, mo in itertools.product(["number", "integer"], KEYS, BOUNDS, DIVISORS):
        schema = {"type": t, key: b}
        if mo is not None:
            schema["multipleOf"] = mo
        yield schema


CASES = list(_cases())


@pytest.mark.parametrize("schema", CASES, ids=lambda s: json.dumps(s)[:70])
def test_extreme_bounds_are_sound_and_exact(schema):
    try:
        regex = re.compile(schema_regex(schema))
    except ConstraintError as err:  # multipleOf a fraction is generated within +-2**52 only
        assert err.keyword == "multipleOf" and isinstance(schema["multipleOf"], float), err
        assert abs(schema[_key(schema)]) > 2**52, err
        return
    validator = jsonschema.Draft202012Validator(schema)
    bound = schema[_key(schema)]
    for text in CANDIDATES:
        accepted = regex.fullmatch(text) is not None
        valid = _valid(validator, text)
        assert not accepted or valid, f"{text} accepted for {schema}"
        frac = text.partition(".")[2]
        if "multipleOf" in schema or not valid or len(frac) > 15 or text.startswith("-0"):
            continue
        if schema["type"] == "integer" and frac:
            continue  # integers are generated without a fraction
        if _between_doubles(text, bound):
            continue  # past 2**53, values between the bound and the double next to it are left out
        assert accepted, f"{text} is valid for {schema} but rejected"


def _valid(validator, text: str) -> bool:
    try:
        return validator.is_valid(json.loads(text))
    except OverflowError:  # jsonschema's multipleOf on a huge int and a float divisor
        return False


def _between_doubles(text: str, bound: int | float) -> bool:
    """Values past 2**52 next to the bound (within two doubles' spacing, or within the bound's
    17th significant digit), and values past the largest double, which parse to inf as floats:
    bounds there are rounded inward (a restriction, never a relaxation)."""
    value, b = Decimal(text), Decimal(bound)
    if abs(value) < 2**52 or abs(b) < 2**52:
        return False
    if abs(value) > Decimal(MAX_DOUBLE) or abs(b) > Decimal(MAX_DOUBLE):
        return True
    slack = max(2 * Decimal(math.ulp(float(bound))), Decimal(10) ** (b.adjusted() - 16))
    return abs(value - b) <= slack


def _key(schema: dict) -> str:
    return next(k for k in KEYS if k in schema)


@pytest.mark.parametrize("schema", [
    {"type": "number", "maximum": 9007199254740991},  # the Snowplow schema's bound
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9007199254740991},
                                      "x": {"type": "number", "exclusiveMinimum": -1e308, "maximum": 1e308}}},
    {"type": "number", "minimum": 1e-300, "exclusiveMaximum": MAX_DOUBLE},
    {"type": "number", "exclusiveMinimum": MAX_DOUBLE},
], ids=lambda s: json.dumps(s)[:60])
def test_extreme_bounds_compile(vocab, schema):
    grammar = compile_grammar(vocab, "json_schema", schema)
    text = '{"id":9007199254740991,"x":-1.5}' if schema["type"] == "object" else None
    if text is not None:
        assert grammar.matches(text) and not grammar.matches('{"id":9007199254740992,"x":1}')
    elif "maximum" in schema:
        assert grammar.matches("9007199254740991") and not grammar.matches("9007199254740992")


def test_bounds_past_400_digits_name_the_keyword():
    with pytest.raises(ConstraintError) as err:
        schema_to_grammar({"type": "object", "properties": {"n": {"type": "number", "minimum": -10**401}}})
    assert err.value.keyword == "minimum" and "/properties/n" in str(err.value)
