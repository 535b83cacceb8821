"""Forced calls in every family's native layout, constrained by the tool's whole JSON schema.

For each registered format: random token walks (an untrained model at temperature 1) under the
forced-call grammar of a tool whose schema carries bounds, string lengths and patterns, an enum,
an array, a nested object through ``$ref`` and optional parameters; every walk, wrapped in the
family's forced prefix and suffix, parses to calls whose arguments validate. With
``parallel_tool_calls`` the grammar admits one to ``max_calls`` calls joined by the family's
separator; without, exactly one.
"""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from radixlm.constrained.testing.walks import random_walk
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS
from radixlm.runtime.chat_formats.tools import ToolSpec

PLACE = {"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                                          "lat": {"type": "number", "minimum": -90, "maximum": 90}},
         "required": ["city"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {
    "query": {"type": "string", "maxLength": 12},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    "mode": {"enum": ["fast", "deep"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "where": {"$ref": "#/$defs/Place"},
    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
    "strict": {"type": "boolean"}},
    "required": ["query", "limit", "where"], "additionalProperties": False, "$defs": {"Place": PLACE}}
PING = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"]}
TOOLS = [ToolSpec("search", "Search", SEARCH), ToolSpec("ping", "Ping", PING)]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
FAMILIES = sorted(FORMATS)
WALKS = 6


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    from radixlm.constrained import TokenizerVocab
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer(tiny_llama)
    return tok, TokenizerVocab.from_tokenizer(tok)


def _grammar(vocab, family: str, name: str | None, max_calls: int):
    from radixlm.constrained import compile_grammar

    constraint = FORMATS[family].body_constraint(TOOLS, name, max_calls)
    (kind, spec), = constraint.items()
    return compile_grammar(vocab[1], kind, spec)


def _walk_texts(vocab, grammar, seed: int) -> list[str]:
    rng, out = random.Random(seed), []
    for _ in range(WALKS):
        got = random_walk(grammar, rng, max_tokens=120)
        assert got is not None
        out.append(vocab[0].decode(got[0]))
    return out


def _calls(family: str, body: str) -> list[tuple[str, dict]]:
    fmt = FORMATS[family]
    text = fmt.forced_prefix + body + fmt.call_suffix
    result = fmt.parse(text, TOOLS)
    assert result.content.strip() == "", (family, text)
    calls = [(c.name, json.loads(c.arguments)) for c in result.calls]
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    return calls


@pytest.mark.parametrize("family", FAMILIES)
def test_a_forced_call_validates_against_the_whole_schema(vocab, family):
    grammar = _grammar(vocab, family, "search", 1)
    for k, body in enumerate(_walk_texts(vocab, grammar, seed=k_seed(family))):
        calls = _calls(family, body)
        assert [name for name, _ in calls] == ["search"], (family, k, body)


@pytest.mark.parametrize("family", FAMILIES)
def test_parallel_calls_are_one_or_more_and_one_without(vocab, family):
    fmt = FORMATS[family]
    one = _grammar(vocab, family, None, 1)
    bodies = _walk_texts(vocab, one, seed=k_seed(family) + 1)
    for body in bodies:
        assert len(_calls(family, body)) == 1
    if fmt.call_separator is None:  # the family writes one call per turn: the grammar stays one call
        assert fmt.body_constraint(TOOLS, None, 4) == fmt.body_constraint(TOOLS, None, 1)
        return
    two = bodies[0] + fmt.call_separator + bodies[1]
    three = fmt.call_separator.join(bodies[:3])
    several = _grammar(vocab, family, None, 3)
    assert several.matches(bodies[0]) and several.matches(two) and several.matches(three)
    assert not several.matches(fmt.call_separator.join(bodies[:4]))  # at most max_calls
    assert not one.matches(two)
    assert len(_calls(family, two)) == 2 and len(_calls(family, three)) == 3
    for body in _walk_texts(vocab, several, seed=k_seed(family) + 2):
        assert 1 <= len(_calls(family, body)) <= 3


def k_seed(family: str) -> int:
    """A fixed seed per family (the walks are the same on every run)."""
    return sum(map(ord, family))
