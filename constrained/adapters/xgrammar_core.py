"""``--grammar-backend xgrammar``: xgrammar's compilers and matcher behind our interface
(``XGrammarCompiled`` ~ ``CompiledGrammar``, ``XGrammarMatcher`` ~ ``GrammarMatcher``).

xgrammar is an optional extra (``pip install 'radixlm[xgrammar]'``). Its ``TokenizerInfo`` is built
from our ``TokenizerVocab`` (raw token bytes; special tokens empty, so never allowed) and cached per
vocabulary with one ``GrammarCompiler`` (its own cache off: ``GrammarBackend`` keeps the LRU).
JSON is compact unless a whitespace pattern is given (xgrammar then allows any whitespace: it has
no pattern option). xgrammar does not enforce every keyword (``notes`` says so): outputs are
still checked by ``validate_output`` against the full schema.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import xgrammar as xgr
from radixlm.constrained.compile.job import require_schema_order
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.decoding.completion import greedy_completion
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar import CompiledGrammar, check_mask_row
from radixlm.constrained.vocab import LazyTables, TableSlot, TokenizerVocab

_COMPILERS = TableSlot("xgrammar_compiler")  # per vocabulary


def tokenizer_info(vocab: TokenizerVocab) -> xgr.TokenizerInfo:
    """xgrammar's view of ``vocab``: raw bytes, ids past the table padding, EOS the stop tokens."""
    table = [b if b is not None else b"" for b in vocab.token_bytes]
    return xgr.TokenizerInfo(table, xgr.VocabType.RAW, vocab_size=vocab.vocab_size,
                             stop_token_ids=list(vocab.eos_token_ids))


def _compiler(vocab: TokenizerVocab) -> xgr.GrammarCompiler:
    return _COMPILERS.of(vocab, lambda: xgr.GrammarCompiler(tokenizer_info(vocab), max_threads=1,
                                                            cache_enabled=False))


def compile_request(vocab: TokenizerVocab, req: CompileRequest) -> XGrammarCompiled:
    """Compile ``req`` with xgrammar (``ConstraintError`` when xgrammar refuses it)."""
    require_schema_order(req, "xgrammar")
    compiler, notes = _compiler(vocab), ["compiled by xgrammar (--grammar-backend xgrammar)"]
    kind, spec = req.kind, req.spec
    try:
        if kind in ("json_schema", "json_object"):
            schema = {"type": "object"} if kind == "json_object" else spec
            if not isinstance(schema, (dict, bool)):
                raise ConstraintError("json_schema must be a JSON object or a boolean")
            if req.whitespace_pattern is not None:
                notes.append("whitespace_pattern is not supported by xgrammar: any whitespace is allowed")
            compact = req.whitespace_pattern is None
            compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=not compact,
                                                    separators=(",", ":") if compact else None)
        elif kind == "regex":
            _require_text(spec, "regex must be a non-empty string")
            compiled = compiler.compile_regex(spec)
        elif kind == "ebnf":
            _require_text(spec, "ebnf must be a non-empty string (an EBNF or Lark grammar)")
            compiled = compiler.compile_grammar(spec) if "::=" in spec else compiler.compile_lark(spec)
        elif kind == "choices":
            if not isinstance(spec, list) or not spec or not all(isinstance(c, str) and c for c in spec):
                raise ConstraintError("choices must be a non-empty list of non-empty strings")
            compiled = compiler.compile_grammar("root ::= " + " | ".join(json.dumps(c, ensure_ascii=False)
                                                                         for c in spec))
        else:
            raise ConstraintError(f"unknown constraint kind {kind!r}")
    except ConstraintError:
        raise
    except (RuntimeError, ValueError, TypeError) as e:  # xgrammar's refusals
        raise ConstraintError(f"{kind}: xgrammar cannot compile it: {str(e).strip()[:300]}") from None
    return XGrammarCompiled(vocab, compiled, kind, spec, notes)


def _require_text(spec: Any, message: str) -> None:
    if not isinstance(spec, str) or not spec.strip():
        raise ConstraintError(message)


