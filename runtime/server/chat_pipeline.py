"""The chat pipeline other APIs translate onto: a chat-completions body in, one choice's events out.

The Responses, Anthropic and Ollama routes each check their own body, write the equivalent
``/v1/chat/completions`` body and hand it here: :func:`start_chat` parses it into the frozen
``ChatRequest`` (the same parser the OpenAI route uses), checks the tool schemas, plans the prompt
and returns a :class:`ChatTurn`, whose :meth:`ChatTurn.events` are the choice's
:class:`~radixlm.runtime.server.chat_generation.ChoiceEvent` (bare JSON calls recognised) and whose
:func:`collect` gathers them into an :class:`Answer`. Errors name the field as the route's client
wrote it (:class:`ParamMap`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.chat_formats.tools import ToolCall
from radixlm.runtime.server.bare_tool_calls import with_bare_calls
from radixlm.runtime.server.chat_generation import ChoiceEvent, ChoiceRunner
from radixlm.runtime.server.chat_plan import ChatPlan, plan_chat, schema_error
from radixlm.runtime.server.http_errors import APIError, from_exception
from radixlm.runtime.server.openai_requests import ChatRequest, parse_chat_request
from radixlm.runtime.server.state import RequestRecord, ServerState
from radixlm.runtime.server.tool_schema import check_tool_schemas


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
    """One planned chat request with its single choice; ``events()`` runs it."""

    def __init__(self, req: ChatRequest, runner: ChoiceRunner, params: ParamMap):
        self.req = req
        self.runner = runner
        self.params = params

    @property
    def plan(self) -> ChatPlan:
        return self.runner.plan

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        """The choice's events; a constraint error becomes a 400 naming the route's field."""
        async with aclosing(with_bare_calls(self.runner.events(), self.plan)) as events:
            try:
                async for ev in events:
                    yield ev
            except ValueError as e:
                raise self.params.error(from_exception(schema_error(self.req, e))) from None


async def start_chat(state: ServerState, request: web.Request, record: RequestRecord, body: dict[str, Any],
                     params: ParamMap, salt: str | None = None) -> ChatTurn:
    """Parse and plan the chat body ``body`` (errors renamed by ``params``); ``salt`` is the request's
    radix-cache namespace when its API names it otherwise than ``cache_salt``."""
    try:
        req = parse_chat_request(body, False, state.max_new_tokens_default)
        if req.tools:
            await state.offload(check_tool_schemas, req.tools)
        plan = await state.prompts.run(plan_chat, state, req, state.extra_key(request, req.salt or salt))
    except APIError as e:
        raise params.error(e) from None
    except ValueError as e:
        raise params.error(from_exception(e)) from None
    return ChatTurn(req, ChoiceRunner(state, plan, record, 0), params)


async def start_raw(state: ServerState, request: web.Request, record: RequestRecord, body: dict[str, Any],
                    params: ParamMap, prompt: str, param: str) -> ChatTurn:
    """As :func:`start_chat`, but ``prompt`` is the model's input as it is (no chat template; ``param``
    names it); ``body`` gives the settings (its ``messages`` are not read)."""
    try:
        req = parse_chat_request({**body, "messages": [{"role": "user", "content": prompt}]}, False,
                                 state.max_new_tokens_default)
    except APIError as e:
        raise params.error(e) from None
    state.prompts.check_chars(prompt, param)
    ids = await state.prompts.encode(prompt, param)
    sampling, ctx = req.sampling, state.context_len
    if ctx and len(ids) >= ctx:
        raise APIError(400, f"this model's maximum context length is {ctx} tokens, but '{param}' takes "
                       f"{len(ids)} tokens", param=param, code="context_length_exceeded")
    if not req.max_tokens_given:  # the server's default, within the context left
        sampling = sampling.replace(max_new_tokens=min(sampling.max_new_tokens, ctx - len(ids) - 1) if ctx
                                    else sampling.max_new_tokens)
    elif ctx and len(ids) + sampling.max_new_tokens > ctx:
        raise params.error(APIError(400, f"this model's maximum context length is {ctx} tokens; '{param}' takes "
                                    f"{len(ids)} and 'max_tokens' asks for {sampling.max_new_tokens}",
                                    param="max_tokens", code="context_length_exceeded"))
    plan = ChatPlan(ids, sampling, stream=req.stream, extra_key=state.extra_key(request, req.salt),
                    fmt=state.tool_format)
    return ChatTurn(req, ChoiceRunner(state, plan, record, 0), params)


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
