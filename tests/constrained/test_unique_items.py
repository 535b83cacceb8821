"""``uniqueItems`` over free scalars, enforced at runtime by the matcher (``unique_items``,
``unique_mask``, located by ``json_schema/unique_paths``): table-driven instances, exhaustive
arrays over values that are equal under other spellings (``"a"``/``"\\u0061"``, ``1``/``1.0``),
masks equal to ``accept_token`` on a real vocabulary (Qwen2's 151,936 tokens, else the 32k test
vocabulary), random walks that validate, rollback/copy, ``validate_tokens``, completions and the
worker-process path."""

from __future__ import annotations

import itertools
import json
import random

import jsonschema
import numpy as np
import pytest
import torch
from radixlm.constrained import (
    CompiledGrammar,
    ConstraintError,
    GrammarBackend,
    TokenizerVocab,
    compile_grammar,
)
from radixlm.constrained.json_schema import schema_to_grammar
from radixlm.constrained.testing.walks import allowed_tokens, compact_json, random_walk
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
NUMBERS = {"type": "array", "items": {"type": "number"}, "uniqueItems": True}
INTEGERS = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
SCALARS = {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}, "uniqueItems": True}
UNTYPED = {"type": "array", "uniqueItems": True}  # any items: containers compared whole
BOUNDED = {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True,
           "minItems": 2, "maxItems": 3}
NESTED = {"type": "array", "items": {"type": "object", "properties": {"tags": STRINGS}, "required": ["tags"],
                                     "additionalProperties": False}}
TREE = {"$defs": {"node": {"type": "object", "additionalProperties": False, "properties": {
    "tags": INTEGERS, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}
EXTRAS = {"type": "object", "properties": {"n": {"type": "integer"}, "t": SCALARS}, "additionalProperties": NUMBERS}
AMBIGUOUS = {"anyOf": [STRINGS, {"type": "array", "items": {"type": "integer"}, "minItems": 2}]}
FIFTY = [f"item {i}" for i in range(50)]

# (schema, text, accepted): a text accepted must be valid; a valid one rejected is a restriction.
CASES = [
    (STRINGS, '[]', True), (STRINGS, '["a","b","ab"]', True), (STRINGS, '["a","a"]', False),
    (STRINGS, '["a","\\u0061"]', False), (STRINGS, '["\\u00e9","é"]', False), (STRINGS, '["a","A",""]', True),
    (STRINGS, '["a\\"b","a\\u0022b"]', False), (STRINGS, '["\\n","\\u000a"]', False), (STRINGS, '["",""]', False),
    (STRINGS, compact_json(FIFTY), True), (STRINGS, compact_json(FIFTY + ["item 7"]), False),
    (NUMBERS, '[1,2,10]', True), (NUMBERS, '[1,1.0]', False), (NUMBERS, '[1,1e0]', False),
    (NUMBERS, '[0.5,5e-1]', False), (NUMBERS, '[-0,0]', False), (NUMBERS, '[10,1,1E1]', False),
    (NUMBERS, '[100000000000000000000,1e20]', False), (NUMBERS, '[12345678901234567891,12345678901234567890]', True),
    (NUMBERS, compact_json([i / 4 for i in range(50)]), True), (NUMBERS, compact_json([i / 4 for i in range(50)] + [2]), False),
    (INTEGERS, '[0,1,2]', True), (INTEGERS, '[3,3]', False), (INTEGERS, '[0,5,0]', False),
    (SCALARS, '[1,"1",true,null,false,0]', True), (SCALARS, '[true,true]', False), (SCALARS, '[null,1,null]', False),
    (SCALARS, '["x",1.5,"x"]', False), (SCALARS, '[false,0,"false"]', True),
    (UNTYPED, '["@some_service","%some_parameter%"]', True), (UNTYPED, '["a","a"]', False),
    (UNTYPED, '[[1],[2]]', True), (UNTYPED, '[[1],[1.0]]', False), (UNTYPED, '[[],[]]', False),
    (UNTYPED, '[["setLogger",["@logger"]],["setDatabase",["@database"]]]', True),
    (UNTYPED, '[1,"1",[1],{"a":1},true,null,[],{},[true],[1.5]]', True), (UNTYPED, '[{},{}]', False),
    (UNTYPED, '[{"a":1,"b":[1]},{"b":[1.0],"a":1}]', False), (UNTYPED, '[{"a":1,"b":2},{"a":1}]', True),
    (UNTYPED, '[{"x":"\\u0061"},{"x":"a"}]', False), (UNTYPED, '[[true],[1]]', True),
    (UNTYPED, '[["]"],["]"]]', False), (UNTYPED, '[["]\\""],["]\\"",1]]', True), (UNTYPED, '[[1],1,[1]]', False),
    (BOUNDED, '["a"]', False), (BOUNDED, '["a","b"]', True), (BOUNDED, '["a","b","a"]', False),
    (BOUNDED, '["a","b","c","d"]', False),
    (NESTED, '[{"tags":["a","b"]},{"tags":["a","b"]}]', True), (NESTED, '[{"tags":["a","a"]}]', False),
    (NESTED, '[{"tags":["x"]},{"tags":["y","z","y"]}]', False),
    (TREE, '{"tags":[1,2],"children":[{"tags":[1,2],"children":[{"tags":[3]}]}]}', True),
    (TREE, '{"tags":[1],"children":[{"children":[{"tags":[3,4,3]}]}]}', False),
    (EXTRAS, '{"n":1,"t":["a",1],"x":[1,2],"y":[1,2]}', True), (EXTRAS, '{"x":[1,1]}', False),
    (EXTRAS, '{"t":[1,"1"],"n":2}', True), (EXTRAS, '{"t":[1,1.0],"n":2}', False),
    (AMBIGUOUS, '["a"]', True), (AMBIGUOUS, '[1,1]', True),
    (AMBIGUOUS, '["a","b"]', False),  # anyOf branches disagree at one path: the one-item restriction
]


@pytest.fixture(scope="module")
def tiny_vocab(tiny_llama):
    return TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama))


@pytest.fixture(scope="module")
def real(checkpoint):
    """(tokenizer, vocab): Qwen2's real vocabulary when llama.cpp's assets are at hand, else the
    32k-token test vocabulary."""
    from llamacpp_assets import fetch_or_reason

    if isinstance(fetch_or_reason(), str):
        tokenizer = Tokenizer(checkpoint("llama", "small"))
    else:
        from radixlm.runtime.testing.llamacpp_fixtures import gguf_tokenizer_dir

        tokenizer = Tokenizer(gguf_tokenizer_dir("qwen2"))
    return tokenizer, TokenizerVocab.from_tokenizer(tokenizer)


def _valid(schema, text: str) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema).is_valid(json.loads(text))


