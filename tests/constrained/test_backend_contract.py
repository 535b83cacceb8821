"""``--grammar-backend radixlm|llguidance|xgrammar``: the same matcher contract from every core.

Each case runs on the three cores (xgrammar only when installed): one valid and one invalid text
per constraint kind, token by token; masks checked against ``accept_token`` for every id of a small
byte-level vocabulary; rollback, copy, EOS and forced text; and through ``GrammarBackend``: futures,
the wall-time budget of a compile that hangs, an engine thread that never waits, and bad names.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import threading
from types import SimpleNamespace

import pytest
import torch
from radixlm.constrained import ConstraintError, GrammarBackend, TokenizerVocab, adapters, compile_grammar
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.testing.walks import allowed_tokens

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

_XGRAMMAR = pytest.param("xgrammar", marks=pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None, reason="xgrammar is not installed (pip install 'radixlm[xgrammar]'): its adapter is not tested"))
CORES = ["radixlm", "llguidance", _XGRAMMAR]
# every byte, a few multi-byte tokens (so tokens cross lexeme boundaries), EOS, two specials
_MULTI = [b'{"', b'":', b'",', b'"}', b"true", b"ab", b"12", b"},{", b" +"]
EOS = 256 + len(_MULTI)

CASES = [  # kind, spec, a valid text, an invalid text
    ("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
                     "required": ["a"], "additionalProperties": False}, '{"a":12,"b":true}', '{"b":true}'),
    ("json_schema", {"type": "array", "items": {"type": "string", "maxLength": 3}}, '["ab","x"]', '["abcd"]'),
    ("regex", r"(ab)+c?", "ababc", "abac"),
    ("ebnf", 'root ::= expr\nexpr ::= term (" +" term)*\nterm ::= [0-9]+', "1 +12", "1 + +2"),
    ("ebnf", 'start: "(" start ")" | "x"', "((x))", "((x)"),
    ("choices", ["ab", 'a"b', "é"], 'a"b', "abc"),
    ("json_object", None, '{"k":[1,{"z":null}]}', "[1]"),
]


@pytest.fixture(scope="module")
def vocab():
    table = [bytes([b]) for b in range(256)] + _MULTI + [None, None, None]
    return TokenizerVocab.from_token_bytes(table, [EOS], vocab_size=len(table) + 20)


def compile_with(core: str, vocab: TokenizerVocab, kind: str, spec, ws: str | None = None):
    """A grammar from ``core`` (synchronously, in this thread)."""
    if core == "radixlm":
        return compile_grammar(vocab, kind, spec, whitespace_pattern=ws)
    return _adapter(core).compile_request(vocab, CompileRequest(kind, spec, ws))


def _adapter(core: str):
    return importlib.import_module(adapters.adapter_compile_fn(core).split(":")[0])


def _walk(matcher, vocab, text: str) -> bool:
    """Accept ``text`` (greedy longest tokens) then EOS; every step's mask must allow the token."""
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    for t in vocab.greedy_encode(text.encode()) + [EOS]:
        allowed = set(allowed_tokens(matcher, row))
        ok = matcher.accept_token(t)
        assert ok == (t in allowed), f"token {t}: mask says {t in allowed}, accept_token says {ok}"
        if not ok:
            return False
    return matcher.is_terminated()


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("kind, spec, good, bad", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_valid_accepted_invalid_rejected(core, vocab, kind, spec, good, bad):
    grammar = compile_with(core, vocab, kind, spec)
    assert grammar.kind == kind and grammar.vocab is vocab
    assert _walk(grammar.matcher(), vocab, good)
    assert not _walk(grammar.matcher(), vocab, bad)
    assert grammar.validate_output(good) == [] and grammar.validate_output(bad)
    assert grammar.matches(good) and not grammar.matches(bad)


@pytest.mark.parametrize("core", CORES)
def test_mask_exact_on_every_token(core, vocab):
    """At a few states, the mask bit of every id equals whether ``accept_token`` takes it."""
    grammar = compile_with(core, vocab, *CASES[0][:2])
    m = grammar.matcher()
    row = torch.full((vocab.mask_words,), -1, dtype=torch.int32)  # garbage that must be overwritten
    for prefix_token in vocab.greedy_encode(b'{"a":1') + [None]:
        allowed = set(allowed_tokens(m, row))
        assert all(t < len(vocab.token_bytes) and vocab.token_bytes[t] is not None or t == EOS for t in allowed)
        for t in range(vocab.vocab_size):
            probe = m.copy()
            assert probe.accept_token(t) == (t in allowed), f"token {t} after {m.num_accepted} tokens"
        if prefix_token is not None:
            assert m.accept_token(prefix_token)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("row", [
    lambda n: torch.zeros(n, dtype=torch.int64),  # not int32
    lambda n: torch.zeros(n + 1, dtype=torch.int32),  # not one row of the vocabulary's words
    lambda n: torch.zeros(2 * n, dtype=torch.int32)[::2],  # not contiguous
    lambda n: torch.zeros(n, dtype=torch.int32, device="meta"),  # not in CPU memory
], ids=["int64", "size", "strided", "meta"])
def test_fill_mask_refuses_a_row_it_cannot_write_into(core, vocab, row):
    """Every core writes the mask by pointer, so a row of another layout is a ``ValueError``
    before anything is written (radixlm: also with its runtime checks, a unique array here)."""
    spec = CASES[0][1] if core != "radixlm" else {  # the peers do not take ``uniqueItems``
        "type": "object", "properties": {"t": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}},
        "required": ["t"], "additionalProperties": False}
    matcher = compile_with(core, vocab, "json_schema", spec).matcher()
    with pytest.raises(ValueError, match=f"contiguous CPU int32 tensor of {vocab.mask_words} elements"):
        matcher.fill_mask(row(vocab.mask_words))
    good = torch.zeros(vocab.mask_words, dtype=torch.int32)
    matcher.fill_mask(good)
    assert allowed_tokens(matcher, good) == [ord("{"), 256]  # `{` and `{"`


