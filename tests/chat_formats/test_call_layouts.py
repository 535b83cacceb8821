"""Each family's declared layout is the one source of its parser, streaming heads and grammar.

For every registered format, calls rendered from its :class:`CallLayout` (``render``: the forced
prefix, the bodies joined by the separator, the suffix) parse back to the same calls, fed whole and
in every two-piece chunking alike, the streamed arguments of JSON layouts included, and the
generated part (between prefix and suffix) is accepted by the family's forced grammar; the forced
texts the server writes are the ones the layout declares.
"""

from __future__ import annotations

import json

import pytest
from radixlm.runtime.chat_formats.tool_formats.base import CallLayout
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS
from radixlm.runtime.chat_formats.tool_formats.scanner import CallStream, accumulate
from radixlm.runtime.chat_formats.tools import ToolSpec

NOTE = {"type": "object", "properties": {"title": {"type": "string"}, "count": {"type": "integer"},
                                         "tags": {"type": "array", "items": {"type": "string"}},
                                         "urgent": {"type": "boolean"}},
        "required": ["title", "count"], "additionalProperties": False}
PING = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
TOOLS = [ToolSpec("add_note", "Note", NOTE), ToolSpec("ping", "Ping", PING)]
CALLS = [("add_note", {"title": "buy milk", "count": 2, "tags": ["home", "x y"], "urgent": False}), ("ping", {"n": 7})]
FAMILIES = sorted(FORMATS)


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    from radixlm.constrained import TokenizerVocab
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    return TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama))


def _turn(family: str) -> list[tuple[str, dict]]:
    return CALLS if FORMATS[family].call_separator is not None else CALLS[:1]


def _output(family: str) -> str:
    """The rendered turn, as the model's output: from the forced prefix (after a prompt-side opener)."""
    return FORMATS[family].layout.render(_turn(family), TOOLS)


def _calls(result) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_declares_its_layout_once(family):
    """The forced texts and the markers a format hands the server come from its layout."""
    fmt = FORMATS[family]
    layout = fmt.layout
    assert isinstance(layout, CallLayout), family
    assert (fmt.forced_prefix, fmt.call_suffix, fmt.call_separator) == (
        layout.forced_prefix(), layout.suffix(), layout.separator())
    assert fmt.closer == layout.close and (not layout.open or layout.open in fmt.markers())
    assert (fmt.call_head is None) == (layout.args is not None)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_rendered_turn_parses_back_whole_and_streamed(family):
    """parse == the calls rendered == every two-piece chunking of the stream."""
    fmt, text = FORMATS[family], _output(family)
    whole = fmt.parse(text, TOOLS)
    assert (whole.content.strip(), _calls(whole)) == ("", _turn(family)), (family, text)
    for cut in range(len(text) + 1):
        parser = fmt.stream(TOOLS)
        events = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.finish()
        got = accumulate(events)
        assert (got.content, _calls(got)) == (whole.content, _calls(whole)), (family, cut)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_rendered_call_phase_streams_its_calls(family):
    """The call phase's stream (the layout's heads for JSON arguments, the parser otherwise) reads
    the rendered turn as its calls, fed one character at a time."""
    fmt, text = FORMATS[family], _output(family)
    stream, events = CallStream(fmt, TOOLS, 0), []
    for ch in text:
        events += stream.feed(ch)
    events += stream.finish()
    got = accumulate(events)
    assert _calls(got) == _turn(family), (family, text)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_generated_part_of_a_rendered_turn_is_in_the_grammar(vocab, family):
    """What a forced turn generates (between the prefix and the suffix) is accepted by the family's
    grammar for these tools, one call and (where the family writes several) the parallel turn."""
    from radixlm.constrained import compile_grammar

    fmt = FORMATS[family]
    text = _output(family)
    generated = text[len(fmt.forced_prefix):len(text) - len(fmt.call_suffix)]
    (kind, spec), = fmt.body_constraint(TOOLS, None, len(_turn(family))).items()
    assert compile_grammar(vocab, kind, spec).matches(generated), (family, generated)
    one = fmt.layout.render(CALLS[1:], TOOLS)
    (kind, spec), = fmt.body_constraint(TOOLS, "ping").items()
    assert compile_grammar(vocab, kind, spec).matches(one[len(fmt.forced_prefix):len(one) - len(fmt.call_suffix)])
