"""Getting results from the engine thread to a ``generate`` call.

``RequestHandle`` is the channel of one call (shared by its requests); each request's
``Delivery`` (``req.delivery``) knows its index on that channel and how much of its output was
already streamed; ``ResultCollector`` turns the items a call receives into its return value or
stream chunks, the same way for the sync and the async API.
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass
from typing import Any


class RequestHandle:
    """Carries ``(index, kind, payload)`` items from the engine thread to one ``generate`` call.

    ``kind`` is ``"chunk"`` (a stream delta), ``"done"`` (the final result or last chunk) or
    ``"error"`` (an exception to raise in the caller). With an asyncio ``loop`` the items are
    delivered on that loop (``aget``); otherwise through a thread-safe queue (``get``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._sync: queue.Queue = queue.Queue()
        self._async: asyncio.Queue | None = asyncio.Queue() if loop is not None else None

    def put(self, index: int, kind: str, payload: Any) -> None:
        item = (index, kind, payload)
        if self._loop is None:
            self._sync.put(item)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._async.put_nowait, item)

    def get(self) -> tuple[int, str, Any]:
        return self._sync.get()

    async def aget(self) -> tuple[int, str, Any]:
        return await self._async.get()


@dataclass
class Delivery:
    """One request's place on its call's handle, and its stream offsets (text chars, token ids)."""

    handle: RequestHandle
    index: int
    created_at: float  # time.perf_counter() at submission
    text_len: int = 0
    ids_len: int = 0
    input_logprobs_sent: bool = False

    def put(self, kind: str, payload: Any) -> None:
        self.handle.put(self.index, kind, payload)


class ResultCollector:
    """The items of one call with ``count`` requests, turned into results or stream chunks."""

    def __init__(self, count: int, single: bool) -> None:
        self.count = count
        self.single = single  # one prompt with n == 1: return the dict, not a list of one
        self.done = 0
        self._results: list[Any] = [None] * count

    @property
    def complete(self) -> bool:
        return self.done == self.count

    def add(self, item: tuple[int, str, Any]) -> None:
        """Take a non-streamed item (raises the request's error)."""
        index, kind, payload = item
        if kind == "error":
            raise payload
        self._results[index] = payload
        self.done += 1

    def result(self) -> Any:
        return self._results[0] if self.single else self._results

    def chunk(self, item: tuple[int, str, Any]) -> dict[str, Any]:
        """A streamed item as the chunk to yield (raises the request's error); a batch's carry ``index``."""
        index, kind, chunk = item
        if kind == "error":
            raise chunk
        self.done += kind == "done"
        if self.count > 1:
            chunk["index"] = index
        return chunk
