"""A forced turn of parallel calls cut off by the budget, in every family's layout: the calls that
completed before the cut come back as calls, and the cut one is reported (``CallStream.cut_index``,
the server's ``truncated_tool_call``) once its tool's name was written. In the streamed (JSON)
layouts a call whose markup the budget ended is the cut one even when its arguments closed (the
server's rule: a budget-closed call is reported apart, ``test_budget_honest_routes``).

The turn is real grammar output: random walks under the family's one-call grammar, joined by its
separator, the last call cut in the middle. Layouts whose arguments stream (JSON) announce each call
as its head arrives; the others are parsed at the end, where the cut once lost every call of the
turn (DeepSeek V3.2's DSML, Qwen3-Coder's XML).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS
from radixlm.runtime.chat_formats.tool_formats.scanner import CallStream, accumulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_forced_call_grammars import SCHEMAS, TOOLS, _grammar, _walk_texts, k_seed  # noqa: E402

PARALLEL = sorted(name for name, fmt in FORMATS.items() if fmt.call_separator is not None)


@pytest.fixture(scope="module")
def vocab(tiny_llama):
    from radixlm.constrained import TokenizerVocab
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer(tiny_llama)
    return tok, TokenizerVocab.from_tokenizer(tok)


def _cut_turn(vocab, family: str) -> tuple[str, str]:
    """(the forced turn's text cut in its third call, the same turn's first two calls whole)."""
    fmt = FORMATS[family]
    bodies = _walk_texts(vocab, _grammar(vocab, family, None, 1), seed=k_seed(family) + 3)
    whole = fmt.forced_prefix + bodies[0] + fmt.call_separator + bodies[1]
    third = bodies[2]
    return whole + fmt.call_separator + third[:len(third) // 2], whole + fmt.call_suffix


@pytest.mark.parametrize("family", PARALLEL)
def test_the_calls_before_the_cut_stand(vocab, family):
    fmt = FORMATS[family]
    cut_text, whole = _cut_turn(vocab, family)
    expected = [(c.name, json.loads(c.arguments)) for c in fmt.parse(whole, TOOLS).calls]
    assert len(expected) == 2, whole
    for step in (1, 5, len(cut_text)):
        stream = CallStream(fmt, TOOLS, 0)
        events = [e for i in range(0, len(cut_text), step) for e in stream.feed(cut_text[i:i + step])]
        got = accumulate(events + stream.finish(cut=True))
        assert got.content.strip() == "", (family, got.content)
        cut = stream.cut_index
        kept = [(c.name, json.loads(c.arguments)) for k, c in enumerate(got.calls) if k != cut]
        if fmt.call_head is None:  # parsed at the end: every call the model finished stands
            assert kept == expected, (family, step, cut_text)
        else:  # streamed: the last announced call is the cut one until its markup is finished
            assert kept == expected[:len(kept)] and len(kept) >= 1 and cut == len(kept), (family, step)
        for name, args in kept:
            jsonschema.validate(args, SCHEMAS[name])
        if cut is not None:  # the cut call: announced, last, one of the declared tools
            assert cut == len(got.calls) - 1 and got.calls[cut].name in SCHEMAS


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_a_turn_cut_in_its_first_call_has_no_call(vocab, family):
    fmt = FORMATS[family]
    body = _walk_texts(vocab, _grammar(vocab, family, "search", 1), seed=k_seed(family) + 4)[0]
    stream = CallStream(fmt, TOOLS, 0)
    events = stream.feed(fmt.forced_prefix + body[:len(body) // 3]) + stream.finish(cut=True)
    got = accumulate(events)
    assert got.content.strip() == ""
    assert all(k == stream.cut_index for k in range(len(got.calls)))  # at most the cut call
    if got.calls:
        assert got.calls[0].name == "search"
