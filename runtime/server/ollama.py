"""Ollama's API (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/version``) on the chat pipeline.

What the served model is, for the routes that describe it (Ollama's ``/api/tags``, ``/api/show`` and
``/api/ps``), and its fill-in-the-middle markers (``suffix`` on ``/api/generate`` and ``/v1/completions``).

The family comes from the checkpoint's architecture (``Qwen2ForCausalLM`` -> ``qwen2``); the
parameter count is computed from the config's shapes (embeddings, attention and MLP projections,
norms, the LM head unless tied), so it is exact for the llama-style decoders served here; the size
is the bytes of the checkpoint's weight files.

Fill-in-the-middle needs the vocabulary's three markers, each one token: Qwen2.5-Coder's
``<|fim_prefix|>`` / ``<|fim_suffix|>`` / ``<|fim_middle|>`` or StarCoder's ``<fim_prefix>`` ...; the
prompt is prefix-suffix-middle (PSM), the order both families were trained on.

Ollama's ``/api/chat`` and ``/api/generate`` bodies: checked, then written as a chat-completions body.

``options`` map onto the sampler (``num_predict`` -> ``max_tokens``, -1 / -2: no limit but the
context; ``repeat_penalty`` -> ``repetition_penalty``); options that tune Ollama's runner
(``num_ctx``, ``num_gpu``, ``num_thread``, ...) are named in the ignored-fields header. ``format``
is ``"json"`` (any JSON object) or a JSON schema (the answer follows it). ``think`` is the chat
template's ``enable_thinking`` (a level, ``low`` / ``medium`` / ``high``: its ``reasoning_effort``).
``stream`` defaults to true, as in Ollama. Messages carry no call ids: an assistant's calls get
``call_<turn>_<n>``, a tool message ``tool_name`` as its id. Images are a 400 (text-only model).
``suffix`` on ``/api/generate`` asks for the code between ``prompt`` and it (fill-in-the-middle).

Ollama's API: ``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``
(``/api/embed``: :mod:`.openai.embeddings`).

Chat and generate (this module's request parser) run as one chat choice (:mod:`.chat.pipeline`); they
stream by default, as NDJSON lines (``"done": false`` deltas, then one ``"done": true`` line with
``done_reason`` -- ``stop`` or ``length`` -- and the counts ``prompt_eval_count`` / ``eval_count``);
``"stream": false`` answers one object. Tool calls come in ``message.tool_calls`` with their
arguments as an object (streamed: one line per complete call), the thinking in
``message.thinking`` (``thinking`` on generate). Durations are nanoseconds measured here, as
Ollama reports them: ``load_duration`` from the request's arrival to the engine request (the model is
resident: this is parsing, the template and tokenizing), ``prompt_eval_duration`` from there to the
first generated token, ``eval_duration`` from it to the last, ``total_duration`` the whole request.
``suffix`` on ``/api/generate`` is fill-in-the-middle (:func:`.chat.pipeline.fim_prompt`; a 400 for a
model without its tokens). ``/api/tags``, ``/api/show`` and ``/api/ps`` describe the served model
(:class:`ModelFacts`). Errors are ``{"error": "..."}``, whatever failed (the app's error middleware
answers the same shape for ``/api/`` paths: 401, 404, 405).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aiohttp import web
from radixlm.runtime.server.chat.pipeline import (
    ChatTurn,
    ChoiceEvent,
    ParamMap,
    fim_markers,
    fim_prompt,
    gather,
    start_chat,
    start_raw,
)
from radixlm.runtime.server.transport.body import (
    APIError,
    FieldReader,
    UnknownFields,
    bad_request,
    shaped_errors,
    with_route_names,
)
from radixlm.runtime.server.transport.sse import NDJSON_TYPE, ndjson_line, write_events
from radixlm.runtime.server.transport.state import RequestRecord, ServerState

from radixlm import __version__

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt")






@dataclass(frozen=True)
class ModelFacts:
    """The served model's name, family, size and shapes (None: not known for this checkpoint)."""

    name: str
    family: str
    format: str
    parameter_count: int | None
    size_bytes: int
    modified_at: str
    context_len: int
    quantization: str
    shapes: dict[str, int]


