"""Masks for the runtime member check (``checks.tracker``): clear the tokens that
``UniqueTracker.feed`` would refuse because of a checked object, without feeding the vocabulary.

Per vocabulary the candidates that can be refused are filed once (``masks.refusable_tokens``); a step
gathers the candidates the core allows and decides them as a batch (``masks.member_memo``'s tail verdicts: inside a
string, by what follows its closing quote, one feed per distinct tail). An open key of a checked
object is the exception:
- an object that takes no extra key: the core spells only its named keys, so the tokens that lead
  only to keys it refuses now are cleared by their raw bytes (``_dead_named``);
- extra keys the grammar spells but none may come now (``maxProperties``): the key must stay a
  prefix of a named key that may come, so every other token is cleared (``_key_only``);
- elsewhere, the tokens that would complete a key already written are cleared by their raw bytes.
The result equals ``feed`` on every token the core allows.

A state's candidates are narrowed to the tokens that hold what its open objects may refuse
(``masks.members``): a ``}`` only where one may not close yet, and so on.

Each tracker keeps a bounded memo per state (``masks.member_memo``): the candidates, and what feeding
each one gave, learned the first time the core allows it. A repeated state feeds nothing and clears
its refused tokens in a few vector operations. Most states are met only once (a key's bytes, a
member's value), so a state's first mask decides just its own candidates and files a
light record (``FirstVisit``); the entry's arrays are built if the state comes again. The states
along a grammar's shortest document are filed whole when it is compiled (``warm_start``,
``grow_first_visits``).

Open asks: What a token read from a state may be refused for by the runtime member check's open objects
(``checks.tracker``), so a step's candidates can be narrowed to the tokens that hold such bytes
(``masks.refusable_tokens.MemberTokens.narrowed``): most states refuse nothing but a few tokens, and a new
state's first mask then decides a handful instead of hundreds.
"""

from __future__ import annotations

import bisect
import functools
import json
from typing import Any, NamedTuple

import numpy as np
from radixlm.constrained.checks.reader import G_AFTER, G_INKEY, G_KEY, G_STR, U_VAL, is_checked
from radixlm.constrained.checks.tracker import UniqueTracker, admit, can_add, can_close, extra_ok, open_keys
from radixlm.constrained.masks.member_memo import (
    KEPT,
    LIVE,
    REFUSED,
    UNKNOWN,
    MemoEntry,
    memo_for,
    memo_key,
    refusal_list,
    refusals,
    sorted_member,
    unique_ids,
)
from radixlm.constrained.masks.refusable_tokens import (
    ASK_ADD,
    ASK_CLOSE,
    ASK_ESCAPE,
    ASK_KEY,
    MemberTokens,
    member_tokens_for,
    place,
)
from radixlm.constrained.vocab import TableSlot


def asks(tracker: UniqueTracker, state: tuple) -> int | None:
    """What a token read from ``state`` may be refused for by the open checked objects, as
    ``masks.refusable_tokens.ASK_*`` bits: a ``}`` where one of them may not close yet, a member where one
    may take no more, a key's name where one takes no extra key now, a key's escape where one
    names a key with an escape (beyond completing a key, which ``narrowed`` always reads). In an
    open key, the key it completes may change what its object allows next: with no
    ``maxProperties``, ``dependentRequired`` or union, only whether another member may come, and
    only when it may be the last named one of an object without extra keys. None: read every
    candidate (a unique array is open, whose items the check reads too)."""
    frames, mode = state.frames, state.mode
    if mode >= U_VAL:
        return None
    cache = _BY_FRAMES.of(tracker, dict)
    flags = cache.get(frames, _UNSET)
    if flags is _UNSET:  # the states of one member's key, colon, value and comma share frames
        if len(cache) > 4096:
            cache.clear()
        flags = cache[frames] = _frames_ask(tracker, frames)
    if flags is None:
        return None
    paths, top = tracker.paths, frames[-1] if frames else ()
    if mode == G_INKEY and is_checked(top):  # what the key it completes changes
        spec = paths.specs[paths.members[top.pos]]
        if spec.alts is not None or spec.max_p is not None or spec.needs:
            flags |= ASK_CLOSE | ASK_ADD | ASK_KEY
        elif not spec.extras and len(open_keys(spec, top.seen)) < 2:  # it may be the last one
            flags |= ASK_ADD
    return flags


