"""Streams in other APIs' framings: named SSE events (Responses, Anthropic) and NDJSON lines (Ollama).

As :func:`radixlm.runtime.server.sse.write_stream` does for OpenAI's chunks, the first event is
awaited before the response starts, so an error raised before any output (bad input, a full queue,
an uncompilable schema) is still a proper HTTP status in the API's error shape; an error after that
is sent in-band, framed by the route, and ends the stream. A client that leaves closes the event
iterator, which aborts its engine requests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web
from radixlm.runtime.server.http_errors import APIError, from_exception

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
