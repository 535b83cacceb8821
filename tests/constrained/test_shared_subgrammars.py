"""The Lark writer writes a sub-grammar used in several places once (``grammar_text._Writer``),
and the engine's garbage-collector freeze nests (``runtime/engine/engine``)."""

from __future__ import annotations

import gc
import re

import pytest
from radixlm.constrained.grammar import CompiledGrammar
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.vocab import TokenizerVocab
from radixlm.runtime.engine import engine as engine_module

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

llguidance = pytest.importorskip("llguidance")

COLOURS = ir.alt([ir.Lit(f'"{c}"') for c in ("black", "red", "green", "yellow", "blue")])


def _grammar() -> ir.Grammar:
    members = [ir.seq(ir.Lit(f'"{k}"'), ir.Lit(":"), ir.Lit("["), COLOURS, ir.Lit("]")) for k in ("a", "b", "c")]
    value = ir.seq(ir.Lit("{"), ir.alt(members), ir.Lit("}"))
    return ir.Grammar(ir.alt([value, ir.Ref("other")]), {"other": ir.seq(ir.Lit("<"), COLOURS, ir.Lit(">"))})


def test_shared_sub_grammar_is_written_once():
    lark = _grammar().to_lark()
    assert lark.count('"\\"black\\""') == 1  # the enum: one rule, named everywhere else
    assert any(line.startswith("shared0: ") for line in lark.splitlines())


def test_rule_body_used_inline_is_written_as_the_rule():
    body = ir.seq(ir.Lit("("), COLOURS, ir.Lit(")"))
    lark = ir.Grammar(ir.alt([body, ir.seq(ir.Lit("!"), ir.Ref("paren"))]), {"paren": body}).to_lark()
    assert lark.splitlines()[0] == 'start: paren | "!" paren'


def test_shared_names_avoid_the_grammars_rules():
    rules = {"shared0": ir.seq(ir.Lit("x"), COLOURS), "shared_x": ir.seq(ir.Lit("y"), COLOURS)}
    lark = ir.Grammar(ir.alt([ir.Ref("shared0"), ir.Ref("shared_x")]), rules).to_lark()
    names = [line.split(":")[0] for line in lark.splitlines()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("text, ok", [('{"a":["red"]}', True), ('{"c":["blue"]}', True), ('<"green">', True),
                                      ('{"a":["pink"]}', False), ('{"d":["red"]}', False), ('<"red"', False)])
def test_shared_rules_keep_the_language(text, ok):
    vocab = TokenizerVocab.from_token_bytes([bytes([b]) for b in range(256)] + [None], [256])
    compiled = CompiledGrammar(vocab, _grammar().to_lark(), "ebnf", None)
    assert "shared0" in _grammar().to_lark()
    assert compiled.matches(text) == ok
    # the reference: the grammar with every copy inline, as one regex
    assert bool(re.fullmatch(_grammar().to_regex(), text)) == ok


def test_gc_freeze_nests_and_thaws_with_the_last_engine(monkeypatch):
    # an engine another test left open (a module-scoped fixture) counts too: start from none
    was_frozen = gc.get_freeze_count() > 0
    monkeypatch.setattr(engine_module, "_open_engines", 0)
    gc.unfreeze()
    try:
        engine_module.freeze_startup_objects()
        engine_module.freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        engine_module.thaw_startup_objects()
        assert gc.get_freeze_count() > 0  # one engine still open
        engine_module.thaw_startup_objects()
        assert gc.get_freeze_count() == 0
        engine_module.thaw_startup_objects()  # an extra shutdown never goes below zero
        engine_module.freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        engine_module.thaw_startup_objects()
        assert gc.get_freeze_count() == 0
    finally:
        if was_frozen:
            gc.freeze()  # the open engines' objects stay frozen as they were