@pytest.mark.parametrize("schema,text,accepted", CASES, ids=[f"{i}:{c[1][:24]}" for i, c in enumerate(CASES)])
def test_instances(tiny_vocab, schema, text, accepted):
    grammar = compile_grammar(tiny_vocab, "json_schema", schema, key_order="any")  # texts in any order
    assert grammar.matches(text) == accepted, text
    assert _valid(schema, text) or not accepted, f"table error: {text} is invalid"
    assert (grammar.unique is None) == (schema is AMBIGUOUS)


@pytest.mark.parametrize("schema,pool", [
    (SCALARS, ['"a"', '"\\u0061"', '"b"', '1', '1.0', '1e0', '10', '0', '-0', 'true', 'false', 'null', '"1"']),
    (INTEGERS, ['0', '1', '10', '-1']),
], ids=["scalars", "integers"])
def test_every_short_array_of_equal_spellings(tiny_vocab, schema, pool):
    """Every array of up to 3 items from ``pool`` (values equal under other spellings, repeats
    included): the grammar accepts exactly the ones ``jsonschema`` calls unique."""
    grammar = compile_grammar(tiny_vocab, "json_schema", schema)
    for n in range(4):
        for items in itertools.product(pool, repeat=n):
            text = "[" + ",".join(items) + "]"
            assert grammar.matches(text) == _valid(schema, text), text


