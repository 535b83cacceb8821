"""Functionary v3.2's own pieces: the grammar of a turn whose first recipient line the model already
wrote (``auto``: a call continues after ``NAME\\n``), and the parse of outputs that start inside the
prompt's ``>>>``."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained.testing.walks import random_walk
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tool_call_cases import TOOLS  # noqa: E402

FMT = FORMATS["functionary_v32"]
SCHEMAS = {t.name: t.parameters for t in TOOLS}


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    from radixlm.constrained import TokenizerVocab
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer(tiny_llama)
    return tok, TokenizerVocab.from_tokenizer(tok)


@pytest.mark.parametrize("max_calls", [1, 3])
def test_the_rest_of_a_named_call_is_its_arguments_then_more_calls(vocab, max_calls):
    from radixlm.constrained import compile_grammar

    (kind, spec), = FMT.rest_constraint(TOOLS, "get_time", max_calls).items()
    grammar = compile_grammar(vocab[1], kind, spec)
    rng = random.Random(49)
    for _ in range(4):
        got = random_walk(grammar, rng, max_tokens=120)
        assert got is not None
        text = "get_time\n" + vocab[0].decode(got[0])
        result = FMT.parse(text, TOOLS)
        assert result.content == "" and 1 <= len(result.calls) <= max_calls, text
        assert result.calls[0].name == "get_time"
        for call in result.calls:
            jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_a_recipient_line_names_a_declared_tool_or_nothing():
    assert FMT.header_call("get_time", TOOLS) == "get_time"
    assert FMT.header_call("all", TOOLS) is None
    assert FMT.header_call("get_date", TOOLS) is None


@pytest.mark.parametrize(("output", "content", "names"), [
    ("all\nHi >>> there", "Hi >>> there", []),  # '>>>' not followed by a call is the user's text
    ("all", "", []),
    ("", "", []),
    ("Plain answer", "Plain answer", []),
    ('get_time\n{"zone": "UTC"}\n>>>all\nDone', "\nDone", ["get_time"]),
])
def test_outputs_after_the_prompt_opener(output, content, names):
    for step in (1, 2, len(output) or 1):
        parser = FMT.stream(TOOLS)
        events = [e for i in range(0, len(output), step) for e in parser.feed(output[i:i + step])] + parser.finish()
        result = parser.result(events)
        assert (result.content, [c.name for c in result.calls]) == (content, names), step