def _frames_ask(tracker: UniqueTracker, frames: tuple) -> int | None:
    """``asks`` of the open objects ``frames`` alone (None: a unique array is open)."""
    flags, paths = 0, tracker.paths
    for frame in frames:
        if frame.kind == "u":
            return None
        if not is_checked(frame):
            continue
        spec, seen = paths.specs[paths.members[frame.pos]], frame.seen
        if not can_close(spec, seen):
            flags |= ASK_CLOSE
        if not can_add(spec, seen):
            flags |= ASK_ADD
        if not extra_ok(spec, seen):
            flags |= ASK_KEY
        if escaped_names(spec):  # extra keys are plain: only a named key may hold a backslash
            flags |= ASK_ESCAPE
    return flags


_UNSET = object()
_BY_FRAMES = TableSlot("open_asks")  # per tracker: frames -> flags


@functools.lru_cache(maxsize=4096)
def escaped_names(spec: Any) -> bool:
    """Whether a named key of ``spec`` (or of a branch of its union) is spelled with an escape."""
    return any(b"\\" in raw for one in (spec.alts or (spec,)) for raw in one.keys)


def forbid_members(tracker: UniqueTracker, vocab: Any, state: tuple, words: np.ndarray) -> None:
    """Clear from ``words`` (the core's mask, uint32) every token that ``tracker.feed`` refuses
    in ``state`` because of a checked object (one that is open, or that the token opens)."""
    memo = memo_for(tracker)
    key, shared = memo_key(tracker, state)
    entry = memo.get(key)
    if entry is None:
        parts = _parts(tracker, vocab, state, shared)
        if not parts.only:  # most states are met once: decide just this step's
            memo.put(key, _first_visit(tracker, vocab, state, parts, words))
            return
        entry = _built(parts)
        memo.put(key, entry)
    elif type(entry) is FirstVisit:  # met again: file it whole, with what the first visit learned
        entry = _grown(entry)
        memo.put(key, entry)
    ids, word, pending, live, (cut_word, cut_bit) = entry.view
    kept = refused = _NONE
    todo = (words[word] & pending).nonzero()[0]  # pending candidates the core allows here
    if len(todo):  # the only feeding: candidates the core first allows here, or live ones
        lv = live[todo] if live is not None else None
        bad = refusals(tracker, vocab, state, ids[todo])
        refused, kept = ids[todo[bad]], ids[todo[~bad]]
        settled = todo if lv is None else todo[~lv]
        entry.settle(settled, np.where(bad if lv is None else bad[~lv], REFUSED, KEPT).astype(np.int8))
    if entry.only:  # only KEPT candidates the core allows survive
        keep = words[cut_word] & cut_bit
        words[:] = 0
        words[cut_word] = keep
        _set(words, kept)
    else:
        if len(cut_word):
            words[cut_word] &= cut_bit
        _clear(words, refused)


def grow_first_visits(tracker: UniqueTracker) -> int:
    """File whole entries for the states met once so far (``FirstVisit``): after the compile-time
    warm-up (``warm_start``), whose states every output passes through, so a request's first
    mask there is a plain memo hit. Returns how many were grown."""
    memo = memo_for(tracker)
    with memo.lock:
        firsts = [(key, entry) for key, entry in memo.entries.items() if type(entry) is FirstVisit]
    for key, entry in firsts:
        memo.put(key, _grown(entry))
    return len(firsts)


_NONE = np.zeros(0, dtype=np.int64)


def _clear(words: np.ndarray, ids: np.ndarray) -> None:
    for t in ids.tolist():  # a few: this step's refusals
        words[t >> 5] &= ~np.uint32(1 << (t & 31))


