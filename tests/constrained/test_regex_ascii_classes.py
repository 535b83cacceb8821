r"""``\d`` and ``\w`` in a ``regex`` constraint are ASCII, as in JSON Schema patterns."""

from __future__ import annotations

import importlib
import re

import pytest
from radixlm.constrained.pattern.regex_text import ascii_classes


@pytest.mark.unit
@pytest.mark.parametrize(("regex", "expect"), [
    (r"(\d{1,3}\.){3}\d{1,3}", r"([0-9]{1,3}\.){3}[0-9]{1,3}"),
    (r"\D+", r"[^0-9]+"),
    (r"\w+@\W", r"[0-9A-Za-z_]+@[^0-9A-Za-z_]"),
    (r"[\d.]+", r"[0-9.]+"),
    (r"[^\d]", r"[^0-9]"),
    (r"[a\D]", r"[a[^0-9]]"),
    (r"\\d", r"\\d"),  # an escaped backslash, then a literal d
    (r"[]\d]", r"[]0-9]"),  # ']' first in a class is a literal
    (r"\p{Nd}\s\.", r"\p{Nd}\s\."),  # other escapes untouched
])
def test_perl_classes_are_spelled_out(regex, expect):
    assert ascii_classes(regex) == expect


@pytest.mark.unit
def test_rewritten_classes_match_what_ecma_would():
    rx = re.compile(ascii_classes(r"(\d{1,3}\.){3}\d{1,3}"))
    assert rx.fullmatch("192.168.0.1")
    assert not rx.fullmatch("281.۶03.᭖31.03𝟯")  # Unicode digits: Rust's \d took these


@pytest.mark.parametrize("core", ["radixlm", "llguidance"])
def test_regex_constraint_refuses_unicode_digits(core):
    """Byte-level vocabulary: every UTF-8 byte is a token, so ``۶`` (D9 B6) is reachable unless refused."""
    from radixlm.constrained import TokenizerVocab, adapters, compile_grammar
    from radixlm.constrained.compile.worker import CompileRequest

    vocab = TokenizerVocab.from_token_bytes([bytes([b]) for b in range(256)] + [None], [256], vocab_size=260)
    regex = r"(\d{1,3}\.){3}\d{1,3}"
    if core == "radixlm":
        grammar = compile_grammar(vocab, "regex", regex)
    else:
        module = importlib.import_module(adapters.adapter_compile_fn(core).split(":")[0])
        grammar = module.compile_request(vocab, CompileRequest("regex", regex, None))

    def accepts(text: str) -> bool:
        matcher = grammar.matcher()
        return all(matcher.accept_token(b) for b in text.encode()) and matcher.accept_token(256)

    assert accepts("192.168.0.1")
    for text in ("۶.1.1.1", "1.᭖.1.1", "1.1.1.𝟯"):
        assert not accepts(text), text
