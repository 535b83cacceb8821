"""The runtime member check's memo (``constrained/member_memo.py``): which states share an entry
(open keys that can only become a fresh extra key), and masks from a shared entry that equal
feeding every token, including a token that writes a second whole key, and matchers on several
threads sharing one memo."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
import test_unique_items as shared
import torch
from radixlm.constrained import compile_grammar
from radixlm.constrained import grammar as grammar_module  # the matcher calls the checks through it
from radixlm.constrained.masks import member_memo
from radixlm.constrained.masks.member_memo import FRESH_KEY, REFUSED, memo_key
from radixlm.constrained.masks.members import FirstVisit, Parts, _grown
from radixlm.constrained.masks.refusable_tokens import place
from radixlm.constrained.vocab import TokenizerVocab

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

INT = {"type": "integer"}
EXTRAS = {"type": "object", "properties": {"name": INT, "nick": INT}, "additionalProperties": INT,
          "dependentRequired": {"zz_trigger": ["name"]}}
CLOSED = {"type": "object", "properties": {"name": INT, "nick": INT}, "additionalProperties": False}
SECOND_KEY = b'":1,"zq"'  # closes an open key, writes a value and a whole second key

tiny_vocab = shared.tiny_vocab


@pytest.fixture(autouse=True)
def check_every_object(monkeypatch):
    """Small objects are checked at runtime too (by default they keep any-order rules)."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)


def _state_after(grammar, text: str):
    """The tracker and its state after ``text`` (fed as one chunk of bytes)."""
    tracker = grammar.unique_tracker
    state = tracker.feed(tracker.initial, text.encode())
    assert state is not None, text
    return tracker, state


@pytest.mark.parametrize(("text", "shared_key"), [
    ('{"zq', True),  # no name starts with "zq": only a fresh extra key can come of it
    ('{"a":1,"zq', True),
    ('{"n', False),  # "name", "nick"
    ('{"nam', False),
    ('{"zz', False),  # the dependentRequired trigger "zz_trigger"
    ('{"zq":1,"zq', False),  # a key already written
    ('{"zqa":1,"zq', False),  # a key already written that it could still become
    ('{"zr":1,"zq', True),  # a key already written that it cannot become
    ('{"', False),  # nothing read yet (nothing to leave out)
])
def test_which_open_keys_share_an_entry(tiny_vocab, text, shared_key):
    grammar = compile_grammar(tiny_vocab, "json_schema", EXTRAS, key_order="any")
    tracker, state = _state_after(grammar, text)
    key, is_shared = memo_key(tracker, state)
    assert is_shared is shared_key
    assert (key[3] == FRESH_KEY) is shared_key
    assert key == state or shared_key


def test_no_extra_key_means_no_sharing(tiny_vocab):
    """Where only named keys may come, an open key's bytes decide everything."""
    grammar = compile_grammar(tiny_vocab, "json_schema", CLOSED, key_order="any")
    tracker, state = _state_after(grammar, '{"n')
    assert memo_key(tracker, state) == (state, False)


def test_the_keys_of_one_frame_never_reach_another(tiny_vocab):
    """A frame's names are its object's plus the keys written in it: after a frame that wrote
    ``zqa``, an open ``zq`` in a frame of the same object that did not is a fresh extra key."""
    grammar = compile_grammar(tiny_vocab, "json_schema", {"type": "array", "items": EXTRAS}, key_order="any")
    tracker = grammar.unique_tracker
    assert memo_key(tracker, _state_after(grammar, '[{"zqa":1,"zq')[1])[1] is False
    assert memo_key(tracker, _state_after(grammar, '[{"zqa":1},{"b":1,"zq')[1])[1] is True
    assert memo_key(tracker, _state_after(grammar, '[{"zqa":1},{"b":1,"zqa":2},{"nick":1,"zq')[1])[1] is True
    assert memo_key(tracker, _state_after(grammar, '[{"b":1},{"zqa":1,"zq')[1])[1] is False


def test_fresh_extra_keys_share_one_entry(tiny_vocab):
    grammar = compile_grammar(tiny_vocab, "json_schema", EXTRAS, key_order="any")
    tracker = grammar.unique_tracker
    keys = {memo_key(tracker, _state_after(grammar, t)[1])[0] for t in ('{"zq', '{"zr', '{"qqq', '{"x')}
    assert len(keys) == 1


def _with_token(vocab: TokenizerVocab, data: bytes) -> tuple[TokenizerVocab, int]:
    """``vocab`` with one more token, ``data``; ``(vocab, its id)``."""
    table = tuple(vocab.token_bytes) + (data,)
    grown = TokenizerVocab(token_bytes=table, eos_token_ids=vocab.eos_token_ids,
                           vocab_size=max(vocab.vocab_size, len(table)), byte_tokens=vocab.byte_tokens)
    return grown, len(table) - 1