def _set(words: np.ndarray, ids: np.ndarray) -> None:
    for t in ids.tolist():
        words[t >> 5] |= np.uint32(1 << (t & 31))


class Parts(NamedTuple):
    """What a state's memo entry is built from: its candidates (``ids``, sorted int64) and their
    ``place``, their ``status`` (None: all ``UNKNOWN``, or ``LIVE`` where ``live`` holds them),
    the tokens cleared whatever the core allows (``always``, a list) and whether only ``KEPT``
    candidates survive (``only``)."""

    ids: np.ndarray
    place: tuple
    status: np.ndarray | None
    always: list
    only: bool
    live: frozenset | None = None  # a shared entry's: ``masks.refusable_tokens``' live tokens, fed every time


class FirstVisit(NamedTuple):
    """A state met once: its ``parts`` and the verdicts of the candidates its one mask decided
    (token -> refused), kept to build its entry if it is met again (``_grown``)."""

    parts: Parts
    decided: dict


def _first_visit(tracker: UniqueTracker, vocab: Any, state: tuple, parts: Parts, words: np.ndarray) -> FirstVisit:
    """Clear from ``words`` the candidates ``state`` refuses among those the core allows, without
    building an entry: most states (about 85% in the benchmark's walks) are met only once (a
    key's bytes, a member's value), and an entry's arrays cost more than the step's few verdicts."""
    word, bit = parts.place
    at = np.flatnonzero(words[word] & bit)
    tokens = parts.ids[at].tolist()
    verdicts = refusal_list(tracker, vocab, state, tokens)
    for t in [t for t, bad in zip(tokens, verdicts, strict=True) if bad] + parts.always:
        words[t >> 5] &= ~np.uint32(1 << (t & 31))
    live = parts.live or ()
    return FirstVisit(parts, {t: v for t, v in zip(tokens, verdicts, strict=True) if t not in live})


def _grown(first: FirstVisit) -> MemoEntry:
    """The entry of a state met a second time, its first visit's verdicts settled."""
    ids, place_, _, always, _, live = first.parts  # a first visit's parts: no status, not ``only``
    status = _status(ids, live)
    decided = first.decided  # a few tokens: set one by one, not through three more arrays
    at = ids.searchsorted(list(decided)) if decided else _NONE
    for i, bad in zip(at.tolist(), decided.values(), strict=True):
        status[i] = REFUSED if bad else KEPT
    refused = [t for t, bad in decided.items() if bad]
    return MemoEntry.grown(ids, place_, status, always, at, refused, (status == LIVE) if live else None)


def _built(parts: Parts) -> MemoEntry:
    """The memo entry of ``parts``."""
    ids, place_, status, always, only, live = parts
    status = _status(ids, live) if status is None else status
    return MemoEntry(ids, place_, status, unique_ids(always) if always else _NONE, only)


def _status(ids: np.ndarray, live: frozenset | None) -> np.ndarray:
    """Fresh statuses of ``ids``: ``UNKNOWN``, or ``LIVE`` for those in ``live``."""
    if not live:
        return np.zeros(len(ids), dtype=np.int8)
    return np.fromiter((LIVE if t in live else UNKNOWN for t in ids.tolist()), dtype=np.int8, count=len(ids))


