"""Compile-time warm-up: the masks along the opening of a grammar's shortest documents, computed
once when the grammar is compiled, so that the first request does not meet them cold.

A state's first mask is the expensive one, on both halves of ``GrammarMatcher.fill_mask``:
- the core (llguidance) builds its lexer's DFA lazily, per grammar, and a lexer state's first
  token-trie walk at 152k tokens costs 100-200 µs (a string value's opening, a key's), against
  5-30 µs once built;
- the runtime member check files a memo entry per state (``masks.members``), shared by every
  matcher of the grammar.

Both caches belong to the compiled grammar, not to a matcher, so the states every output of the
grammar passes through (the start, the first key, a string value's first character, a number)
are worth building before any request arrives: compiles run in the compile pool's threads, off
the batch's token path, while one slow mask delays a whole decode step. This is the trade
xgrammar makes with its compile-time token-mask cache, kept to a bounded walk here: the opening
of the shortest documents (``completion.opening_bytes``: the completion search's first order, at
most ``WARM_BYTES``, finished or not, each string value given one character where it may hold
one), tokenised as the model would write it, one mask per token: the start's mask always, at
most ``WARM_MASKS`` masks and ``WARM_SECONDS`` in all (half of it for the search). It never walks
the vocabulary once per automaton state; it only does early what the first request's masks
would do anyway. The member check's states along it are then filed whole
(``masks.members.grow_first_visits``), so a request's first mask there is a memo hit.

The masks and every verdict are the same with or without it: it fills caches, nothing else
(``tests/constrained/test_warm_up.py``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from radixlm.constrained.decoding.completion import opening_bytes
from radixlm.constrained.masks.members import grow_first_visits

WARM_BYTES = 256  # the shortest document searched for (a completion search's first budget)
WARM_MASKS = 16  # masks computed at most: a walk's cold first visits are mostly its first eight masks
FILL = ord("a")  # string values get one character: the lexer's state inside a string, not only at its ends
WARM_SECONDS = 0.005  # wall time in all (the search half of it), checked between masks


def warm_start(grammar: Any) -> int:
    """Compute the masks along the opening of ``grammar``'s shortest documents on a throwaway
    matcher, filling the grammar's shared caches; returns how many masks were computed."""
    deadline = time.perf_counter() + WARM_SECONDS
    matcher = grammar.matcher()
    text = opening_bytes(matcher, WARM_BYTES, WARM_SECONDS / 2, fill=FILL)
    ids = _tokens(grammar.vocab, text) if text else []
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    matcher.fill_mask(row)  # the start, whatever the search found
    done = 1
    for token in ids[:WARM_MASKS - 1]:
        if time.perf_counter() > deadline or not matcher.accept_token(token):
            break
        matcher.fill_mask(row)
        done += 1
    if grammar.unique_tracker is not None:  # states every output meets: whole entries, not records
        grow_first_visits(grammar.unique_tracker)
    return done


def _tokens(vocab: Any, text: bytes) -> list[int]:
    """``text`` as the model's tokenizer writes it, or longest-match where the vocabulary has no
    encoder (or the text is no UTF-8); none where a byte has no token (the warm-up then masks the
    start alone: it only fills caches, and must never fail a compile)."""
    if vocab.encode is not None:
        try:
            return list(vocab.encode(text.decode("utf-8")))
        except UnicodeDecodeError:
            pass
    try:
        return vocab.greedy_encode(text)
    except ValueError:
        return []
