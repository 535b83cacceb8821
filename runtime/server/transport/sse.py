"""Streaming responses: OpenAI's server-sent events, other APIs' named events and NDJSON, and merging choices'
streams.

Server-sent events and concurrency helpers shared by the native and the OpenAI routes.

A stream is ``data: {json}\n\n`` events ending with ``data: [DONE]\n\n``. Routes fetch the first
chunk before sending any header, so an error that the engine raises at submission (bad input,
a full queue, an uncompilable schema) still becomes a proper HTTP status instead of a broken stream.

Streams in other APIs' framings: named SSE events (Responses, Anthropic) and NDJSON lines (Ollama).

As :func:`radixlm.runtime.server.transport.sse.write_stream` does for OpenAI's chunks, the first event is
awaited before the response starts, so an error raised before any output (bad input, a full queue,
an uncompilable schema) is still a proper HTTP status in the API's error shape; an error after that
is sent in-band, framed by the route, and ends the stream. A client that leaves closes the event
iterator, which aborts its engine requests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from aiohttp import web
from radixlm.runtime.server.transport.body import APIError, from_exception

T = TypeVar("T")
DONE = b"data: [DONE]\n\n"


async def open_stream(request: web.Request, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Start a 200 event stream (``headers`` added to the SSE ones)."""
    resp = web.StreamResponse(status=200, headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
        **(headers or {})})
    await resp.prepare(request)
    return resp


async def send_event(resp: web.StreamResponse, obj: Any) -> None:
    """One ``data:`` event; raises ``ConnectionResetError`` when the client has gone."""
    await resp.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")


async def write_stream(request: web.Request, events: AsyncIterator[Any],
                       headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Send every object of ``events`` as an SSE event, then ``[DONE]`` (``headers`` go on the response).

    The first event is awaited before the response starts (see the module docstring). An error
    after that is sent as one last ``{"error": ...}`` event. If the client disconnects, the event
    iterator is closed, which aborts its engine requests.
    """
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await _close(events)
        raise
    resp = await open_stream(request, headers)
    try:
        if first is not None:
            await send_event(resp, first)
            async for obj in events:
                await send_event(resp, obj)
    except (ConnectionResetError, asyncio.CancelledError):
        await _close(events)
        raise
    except Exception as e:  # the stream has started: report in-band
        await _close(events)
        await resp.write(from_exception(e).to_sse())
    await resp.write(DONE)
    await resp.write_eof()
    return resp


async def _close(events: AsyncIterator[Any]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def gather_all(aws: list[Awaitable[T]]) -> list[T]:
    """Like ``asyncio.gather``, but the first failure cancels the rest (their requests abort)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def merge_streams(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Interleave several async iterators as ``(index, item)`` in arrival order.

    The first error is re-raised; leaving early (or an error) cancels and closes every stream.
    """
    if len(streams) == 1:  # the common case needs no tasks
        async with aclosing(streams[0]) as only:
            async for item in only:
                yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, it: AsyncIterator[T]) -> None:
        try:
            async with aclosing(it):
                async for item in it:
                    await queue.put((i, item, None))
            await queue.put((i, None, None))
        except Exception as e:
            await queue.put((i, None, e))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            i, item, err = await queue.get()
            if err is not None:
                raise err
            if item is None:
                remaining -= 1
                continue
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


SSE_TYPE = "text/event-stream"
NDJSON_TYPE = "application/x-ndjson"


def named_event(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event with an ``event:`` line (the Responses and Anthropic framings)."""
    return f"event: {name}\ndata: ".encode() + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def ndjson_line(data: dict[str, Any]) -> bytes:
    """One NDJSON line (Ollama's framing)."""
    return json.dumps(data, ensure_ascii=False).encode() + b"\n"


async def write_events(request: web.Request, events: AsyncIterator[bytes], content_type: str,
                       on_error: Callable[[APIError], bytes], headers: dict[str, str] | None = None
                       ) -> web.StreamResponse:
    """Send each framed event of ``events`` (see the module docstring); ``on_error`` frames a late error."""
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await events.aclose()
        raise
    extra = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"} if content_type == SSE_TYPE else {}
    resp = web.StreamResponse(status=200, headers={"Content-Type": content_type, **extra, **(headers or {})})
    await resp.prepare(request)
    try:
        if first is not None:
            await resp.write(first)
            async for data in events:
                await resp.write(data)
    except (ConnectionResetError, asyncio.CancelledError):
        await events.aclose()
        raise
    except Exception as e:  # the stream has started: report in-band
        await events.aclose()
        await resp.write(on_error(from_exception(e)))
    await resp.write_eof()
    return resp
