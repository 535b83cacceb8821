"""OpenAI's API: ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (the latter on the chat
pipeline).

OpenAI response shapes (pydantic models): the envelope every completion and stream chunk shares, and usage.

The routes build each ``choices[i]`` object themselves (its keys depend on the route and on
radixlm's extensions, e.g. ``constraint_violations``); these models give the outer object its
fields and their order, and turn it into the JSON-ready dict the routes send.

The OpenAI-compatible routes: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``.

Each choice (``n`` of them per prompt) is its own engine request; siblings share the prompt's KV
through the radix cache. ``usage`` counts each prompt once and reports the cached part in
``prompt_tokens_details.cached_tokens``. Structured outputs map onto the engine's constraints:
``response_format`` json_object / json_schema -> ``sampling_params`` json_object / json_schema;
tool calls are described in :mod:`radixlm.runtime.server.chat.tools` (the legacy ``functions`` /
``function_call`` are tools whose one call is answered as ``function_call``). ``suffix`` on
``/v1/completions`` is fill-in-the-middle (:func:`.chat.pipeline.fim_prompt`). A lenient constraint
(``json_schema.strict: false``) adds radixlm's ``constraint_violations`` to each choice (streamed: to
its finishing chunk): the engine's check of the output against the whole constraint, ``[]`` if valid.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field
from radixlm.runtime.sampling_params import SamplingParams, choice_seed
from radixlm.runtime.server.chat.pipeline import (
    ChatTurn,
    ChoiceEvent,
    LegacyFunctionNames,
    ParamMap,
    TextCursor,
    check_fan_out,
    completion_logprobs,
    extract,
    fim_prompt,
    gather,
    merge_completion_logprobs,
    new_id,
    open_chat,
)
from radixlm.runtime.server.chat.request import (
    IGNORED_FIELDS,
    MAX_N,
    ChatRequest,
    parse_chat_request,
    read_extensions,
    read_sampler_fields,
    read_stream_options,
    strict_reader,
)
from radixlm.runtime.server.transport.body import (
    OPENAI_NAMES,
    UnknownFields,
    bad_request,
    check_token_ids,
    is_kind,
    read_cache_salt,
    with_route_names,
)
from radixlm.runtime.server.transport.sse import gather_all, merge_streams, write_stream
from radixlm.runtime.server.transport.state import RequestRecord, ServerState


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    """Token counts of a whole request: each prompt counted once, its cached part in the details."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def count(cls, prompt: int, completion: int, cached: int) -> Usage:
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


class Envelope(BaseModel):
    """The outer object of a completion (``text_completion``, ``chat.completion``) or a stream chunk
    (``chat.completion.chunk``; completions' chunks are ``text_completion`` too)."""

    id: str
    object: str
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[dict[str, Any]]
    system_fingerprint: str | None = None
    usage: Usage | None = None

    def to_dict(self, with_usage: bool) -> dict[str, Any]:
        """The JSON-ready dict; ``with_usage=False`` leaves the ``usage`` key out (a null usage stays
        in where the client asked for usage: every chunk but the last then has ``"usage": null``)."""
        return self.model_dump(exclude=None if with_usage else {"usage"})


def envelope(obj: str, rid: str, model: str, choices: list[dict], usage: Usage | None = None) -> dict:
    """The outer object as a dict: ``usage`` present when given, and always on a ``.chunk`` object."""
    return Envelope(id=rid, object=obj, model=model, choices=choices, usage=usage).to_dict(
        with_usage=usage is not None or obj.endswith(".chunk"))


def finish_reason(meta: dict[str, Any]) -> str | None:
    """Engine ``finish_reason`` {type, matched} -> OpenAI's string."""
    fr = meta.get("finish_reason")
    if fr is None:
        return None
    kind = fr.get("type") if isinstance(fr, dict) else str(fr)
    return {"stop": "stop", "length": "length"}.get(kind, kind)


COMPLETION_MAX_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions


