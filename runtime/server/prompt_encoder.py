"""Prompt text to token ids off the event loop, after a cheap size check on the raw text.

Tokenizing (and chat-template rendering) costs time linear in the text, so a multi-megabyte prompt
run in a handler would stall every route. :class:`PromptEncoder` first compares the text's length
with ``max_chars``, the most characters a prompt that fits the context can have: every token
covers at most ``longest`` bytes of text (the vocabulary's longest token, at least one character
each), so a prompt of more than ``context_len * longest`` characters needs more than
``context_len`` tokens; ``NORMALIZER_SLACK`` covers normalizers that compose characters (Unicode
NFC / NFKC shrink UTF-8 text at most 3x; a normalizer that deletes text is not covered). Such a prompt is a 400 naming the field, before any tokenizing. The rest runs in a
small dedicated thread pool (``run``), and encoding goes through the tokenizer's GIL-releasing
batch path where it has one, so the event loop keeps serving meanwhile.

Utility routes (``/tokenize``, ``/detokenize``, token counting) run in a pool of their own
(``run_utility``, one thread), so a burst of them waits behind itself and never delays the
tokenizing of a generation request; they apply the same character bound first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from radixlm.runtime.server.http_errors import bad_request

T = TypeVar("T")
NORMALIZER_SLACK = 4
TOKENIZE_THREADS = 2
UTILITY_THREADS = 1


def longest_token_bytes(tokenizer: Any) -> int | None:
    """The byte length of the vocabulary's longest token (None when the tokenizer cannot tell)."""
    all_bytes = getattr(tokenizer, "all_token_bytes", None)
    if all_bytes is None:
        return None
    return max((len(b) for b in all_bytes()), default=0) or None


class PromptEncoder:
    """The size check and the tokenizer thread pool of one server."""

    def __init__(self, tokenizer: Any, context_len: int):
        self.tokenizer = tokenizer
        longest = longest_token_bytes(tokenizer) if context_len else None
        self.max_chars = context_len * longest * NORMALIZER_SLACK if longest else None
        self.pool = ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="radixlm-tokenize")
        self.utility_pool = ThreadPoolExecutor(UTILITY_THREADS, thread_name_prefix="radixlm-tokenize-utility")

    def check_chars(self, text: str | int, param: str) -> None:
        """400 naming ``param`` when ``text`` (or a count of characters) is more than any prompt that fits."""
        chars = text if isinstance(text, int) else len(text)
        if self.max_chars is not None and chars > self.max_chars:
            raise bad_request(f"'{param}': {chars} characters cannot fit the model's context (at most "
                              f"{self.max_chars} characters for this tokenizer and context length)",
                              param=param, code="context_length_exceeded")

    def encode_sync(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``, through the GIL-releasing batch path when the tokenizer has one."""
        batch = getattr(self.tokenizer, "encode_batch", None)
        if batch is not None:
            return batch([text], add_special_tokens=add_special_tokens)[0]
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    async def encode(self, text: str, param: str, add_special_tokens: bool = True) -> list[int]:
        """Check ``text``'s size, then encode it in the pool (400 naming ``param`` if it has no tokens)."""
        self.check_chars(text, param)
        ids = await self.run(self.encode_sync, text, add_special_tokens)
        if not ids:
            raise bad_request(f"{param} must be non-empty (it encodes to no tokens)", param=param,
                              code="invalid_value")
        return ids

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the tokenizer pool (template rendering, tokenizing)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def run_utility(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the utility routes' own pool (never ahead of a generation request's work)."""
        return await asyncio.get_running_loop().run_in_executor(self.utility_pool, fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.utility_pool.shutdown(wait=False, cancel_futures=True)


def text_chars(value: Any) -> int:
    """How many characters the strings inside ``value`` (nested dicts and lists, keys excluded) hold
    together. A chat template renders the messages' text whole, so messages whose strings exceed the
    character bound make a prompt that exceeds it too (``max_chars``' 4x slack covers dropped ids)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total
