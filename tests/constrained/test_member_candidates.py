"""How the runtime member check feeds and files its candidates (``constrained/member_tokens.py``,
``member_mask.py``): the per-vocabulary lookups, the tokens a shared entry must feed whole
(``live``), feeding by closing quote and tail inside a string, the entries of objects that take no
extra key, and the states filed at compile time. Each is checked against ``UniqueTracker.feed``
or ``accept_token`` on every token of a vocabulary made to exercise it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from radixlm.constrained import compile_grammar
from radixlm.constrained.checks.reader import G_AFTER, G_INKEY, G_KEY, G_STR, G_VAL
from radixlm.constrained.masks import member_memo
from radixlm.constrained.masks.member_memo import FromState, memo_for, memo_key, refusals
from radixlm.constrained.masks.refusable_tokens import UNSPLIT, MemberTokens, QuoteSplit, close_of
from radixlm.constrained.vocab import TokenizerVocab

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

INT, STR = {"type": "integer"}, {"type": "string"}
KEYS = ["name", "nick", "nickname", "nice", "zeta"]
CLOSED = {"type": "object", "properties": {k: INT for k in KEYS} | {"s": STR}, "additionalProperties": False}
OPEN = {"type": "object", "properties": {"name": INT, "s": STR}, "additionalProperties": INT}
# single bytes, plain runs before a closing quote with shared tails, escapes before a quote, key
# pieces, and tokens that close a key and write a whole second one (``live``) or only its start
PIECES = [b'x",', b'yy",', b'ab"}', b'q"}', b'",', b'"}', b'\\"",', b'\\\\",', b'a\\"x",', b'"', b'",\n',
          b'ni', b'nick', b'ck', b'ckname', b'ckname"', b'ck"', b'ck":', b'me":', b'ce"', b'c', b'ame"',
          b'":1,"zq"', b'":1,"name"', b'":1,"z', b'":"a",', b'"zq', b'zq":1,"zq"', b'e":1}', b'":1}']


@pytest.fixture(scope="module")
def vocab() -> TokenizerVocab:
    alphabet = b'{}[],:"\\ 0123456789abcdefghijklmnopqrstuvwxyz\n'
    tokens = [bytes([c]) for c in alphabet] + PIECES
    return TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])


@pytest.fixture(autouse=True)
def check_every_object(monkeypatch):
    """Small objects are checked at runtime too (by default they keep any-order rules)."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)


def test_lookups_by_bytes():
    files = MemberTokens((b"ab", b"abc", b"abd", b"b", b"a", b"ab", b"\xff", b"\xff\xff", b"\xffa", None))
    assert sorted(files.starting_with(b"ab")) == [0, 1, 2, 5]
    assert sorted(files.starting_with(b"ab", longer=True)) == [1, 2]  # the two spelled "ab" left out
    assert sorted(files.starting_with(b"\xff")) == [6, 7, 8]  # no byte above 0xff: to the end
    assert files.starting_with(b"\xff\xff", longer=True) == ()
    assert sorted(files.prefixes_of(b"abcz")) == [0, 1, 4, 5]
    assert files.prefixes_of(b"") == ()


def test_lookups_equal_a_scan_of_the_table_and_files_are_arrays():
    """The sorted ids (an int32 array, no dict of Python ints) answer as a scan of every token does,
    on a random table with duplicates, empty slots and bytes up to 0xff."""
    rng = np.random.default_rng(7)
    alphabet = b'ab"\xff,'
    table = [bytes(rng.choice(list(alphabet), size=rng.integers(1, 5))) if rng.random() > 0.05 else None
             for _ in range(3000)]
    files = MemberTokens(tuple(table))
    assert files._sorted[1].dtype == np.int32 and "_by_bytes" not in dir(files)
    assert all(isinstance(a, np.ndarray) for a in (files.outside, files.after_quote, files.live, files.quoted))
    for probe in [bytes(rng.choice(list(alphabet), size=rng.integers(0, 6))) for _ in range(300)]:
        prefixes = [t for t, b in enumerate(table) if b and probe.startswith(b)]
        starting = [t for t, b in enumerate(table) if b is not None and b.startswith(probe)]
        longer = [t for t in starting if len(table[t]) > len(probe)]
        assert sorted(files.prefixes_of(probe)) == prefixes
        assert sorted(files.starting_with(probe)) == starting
        assert sorted(files.starting_with(probe, longer=True)) == longer