def test_whitespace_patterns(tiny_vocab):
    spaced = compile_grammar(tiny_vocab, "json_schema", STRINGS, whitespace_pattern="[ \n]*")
    assert spaced.unique is not None
    assert spaced.matches('[ "a" ,\n "b" ]') and not spaced.matches('[ "a" , "a" ]')
    unicode_ws = compile_grammar(tiny_vocab, "json_schema", STRINGS, whitespace_pattern=r"\s*")
    assert unicode_ws.unique is None and not unicode_ws.matches('["a","b"]')  # the restriction


def test_regex_consumers_keep_the_restriction():
    """``schema_to_grammar`` without ``unique_runtime`` (tool-call regexes, walks) still caps free
    unique arrays at one item, and raises where that is not enough."""
    assert schema_to_grammar(STRINGS).unique is None
    assert schema_to_grammar(STRINGS, unique_runtime=True).unique is not None
    with pytest.raises(ConstraintError, match="#/uniqueItems"):
        schema_to_grammar(dict(STRINGS, minItems=2))
    with pytest.raises(ConstraintError, match="#/uniqueItems"):  # object items: not checked at runtime
        schema_to_grammar({"type": "array", "items": {"type": "object"}, "uniqueItems": True, "minItems": 2},
                          unique_runtime=True)


def test_ambiguous_positions_fall_back(tiny_vocab):
    """Where the restriction cannot hold (``minItems`` 2) strict mode raises at the keyword;
    lenient mode generates the plain array and reports the keyword."""
    both = {"anyOf": [dict(STRINGS, minItems=2), {"type": "array", "items": {"type": "integer"}, "minItems": 2}]}
    with pytest.raises(ConstraintError, match="#/uniqueItems"):
        compile_grammar(tiny_vocab, "json_schema", both)
    lenient = compile_grammar(tiny_vocab, "json_schema", both, strict=False)
    assert lenient.relaxed == ["#/uniqueItems"] and lenient.unique is None
    assert lenient.matches('["a","a"]') and lenient.validate_output('["a","a"]')


def _prefixes(tokenizer, grammar, texts: list[str], walks: int) -> list[list[int]]:
    out = [tokenizer.encode(t) for t in texts]
    for seed in range(walks):
        walk = random_walk(grammar, random.Random(seed), max_tokens=30)
        if walk is not None:
            out.append(walk[0])
    return out


@pytest.mark.parametrize("schema,texts", [
    (STRINGS, ['["alpha","alpha beta","é中","é中文","a\\"b","a\\"bc","\\u0041","A1"]']),
    (SCALARS, ['[12,"12",true,-3.5,null,"x",1e5,false,120,-3.55,"xy",1e50]']),
    (NESTED, ['[{"tags":["x","y"]},{"tags":["y","x","xz"]}]']),
    (UNTYPED, ['[["a",[1]],["a",[1,2]],{"k":[]},{"k":{}},[[]],[],"]",{"k":"]}"},{"k":"]"}]']),
], ids=["strings", "scalars", "nested", "untyped"])
def test_masks_equal_accept_token(real, schema, texts):
    """At every prefix of the texts (items that begin like earlier ones) and sampled prefixes of
    walks, every token the core allows and the check removes is rejected by ``accept_token``,
    and every allowed token is accepted (past 2,000 of them: those holding a quote, and a sample)."""
    tokenizer, vocab = real
    grammar = compile_grammar(vocab, "json_schema", schema)
    plain = CompiledGrammar(vocab, grammar.lark, "json_schema", schema)  # the same grammar, unchecked
    rng = random.Random(0)
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    quoted = np.zeros(vocab.mask_words * 32, dtype=bool)
    quoted[[t for t, b in enumerate(vocab.token_bytes) if b and any(c in b for c in b'"]}')]] = True
    checked = 0
    paths = _prefixes(tokenizer, grammar, texts, walks=2)
    for i, ids in enumerate(paths):
        m, p = grammar.matcher(), plain.matcher()
        for n in range(len(ids) + 1):
            if n and not (m.accept_token(ids[n - 1]) and p.accept_token(ids[n - 1])):
                raise AssertionError(f"prefix {n} of {ids} rejected")
            if i >= len(texts) and rng.random() > 0.2:  # the texts at every prefix, walks sampled
                continue
            assert_masks_agree(m, p, row, rng, quoted)
            checked += 1
    assert checked >= 5


