"""Every matcher of one compiled grammar shares llguidance's lazily built lexer, so what one
matcher does must never change what another accepts.

The case is a real one from the bench data: ``Handwritten/string3`` intersects five patterns
inside one string lexeme. Under llguidance's default step fuel, a matcher that accepted its valid
instance without masks after another matcher's first mask ran out of fuel about 70 tokens in, and
the state it was building stayed dead for every later matcher of the grammar."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
from radixlm.constrained import compile_grammar
from radixlm.constrained.testing.walks import compact_json

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench" / "Handwritten" / "Handwritten---string3.json"
VALID = "a1" + "c1d3g3a1b2" * 6 + "a1" * 14 + "t8" * 5
INVALID = "c1d3g3a1b2" * 6 + "a1" * 15 + "t8" * 5  # starts with what a ``not`` pattern forbids


def _accepts(matcher, ids: list[int]) -> bool:
    return all(matcher.accept_token(t) for t in ids) and matcher.is_accepting()


def test_a_mask_of_one_matcher_never_changes_what_another_accepts(vocab) -> None:
    schema = json.loads(SCHEMA.read_text())["schema"]
    assert jsonschema.Draft202012Validator(schema).is_valid(VALID)
    assert not jsonschema.Draft202012Validator(schema).is_valid(INVALID)
    grammar = compile_grammar(vocab, "json_schema", schema)
    ids = vocab.llg.tokenize_str(compact_json(VALID))
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    first = grammar.matcher()
    first.fill_mask(row)
    assert first.accept_token(vocab.byte_tokens[ord('"')])
    first.fill_mask(row)
    assert _accepts(grammar.matcher(), ids)  # without masks: jump-forward splices, ``matches``
    masked = grammar.matcher()
    for t in ids:  # and with them, after that
        masked.fill_mask(row)
        assert row[t >> 5].item() >> (t & 31) & 1, f"token {t} is missing from the mask"
        assert masked.accept_token(t)
    assert masked.is_accepting() and grammar.matches(compact_json(VALID))
    assert not grammar.matches(compact_json(INVALID))  # the patterns still hold