def test_live_tokens_are_those_that_can_write_a_later_key():
    files = MemberTokens((b'":1,"zq"', b'","","', b'":"a",', b'"""', b'":""', b'":1,"z', b',""', b'x'))
    assert files.live.tolist() == [0, 1, 6]  # a "," with two quotes after it


@pytest.mark.parametrize("schema,text", [
    (OPEN, '{"s":"ab\\"c","zq":1,"name":2,"zr":3,"s2":4}'),
    ({**OPEN, "properties": {'a"b': INT, "n\\m": INT, "name": INT}}, '{"a\\"b":1,"zq":2,"n\\\\m":3,"name":4}'),
])
def test_masks_agree_through_escaped_values_and_names(vocab, schema, text):
    """Masks equal ``accept_token`` at every prefix, through string values with escapes and
    through named keys spelled with escapes (a backslash token may lead only to a key written
    already)."""
    member_memo.memos.clear()
    _mask_agrees(compile_grammar(vocab, "json_schema", schema, key_order="any"), text)


def _walk_states(grammar, texts: list[str]):
    """Every tracker state along ``texts`` (each fed a byte at a time)."""
    tracker = grammar.unique_tracker
    for text in texts:
        state = tracker.initial
        for b in text.encode():
            state = tracker.feed(state, bytes([b]))
            assert state is not None, text
            yield state


@pytest.mark.parametrize("schema,texts", [
    (OPEN, ['{"s":"ab\\"c","zq":1,"name":2,"zr":3}', '{"zqq":1,"zq":2}']),
    (CLOSED, ['{"nick":1,"s":"xy\\"zw","nickname":2,"nice":3}']),
    # extra keys the grammar spells but, once one is written, only "name" may come: a token that
    # leaves a key open is refused when the key can no longer become "name"
    ({**OPEN, "properties": {"name": INT, "nick": INT, 'a"b': INT}, "required": ["name"], "maxProperties": 2},
     ['{"zq":1,"name":2}', '{"a\\"b":1,"name":2}', '{"nick":1,"name":2}']),
])
def test_feeding_by_tail_equals_feeding_whole(vocab, schema, texts):
    """Inside a string value or a key that completes as a fresh extra one, and past the quote
    that opens one, ``refusals`` feeds a token from its closing quote, once per distinct tail;
    its verdicts equal feeding each token whole, for every token, in a batch of the whole
    vocabulary and one token at a time."""
    grammar = compile_grammar(vocab, "json_schema", schema, key_order="any")
    tracker, table = grammar.unique_tracker, vocab.token_bytes
    every = np.arange(len(table), dtype=np.int64)
    split = opened = 0
    for state in _walk_states(grammar, texts):
        fed = np.array([tracker.feed(state, data or b"", lengths=False) is None for data in table])
        batch = refusals(tracker, vocab, state, every)
        assert (batch == fed).all(), (state, [table[t] for t in np.flatnonzero(batch != fed)])
        for t in range(len(table)):
            one = refusals(tracker, vocab, state, every[t:t + 1])
            assert one[0] == fed[t], (state, table[t])
        split += state[4] in (0, -1) and state[1] in (G_STR, G_INKEY)
        opened += state[1] in (G_VAL, G_KEY, G_AFTER)
    assert split >= 5 and opened >= 5  # both paths ran: inside strings, and past an opening quote


@pytest.mark.parametrize("data,escaped,at", [
    (b'ab",', False, 2), (b'\\",', False, -1), (b'\\"x",', False, 3), (b'\\\\",', False, 2),
    (b'",', True, -1), (b'"",', True, 1), (b'abc', False, -1), (b'\\', False, -1), (b'"', False, 0),
])
def test_the_first_unescaped_quote(data, escaped, at):
    assert close_of(data, escaped) == at


def test_the_quote_split_leaves_unicode_escapes_whole():
    tokens = (b'ab",', b'c",', b'\\u0022",', b'u00"', b'x\\"y"}', b'plain', b'"', b'\\u00e9')
    split = QuoteSplit(tokens)
    at = [[split.reading[e].get(t, (-1,))[0] for t in range(len(tokens))] for e in (0, 1)]
    assert at[0] == [2, 1, UNSPLIT, 3, 4, -1, 0, -1]
    # after a backslash the first byte is escaped (an escaped backslash is plain), and an
    # escaped "u" starts a \\u escape
    assert at[1] == [2, 1, 6, UNSPLIT, 4, -1, -1, -1]
    assert [close_of(data, False) for data in tokens] == at[0]