def assert_masks_agree(m, p, row, rng, wide) -> None:
    """At one prefix: the checked matcher ``m`` allows a subset of what the unchecked ``p`` (the
    same grammar) allows, every token it removes is rejected by ``accept_token`` and every one it
    keeps is accepted (past 2,000 of them: those in ``wide``, and a sample)."""
    vocab = m.grammar.vocab
    ours, core = _bits(m, row), _bits(p, row)
    assert not (ours & ~core).any()
    for t in np.nonzero(core & ~ours)[0].tolist():
        assert not m.copy().accept_token(t), f"token {vocab.token_bytes[t]!r} removed but accepted"
    kept = np.nonzero(ours)[0].tolist()
    if len(kept) > 2000:
        kept = np.nonzero(ours & wide)[0].tolist() + rng.sample(kept, 100)
    for t in kept:
        assert m.copy().accept_token(t), f"token {vocab.token_bytes[t]!r} allowed but rejected"


WALKED = [STRINGS, NUMBERS, INTEGERS, SCALARS, UNTYPED, BOUNDED, NESTED, TREE, EXTRAS]


@pytest.fixture(scope="module")
def toy_vocab():
    """Single bytes of a small alphabet and a few tokens of several items, so that uniform walks
    write duplicates often."""
    alphabet = b'[]{},:"abcdeghilnrstufxy01-.E+\\ '
    tokens = [bytes([c]) for c in alphabet] + [b'","', b'"a"', b'1,', b'true', b'"a","a"', b',0', b'],[']
    return TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])


@pytest.mark.parametrize("schema", WALKED, ids=["strings", "numbers", "integers", "scalars", "untyped", "bounded",
                                                "nested", "tree", "extras"])
def test_random_walks_validate(toy_vocab, schema):
    """Uniform walks over a small alphabet: without the check some write duplicates, with it every
    output validates (``random_walk`` also asserts that every masked token is accepted)."""
    grammar = compile_grammar(toy_vocab, "json_schema", schema)
    plain = CompiledGrammar(toy_vocab, grammar.lark, "json_schema", schema)
    texts = {}
    for name, g in (("checked", grammar), ("plain", plain)):
        walks = [random_walk(g, random.Random(seed), max_tokens=40) for seed in range(20)]
        texts[name] = [b"".join(toy_vocab.token_bytes[t] for t in w[0]).decode() for w in walks if w is not None]
        if name == "checked":
            for walk in walks[:4]:  # every token, at every step: mask bit == accept_token
                _exact_along(grammar, walk[0])
    assert len(texts["checked"]) == 20 and all(_valid(schema, t) for t in texts["checked"])
    assert not all(_valid(schema, t) for t in texts["plain"])  # the check is what keeps them unique


def _exact_along(grammar, ids: list[int]) -> None:
    vocab, m = grammar.vocab, grammar.matcher()
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    for t in ids + [None]:
        allowed = set(allowed_tokens(m, row))
        for u in range(vocab.vocab_size):
            assert m.copy().accept_token(u) == (u in allowed), (ids, t, u)
        if t is not None:
            assert m.accept_token(t)


def test_jump_forward_walks_validate(tiny_vocab, tiny_llama):
    tokenizer = Tokenizer(tiny_llama)
    for schema in (STRINGS, SCALARS, NESTED, dict(INTEGERS, minItems=3)):
        grammar = compile_grammar(tiny_vocab, "json_schema", schema)
        for seed in range(6):
            walk = random_walk(grammar, random.Random(seed), max_tokens=40, tokenizer=tokenizer, jump=True)
            assert walk is not None
            assert _valid(schema, b"".join(tiny_vocab.token_bytes[t] for t in walk[0]).decode("utf-8"))


def _bits(matcher, row: torch.Tensor) -> np.ndarray:
    """The mask as one bool per token id."""
    matcher.fill_mask(row)
    return np.unpackbits(row.numpy().view(np.uint8), bitorder="little").astype(bool)


def _masks(grammar, ids: list[int]) -> list[set[int]]:
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    m, out = grammar.matcher(), []
    for t in ids:
        out.append(set(allowed_tokens(m, row)))
        assert m.accept_token(t)
    return out


