"""The playground's route: one generation whose tokens stream with where each came from.

``POST /dashboard/api/playground`` takes ``{"prompt": str}`` or ``{"messages": [...]}`` (rendered
with the chat template), at most one of ``json_schema`` (an object), ``regex`` (a string) or
``tools`` (OpenAI's list: the answer is one call, constrained to the declared tools' schema), and
``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``, ``seed``. It answers an event stream:

- ``{"type": "prompt", "tokens": [str], "cached": int}``: the prompt's tokens as text and how many
  the radix cache served;
- ``{"type": "tokens", "offset": int, "tokens": [{"text", "origin"}]}``: replace the answer's
  tokens from ``offset`` (where the previous event ended); origins as in
  ``scheduler/req.py`` (``TokenOrigins``);
- ``{"type": "done", "text", "finish_reason", "json", "json_error", "completion_tokens",
  "cached_tokens", "forced_tokens", "closed_tokens", "notes"}``: the final text and, for a JSON
  schema or tools, its parsed value (or why it does not parse).

Errors before the first token (bad fields, a schema that does not compile) are a 400 naming the
field; the request runs in the caller's cache namespace, like any other of its requests.
"""

from __future__ import annotations

import codecs
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from radixlm.runtime.chat_formats.tools import call_schema
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.chat.tools import parse_tools
from radixlm.runtime.server.transport.body import FieldReader, bad_request
from radixlm.runtime.server.transport.state import RequestRecord, ServerState

MAX_NEW_TOKENS = 1024
SAMPLING_FIELDS = (("temperature", "number", 0.0, 2.0), ("top_p", "number", 0.0, 1.0),
                   ("top_k", "int", -1, None), ("seed", "int", 0, None))


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's share of the text: a character split across tokens goes to the token that ends it."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return [decoder.decode(tokenizer.id_to_bytes(t)) for t in ids]


def parse_playground(state: ServerState, body: dict[str, Any]) -> tuple[list[int], SamplingParams, str | None]:
    """The prompt's ids, the sampling params and the constraint kind of a playground body (400s)."""
    r = FieldReader(body)
    prompt, messages = r.get("prompt", "str"), r.get("messages", "list")
    if (prompt is None) == (messages is None):
        raise bad_request("send exactly one of 'prompt' and 'messages'", param="prompt", code="invalid_value")
    given = [k for k in ("json_schema", "regex", "tools") if body.get(k) is not None]
    if len(given) > 1:
        raise bad_request(f"at most one constraint may be set, got {', '.join(given)}", param=given[1],
                          code="invalid_value")
    schema, regex = r.get("json_schema", ("object", "bool")), r.get("regex", "str")
    tools = parse_tools(r.get("tools", "list")) if body.get("tools") is not None else []
    if tools:
        schema = call_schema(tools)
    fields: dict[str, Any] = {"max_new_tokens": r.get("max_new_tokens", "int", 128, lo=1, hi=MAX_NEW_TOKENS),
                              "return_token_origins": True, "json_schema": schema, "regex": regex}
    for name, kind, lo, hi in SAMPLING_FIELDS:
        value = r.get(name, kind, lo=lo, hi=hi)
        if value is not None:
            fields[name] = value
    r.reject_unknown()
    params = SamplingParams(**fields)
    if messages is not None:
        tool_dicts = [body["tools"][i] for i in range(len(tools))] or None
        try:
            text = state.tokenizer.apply_chat_template(messages, tools=tool_dicts, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template error is the messages' fault
            raise bad_request(f"'messages' cannot be rendered by the chat template: {e}", param="messages",
                              code="invalid_value") from None
        ids = state.tokenizer.encode(text, add_special_tokens=False)
    else:
        ids = state.tokenizer.encode(prompt, add_special_tokens=True)
    if not ids:
        raise bad_request("the prompt encodes to no tokens", param="messages" if messages else "prompt",
                          code="invalid_value")
    return ids, params, params.constraint_kind


async def playground_events(state: ServerState, request: web.Request, ids: list[int], params: SamplingParams,
                            record: RequestRecord) -> AsyncIterator[dict[str, Any]]:
    """The event stream of the module docstring (the engine's first chunk comes before any event);
    the run's tokens are counted in ``record`` (the request log line)."""
    tokenizer = state.tokenizer
    rid = f"playground-{uuid.uuid4().hex[:12]}"
    stream = state.stream(rid, input_ids=ids, sampling_params=params, extra_key=state.extra_key(request, None))
    out_ids: list[int] = []
    origins: list[str] = []
    first, text = True, ""
    async for chunk in stream:
        meta = chunk.get("meta_info", {})
        text += chunk.get("text", "")
        if first:
            first = False
            yield {"type": "prompt", "tokens": token_texts(tokenizer, ids), "cached": meta.get("cached_tokens", 0)}
        marks = meta.get("token_origins")
        if marks is not None:
            offset = marks["offset"]
            del out_ids[offset:], origins[offset:]
            out_ids += marks["ids"]
            origins += marks["origins"]
            texts = token_texts(tokenizer, out_ids)[offset:]
            yield {"type": "tokens", "offset": offset,
                   "tokens": [{"text": t, "origin": o} for t, o in zip(texts, origins[offset:])]}
        if meta.get("finish_reason") is not None:
            record.add(meta)
            yield _done(text, meta, params, origins)


def _done(text: str, meta: dict[str, Any], params: SamplingParams, origins: list[str]) -> dict[str, Any]:
    parsed, error = None, None
    if params.json_schema is not None:
        try:
            parsed = json.loads(text)
        except ValueError as e:
            error = f"not JSON: {e}"
    finish = meta.get("finish_reason") or {}
    return {"type": "done", "text": text, "finish_reason": finish.get("type"), "json": parsed,
            "json_error": error, "completion_tokens": meta.get("completion_tokens", 0),
            "cached_tokens": meta.get("cached_tokens", 0), "forced_tokens": origins.count("forced"),
            "closed_tokens": origins.count("closed"), "notes": meta.get("constraint_notes", [])}
