"""Engine logprobs -> the two OpenAI logprob shapes (legacy completions, and chat ``content``).

The engine reports logprobs SGLang-style in ``meta_info``: ``output_token_logprobs`` is a list of
``[logprob, token_id, ...]`` (``logprob`` is None for a jump-forward token) and
``output_top_logprobs`` a list (per position) of such lists; plain floats aligned with
``output_ids`` are accepted too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.server.engine_api import ServedTokenizer


@dataclass
class TokenLogprob:
    """One position: the chosen token, its logprob, and the top alternatives ``(token_id, logprob)``."""

    token_id: int
    logprob: float | None
    top: list[tuple[int, float]] = field(default_factory=list)


def _entry(e: Any, fallback_id: int | None) -> tuple[int | None, float | None]:
    if isinstance(e, (list, tuple)):
        return (int(e[1]) if len(e) > 1 and e[1] is not None else fallback_id), e[0]
    if isinstance(e, dict):
        return e.get("token_id", fallback_id), e.get("logprob")
    return fallback_id, e


def _tops(row: Any) -> list[tuple[int, float]]:
    out = []
    for e in row or []:
        tid, lp = _entry(e, None)
        if tid is not None and lp is not None:
            out.append((tid, float(lp)))
    return out


def extract(meta: dict[str, Any], ids: list[int] | None, which: str = "output") -> list[TokenLogprob]:
    """The ``which`` (``input`` | ``output``) logprobs of an engine result or stream chunk."""
    lps = meta.get(f"{which}_token_logprobs") or []
    tops = meta.get(f"{which}_top_logprobs") or []
    out = []
    for i, e in enumerate(lps):
        fallback = ids[i] if ids is not None and i < len(ids) else None
        tid, lp = _entry(e, fallback)
        if tid is None:
            continue
        out.append(TokenLogprob(tid, None if lp is None else float(lp), _tops(tops[i] if i < len(tops) else [])))
    return out


def token_text(tokenizer: ServedTokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def _token_bytes(tokenizer: ServedTokenizer, token_id: int) -> list[int]:
    return list(tokenizer.id_to_bytes(token_id))


class TextCursor:
    """Where each token starts in a choice's text: ``offset`` advances by the token's share of the
    incrementally decoded text (a token ending inside a UTF-8 character adds nothing until the
    character completes; special tokens add nothing), so offsets agree streamed or not."""

    def __init__(self, tokenizer: ServedTokenizer, offset: int = 0):
        self.detok = tokenizer.incremental_detokenizer()
        self.offset = offset

    def advance(self, token_id: int) -> int:
        """The offset of ``token_id``, then move past it."""
        start = self.offset
        self.offset += len(self.detok.step([token_id]))
        return start


def completion_logprobs(tokenizer: ServedTokenizer, entries: list[TokenLogprob], cursor: TextCursor) -> dict[str, Any]:
    """The legacy ``/v1/completions`` shape: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens, token_lps, top, offsets = [], [], [], []
    for e in entries:
        tokens.append(token_text(tokenizer, e.token_id))
        token_lps.append(e.logprob)
        top.append({token_text(tokenizer, t): lp for t, lp in e.top} if e.top else None)
        offsets.append(cursor.advance(e.token_id))
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": top, "text_offset": offsets}


def merge_completion_logprobs(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return b
    return {k: a[k] + b[k] for k in b}


def chat_logprobs(tokenizer: ServedTokenizer, entries: list[TokenLogprob], top_n: int) -> list[dict[str, Any]]:
    """The chat ``logprobs.content`` list: token, logprob, bytes, top_logprobs."""
    out = []
    for e in entries:
        tops = [{"token": token_text(tokenizer, t), "logprob": lp, "bytes": _token_bytes(tokenizer, t)}
                for t, lp in e.top[:top_n]]
        out.append({"token": token_text(tokenizer, e.token_id),
                    "logprob": e.logprob if e.logprob is not None else 0.0,
                    "bytes": _token_bytes(tokenizer, e.token_id), "top_logprobs": tops})
    return out
