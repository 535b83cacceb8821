"""``/tokenize`` with ``messages`` and ``tools``: the tokens are the chat prompt's, tools included
(rendered as a chat request renders them), and ``tool_choice: "none"`` leaves them out as it does."""

from __future__ import annotations

import json
import urllib.request

import pytest
from radixlm.runtime.server.chat.tools import parse_tools

MSG = [{"role": "user", "content": "What time is it in Lima?"}]
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                           "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                          "required": ["zone"]}}}]


def _post(server, body: dict, path: str = "/tokenize") -> tuple[int, dict]:
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tokens_equal_the_chat_prompt_with_tools(server):
    tok = server.engine.tokenizer
    status, out = _post(server, {"messages": MSG, "tools": TOOLS})
    assert status == 200, out
    rendered = [t.to_template() for t in parse_tools(TOOLS)]  # the chat route's rendering of the tools
    prompt = tok.apply_chat_template(MSG, tools=rendered, add_generation_prompt=True)
    assert out["tokens"] == tok.encode(prompt, add_special_tokens=False) and out["count"] == len(out["tokens"])
    chat = _post(server, {"messages": MSG, "tools": TOOLS, "max_tokens": 1}, "/v1/chat/completions")[1]
    assert chat["usage"]["prompt_tokens"] == out["count"]
    assert "get_time" in tok.decode(out["tokens"], skip_special_tokens=False)
    bare = _post(server, {"messages": MSG})[1]
    assert bare["count"] < out["count"]
    assert _post(server, {"messages": MSG, "tools": TOOLS, "tool_choice": "none"})[1]["tokens"] == bare["tokens"]


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": MSG, "tools": [{"type": "function"}]}, "tools[0].function"),
    ({"messages": MSG, "tools": "get_time"}, "tools"),
])
def test_bad_tools_are_a_400_naming_the_field(server, body, param):
    status, out = _post(server, body)
    assert status == 400 and out["error"]["param"] == param, out