def _mask_agrees(grammar, text: str) -> None:
    """At every prefix of ``text`` (one byte per token): each token's mask bit equals whether
    ``accept_token`` takes it, on the state's first visit (no memo entry), its second (the entry
    built from the first's verdicts) and a third (the entry alone)."""
    m = grammar.matcher()
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    for b in text.encode() + b"\x00":
        accepted = [m.copy().accept_token(t) for t in range(grammar.vocab.vocab_size)]
        for _ in range(3):
            m.fill_mask(row)
            words = row.numpy().view(np.uint32)
            for t in range(grammar.vocab.vocab_size):
                bit = bool((words[t >> 5] >> (t & 31)) & 1)
                assert bit == accepted[t], (text, m.accepted_bytes(), grammar.vocab.token_bytes[t])
        if b:
            assert m.accept_token(grammar.vocab.byte_tokens[b])


@pytest.mark.parametrize("text", ['{"nick":1,"nickname":2,"nice":3,"name":4}', '{"nice":1,"ni', '{"zeta":1,"s":"q"}'])
def test_closed_objects_clear_keys_already_written(vocab, text):
    """An object that takes no extra key (``_dead_named``): after "nick", the tokens that lead
    only to it again are cleared; those that can still become "nickname" or "nice" are kept."""
    member_memo.memos.clear()
    _mask_agrees(compile_grammar(vocab, "json_schema", CLOSED, key_order="any"), text)


def test_extra_keys_past_max_properties(vocab):
    """Extra keys the grammar spells but ``maxProperties`` has used up: only named keys go on."""
    schema = {**OPEN, "maxProperties": 2, "properties": {"name": INT, "nick": INT}}
    _mask_agrees(compile_grammar(vocab, "json_schema", schema, key_order="any"), '{"zq":1,"nick":2}')


def test_first_states_are_filed_at_compile_time(vocab):
    """The compile's warm-up (``warm_start``): the initial state's entry exists whole before any
    request's mask, every candidate the core allows there settled; masks from it equal masks
    computed with an empty memo."""
    member_memo.memos.clear()
    grammar = compile_grammar(vocab, "json_schema", CLOSED, key_order="any")
    tracker = grammar.unique_tracker
    entry = memo_for(tracker).get(memo_key(tracker, tracker.initial)[0])
    assert isinstance(entry, member_memo.MemoEntry)
    _, word, pending, live, _ = entry.view
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    core = grammar.matcher()._core
    core.unsafe_compute_mask_ptr(row.data_ptr(), vocab.mask_words * 4)
    assert not (row.numpy().view(np.uint32)[word] & pending).any() and live is None  # nothing to feed
    grammar.matcher().fill_mask(row)
    prepared = row.clone()
    member_memo.memos.clear()
    grammar.matcher().fill_mask(row)
    assert torch.equal(prepared, row)


# tokens that close, add and open members in one go: a step's candidates are narrowed to what the
# open objects may refuse (``member_mask.asks``), so each of these must still be read where a
# ``}``, a ``,`` or a key's name may be refused
MEMBER_PIECES = [b'"}', b'}}', b'"},', b'},{"', b'":{}', b'{}', b' {}', b'1}', b'1,', b',"', b'":"","',
                 b'":""}', b'a":1}', b'a":1,', b'":1}}', b'"]}', b'1]}', b'":[{}]', b'":{"a":1}}',
                 b'c":1}', b'":1,"b', b',"\\', b'\\u0061', b'zq":1,', b'"b', b',"b', b',"a":', b'1,"b":', b'","a":', b'"a":', b'":{"', b'":[{"', b'o":{"', b'o":{}', b'":{"a"', b'o":{"x', b'":{"x']
OBJ_A = {"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a"]}


@pytest.fixture(scope="module")
def member_vocab() -> TokenizerVocab:
    alphabet = b'{}[],:"\\ 0123456789abcdefghijklmnopqrstuvwxyz\n'
    tokens = [bytes([c]) for c in alphabet] + PIECES + MEMBER_PIECES
    return TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])