def model_facts(state: ServerState) -> ModelFacts:
    """The facts of ``state``'s model (reads the checkpoint's file sizes; no weights are loaded)."""
    cfg = state.engine.model_config
    args = state.engine.server_args
    files = _weight_files(state.model_path)
    shapes = {k: int(v) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                                  "intermediate_size", "vocab_size") if isinstance(v := getattr(cfg, k, None), int)}
    mtime = max((os.path.getmtime(f) for f in files), default=os.path.getmtime(state.model_path)
                if os.path.exists(state.model_path) else 0.0)
    quant = args.quantization or str(getattr(cfg, "torch_dtype", None) or args.dtype)
    return ModelFacts(
        name=state.model_name, family=family(cfg.architecture),
        format="gguf" if any(f.endswith(".gguf") for f in files) else "safetensors",
        parameter_count=parameter_count(cfg), size_bytes=sum(os.path.getsize(f) for f in files),
        modified_at=datetime.fromtimestamp(mtime, timezone.utc).isoformat(), context_len=state.context_len,
        quantization=quant.upper().replace("FLOAT", "F").replace("BFLOAT", "BF"), shapes=shapes)


def family(architecture: str) -> str:
    """``LlamaForCausalLM`` -> ``llama``, ``Gemma3ForCausalLM`` -> ``gemma3``."""
    return re.sub(r"For(CausalLM|ConditionalGeneration)$", "", architecture).lower() or "unknown"


def parameter_count(cfg: Any) -> int | None:
    """Parameters of a llama-style decoder from its config (None when a shape is missing)."""
    try:
        h, layers, inter, vocab = cfg.hidden_size, cfg.num_layers, cfg.intermediate_size, cfg.vocab_size
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    except AttributeError:
        return None
    attn = h * q + 2 * h * kv + q * h
    if getattr(cfg, "qkv_bias", False):
        attn += q + 2 * kv
    if getattr(cfg, "o_bias", False):
        attn += h
    if getattr(cfg, "qk_norm", False):
        attn += 2 * cfg.head_dim
    mlp = 3 * h * inter + (2 * inter + h if getattr(cfg, "mlp_bias", False) else 0)
    per_layer = attn + mlp + 2 * h  # two RMS norms
    head = 0 if getattr(cfg, "tie_word_embeddings", False) else vocab * h
    return vocab * h + layers * per_layer + h + head


def parameter_size(count: int | None) -> str:
    """``494032768`` -> ``"494.03M"`` (Ollama's ``parameter_size``)."""
    if count is None:
        return "unknown"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f}{unit}"
    return str(count)


def _weight_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        return []
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(WEIGHT_SUFFIXES))


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


KEEP_ALIVE_S = 3650 * 86400  # /api/ps's expires_at: the model is never unloaded
OLLAMA_NAMES: dict[str, tuple[str, ...]] = {"max_new_tokens": ("options.num_predict",), "stop": ("options.stop",)}
_DONE = {"length": "length", "abort": "abort"}  # other finishes (stop, tool calls): stop




