"""Jump-forward decoding (SGLang's compressed FSM): append the text the grammar forces without
one decode step per token, re-tokenising the boundary so the ids equal a fresh tokenisation.

Who does what: ``jump_forward`` only *computes* the splice and never changes the matcher. The
engine drops ``num_drop`` trailing output tokens (and their KV), appends ``new_ids``, and moves the
matcher the same way: ``matcher.rollback(num_drop)`` then ``accept_token`` for each new id (all
of which are guaranteed to be accepted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_RETOKENIZE = 4  # output tokens re-tokenised together with the forced text


@dataclass(frozen=True)
class JumpForward:
    """Drop the last ``num_drop`` output tokens and append ``new_ids``; ``text`` is the forced
    text that the splice adds after the dropped tokens' text."""

    num_drop: int
    new_ids: list[int]
    text: str


def jump_forward(matcher: Any, tokenizer: Any, output_ids: Sequence[int],
                 retokenize: int = DEFAULT_RETOKENIZE) -> JumpForward | None:
    """The splice for the forced continuation at ``matcher``'s state (a ``GrammarMatcher``), or None
    when nothing is forced (or the boundary cannot be re-tokenised cleanly).

    ``output_ids`` are the request's output tokens, the last ones of which the matcher accepted.
    """
    if matcher.is_terminated():
        return None
    forced = matcher.forced_continuation()
    if not forced:
        return None
    k = min(retokenize, len(output_ids), matcher.num_accepted)
    tail_text = None
    while k >= 0:  # the re-tokenised tail must start on a character boundary
        tail = b"".join(tokenizer.id_to_bytes(t) for t in output_ids[len(output_ids) - k:])
        try:
            tail_text = tail.decode("utf-8")
            break
        except UnicodeDecodeError:
            k -= 1
    if tail_text is None:
        return None
    old = list(output_ids[len(output_ids) - k:])
    new = tokenizer.encode(tail_text + forced)
    if b"".join(tokenizer.id_to_bytes(t) for t in new) != (tail_text + forced).encode("utf-8"):
        return None  # a normaliser changed the text: splicing would not be faithful
    common = 0
    while common < min(len(old), len(new)) and old[common] == new[common]:
        common += 1
    num_drop, new_ids = k - common, new[common:]
    if not new_ids:
        return None
    if num_drop:  # the splice must be a path through the grammar: check it on a copy
        probe = matcher.copy()
        probe.rollback(num_drop)
        if not all(probe.accept_token(t) for t in new_ids):
            return None
    elif matcher.validate_tokens(new_ids) != len(new_ids):  # the common case: no copy
        return None
    return JumpForward(num_drop, new_ids, forced)