@pytest.mark.parametrize("core", CORES)
def test_cursor_rules(core, vocab):
    grammar = compile_with(core, vocab, *CASES[0][:2])
    m = grammar.matcher()
    # every backend writes the members in schema order (radixlm's default json_key_order)
    assert m.forced_continuation() == '{"a":'
    ids = vocab.greedy_encode(b'{"a":12')
    assert all(m.accept_token(t) for t in ids) and m.num_accepted == len(ids)
    assert not m.is_accepting() and not m.is_terminated()  # more digits, ',"b":…' or '}' may follow
    assert not m.accept_token(ord("x")) and not m.accept_token(EOS) and m.num_accepted == len(ids)
    fork = m.copy()
    assert fork.accept_token(ord("}")) and fork.is_accepting() and fork.is_terminated()  # only EOS now
    assert fork.accept_token(EOS) and fork.is_terminated() and not fork.accept_token(ord("}"))
    row = torch.full((vocab.mask_words,), -1, dtype=torch.int32)
    fork.fill_mask(row)
    assert not row.any()  # nothing after EOS
    assert not m.is_accepting() and m.num_accepted == len(ids)  # the fork is independent
    fork.rollback(2)  # EOS and "}"
    assert fork.num_accepted == len(ids) and not fork.is_accepting()
    assert fork.accept_token(ord(",")) and fork.accept_token(ord('"')) and fork.forced_continuation() == 'b":'
    with pytest.raises(ValueError):
        m.rollback(len(ids) + 1)
    with pytest.raises(ValueError):
        m.fill_mask(torch.zeros(vocab.mask_words + 1, dtype=torch.int32))
    done = compile_with(core, vocab, "regex", "ab").matcher()
    assert done.accept_token(ord("a")) and done.accept_token(ord("b")) and done.is_terminated()


@pytest.mark.parametrize("core", CORES)
def test_whitespace_pattern_allows_spaces(core, vocab):
    grammar = compile_with(core, vocab, "json_schema", CASES[0][1], ws=r"[ ]?")
    assert _walk(grammar.matcher(), vocab, '{"a": 1, "b": true}')


@pytest.mark.parametrize("core", CORES)
def test_bad_specs_are_constraint_errors(core, vocab):
    for kind, spec in [("regex", ""), ("ebnf", "root ::= ("), ("choices", []), ("json_schema", 3)]:
        with pytest.raises(ConstraintError):
            compile_with(core, vocab, kind, spec)


def _params(kind: str, spec) -> SimpleNamespace:
    return SimpleNamespace(constraint_kind=kind, **{kind: spec}, whitespace_pattern=None, strict=True,
                           json_key_order="schema")


@pytest.mark.parametrize("core", ["llguidance", _XGRAMMAR])
def test_backend_compiles_in_threads_and_caches(core, vocab):
    backend = GrammarBackend(vocab, core=core, num_workers=1)
    try:
        assert backend.core == core and backend.pool.worker_pids() == []  # threads, no processes
        futures = [backend.submit(_params("regex", "(ab)+")) for _ in range(2)]
        grammars = [f.result(timeout=30) for f in futures]
        assert grammars[0] is grammars[1] and grammars[0].compile_s is not None
        assert backend.stats["hits"] == 1 and _walk(grammars[0].matcher(), vocab, "abab")
        with pytest.raises(ConstraintError):
            backend.submit(_params("json_schema", {"type": "nonsense"})).result(timeout=30)
    finally:
        backend.shutdown()


@pytest.mark.parametrize("core", ["llguidance", _XGRAMMAR])
def test_backend_honours_compile_timeout(core, vocab, monkeypatch):
    release, finished = threading.Event(), threading.Event()

    def hang(vocab, req):  # a compile that hangs until the test releases it
        release.wait(30)
        finished.set()

    monkeypatch.setattr(_adapter(core), "compile_request", hang)
    backend = GrammarBackend(vocab, core=core, num_workers=1, compile_timeout_s=0.2)
    try:
        future = backend.submit(_params("json_schema", {"type": "object"}))
        assert not finished.is_set()  # the engine thread never waits for a compile
        with pytest.raises(ConstraintError, match="exceeded the 0.2 s budget"):
            future.result(timeout=30)
        assert not finished.is_set() and backend.stats["timeouts"] == 1  # the budget ended it, not the compile
    finally:
        release.set()
        backend.shutdown()


def test_unknown_or_missing_backend(vocab, monkeypatch):
    with pytest.raises(ValueError, match="unknown grammar backend 'outlines'"):
        GrammarBackend(vocab, core="outlines")
    monkeypatch.setitem(adapters._ADAPTERS, "xgrammar", ("radixlm.constrained.adapters.not_there", "radixlm[xgrammar]"))
    with pytest.raises(ValueError, match=r"pip install 'radixlm\[xgrammar\]'"):
        GrammarBackend(vocab, core="xgrammar")


def test_llguidance_lark_hands_schemas_to_llguidance():
    from radixlm.constrained.adapters.llguidance_core import lark_of

    lark = lark_of(CompileRequest("json_schema", {"type": "integer"}, None, strict=False))
    assert lark.startswith("start: %json ")
    options = json.loads(lark.removeprefix("start: %json "))["x-guidance"]
    assert options == {"whitespace_flexible": False, "lenient": True}


def test_server_flag_lists_every_backend():
    from radixlm.constrained.adapters import CORES
    from radixlm.runtime.server_args import GRAMMAR_BACKENDS

    assert GRAMMAR_BACKENDS == CORES