def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class _Clock:
    """One request's phases, for Ollama's durations: submitted, first event, last event."""

    def __init__(self, record: RequestRecord):
        self.start = record.start
        self.submitted = self.last = time.perf_counter()
        self.first: float | None = None

    async def timed(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[ChoiceEvent]:
        """``events``, stamping the first and the last."""
        self.submitted = time.perf_counter()
        async with aclosing(events) as inner:
            async for ev in inner:
                self.last = time.perf_counter()
                if self.first is None and ev.kind != "finish":
                    self.first = self.last
                yield ev

    def durations(self) -> dict[str, int]:
        first = self.first if self.first is not None else self.last
        ns = lambda a, b: max(int((b - a) * 1e9), 0)  # noqa: E731
        return {"total_duration": ns(self.start, time.perf_counter()), "load_duration": ns(self.start, self.submitted),
                "prompt_eval_duration": ns(self.submitted, first), "eval_duration": ns(first, self.last)}


def _license(model_path: str) -> str:
    """The checkpoint folder's ``LICENSE`` text ("" without one)."""
    for name in ("LICENSE", "LICENSE.txt", "LICENSE.md"):
        path = os.path.join(model_path, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(65536)
    return ""


def _arguments(text: str) -> dict[str, Any]:
    value = json.loads(text) if text.strip() else {}
    return value if isinstance(value, dict) else {"value": value}


class OllamaRoutes:
    """Ollama's routes; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", shaped_errors(with_route_names(self.chat, OLLAMA_NAMES)))
        app.router.add_post("/api/generate", shaped_errors(with_route_names(self.generate, OLLAMA_NAMES)))
        app.router.add_get("/api/tags", shaped_errors(self.tags))
        app.router.add_post("/api/show", shaped_errors(self.show))
        app.router.add_get("/api/ps", shaped_errors(self.ps))
        app.router.add_get("/api/version", shaped_errors(self.version))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/api/chat") as record:
            req = parse_chat(await self.state.read_json(request), self.state.strict)
            return await self._answer(request, req, record, "message")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/api/generate") as record:
            req = parse_generate(await self.state.read_json(request), self.state.strict)
            if not req.prompt:  # Ollama's "load the model" request: it is loaded
                self.state.check_model(req.model)
                return web.json_response({"model": self.state.model_name, "created_at": _now(), "response": "",
                                          "done": True, "done_reason": "load"}, headers=req.ignored.report("/api/generate"))
            return await self._answer(request, req, record, "response")

    async def _answer(self, request: web.Request, req: OllamaRequest, record: RequestRecord,
                      shape: str) -> web.StreamResponse:
        """Run ``req``; ``shape`` is ``message`` (chat) or ``response`` (generate)."""
        self.state.check_model(req.model)
        headers = req.ignored.report(request.path)
        if req.suffix is not None:
            prompt = fim_prompt(self.state.tokenizer, req.prompt or "", req.suffix)
            turn = await start_raw(self.state, request, record, req.chat, PARAMS, prompt, "prompt")
        elif req.raw:
            turn = await start_raw(self.state, request, record, req.chat, PARAMS, req.prompt or "", "prompt")
        else:
            turn = await start_chat(self.state, request, record, req.chat,
                                    GENERATE_PARAMS if shape == "response" else PARAMS)
        clock = _Clock(record)
        if req.stream:
            on_error = lambda err: ndjson_line({"error": err.message})  # noqa: E731
            return await write_events(request, self._lines(turn, record, shape, clock), NDJSON_TYPE, on_error,
                                      headers)
        answer = await gather(clock.timed(turn.events()))  # a call the budget cut off is not in answer.calls
        if shape == "message":
            body: dict[str, Any] = {"message": {"role": "assistant", "content": answer.content}}
            if answer.reasoning:
                body["message"]["thinking"] = answer.reasoning
            if answer.calls:
                body["message"]["tool_calls"] = [{"function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                                                 for c in answer.calls]
        else:
            body = {"response": answer.content, **({"thinking": answer.reasoning} if answer.reasoning else {})}
        return web.json_response({"model": self.state.model_name, "created_at": _now(), **body,
                                  **self._done(record, answer.finish.finish_reason, clock)}, headers=headers)

    def _done(self, record: RequestRecord, finish: str | None, clock: _Clock) -> dict[str, Any]:
        return {"done": True, "done_reason": _DONE.get(finish or "stop", "stop"), **clock.durations(),
                "prompt_eval_count": record.prompt, "eval_count": record.completion}

    async def _lines(self, turn: ChatTurn, record: RequestRecord, shape: str, clock: _Clock) -> AsyncIterator[bytes]:
        call: dict[str, Any] | None = None  # the call being generated, sent whole once complete

        def line(**fields: Any) -> bytes:
            if shape == "message":
                msg = {"role": "assistant", "content": fields.pop("content", "")}
                msg.update((k, fields.pop(k)) for k in ("thinking", "tool_calls") if k in fields)
                fields["message"] = msg
            elif "content" in fields:
                fields["response"] = fields.pop("content")
            return ndjson_line({"model": self.state.model_name, "created_at": _now(), **fields})

        def flush() -> list[bytes]:
            nonlocal call
            done, call = call, None
            if done is None or shape != "message":
                return []
            return [line(tool_calls=[{"function": {"name": done["name"], "arguments": _arguments(done["args"])}}],
                         done=False)]

        async with aclosing(clock.timed(turn.events())) as events:
            async for ev in events:
                if ev.kind == "content" and ev.text:
                    yield line(content=ev.text, done=False)
                elif ev.kind == "reasoning" and ev.text:
                    yield line(thinking=ev.text, done=False)
                elif ev.kind == "call_start":
                    for out in flush():
                        yield out
                    call = {"name": ev.name or "", "args": ""}
                elif ev.kind == "call_args" and call is not None:
                    call["args"] += ev.text
                elif ev.kind == "finish":  # a call the budget cut is never among the events
                    for out in flush():
                        yield out
                    yield line(content="", **self._done(record, ev.finish_reason, clock))

    async def tags(self, request: web.Request) -> web.Response:
        return web.json_response({"models": [self._model_entry()]})

    def _model_entry(self) -> dict[str, Any]:
        facts = model_facts(self.state)
        return {"name": facts.name, "model": facts.name, "modified_at": facts.modified_at, "size": facts.size_bytes,
                "details": self._details(facts)}

    def _details(self, facts: Any) -> dict[str, Any]:
        return {"parent_model": "", "format": facts.format, "family": facts.family, "families": [facts.family],
                "parameter_size": parameter_size(facts.parameter_count), "quantization_level": facts.quantization}

    async def show(self, request: web.Request) -> web.Response:
        body = await self.state.read_json(request)
        model = body.get("model") or body.get("name")
        if not isinstance(model, str):
            raise bad_request("missing required field 'model'", param="model", code="missing_field")
        try:
            self.state.check_model(model.removesuffix(":latest"))
        except APIError:
            raise APIError(404, f"model '{model}' not found; this server serves '{self.state.model_name}'",
                           param="model", code="model_not_found") from None
        facts = model_facts(self.state)
        arch = facts.family
        info: dict[str, Any] = {"general.architecture": arch, "general.basename": facts.name,
                                f"{arch}.context_length": facts.context_len}
        if facts.parameter_count is not None:
            info["general.parameter_count"] = facts.parameter_count
        for key, name in (("hidden_size", "embedding_length"), ("num_layers", "block_count"),
                          ("num_heads", "attention.head_count"), ("num_kv_heads", "attention.head_count_kv"),
                          ("intermediate_size", "feed_forward_length"), ("vocab_size", "vocab_size")):
            if key in facts.shapes:
                info[f"{arch}.{name}"] = facts.shapes[key]
        template = self.state.tokenizer.chat_template or ""
        caps = ["completion", "tools"] + (["insert"] if fim_markers(self.state.tokenizer) else []) + \
            (["thinking"] if self.state.reasoning_format is not None else [])
        return web.json_response({
            "license": _license(self.state.model_path),
            "modelfile": f"FROM {self.state.model_path}\nPARAMETER num_ctx {facts.context_len}\n",
            "parameters": f"num_ctx {facts.context_len}", "template": template, "details": self._details(facts),
            "model_info": info, "capabilities": caps, "modified_at": facts.modified_at})

    async def ps(self, request: web.Request) -> web.Response:
        """The running models: the served one, resident for as long as the server runs."""
        entry = self._model_entry()
        expires = datetime.fromtimestamp(self.state.started_at + KEEP_ALIVE_S, timezone.utc)
        on_gpu = str(self.state.engine.server_args.device).startswith("cuda")  # "auto" counts as CPU here
        entry.update(digest=hashlib.sha256(f"{self.state.model_path}@{entry['modified_at']}".encode()).hexdigest(),
                     expires_at=expires.isoformat().replace("+00:00", "Z"), size_vram=entry["size"] if on_gpu else 0,
                     context_length=self.state.context_len)
        return web.json_response({"models": [entry]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__})