class XGrammarCompiled:
    """An xgrammar ``CompiledGrammar`` with our grammar's attributes (immutable, shared)."""

    # Same checks of a final output as ours (jsonschema for schemas, ``matches`` for the rest).
    validate_output = CompiledGrammar.validate_output

    def __init__(self, vocab: TokenizerVocab, compiled: Any, kind: str, spec: Any,
                 notes: list[str] | None = None) -> None:
        self.vocab = vocab
        self.compiled = compiled
        self.kind = kind
        self.spec = spec
        self.relaxed: list[str] = []
        self.notes = list(notes or [])
        self.compile_s: float | None = None
        self.tables = LazyTables()  # per-grammar tables of the matcher's clients (``decoding``)

    def matcher(self) -> XGrammarMatcher:
        """A fresh cursor at the start of the grammar."""
        return XGrammarMatcher(self, xgr.GrammarMatcher(self.compiled))

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a complete sentence of the grammar (byte-exact, no tokenisation)."""
        m = xgr.GrammarMatcher(self.compiled)
        return m.accept_string(text) and m.is_completed()


class XGrammarMatcher:
    """Per-request cursor over an ``XGrammarCompiled``; the contract of ``grammar.GrammarMatcher``."""

    def __init__(self, grammar: XGrammarCompiled, core: Any) -> None:
        self.grammar = grammar
        self._core = core
        self._eos = frozenset(grammar.vocab.eos_token_ids)
        self._accepted = 0
        self._eos_accepted = False
        self._only_eos: tuple[int, bool] | None = None  # (num_accepted, answer) of the last check

    @property
    def num_accepted(self) -> int:
        return self._accepted

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when the token is not allowed here."""
        if self._eos_accepted:
            return False
        table = self.grammar.vocab.token_bytes
        is_eos = token_id in self._eos
        # Special and padding ids are refused here: xgrammar would log a warning for each.
        if not is_eos and (not 0 <= token_id < len(table) or table[token_id] is None):
            return False
        if not self._core.accept_token(token_id):
            return False
        self._eos_accepted = is_eos
        self._accepted += 1
        self._only_eos = None
        return True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""
        if not 0 <= n <= self._accepted:
            raise ValueError(f"cannot roll back {n} tokens: {self._accepted} accepted")
        if n:
            self._core.rollback(n)
            self._accepted -= n
            self._eos_accepted = False
            self._only_eos = None

    def completion_bytes(self, max_bytes: int = 20_000) -> bytes | None:
        """Short bytes that complete the document (``decoding.completion.greedy_completion``)."""
        return greedy_completion(self, max_bytes)

    def validate_tokens(self, token_ids: list[int]) -> int:
        """How many of ``token_ids`` would be accepted in a row from here (on a fork)."""
        probe, n = self.copy(), 0
        for t in token_ids:
            if not probe.accept_token(t):
                break
            n += 1
        return n

    def copy(self) -> XGrammarMatcher:
        """An independent cursor at the same position (shares the compiled grammar)."""
        other = XGrammarMatcher(self.grammar, self._core.fork())
        other._accepted, other._eos_accepted = self._accepted, self._eos_accepted
        return other

    def is_terminated(self) -> bool:
        """EOS accepted, or the text is complete and only EOS may follow."""
        if self._eos_accepted:
            return True
        if not self._core.is_completed():
            return False
        if self._only_eos is None or self._only_eos[0] != self._accepted:
            self._only_eos = (self._accepted, self._allows_only_eos())
        return self._only_eos[1]

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete sentence (EOS allowed now)."""
        return self._eos_accepted or self._core.is_completed()

    def forced_continuation(self) -> str:
        """Text every valid continuation starts with (empty when none is forced)."""
        if self._eos_accepted:
            return ""
        return self._core.find_jump_forward_string()

    def fill_mask(self, bitmask_row: torch.Tensor) -> None:
        """Write the allowed tokens into ``bitmask_row`` (int32, contiguous, CPU, ``[ceil(vocab / 32)]``)."""
        words = check_mask_row(bitmask_row, self.grammar.vocab.mask_words)
        if self._eos_accepted:
            bitmask_row.zero_()
            return
        self._core.fill_next_token_bitmask(bitmask_row.view(1, words), 0)

    def _allows_only_eos(self) -> bool:
        row = torch.zeros(self.grammar.vocab.mask_words, dtype=torch.int32)
        self._core.fill_next_token_bitmask(row.view(1, -1), 0)
        bits = row.numpy().view("uint32")
        for eos in self._eos:
            bits[eos // 32] &= ~(1 << (eos % 32)) & 0xFFFFFFFF
        return not bits.any()