def _parts(tracker: UniqueTracker, vocab: Any, state: tuple, shared: bool) -> Parts:
    """A fresh entry's parts for ``state``: its candidates by reader mode, narrowed to what the
    open objects may refuse (``asks``), none fed yet (``shared``: an open fresh extra key's,
    whose ``live`` candidates are fed every time)."""
    files = member_tokens_for(vocab)
    frames, mode = state.frames, state.mode
    top = frames[-1] if frames else ()
    checked = is_checked(top)
    spec = tracker.paths.specs[tracker.paths.members[top.pos]] if checked else None
    always: list = []
    if not tracker.in_checked(state):  # a token may still open a checked object and go on in it
        return Parts(files.after_brace, files.placed(files.after_brace), None, always, False)
    if mode >= U_VAL:
        ids = files.after_bracket
    elif mode == G_STR:
        ids = files.after_quote
    elif mode == G_INKEY and spec is not None:
        if spec.extras and not extra_ok(spec, top.seen):  # the core spells extra keys, none may come
            return _key_only(files, state, spec)
        refused = _dead_named if not spec.extras else _completing_refused
        always = refused(files, spec, top.seen, state.buf)
        ids = files.key_chars  # a named key's escape may lead where only refused keys go
    elif mode == G_INKEY:
        ids = files.after_quote
    elif mode in (G_KEY, G_AFTER) and spec is not None and not extra_ok(spec, top.seen):
        ids = files.any_outside  # a key it opens may be dead at once
    else:
        ids = files.outside
    flags = asks(tracker, state)
    ids, placed = files.narrowed(ids, flags, mode == G_KEY) if flags is not None else (ids, files.placed(ids))
    return Parts(ids, placed, None, always, False, files.live_set if shared else None)


def _completing_refused(files: MemberTokens, spec: Any, seen: frozenset, prefix: bytes) -> list[int]:
    """The tokens that complete, after the open key ``prefix``, a key the object refuses: a key
    already written (named or extra: plain characters, so its raw bytes are its name quoted) or
    a named key past what ``maxProperties`` leaves."""
    if spec.alts is None and spec.max_p is None:  # only the keys written are refused (``admit``)
        refused = spec.raw_of(seen)
    else:
        allowed = set(open_keys(spec, seen))
        refused = [k for k in spec.keys if k not in allowed]
    refused += [b'"%s"' % n.encode() for n in seen if n not in spec.names]
    for alt in spec.alts or ():  # a union: a name one branch blocks may be another's extra
        refused += [json.dumps(n, ensure_ascii=False).encode() for n in alt.blocked
                    if n not in seen and n not in spec.names and admit(spec, seen, n) is None]
    out: list[int] = []
    for key in refused:
        if key.startswith(prefix) and len(key) > len(prefix):
            out += files.starting_with(key[len(prefix):])
    return out


def _dead_named(files: MemberTokens, spec: Any, seen: frozenset, prefix: bytes) -> list[int]:
    """Where the object takes no extra key, so the core spells only its named keys: the tokens
    after the open key ``prefix`` that lead only to keys it refuses now (a prefix of one that is
    a prefix of no key it may take, or one completed)."""
    allowed = open_keys(spec, seen)
    cut = len(prefix)
    dead = [k[cut:] for k in spec.keys if k not in allowed and k.startswith(prefix) and len(k) > cut]
    if not dead:
        return []
    # the rests of the keys it may take, sorted: a token leads to one of them if one starts with
    # it (looked up per dead token rather than listing every prefix of every live key: objects
    # with many long names spent milliseconds on that list)
    alive = sorted(k[cut:] for k in allowed if k.startswith(prefix) and len(k) > cut)
    table = files.token_bytes
    out: list[int] = []
    for rest in dead:
        for t in files.prefixes_of(rest):
            i = bisect.bisect_left(alive, table[t])
            if i == len(alive) or not alive[i].startswith(table[t]):
                out.append(t)
        out += files.starting_with(rest)
    return out


def _key_only(files: MemberTokens, state: tuple, spec: Any) -> Parts:
    """An open key where no extra key may come: only tokens that keep it a prefix of a named key
    that may come (``KEPT`` from the start), or complete one (fed when first allowed), survive."""
    prefix = state.buf
    keep, complete = [], []
    for key in open_keys(spec, state.frames[-1].seen):
        if key.startswith(prefix) and len(key) > len(prefix):
            rest = key[len(prefix):]
            keep += files.prefixes_of(rest)
            complete += files.starting_with(rest, longer=True)
    ids = unique_ids(keep + complete)
    status = np.where(sorted_member(ids, unique_ids(keep)), KEPT, UNKNOWN).astype(np.int8)
    return Parts(ids, place(ids), status, [], True)
