"""Chat ``messages`` as the chat template wants them: roles checked, content as text, call args parsed.

Keys other clients send inside a message are accepted: ``reasoning_content`` (an assistant's earlier
thinking, passed to templates that render it), ``function_call`` (the legacy single call: read as
one tool call; ``null`` is nothing) and ``refusal``; the legacy ``function`` role (a function's
result, named by ``name``) is a tool message. Any other key follows the request's
:class:`~radixlm.runtime.server.request_fields.UnknownFields` policy (ignored, or a 400 when strict).
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import FieldReader

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_AS_ROLE = {"developer": "system", "function": "tool"}


def parse_messages(r: FieldReader) -> list[dict[str, Any]]:
    """``messages`` of a chat body: a non-empty list of messages (400 naming the bad one)."""
    raw = r.get("messages", "list", required=True)
    if not raw:
        raise bad_request("'messages' must not be empty", param="messages", code="invalid_value")
    return [_message(r, m, i) for i, m in enumerate(raw)]


def _message(parent: FieldReader, m: Any, i: int) -> dict[str, Any]:
    """One chat message, normalised for the template: content as a string, tool-call args as dicts."""
    prefix = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(f"'{prefix}' must be an object", param=prefix, code="invalid_type")
    r = parent.sub(m, prefix)
    role = r.get("role", "str", required=True, choices=ROLES)
    out: dict[str, Any] = {"role": _AS_ROLE.get(role, role),
                           "content": _content(r.get("content", ("str", "list")), f"{prefix}.content")}
    name = r.get("name", "str")
    if name is not None:
        out["name"] = name
    if role == "tool":
        out["tool_call_id"] = r.get("tool_call_id", "str", required=True)
    elif role == "function":
        out["tool_call_id"] = r.get("name", "str", required=True)
    calls = r.get("tool_calls", "list") if role == "assistant" else None
    legacy = r.get("function_call", "object")  # read for every role; only an assistant's is a call
    if role == "assistant" and not calls and legacy is not None:
        calls = [{"id": "", "type": "function", "function": legacy}]
    if calls:
        out["tool_calls"] = [_history_call(c, f"{prefix}.tool_calls[{j}]") for j, c in enumerate(calls)]
    elif role != "assistant" and out["content"] is None:
        raise bad_request(f"'{prefix}.content' is required for role '{role}'", param=f"{prefix}.content",
                          code="missing_field")
    thought = r.get("reasoning_content", "str")
    if role == "assistant" and thought is not None:
        out["reasoning_content"] = thought
    r.get("refusal", "str")
    r.reject_unknown()
    return out


def _content(content: Any, param: str) -> str | None:
    """Message content as text; array content must be text parts."""
    if content is None or isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise bad_request(f"'{param}[{j}]' must be a text part {{\"type\": \"text\", \"text\": ...}}; "
                              "other content types are not supported", param=f"{param}[{j}]",
                              code="invalid_type")
        texts.append(part["text"])
    return "".join(texts)


def _history_call(call: Any, prefix: str) -> dict[str, Any]:
    """An earlier assistant tool call, with ``arguments`` parsed for the chat template (its other
    keys, e.g. a streamed call's ``index``, are not needed and not checked)."""
    r = FieldReader(call, prefix)
    call_id = r.get("id", "str", "")
    r.get("type", "str", "function", choices=("function",))
    fn = r.sub(r.get("function", "object", required=True), "function")
    name = fn.get("name", "str", required=True)
    args = fn.get("arguments", ("str", "object"), "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise bad_request(f"'{prefix}.function.arguments' is not valid JSON: {e}",
                              param=f"{prefix}.function.arguments", code="invalid_json") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
