"""Ollama's ``/api/chat`` and ``/api/generate`` bodies: checked, then written as a chat-completions body.

``options`` map onto the sampler (``num_predict`` -> ``max_tokens``, -1 / -2: no limit but the
context; ``repeat_penalty`` -> ``repetition_penalty``); options that tune Ollama's runner
(``num_ctx``, ``num_gpu``, ``num_thread``, ...) are named in the ignored-fields header. ``format``
is ``"json"`` (any JSON object) or a JSON schema (the answer follows it). ``think`` is the chat
template's ``enable_thinking`` (a level, ``low`` / ``medium`` / ``high``: its ``reasoning_effort``).
``stream`` defaults to true, as in Ollama. Messages carry no call ids: an assistant's calls get
``call_<turn>_<n>``, a tool message ``tool_name`` as its id. Images are a 400 (text-only model).
``suffix`` on ``/api/generate`` asks for the code between ``prompt`` and it (fill-in-the-middle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.server.chat_pipeline import ParamMap
from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import FieldReader, UnknownFields

DROPPED = frozenset({"keep_alive", "logprobs", "top_logprobs", "truncate", "shift", "dimensions"})
# settings of Ollama's own runner: accepted without effect (named in the header)
RUNNER_OPTIONS = frozenset({"num_ctx", "num_gpu", "num_thread", "num_batch", "main_gpu", "use_mmap", "use_mlock",
                            "numa", "num_keep", "typical_p", "repeat_last_n", "penalize_newline", "low_vram",
                            "vocab_only", "f16_kv", "logits_all", "tfs_z", "mirostat", "mirostat_tau",
                            "mirostat_eta"})
# option -> (chat field, kind, lo, hi)
SAMPLER_OPTIONS: dict[str, tuple[str, str, float | None, float | None]] = {
    "temperature": ("temperature", "number", 0.0, 2.0), "top_p": ("top_p", "number", 0.0, 1.0),
    "top_k": ("top_k", "int", None, None), "min_p": ("min_p", "number", 0.0, 1.0),
    "seed": ("seed", "int", None, None), "presence_penalty": ("presence_penalty", "number", -2.0, 2.0),
    "frequency_penalty": ("frequency_penalty", "number", -2.0, 2.0),
    "repeat_penalty": ("repetition_penalty", "number", 0.0, None), "stop": ("stop", "list", None, None)}
PARAMS = ParamMap((
    ("max_tokens", "options.num_predict"), ("temperature", "options.temperature"), ("top_p", "options.top_p"),
    ("top_k", "options.top_k"), ("min_p", "options.min_p"), ("seed", "options.seed"),
    ("presence_penalty", "options.presence_penalty"), ("frequency_penalty", "options.frequency_penalty"),
    ("repetition_penalty", "options.repeat_penalty"), ("stop", "options.stop"),
    (r"response_format\.json_schema\.schema", "format"), ("response_format", "format"),
))
# /api/generate: the chat messages are made of its prompt (and system), so they are named as "prompt"
GENERATE_PARAMS = ParamMap((("messages", "prompt"), *PARAMS.rules))


@dataclass(frozen=True)
class OllamaRequest:
    """A checked body: ``chat`` the chat-completions body; ``prompt`` set for ``/api/generate``
    (``raw``: used as it is, no template)."""

    chat: dict[str, Any]
    model: str | None
    stream: bool = True
    prompt: str | None = None
    raw: bool = False
    suffix: str | None = None  # fill-in-the-middle: the code after the gap (``prompt`` is before it)
    ignored: UnknownFields = field(default_factory=UnknownFields)


def _common(r: FieldReader, chat: dict[str, Any]) -> tuple[str | None, bool]:
    """The fields both routes read: model, options, format, think, stream."""
    model = r.get("model", "str", required=True)
    _options(r, chat)
    fmt = r.get("format", ("str", "object"))
    if fmt == "json":
        chat["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt}}
    elif fmt not in (None, ""):
        raise bad_request(f"'format' must be \"json\" or a JSON schema object, got {fmt!r}", param="format",
                          code="invalid_value")
    think = r.get("think", ("bool", "str"))
    if isinstance(think, str):
        if think not in ("low", "medium", "high"):
            raise bad_request(f"'think' must be a boolean or low, medium or high, got {think!r}", param="think",
                              code="invalid_value")
        chat["reasoning_effort"] = think
    elif think is not None:
        chat["chat_template_kwargs"] = {"enable_thinking": think}
    stream = r.get("stream", "bool", True)
    chat["stream"] = True  # the engine request streams either way: the durations need the first token's time
    return model.removesuffix(":latest"), stream


def _options(r: FieldReader, chat: dict[str, Any]) -> None:
    raw = r.get("options", "object")
    if raw is None:
        return
    o = r.sub(raw, "options")
    for key, (target, kind, lo, hi) in SAMPLER_OPTIONS.items():
        value = o.get(key, kind, lo=lo, hi=hi)
        if value is not None:
            chat[target] = value
    predict = o.get("num_predict", "int", lo=-2)
    if predict == 0:
        raise bad_request("'options.num_predict' must be positive, or -1 / -2 for no limit but the context",
                          param="options.num_predict", code="out_of_range")
    if predict is not None and predict > 0:
        chat["max_tokens"] = predict
    o.reject_unknown(RUNNER_OPTIONS)


def parse_chat(body: dict[str, Any], strict: bool = False) -> OllamaRequest:
    """Check an ``/api/chat`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    raw = r.get("messages", "list", required=True)
    chat: dict[str, Any] = {"messages": [_message(m, f"messages[{i}]", i) for i, m in enumerate(raw)]}
    if not raw:
        raise bad_request("'messages' must not be empty", param="messages", code="invalid_value")
    tools = r.get("tools", "list")
    if tools:
        chat["tools"] = tools
    model, stream = _common(r, chat)
    r.reject_unknown(DROPPED)
    return OllamaRequest(chat, model, stream, ignored=r.unknown)


def parse_generate(body: dict[str, Any], strict: bool = False) -> OllamaRequest:
    """Check an ``/api/generate`` body; an empty ``prompt`` asks only that the model be loaded."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    prompt = r.get("prompt", "str", "")
    raw = r.get("raw", "bool", False)
    system = r.get("system", "str")
    suffix = r.get("suffix", "str")
    for key in ("template", "context"):
        if r.get(key, ("str", "list")) not in (None, "", []):
            raise bad_request(f"'{key}' is not supported by this server (it renders the model's own chat "
                              "template; send a conversation to /api/chat)", param=key, code="unsupported_parameter")
    if r.get("images", "list"):
        raise bad_request("'images' is not supported: this server serves a text-only model", param="images",
                          code="unsupported_parameter")
    messages = ([{"role": "system", "content": system}] if system and not raw else []) + \
        [{"role": "user", "content": prompt}]
    chat: dict[str, Any] = {"messages": messages}
    model, stream = _common(r, chat)
    r.reject_unknown(DROPPED)
    return OllamaRequest(chat, model, stream, prompt=prompt, raw=raw, suffix=suffix or None, ignored=r.unknown)


def _message(m: Any, path: str, turn: int) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
    r = FieldReader(m, path)
    role = r.get("role", "str", required=True, choices=("system", "user", "assistant", "tool"))
    out: dict[str, Any] = {"role": role, "content": r.get("content", "str", "")}
    if r.get("images", "list"):
        raise bad_request(f"'{path}.images' is not supported: this server serves a text-only model",
                          param=f"{path}.images", code="unsupported_parameter")
    calls = r.get("tool_calls", "list") if role == "assistant" else None
    if calls:
        out["tool_calls"] = [_call(c, f"{path}.tool_calls[{j}]", f"call_{turn}_{j}") for j, c in enumerate(calls)]
    thinking = r.get("thinking", "str")
    if thinking and role == "assistant":
        out["reasoning_content"] = thinking
    name = r.get("tool_name", "str")
    if role == "tool":
        out["tool_call_id"] = name or ""
        if name:
            out["name"] = name
    r.reject_unknown()
    return out


def _call(call: Any, path: str, call_id: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
    r = FieldReader(call, path)
    fn = r.sub(r.get("function", "object", required=True), "function")
    name = fn.get("name", "str", required=True)
    args = fn.get("arguments", "object", {})
    fn.get("index", "int")
    fn.reject_unknown()
    r.get("id", "str")
    r.reject_unknown()
    return {"id": call.get("id") or call_id, "type": "function", "function": {"name": name, "arguments": args}}