def test_rollback_and_copy_are_equivalent(tiny_vocab, tiny_llama):
    tokenizer = Tokenizer(tiny_llama)
    grammar = compile_grammar(tiny_vocab, "json_schema", SCALARS)
    ids = tokenizer.encode('["ab",7,"cd",true,"ab2",-1.5]')
    fresh = _masks(grammar, ids)
    row = torch.zeros(tiny_vocab.mask_words, dtype=torch.int32)
    m = grammar.matcher()
    assert all(m.accept_token(t) for t in ids)
    end = set(allowed_tokens(m, row))
    rng = random.Random(1)
    for _ in range(6):
        k = rng.randrange(1, len(ids) + 1)
        fork = m.copy()
        m.rollback(k)
        assert set(allowed_tokens(m, row)) == fresh[len(ids) - k]
        assert set(allowed_tokens(fork, row)) == end  # the fork did not move
        assert all(m.accept_token(t) for t in ids[len(ids) - k:])
    assert m.is_accepting() and set(allowed_tokens(m, row)) == end
    # A fork that writes a duplicate is refused; the original is untouched.
    dup = tokenizer.encode('["ab",7,"ab"]')
    probe = grammar.matcher()
    assert probe.validate_tokens(dup) < len(dup)
    first = probe.validate_tokens(dup)
    for t in dup[:first]:
        assert probe.accept_token(t)
    other = probe.copy()
    assert not other.accept_token(dup[first]) and not probe.accept_token(dup[first])
    assert other.num_accepted == probe.num_accepted == first


@pytest.mark.parametrize("schema,prefix", [
    (STRINGS, '["a","b","a'), (STRINGS, '["x","'), (INTEGERS, '[0,1,'), (INTEGERS, '[5,0,5'),
    (SCALARS, '[true,false,null,'), (NUMBERS, '[1,1.'), (NESTED, '[{"tags":["q","q'),
], ids=["open-dup", "open", "int-zero", "int-dup", "literals", "number", "nested"])
def test_completions_never_duplicate(tiny_vocab, schema, prefix):
    grammar = compile_grammar(tiny_vocab, "json_schema", schema)
    m = grammar.matcher()
    assert all(m.accept_token(tiny_vocab.byte_tokens[b]) for b in prefix.encode())
    done = m.completion()
    assert done is not None and _valid(schema, prefix + done), prefix + str(done)
    forced = m.forced_continuation()
    assert all(m.accept_token(tiny_vocab.byte_tokens[b]) for b in forced.encode())


def test_items_that_can_only_become_duplicates_are_refused(tiny_vocab):
    """An integer item ``0`` cannot be extended into another value, a literal is fixed by its first
    letter: once written, starting them again would be a dead end, so the check refuses it."""
    ints = compile_grammar(tiny_vocab, "json_schema", INTEGERS).matcher()
    assert all(ints.accept_token(tiny_vocab.byte_tokens[b]) for b in b"[0,")
    zero = tiny_vocab.byte_tokens[ord("0")]
    row = torch.zeros(tiny_vocab.mask_words, dtype=torch.int32)
    assert zero not in allowed_tokens(ints, row) and not ints.accept_token(zero)
    lits = compile_grammar(tiny_vocab, "json_schema", SCALARS).matcher()
    assert all(lits.accept_token(tiny_vocab.byte_tokens[b]) for b in b"[true,")
    t = tiny_vocab.byte_tokens[ord("t")]
    assert t not in allowed_tokens(lits, row) and not lits.accept_token(t)
    assert lits.accept_token(tiny_vocab.byte_tokens[ord("f")])


def test_compiled_in_worker_processes(tiny_vocab):
    """The locations cross the compile-worker boundary (``CompiledParts`` pickles)."""
    backend = GrammarBackend(tiny_vocab, num_workers=1)
    try:
        grammar = backend.submit(SamplingParams(json_schema=dict(STRINGS, minItems=2))).result(timeout=60)
        assert grammar.unique is not None
        assert grammar.matches('["a","b"]') and not grammar.matches('["a","a"]')
    finally:
        backend.shutdown()
