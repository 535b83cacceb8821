"""Walking texts and random token paths through a grammar: the checks shared by the tests and
``benchmarks/bench_grammar.py``."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import torch
from radixlm.constrained.grammar import CompiledGrammar, GrammarMatcher


def compact_json(value: Any) -> str:
    """The compact serialisation grammars generate by default."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def accepts_text(grammar: CompiledGrammar, tokenizer: Any, text: str) -> bool:
    """Walk ``text``'s tokens through a fresh matcher; True if all are accepted and EOS then is."""
    matcher = grammar.matcher()
    for t in tokenizer.encode(text):
        if not matcher.accept_token(t):
            return False
    return matcher.accept_token(grammar.vocab.eos_token_ids[0])


def allowed_tokens(matcher: GrammarMatcher, mask: torch.Tensor) -> list[int]:
    """Allowed ids from the bitmask (test helper, not the engine path)."""
    matcher.fill_mask(mask)
    return allowed_ids(mask).tolist()


def allowed_ids(mask: torch.Tensor) -> np.ndarray:
    """The ids whose bits are set in a filled bitmask row, ascending (int64). An array rather than
    a list: 150k Python ints per step would churn the allocator, and the next timed mask would
    pay for it (~50 µs of page faults and cold caches in ``bench_grammar``)."""
    words = mask.numpy().view(np.uint32).astype("<u4", copy=False)  # little-endian words: no copy on x86
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")  # bit i of word w: id 32w + i
    return np.flatnonzero(bits)


def random_walk(grammar: CompiledGrammar, rng: random.Random, max_tokens: int = 200,
                tokenizer: Any = None, jump: bool = False) -> tuple[list[int], int] | None:
    """Sample uniformly among allowed tokens (an untrained model at temperature 1) until the
    matcher terminates. After ``max_tokens`` the walk finishes on a short byte path to an
    accepting state (``GrammarMatcher.completion``). With ``jump`` (and a tokenizer), forced text is spliced in by jump-forward.
    Returns (token ids without EOS, number of sampling steps), or None if it cannot finish."""
    from radixlm.constrained.decoding.jump_forward import jump_forward

    matcher = grammar.matcher()
    mask = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    ids: list[int] = []
    steps = 0
    eos = set(grammar.vocab.eos_token_ids)
    while not matcher.is_terminated() and steps < max_tokens:
        if jump:
            jf = jump_forward(matcher, tokenizer, ids)
            if jf is not None:
                matcher.rollback(jf.num_drop)
                del ids[len(ids) - jf.num_drop:]
                for t in jf.new_ids:
                    if not matcher.accept_token(t):
                        raise AssertionError("jump-forward produced a token the matcher rejects")
                ids += jf.new_ids
                continue
        choice = rng.choice(allowed_tokens(matcher, mask))
        steps += 1
        if not matcher.accept_token(choice):
            raise AssertionError(f"token {choice} was in the mask but the matcher rejected it")
        if choice not in eos:
            ids.append(choice)
    if not matcher.is_terminated():
        data = matcher.completion_bytes()
        if data is None:
            return None
        path = [grammar.vocab.byte_tokens[b] for b in data]
        if not all(matcher.accept_token(t) for t in path):
            raise AssertionError("the completion was rejected by the matcher it came from")
        ids += path
        steps += len(path)
    return ids, steps


def schema_regex(schema: Any, **options: Any) -> str | None:
    """One regex of a (non-recursive) schema's serialisations, for exhaustive checks of the
    scalar front ends against Python's ``re`` (tests only; the engine compiles the grammar)."""
    from radixlm.constrained.json_schema import schema_to_grammar

    options.setdefault("any_order", False)  # any-order objects multiply out in one regex
    return schema_to_grammar(schema, **options).grammar.to_regex()


def forced_count(grammar: CompiledGrammar, ids: list[int]) -> int:
    """How many of ``ids`` lie inside the forced continuation where they come: the forward passes
    jump-forward saves on a model output of these tokens (it splices forced text in one step)."""
    matcher, saved = grammar.matcher(), 0
    for t in ids:
        forced = matcher.forced_continuation().encode()
        saved += bool(forced) and forced.startswith(grammar.vocab.token_bytes[t])
        if not matcher.accept_token(t):
            raise AssertionError(f"token {t} is rejected")
    return saved


def eos_pass(grammar: CompiledGrammar, ids: list[int]) -> int:
    """1 when a model writing ``ids`` needs one more pass to sample EOS, 0 when the grammar
    terminates there (the engine then finishes the request without one)."""
    matcher = grammar.matcher()
    for t in ids:
        matcher.accept_token(t)
    return int(not matcher.is_terminated())
