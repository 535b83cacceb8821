"""The chat pipeline: a chat-completions request in, each choice's events out.

The OpenAI chat route parses its body into the frozen ``ChatRequest`` and hands it to
:func:`open_chat`; the Responses, Anthropic and Ollama routes each check their own body, write the
equivalent ``/v1/chat/completions`` body and hand it to :func:`start_chat` (or :func:`start_raw`
for a prompt used as it is), which parse it with the same parser. :func:`open_chat` checks the
fan-out and the tool schemas, plans the prompt (:func:`~radixlm.runtime.server.chat.request.plan_chat`,
with the one context-length rule) and returns a :class:`ChatTurn`, whose :meth:`ChatTurn.events`
are a choice's :class:`~radixlm.runtime.server.chat.generation.ChoiceEvent` (bare JSON calls
recognised) and whose :func:`collect` / :func:`gather` gather them. Errors name the field as the
route's client wrote it (:class:`ParamMap`).

The fan-out limits of one HTTP request, checked once before any engine call.

A route splits a request into several engine calls (``/generate``: one per prompt;
``/v1/completions`` and ``/v1/chat/completions``: one per choice), and each call alone is within
the engine's per-call limits. :func:`check_fan_out` counts the whole HTTP request instead: its
prompts against ``max_prompts_per_request``, each prompt's ``n`` against ``max_n``, and every
sequence (prompts x n) against ``max_sequences_per_request`` and the waiting-queue bound (a request
larger than the bound could never be queued, so it is a 400, not a 503 "retry"). Errors are 400s
naming the field as the client wrote it.

``with_bare_calls``: a choice's events with a bare JSON call recognised (``tool_choice: auto``).

Families whose models write a call as the bare output ``{"name": ..., "arguments": ...}`` (no
``<tool_call>`` tags; see :mod:`radixlm.runtime.chat_formats.tool_formats.bare_json`) generate it
in the text phase, as content. This filter holds content events back while the output may still
be such a call, and at the finish event either turns it into ``tool_calls`` (finish_reason
``tool_calls``; only when the text ended on its own, ``stop``) or releases the held content as it
was (logprobs kept). Reasoning events pass through.

Also here: fill-in-the-middle prompts (:func:`fim_prompt`, for ``suffix`` on ``/v1/completions`` and
``/api/generate``) and the answers' ids (:func:`new_id`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.chat_formats.tool_formats.bare_json import BareJsonHold
from radixlm.runtime.chat_formats.tools import ToolCall
from radixlm.runtime.server.chat.generation import ChoiceEvent, ChoiceRunner
from radixlm.runtime.server.chat.request import (
    ChatPlan,
    ChatRequest,
    fit_context,
    parse_chat_request,
    plan_chat,
    schema_error,
)
from radixlm.runtime.server.chat.tools import check_tool_schemas, legacy_error
from radixlm.runtime.server.transport.errors import APIError, bad_request, from_exception
from radixlm.runtime.server.transport.state import RequestRecord, ServerState


def check_fan_out(args: Any, ns: Sequence[int], prompt_param: str, n_param: str) -> None:
    """400 unless a request of ``len(ns)`` prompts, prompt ``i`` asking for ``ns[i]`` sequences,
    fits the limits of ``args`` (the engine's ``ServerArgs``)."""
    if len(ns) > args.max_prompts_per_request:
        raise bad_request(f"{prompt_param}: {len(ns)} prompts in one request, more than "
                          f"max_prompts_per_request ({args.max_prompts_per_request})",
                          param=prompt_param, code="too_many_prompts")
    worst = max(ns, default=0)
    if worst > args.max_n:
        raise bad_request(f"{n_param} must be <= {args.max_n} (max_n), got {worst}", param=n_param,
                          code="invalid_value")
    total = sum(ns)
    if total > args.max_sequences_per_request:
        raise bad_request(f"{n_param}: {total} sequences (prompts x n) in one request, more than "
                          f"max_sequences_per_request ({args.max_sequences_per_request})",
                          param=n_param, code="too_many_sequences")
    limit = args.queue_limit
    if total > limit:
        raise bad_request(f"{n_param}: {total} sequences (prompts x n) in one request can never fit the "
                          f"waiting queue (max_queued_requests={limit})", param=n_param,
                          code="too_many_sequences")


async def with_bare_calls(events: AsyncIterator[ChoiceEvent], plan: ChatPlan) -> AsyncIterator[ChoiceEvent]:
    """``events`` with a whole-output bare JSON call turned into call events."""
    hold = (BareJsonHold(plan.tools) if plan.tools and plan.tool_choice.mode == "auto"
            and plan.fmt.bare_json_calls else None)
    held: list[ChoiceEvent] = []
    async for ev in events:
        if hold is None or ev.kind == "reasoning":
            yield ev
            continue
        if ev.kind == "content":
            held.append(ev)
            if hold.feed(ev.text):
                continue
        elif ev.kind == "finish" and ev.finish_reason == "stop":
            calls = hold.calls()
            if calls:
                for i, call in enumerate(calls):
                    yield ChoiceEvent("call_start", call_index=i, call_id=plan.fmt.new_call_id(call.name, i),
                                      name=call.name)
                    yield ChoiceEvent("call_args", text=call.arguments, call_index=i)
                yield ChoiceEvent("finish", finish_reason="tool_calls", violations=ev.violations, notes=ev.notes)
                return
        hold = None  # not a bare call: what was held is content, in order
        for out in held:
            yield out
        if ev.kind != "content":
            yield ev


@dataclass(frozen=True)
class ParamMap:
    """Chat-body field paths -> the route's own: ``rules`` are ``(regex, replacement)`` pairs applied
    to an error's ``param`` (and to the same text in its message); the first that matches wins."""

    rules: tuple[tuple[str, str], ...] = ()

    def name(self, param: str) -> str:
        """``param`` as the route's client wrote it."""
        for pattern, repl in self.rules:
            renamed, n = re.subn(rf"^{pattern}(?=$|[.\[])", repl, param)
            if n:
                return renamed
        return param

    def error(self, err: APIError) -> APIError:
        """``err`` naming the route's field (unchanged when it names none)."""
        if not err.param:
            return err
        new = self.name(err.param)
        if new == err.param:
            return err
        # the field as the message names it: quoted, or bare when it cannot be an English word
        message = err.message.replace(f"'{err.param}'", f"'{new}'")
        if "_" in err.param or "." in err.param:  # no English word: safe to rename wherever it stands
            message = re.sub(rf"(?<![\w.\[]){re.escape(err.param)}(?![\w\[])", new, message)
        return APIError(err.status, message, param=new, code=err.code, retry_after_s=err.retry_after_s)


@dataclass
class Answer:
    """One choice, gathered: the text, the thinking, the complete calls and why it ended."""

    content: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # OpenAI's: stop | length | tool_calls | abort
    stop_matched: str | None = None  # the request's stop string that ended it


class ChatTurn:
    """One planned chat request with its choices (one runner each); ``events(j)`` runs choice ``j``."""

    def __init__(self, req: ChatRequest, runners: list[ChoiceRunner], params: ParamMap):
        self.req = req
        self.runners = runners
        self.params = params

    @property
    def plan(self) -> ChatPlan:
        return self.runners[0].plan

    async def events(self, j: int = 0) -> AsyncIterator[ChoiceEvent]:
        """Choice ``j``'s events, a whole-output bare JSON call recognised; a constraint error becomes a
        400 naming the route's field."""
        async with aclosing(with_bare_calls(self.runners[j].events(), self.plan)) as events:
            try:
                async for ev in events:
                    yield ev
            except ValueError as e:
                raise self.params.error(from_exception(schema_error(self.req, e))) from None


class LegacyFunctionNames(ParamMap):
    """OpenAI's legacy ``functions`` / ``function_call``, read as tools: errors name the fields the
    request sent (:func:`~radixlm.runtime.server.chat.tools.legacy_error`)."""

    def error(self, err: APIError) -> APIError:
        return legacy_error(err)


async def open_chat(state: ServerState, request: web.Request, record: RequestRecord, req: ChatRequest,
                    params: ParamMap, salt: str | None = None) -> ChatTurn:
    """The turn of the parsed chat request ``req``: its fan-out checked, its tool schemas (all of them,
    whatever ``tool_choice``: ``auto`` would otherwise fail mid-answer) checked, its prompt planned off
    the event loop, and ``req.n`` choices (errors renamed by ``params``); ``salt`` is the request's
    radix-cache namespace when its API names it otherwise than ``cache_salt``."""
    try:
        check_fan_out(state.engine.server_args, [req.n], "messages", "n")
        if req.tools:
            await state.offload(check_tool_schemas, req.tools)
        plan = await state.prompts.run(plan_chat, state, req, state.extra_key(request, req.salt or salt))
    except APIError as e:
        raise params.error(e) from None
    except ValueError as e:
        raise params.error(from_exception(e)) from None
    return ChatTurn(req, [ChoiceRunner(state, plan, record, j) for j in range(req.n)], params)


def _parsed(state: ServerState, body: dict[str, Any], params: ParamMap) -> ChatRequest:
    """``body`` parsed leniently as a chat request (errors renamed by ``params``)."""
    try:
        return parse_chat_request(body, False, state.max_new_tokens_default)
    except APIError as e:
        raise params.error(e) from None
    except ValueError as e:
        raise params.error(from_exception(e)) from None


async def start_chat(state: ServerState, request: web.Request, record: RequestRecord, body: dict[str, Any],
                     params: ParamMap, salt: str | None = None) -> ChatTurn:
    """:func:`open_chat` for the chat body ``body`` another API wrote (parsed leniently)."""
    return await open_chat(state, request, record, _parsed(state, body, params), params, salt)


async def start_raw(state: ServerState, request: web.Request, record: RequestRecord, body: dict[str, Any],
                    params: ParamMap, prompt: str, param: str) -> ChatTurn:
    """As :func:`start_chat`, but ``prompt`` is the model's input as it is (no chat template; ``param``
    names it); ``body`` gives the settings (its ``messages`` are not read)."""
    req = _parsed(state, {**body, "messages": [{"role": "user", "content": prompt}]}, params)
    ids = await state.prompts.encode(prompt, param)  # the size check first
    try:
        sampling = fit_context(state, req, len(ids), param)
    except APIError as e:
        raise params.error(e) from None
    plan = ChatPlan(ids, sampling, stream=req.stream, extra_key=state.extra_key(request, req.salt),
                    fmt=state.tool_format)
    return ChatTurn(req, [ChoiceRunner(state, plan, record, 0)], params)


@dataclass
class Gathered:
    """A choice's events, gathered: the text, the thinking, the complete calls, a call the budget cut
    off (not a complete call: kept apart), the content's logprobs and the finish event."""

    content: str
    reasoning: str
    calls: list[ToolCall]
    truncated: ToolCall | None
    logprobs: list[dict]
    finish: ChoiceEvent


async def gather(events: AsyncIterator[ChoiceEvent]) -> Gathered:
    """Run a choice's event stream to its end (the last event is its ``finish``)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, ToolCall] = {}
    lps: list[dict] = []
    finish = ChoiceEvent("finish", finish_reason="stop")
    async for ev in events:
        if ev.kind == "content":
            content.append(ev.text)
            lps.extend(ev.logprobs or [])
        elif ev.kind == "reasoning":
            reasoning.append(ev.text)
        elif ev.kind == "call_start":
            calls[ev.call_index] = ToolCall(ev.call_id or "", ev.name or "", "")
        elif ev.kind == "call_args":
            calls[ev.call_index].arguments += ev.text
        else:
            finish = ev
    truncated = calls.pop(finish.cut_call, None) if finish.cut_call is not None else None
    return Gathered("".join(content), "".join(reasoning), list(calls.values()), truncated, lps, finish)


async def collect(turn: ChatTurn) -> Answer:
    """Run ``turn`` to its end (an announced call the budget cut off is not a complete call: dropped)."""
    got = await gather(turn.events())
    return Answer(got.content, got.reasoning, got.calls, got.finish.finish_reason or "stop",
                  got.finish.stop_matched)


def count_tokens(state: ServerState, text: str) -> int:
    """Tokens of ``text`` as the served tokenizer encodes it (the thinking's share of the output)."""
    return len(state.tokenizer.encode(text, add_special_tokens=False)) if text else 0


def fim_markers(tokenizer: Any) -> tuple[str, str, str] | None:
    """The vocabulary's (prefix, suffix, middle) markers, each one token; None without them."""
    for markers in FIM_MARKERS:
        if all(len(tokenizer.encode(m)) == 1 for m in markers):
            return markers
    return None


def fim_prompt(tokenizer: Any, prefix: str, suffix: str, param: str = "suffix") -> str:
    """The fill-in-the-middle prompt for the code between ``prefix`` and ``suffix`` (a 400 naming
    ``param`` when the vocabulary has no markers)."""
    markers = fim_markers(tokenizer)
    if markers is None:
        raise bad_request(f"'{param}' (fill-in-the-middle) needs a model whose vocabulary has fill-in-the-middle "
                          f"tokens ({' '.join(FIM_MARKERS[0])}, as Qwen2.5-Coder's); this model has none",
                          param=param, code="unsupported_parameter")
    return f"{markers[0]}{prefix}{markers[1]}{suffix}{markers[2]}"


def new_id(prefix: str) -> str:
    """A response id: ``cmpl-...`` / ``chatcmpl-...``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


FIM_MARKERS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
               ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"))  # StarCoder, SantaCoder