@dataclass(frozen=True)
class CompletionRequest:
    """A parsed ``POST /v1/completions`` body; ``prompts`` holds text or token-id lists."""

    model: str | None
    prompts: list[str | list[int]]
    sampling: SamplingParams  # choice j of a prompt draws with seed + j
    n: int = 1
    echo: bool = False
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace
    rid: str | None = None  # SGLang's request id: /abort_request takes it
    constraint_field: str | None = None  # the request field holding a regex / ebnf / schema extension
    ignored: UnknownFields = field(default_factory=UnknownFields)
    suffix: str | None = None  # fill-in-the-middle: each prompt is the code before the gap, this after it


def parse_completion_request(body: dict[str, Any], strict: bool = False) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = strict_reader(body, strict)
    model = r.get("model", "str")
    raw = r.get("prompt", ("str", "list"), required=True)
    prompts = _prompts(raw)
    sampler = read_sampler_fields(r, ("max_tokens",))
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    echo = r.get("echo", "bool", False)
    suffix = r.get("suffix", "str") or None
    if suffix is not None and (echo or not all(isinstance(p, str) for p in prompts)):
        raise bad_request("'suffix' (fill-in-the-middle) takes text prompts and no 'echo'", param="suffix",
                          code="invalid_value")
    logprobs = r.get("logprobs", "int", lo=0, hi=20)
    stream = r.get("stream", "bool", False)
    include_usage = read_stream_options(r, stream)
    salt = read_cache_salt(r)
    rid, constraint, source = read_extensions(r)
    r.reject_unknown(IGNORED_FIELDS)
    sampling = SamplingParams(**{"max_new_tokens": COMPLETION_MAX_TOKENS, **sampler, **constraint})
    return CompletionRequest(model, prompts, sampling, n=n, echo=echo, logprobs=logprobs, stream=stream,
                             include_usage=include_usage, salt=salt, rid=rid, constraint_field=source,
                             ignored=r.unknown, suffix=suffix)


def _prompts(raw: Any) -> list[str | list[int]]:
    """``prompt``: a string, a list of strings, a token-id list, or a list of token-id lists."""
    if isinstance(raw, str):
        raw = [raw]
    if not raw:
        raise bad_request("'prompt' must not be empty", param="prompt", code="invalid_value")
    if all(is_kind(t, "int") for t in raw):
        return [check_token_ids(raw, "prompt")]
    out: list[str | list[int]] = []
    for i, p in enumerate(raw):
        if isinstance(p, list):
            out.append(check_token_ids(p, f"prompt[{i}]"))
        elif isinstance(p, str) and p:
            out.append(p)
        else:
            raise bad_request(f"'prompt[{i}]' must be a non-empty string or an array of token ids",
                              param=f"prompt[{i}]", code="invalid_type")
    return out