def _allowed(grammar, text: str, token: int) -> bool:
    """Whether the mask after ``text`` allows ``token``; the mask must agree with ``feed``."""
    m = grammar.matcher()
    for t in grammar.vocab.llg.tokenize_str(text):
        assert m.accept_token(t)
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    m.fill_mask(row)
    bit = bool((row.numpy().view(np.uint32)[token >> 5] >> (token & 31)) & 1)
    assert bit == m.copy().accept_token(token)
    return bit


@pytest.mark.parametrize("order", [("zq", "zr"), ("zr", "zq")])
def test_a_shared_entry_still_refuses_a_repeated_key_within_one_token(tiny_vocab, order):
    """From ``{"zq`` the token ``":1,"zq"`` writes the key "zq" twice (refused); from ``{"zr``
    it writes "zr" then "zq" (kept). Both open keys share one entry: whichever comes first, the
    token is fed on the concrete state every time (``LIVE``), so each mask is right."""
    vocab, token = _with_token(tiny_vocab, SECOND_KEY)
    grammar = compile_grammar(vocab, "json_schema", EXTRAS, key_order="any")
    member_memo.memos.clear()
    for key in order:
        assert _allowed(grammar, '{"' + key, token) is (key != "zq")
    memo = member_memo.memo_for(grammar.unique_tracker)
    assert sum(k[3] == FRESH_KEY for k in memo.entries) == 1


DOCS = ['{"name":1,"nick":2,"zq":3,"zr":4}', '{"zq":1,"name":2,"nick":3}', '{"nick":1,"zz":2,"name":3}']


def test_threads_sharing_one_memo_get_the_masks_of_a_fresh_one(tiny_vocab, monkeypatch):
    """Matchers of one grammar share its tracker's memo, read without a lock. Four threads walk
    the same outputs (whole tokens and byte by byte, through keys the check refuses to repeat)
    with a memo of 3 states (evictions between a ``get`` and its mark) and a tiny switch
    interval; every mask equals the one a single thread computes from a fresh memo."""
    vocab = tiny_vocab
    for data in (b'ame"', b'name":', b'ick"', SECOND_KEY):  # tokens that would repeat a key
        vocab, _ = _with_token(vocab, data)
    grammar = compile_grammar(vocab, "json_schema", EXTRAS, key_order="any")
    tokenize = grammar.vocab.llg.tokenize_str
    paths = [tokenize(d) for d in DOCS] + [[t for c in d for t in tokenize(c)] for d in DOCS]

    def masks(path: list[int]) -> list[torch.Tensor]:
        m, rows = grammar.matcher(), []
        for token in path:
            member_memo.memos.clear()
            rows.append(torch.zeros(vocab.mask_words, dtype=torch.int32))
            m.fill_mask(rows[-1])
            assert m.accept_token(token)
        return rows

    want = [masks(p) for p in paths]
    with monkeypatch.context() as patch:  # the core's masks alone: the check must refuse something
        patch.setattr(grammar_module, "forbid_members", lambda *args: None)
        core = [masks(p) for p in paths]
    assert any(not torch.equal(a, b) for w, c in zip(want, core, strict=True) for a, b in zip(w, c, strict=True))
    monkeypatch.setattr(member_memo, "MEMO_STATES", 3)
    member_memo.memos.clear()
    errors: list[str] = []

    def run(k: int) -> None:
        row = torch.zeros(vocab.mask_words, dtype=torch.int32)
        for rep in range(8):
            n = (k + rep) % len(paths)
            m = grammar.matcher()
            for i, token in enumerate(paths[n]):
                m.fill_mask(row)
                if not torch.equal(row, want[n][i]):
                    errors.append(f"thread {k} path {n} step {i}")
                    return
                m.accept_token(token)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors


def test_a_grown_entry_keeps_its_first_verdicts_when_more_come():
    """A state met a second time files its first visit's verdicts (``member_mask._grown``); a
    later visit that settles a new refusal rebuilds the entry's cut from those statuses, so the
    first visit's refusals must still be there, and its decided tokens no longer pending."""
    ids = np.array([3, 40, 70, 100], dtype=np.int64)
    entry = _grown(FirstVisit(Parts(ids, place(ids), None, [], False), {40: True, 70: False}))

    def cleared() -> set[int]:
        words = np.full(4, 0xFFFFFFFF, dtype=np.uint32)
        cut_word, cut_bit = entry.view[4]
        words[cut_word] &= cut_bit
        return {t for t in range(128) if not (int(words[t >> 5]) >> (t & 31)) & 1}

    assert cleared() == {40}
    assert [bool(p) for p in entry.view[2]] == [True, False, False, True]  # 3 and 100 still to feed
    entry.settle(np.array([3]), np.array([REFUSED], dtype=np.int8))  # 100 refused on a later visit
    assert cleared() == {40, 100}