@pytest.mark.parametrize("schema,text", [
    # required members missing: "}" refused until they are written, in an object and nested ones
    ({"type": "object", "properties": {"a": INT, "b": INT, "s": STR, "o": OBJ_A}, "required": ["a", "b"]},
     '{"s":"","o":{"b":1,"a":1},"b":2,"a":1}'),
    # a member that requires another (dependentRequired): completing "a" makes "}" wait for "c"
    ({"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "dependentRequired": {"a": ["c"]}},
     '{"b":1,"a":1,"c":1}'),
    # maxProperties with extra keys: "," refused once it is reached
    ({**OPEN, "maxProperties": 2}, '{"zq":1,"s":""}'),
    # no extra key: "," refused once every named key is written
    ({"type": "object", "properties": {"a": INT, "b": INT}, "additionalProperties": False}, '{"b":1,"a":1}'),
    # minProperties
    ({**OPEN, "minProperties": 2}, '{"zq":1,"s":"a"}'),
    # a union of objects, and objects with required members inside arrays
    ({"anyOf": [OBJ_A, {"type": "object", "properties": {"c": INT}, "required": ["c"]}]}, '{"c":1,"b":1}'),
    ({"type": "array", "items": OBJ_A}, '[{"a":1},{"b":1,"a":2}]'),
    # extra keys are plain: no backslash can go on an open key unless a named key has one
    (OPEN, '{"zq":1,"s":"\\\\"}'),
    # a named key spelled with an escape
    ({"type": "object", "properties": {"a\\b": INT, "a": INT}, "required": ["a"]}, '{"a\\\\b":1,"a":2}'),
])
def test_narrowed_candidates_keep_every_refusal(member_vocab, schema, text):
    """Masks equal ``accept_token`` at every prefix where what the open objects may refuse
    changes (a ``}``, a ``,``, a key) and tokens do several of those at once."""
    member_memo.memos.clear()
    _mask_agrees(compile_grammar(member_vocab, "json_schema", schema, key_order="any"), text)


@pytest.mark.parametrize("schema,texts", [
    ({"type": "object", "properties": {"a": INT, "b": INT, "s": STR, "o": OBJ_A}, "required": ["a", "b"]},
     ['{"s":"x","o":{"b":1,"a":1},"b":2,"a":1}', '{"a":1,"s":"y","b":2}']),
    ({"type": "object", "properties": {"a": INT, "b": INT, "c": INT}, "additionalProperties": False},
     ['{"b":1,"a":1,"c":2}', '{"c":1,"b":2}']),
    ({**OPEN, "maxProperties": 2, "required": ["s"]}, ['{"zq":1,"s":"a"}', '{"s":"b","name":1}']),
])
def test_verdicts_shared_across_states_equal_feeding(member_vocab, schema, texts):
    """``member_verdicts.FromState.refused`` files verdicts per tracker under each state with its objects'
    keys replaced by what the bytes can ask of them; over every state of several texts (written
    in different orders, so states with different keys share entries), every token's verdict
    equals feeding it."""
    grammar = compile_grammar(member_vocab, "json_schema", schema, key_order="any")
    tracker, shared = grammar.unique_tracker, 0
    for state in _walk_states(grammar, texts):
        for data in member_vocab.token_bytes:
            data = data or b""
            assert FromState(tracker, state).refused(data) == (tracker.feed(state, data, lengths=False) is None), (state, data)
        shared += any(len(f) == 3 and f[0] == "o" and f[2] for f in state[0])
    assert shared >= 10  # states with keys written, which the cache shares


@pytest.mark.parametrize("schema,texts", [
    ({"type": "array", "items": {"type": "object", "properties": {"o": OBJ_A, "b": INT, "l": {"type": "array", "items": OBJ_A}},
                                 "required": ["o"]}},
     ['[{"o":{"a":1},"b":1},{"b":1,"o":{"b":2,"a":1}},{"l":[{"a":1}],"o":{"a":2}}]']),
    ({**OPEN, "properties": {"o": {**OBJ_A, "additionalProperties": False}, "name": INT},
      "additionalProperties": True}, ['{"zq":{"x":1},"o":{"a":1},"zr":{},"name":1}']),
])
def test_keys_closed_without_a_feed_equal_feeding(member_vocab, schema, texts):
    """A key closed with a tail that asks nothing of the open objects (``":{"``, ``":[{"``) is
    decided by the object's ``admit`` and the tail's verdict filed from an earlier state with the
    same value path (``member_verdicts.after_key``): over every state of the texts, with the
    tracker's verdicts kept from state to state, ``refusals`` equals feeding every token."""
    grammar = compile_grammar(member_vocab, "json_schema", schema, key_order="any")
    tracker, table = grammar.unique_tracker, member_vocab.token_bytes
    every = np.arange(len(table), dtype=np.int64)
    for state in _walk_states(grammar, texts):
        fed = np.array([tracker.feed(state, data or b"", lengths=False) is None for data in table])
        batch = refusals(tracker, vocab=member_vocab, state=state, ids=every)
        assert (batch == fed).all(), (state, [table[t] for t in np.flatnonzero(batch != fed)])