class OpenAIRoutes:
    """Handlers of the OpenAI API; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state
        self.strict = state.strict  # unknown fields: 400

    def register(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model:.+}", self.model)
        app.router.add_post("/v1/completions", with_route_names(self.completions, OPENAI_NAMES))
        app.router.add_post("/v1/chat/completions", with_route_names(self.chat, OPENAI_NAMES))

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.state.model_name, "object": "model", "created": int(self.state.started_at),
                "owned_by": "radixlm", "root": self.state.model_path, "max_model_len": self.state.context_len}

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        self.state.check_model(request.match_info["model"])
        return web.json_response(self._model_card())

    # ------------------------------------------------------------------ completions

    async def completions(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/v1/completions") as record:
            req = parse_completion_request(await self.state.read_json(request), self.strict)
            self.state.check_model(req.model)
            if req.suffix is not None:  # fill-in-the-middle: the prompts become the model's FIM layout
                req = replace(req, prompts=[fim_prompt(self.state.tokenizer, p, req.suffix) for p in req.prompts])
            check_fan_out(self.state.engine.server_args, [req.n] * len(req.prompts), "prompt", "n")
            record.id = req.rid or record.id
            headers = req.ignored.report("/v1/completions")
            jobs = [(p, j) for p in range(len(req.prompts)) for j in range(req.n)]
            rid = new_id("cmpl")
            extra_key = self.state.extra_key(request, req.salt)
            ids = await self._encoded(req)
            if req.stream:
                return await write_stream(request, self._completion_chunks(req, ids, jobs, rid, record, extra_key),
                                          headers)
            results = await gather_all([
                self.state.generate(self.state.new_rid(record, f"-{k}"),
                                    **self._completion_kwargs(req, ids, p, j, extra_key))
                for k, (p, j) in enumerate(jobs)])
            choices = []
            for k, ((p, j), res) in enumerate(zip(jobs, results)):
                meta = res.get("meta_info", {})
                record.add(meta, prompt=j == 0)
                text = (self._prompt_text(req, p) if req.echo else "") + res.get("text", "")
                lps = self._completion_lps(req, res, req.echo, self._cursor(len(text) - len(res.get("text", ""))))
                choice = {"index": k, "text": text, "finish_reason": finish_reason(meta), "logprobs": lps}
                with_budget_closed(choice, bool(meta.get("budget_closed")), meta.get("constraint_notes"))
                choices.append(with_violations(choice, meta.get("constraint_violations")))
            usage = Usage.count(record.prompt, record.completion, record.cached)
            return web.json_response(envelope("text_completion", rid, self.state.model_name, choices, usage),
                                     headers=headers)

    async def _encoded(self, req: CompletionRequest) -> list[list[int]]:
        """Each prompt's token ids, text tokenized off the event loop (every size check first)."""
        params = [f"prompt[{i}]" if len(req.prompts) > 1 else "prompt" for i in range(len(req.prompts))]
        for prompt, param in zip(req.prompts, params):
            if isinstance(prompt, str):
                self.state.prompts.check_chars(prompt, param)
        return await gather_all([self.state.prompts.encode(p, param) if isinstance(p, str) else _ready(p)
                                 for p, param in zip(req.prompts, params)])

    def _completion_kwargs(self, req: CompletionRequest, ids: list[list[int]], p: int, j: int,
                           extra_key: str | None) -> dict[str, Any]:
        sampling = req.sampling
        if sampling.seed is not None:
            sampling = sampling.replace(seed=choice_seed(sampling.seed, j))  # choices must differ even with a fixed seed
        kwargs: dict[str, Any] = {"sampling_params": sampling, "extra_key": extra_key, "input_ids": ids[p]}
        if req.logprobs is not None:
            kwargs.update(return_logprob=True, top_logprobs_num=req.logprobs)
            if req.echo:
                kwargs["logprob_start_len"] = 0
        return kwargs

    def _prompt_text(self, req: CompletionRequest, p: int) -> str:
        prompt = req.prompts[p]
        return prompt if isinstance(prompt, str) else self.state.tokenizer.decode(prompt)

    def _cursor(self, offset: int) -> TextCursor:
        return TextCursor(self.state.tokenizer, offset)

    def _completion_lps(self, req: CompletionRequest, res: dict, with_prompt: bool,
                        cursor: TextCursor) -> dict | None:
        """Logprobs of one result or chunk, placed in the choice's text by ``cursor``; ``with_prompt``
        (echo, first chunk) prepends the prompt's, from offset 0."""
        if req.logprobs is None:
            return None
        tok, meta = self.state.tokenizer, res.get("meta_info", {})
        out = completion_logprobs(tok, extract(meta, None, "input"), self._cursor(0)) if with_prompt else None
        return merge_completion_logprobs(out, completion_logprobs(tok, extract(meta, res.get("output_ids")),
                                                                  cursor))

    async def _completion_chunks(self, req: CompletionRequest, ids: list[list[int]], jobs: list[tuple[int, int]],
                                 rid: str, record: RequestRecord, extra_key: str | None) -> AsyncIterator[dict]:
        streams = [self.state.stream(self.state.new_rid(record, f"-{k}"),
                                     **self._completion_kwargs(req, ids, p, j, extra_key))
                   for k, (p, j) in enumerate(jobs)]
        sent: dict[int, TextCursor] = {}  # where each choice's next token starts in its text
        async with aclosing(merge_streams(streams)) as merged:
            async for k, chunk in merged:
                for out in self._completion_chunk(req, jobs, rid, record, sent, k, chunk):
                    yield out
        if req.include_usage:
            usage = Usage.count(record.prompt, record.completion, record.cached)
            yield envelope("text_completion", rid, self.state.model_name, [], usage)

    def _completion_chunk(self, req: CompletionRequest, jobs: list[tuple[int, int]], rid: str,
                          record: RequestRecord, sent: dict[int, TextCursor], k: int, chunk: dict) -> list[dict]:
        """The OpenAI chunk (if any) for engine chunk ``chunk`` of job ``k``."""
        p, j = jobs[k]
        meta = chunk.get("meta_info", {})
        reason = finish_reason(meta)
        if reason is not None:
            record.add(meta, prompt=j == 0)
        first = k not in sent
        text = (self._prompt_text(req, p) if req.echo and first else "") + chunk.get("text", "")
        if first:
            sent[k] = self._cursor(len(text) - len(chunk.get("text", "")))
        lps = self._completion_lps(req, chunk, req.echo and first, sent[k])
        if not (text or reason or lps):
            return []
        choice = {"index": k, "text": text, "logprobs": lps, "finish_reason": reason}
        if reason is not None:
            with_violations(choice, meta.get("constraint_violations"))
            with_budget_closed(choice, bool(meta.get("budget_closed")), meta.get("constraint_notes"))
        return [self._chunk("text_completion", rid, [choice], req.include_usage)]

    def _chunk(self, obj: str, rid: str, choices: list[dict], include_usage: bool) -> dict:
        """A stream chunk; ``"usage": null`` on every chunk when the client asked for usage."""
        return Envelope(id=rid, object=obj, model=self.state.model_name, choices=choices).to_dict(include_usage)

    # ------------------------------------------------------------------ chat

    async def chat(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/v1/chat/completions") as record:
            req = parse_chat_request(await self.state.read_json(request), self.strict,
                                     self.state.max_new_tokens_default)
            self.state.check_model(req.model)
            record.id = req.rid or record.id
            headers = req.ignored.report("/v1/chat/completions")
            params = LegacyFunctionNames() if req.legacy_functions else ParamMap()
            turn = await open_chat(self.state, request, record, req, params)
            rid = new_id("chatcmpl")
            if req.stream:
                return await write_stream(request, self._chat_chunks(turn, rid, record), headers)
            choices = await gather_all([_collect(turn, j) for j in range(req.n)])
            usage = Usage.count(record.prompt, record.completion, record.cached)
            return web.json_response(envelope("chat.completion", rid, self.state.model_name, choices, usage),
                                     headers=headers)

    async def _chat_chunks(self, turn: ChatTurn, rid: str, record: RequestRecord) -> AsyncIterator[dict]:
        req = turn.req
        async with aclosing(merge_streams([turn.events(j) for j in range(req.n)])) as merged:
            try:
                first = await anext(merged)  # engine errors surface before any byte is sent
            except StopAsyncIteration:
                return
            for j in range(req.n):
                yield self._chat_chunk(req, rid, j, {"role": "assistant", "content": ""})
            k, ev = first
            chunk = self._event_chunk(req, rid, k, ev)
            if chunk is not None:
                yield chunk
            async for k, ev in merged:
                chunk = self._event_chunk(req, rid, k, ev)
                if chunk is not None:
                    yield chunk
        if req.include_usage:
            usage = Usage.count(record.prompt, record.completion, record.cached)
            yield envelope("chat.completion.chunk", rid, self.state.model_name, [], usage)

    def _event_chunk(self, req: ChatRequest, rid: str, k: int, ev: ChoiceEvent) -> dict | None:
        if ev.kind == "content":
            if not ev.text and not ev.logprobs:
                return None
            lps = {"content": ev.logprobs, "refusal": None} if req.logprobs else None
            return self._chat_chunk(req, rid, k, {"content": ev.text}, logprobs=lps)
        if ev.kind == "reasoning":
            return self._chat_chunk(req, rid, k, {"reasoning_content": ev.text})
        if ev.kind == "call_start" and req.legacy_functions:
            return self._chat_chunk(req, rid, k, {"function_call": {"name": ev.name, "arguments": ""}})
        if ev.kind == "call_args" and req.legacy_functions:
            return self._chat_chunk(req, rid, k, {"function_call": {"arguments": ev.text}})
        if ev.kind == "call_start":
            call = {"index": ev.call_index, "id": ev.call_id, "type": "function",
                    "function": {"name": ev.name, "arguments": ""}}
            return self._chat_chunk(req, rid, k, {"tool_calls": [call]})
        if ev.kind == "call_args":
            return self._chat_chunk(req, rid, k, {"tool_calls": [{"index": ev.call_index,
                                                                    "function": {"arguments": ev.text}}]})
        reason = "function_call" if req.legacy_functions and ev.finish_reason == "tool_calls" else ev.finish_reason
        out = self._chat_chunk(req, rid, k, {}, reason=reason)
        with_violations(out["choices"][0], ev.violations)
        with_budget_closed(out["choices"][0], ev.budget_closed, ev.notes)
        if ev.truncated is not None:  # as the non-streamed choice has it
            out["choices"][0]["truncated_tool_call"] = ev.truncated.to_dict()
        return out

    def _chat_chunk(self, req: ChatRequest, rid: str, k: int, delta: dict, reason: str | None = None,
                    logprobs: dict | None = None) -> dict:
        choice = {"index": k, "delta": delta, "logprobs": logprobs, "finish_reason": reason}
        return self._chunk("chat.completion.chunk", rid, [choice], req.include_usage)


def with_violations(choice: dict[str, Any], violations: list[str] | None) -> dict[str, Any]:
    """``choice`` with radixlm's ``constraint_violations`` extension: the lenient-mode report (``[]``:
    the output is valid), present exactly when the request's constraint was lenient (``strict: false``)."""
    if isinstance(violations, list):
        choice["constraint_violations"] = list(violations)
    return choice


def with_budget_closed(choice: dict[str, Any], closed: bool, notes: list[str] | None = None) -> dict[str, Any]:
    """``choice`` with radixlm's ``budget_closed: true`` extension when budget-aware completion closed
    the output (its ``finish_reason`` is then ``length``), and ``constraint_notes`` (why an answer was
    cut or closed, what the compiler restricted) as ``/generate``'s ``meta_info`` has them; absent
    otherwise."""
    if closed:
        choice["budget_closed"] = True
    if notes:
        choice["constraint_notes"] = list(notes)
    return choice


async def _ready(value: Any) -> Any:
    return value


async def _collect(turn: ChatTurn, j: int) -> dict[str, Any]:
    """Run choice ``j`` to the end and build its ``choices[j]`` object (a request that sent the legacy
    ``functions`` has its call answered as ``function_call``)."""
    runner, legacy = turn.runners[j], turn.req.legacy_functions
    got = await gather(turn.events(j))
    text, thought, fin = got.content, got.reasoning, got.finish
    calls, truncated = got.calls, got.truncated
    # no answer after the thinking (the budget ran out in it): null, not an empty (invalid) answer
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not (calls or thought) else None}
    if runner.splitter is not None:
        message["reasoning_content"] = thought or None
    finish = fin.finish_reason
    if calls and legacy:
        message["function_call"] = calls[0].to_dict()["function"]
        finish = "function_call" if finish == "tool_calls" else finish
    elif calls:
        message["tool_calls"] = [c.to_dict() for c in calls]
    choice = {"index": runner.index, "message": message,
              "logprobs": {"content": got.logprobs, "refusal": None} if turn.req.logprobs else None,
              "finish_reason": finish}
    if truncated is not None:
        choice["truncated_tool_call"] = truncated.to_dict()
    return with_budget_closed(with_violations(choice, fin.violations), fin.budget_closed, fin.notes)


COMPLETION_MAX_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
