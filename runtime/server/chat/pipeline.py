"""The chat pipeline: a chat-completions request in, each choice's events out.

The OpenAI chat route parses its body into the frozen ``ChatRequest`` and hands it to
:func:`open_chat`; the Responses, Anthropic and Ollama routes each check their own body, write the
equivalent ``/v1/chat/completions`` body and hand it to :func:`start_chat` (or :func:`start_raw`
for a prompt used as it is), which parse it with the same parser. :func:`open_chat` checks the
fan-out and the tool schemas, plans the prompt (:func:`~radixlm.runtime.server.chat.request.plan_chat`,
with the one context-length rule) and returns a :class:`ChatTurn`, whose :meth:`ChatTurn.events`
are a choice's :class:`~radixlm.runtime.server.chat.pipeline.ChoiceEvent` (bare JSON calls
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

One chat choice generated: the engine's output as :class:`ChoiceEvent` s (text, thinking, calls, finish),
with OpenAI's logprobs.

Engine logprobs -> the two OpenAI logprob shapes (legacy completions, and chat ``content``).

The engine reports logprobs SGLang-style in ``meta_info``: ``output_token_logprobs`` is a list of
``[logprob, token_id, ...]`` (``logprob`` is None for a jump-forward token) and
``output_top_logprobs`` a list (per position) of such lists; plain floats aligned with
``output_ids`` are accepted too.

One chat choice, generated as a sequence of engine phases and reported as events.

Plain chat is one phase. Tool calls add phases (see :mod:`radixlm.runtime.server.chat.tools` for the
protocol): a *text* phase generates content and stops at ``<tool_call>``; a *call* phase continues
the exact token sequence with the call constraint. Each phase is a separate engine request whose
prompt is the previous one's prompt plus its output, so it hits the radix cache.

The events (:class:`ChoiceEvent`) are the same whether the client streams or not: the streaming
route turns each into a chunk, the other accumulates them into one message.

With a reasoning format, text phases' output goes through the format's streaming parser, which
splits it into *reasoning* and *content* events. A constraint (``response_format``) waits for the
reasoning to close through the engine's reasoning gate (``reasoning_end``); a forced tool call
first runs a *think* phase that stops at the format's end marker (or at its share of the budget,
where the server writes the marker), then the call phase.

A lenient constraint (``strict=False``) has the engine list what the output violates in
``meta_info["constraint_violations"]``; the finish event carries the text phases' lists (None when no
lenient constraint ran), which the OpenAI routes show as the choice's ``constraint_violations``.

Budgets: the finish event says whether budget-aware completion closed a phase's output
(``budget_closed``) and which call the budget cut off (``cut_call``, and ``truncated``: the call as
far as it was written). Each call's events are held until the call is complete (the next one
started, or the phase ended whole), so a cut call is never sent as a call, streamed or not; a call
phase's content is raw call markup, so it is held and dropped unless the call completed. A forced
call's think phase has a bound (:func:`thinking_share`): there the server closes the thinking.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.chat_formats.reasoning.base import ReasoningParser, Split
from radixlm.runtime.chat_formats.tool_formats.bare_json import BareJsonHold
from radixlm.runtime.chat_formats.tool_formats.base import ToolFormat
from radixlm.runtime.chat_formats.tool_formats.grammar import with_model_end
from radixlm.runtime.chat_formats.tool_formats.scanner import CallStream
from radixlm.runtime.chat_formats.tools import ToolCall
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS, SamplingParams, choice_seed
from radixlm.runtime.server.chat.request import (
    ChatPlan,
    ChatRequest,
    fit_context,
    parse_chat_request,
    plan_chat,
    schema_error,
)
from radixlm.runtime.server.chat.tools import check_tool_schemas, legacy_error
from radixlm.runtime.server.transport.body import APIError, bad_request, from_exception
from radixlm.runtime.server.transport.state import RequestRecord, ServedTokenizer, ServerState


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
    return Gathered("".join(content), "".join(reasoning), list(calls.values()), finish.truncated, lps, finish)


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


@dataclass
class TokenLogprob:
    """One position: the chosen token, its logprob, and the top alternatives ``(token_id, logprob)``."""

    token_id: int
    logprob: float | None
    top: list[tuple[int, float]] = field(default_factory=list)


def _entry(e: Any, fallback_id: int | None) -> tuple[int | None, float | None]:
    if isinstance(e, (list, tuple)):
        return (int(e[1]) if len(e) > 1 and e[1] is not None else fallback_id), e[0]
    if isinstance(e, dict):
        return e.get("token_id", fallback_id), e.get("logprob")
    return fallback_id, e


def _tops(row: Any) -> list[tuple[int, float]]:
    out = []
    for e in row or []:
        tid, lp = _entry(e, None)
        if tid is not None and lp is not None:
            out.append((tid, float(lp)))
    return out


def extract(meta: dict[str, Any], ids: list[int] | None, which: str = "output") -> list[TokenLogprob]:
    """The ``which`` (``input`` | ``output``) logprobs of an engine result or stream chunk."""
    lps = meta.get(f"{which}_token_logprobs") or []
    tops = meta.get(f"{which}_top_logprobs") or []
    out = []
    for i, e in enumerate(lps):
        fallback = ids[i] if ids is not None and i < len(ids) else None
        tid, lp = _entry(e, fallback)
        if tid is None:
            continue
        out.append(TokenLogprob(tid, None if lp is None else float(lp), _tops(tops[i] if i < len(tops) else [])))
    return out


def token_text(tokenizer: ServedTokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def _token_bytes(tokenizer: ServedTokenizer, token_id: int) -> list[int]:
    return list(tokenizer.id_to_bytes(token_id))


class TextCursor:
    """Where each token starts in a choice's text: ``offset`` advances by the token's share of the
    incrementally decoded text (a token ending inside a UTF-8 character adds nothing until the
    character completes; special tokens add nothing), so offsets agree streamed or not."""

    def __init__(self, tokenizer: ServedTokenizer, offset: int = 0):
        self.detok = tokenizer.incremental_detokenizer()
        self.offset = offset

    def advance(self, token_id: int) -> int:
        """The offset of ``token_id``, then move past it."""
        start = self.offset
        self.offset += len(self.detok.step([token_id]))
        return start


def completion_logprobs(tokenizer: ServedTokenizer, entries: list[TokenLogprob], cursor: TextCursor) -> dict[str, Any]:
    """The legacy ``/v1/completions`` shape: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens, token_lps, top, offsets = [], [], [], []
    for e in entries:
        tokens.append(token_text(tokenizer, e.token_id))
        token_lps.append(e.logprob)
        top.append({token_text(tokenizer, t): lp for t, lp in e.top} if e.top else None)
        offsets.append(cursor.advance(e.token_id))
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": top, "text_offset": offsets}


def merge_completion_logprobs(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return b
    return {k: a[k] + b[k] for k in b}


def chat_logprobs(tokenizer: ServedTokenizer, entries: list[TokenLogprob], top_n: int) -> list[dict[str, Any]]:
    """The chat ``logprobs.content`` list: token, logprob, bytes, top_logprobs."""
    out = []
    for e in entries:
        tops = [{"token": token_text(tokenizer, t), "logprob": lp, "bytes": _token_bytes(tokenizer, t)}
                for t, lp in e.top[:top_n]]
        out.append({"token": token_text(tokenizer, e.token_id),
                    "logprob": e.logprob if e.logprob is not None else 0.0,
                    "bytes": _token_bytes(tokenizer, e.token_id), "top_logprobs": tops})
    return out


_HEADER_TOKENS = 32  # a header line is a tool name: a longer first line is plain text
CALL_ROOM = 512  # tokens a forced turn keeps for its calls after the thinking (at most half the budget)


def thinking_share(budget: int) -> int:
    """The tokens a reasoning model may think before a forced call: the budget less the calls' room
    (``CALL_ROOM``, or half of a smaller budget); at least one."""
    return max(budget - min(budget // 2, CALL_ROOM), 1)

# Sampler fields that would break a call's JSON if kept in a call phase (reset to their defaults).
_NOT_IN_CALL_PHASE = ("stop", "stop_token_ids", "logit_bias", *CONSTRAINT_FIELDS, "whitespace_pattern",
                      "min_new_tokens", "reasoning_end")


@dataclass
class ChoiceEvent:
    """``kind``: content | reasoning | call_start | call_args | finish."""

    kind: str
    text: str = ""
    call_index: int = 0
    call_id: str | None = None
    name: str | None = None
    logprobs: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    violations: list[str] | None = None  # finish: what a lenient (strict=False) constraint saw violated
    budget_closed: bool = False  # finish: budget-aware completion closed an output (reason "length")
    cut_call: int | None = None  # finish: index of a call cut off by the budget (never sent as a call)
    truncated: ToolCall | None = None  # finish: that call as far as it was written (``truncated_tool_call``)
    notes: list[str] | None = None  # finish: the constraints' notes (why an output was cut or closed)
    stop_matched: str | None = None  # finish: the request's stop string that ended the answer, if one did


class _HeldCalls:
    """A call phase's call events, each call's held until it is complete: a later call started (the
    layouts that announce calls as they come close one before the next), or the phase ended whole.
    A call the budget cut is never released: the stream then equals the non-streamed answer."""

    def __init__(self) -> None:
        self.events: dict[int, list[ChoiceEvent]] = {}

    def add(self, ev: ChoiceEvent) -> list[ChoiceEvent]:
        """Hold ``ev``; return the events of the calls now known complete (those before ``ev``'s)."""
        self.events.setdefault(ev.call_index, []).append(ev)
        return self._take([k for k in self.events if k < ev.call_index])

    def release(self, cut: int | None) -> list[ChoiceEvent]:
        """At the phase's end: every held call's events but the ``cut`` one's."""
        return self._take([k for k in self.events if k != cut])

    def call(self, index: int) -> ToolCall | None:
        """The held call ``index`` as far as it was written."""
        evs = self.events.get(index)
        if not evs:
            return None
        start = evs[0]
        return ToolCall(start.call_id or "", start.name or "", "".join(e.text for e in evs if e.kind == "call_args"))

    def _take(self, keys: list[int]) -> list[ChoiceEvent]:
        return [ev for k in sorted(keys) for ev in self.events.pop(k)]


@dataclass
class _Phase:
    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def finish(self) -> dict[str, Any]:
        fr = self.meta.get("finish_reason") or {}
        return fr if isinstance(fr, dict) else {"type": str(fr), "matched": None}


class ChoiceRunner:
    """Generates choice ``index`` of a chat request; ``events()`` yields :class:`ChoiceEvent`."""

    def __init__(self, state: ServerState, plan: ChatPlan, record: RequestRecord, index: int):
        self.state = state
        self.plan = plan
        self.record = record
        self.index = index
        self.budget = plan.sampling.max_new_tokens
        self.ids = list(plan.prompt_ids)
        self.calls = 0
        self.call_end = "length"  # OpenAI finish_reason of the last call phase, if it did not complete
        self.cut_off = False  # the last call phase was cut off (a streamed call's arguments are partial)
        self.first_phase = index == 0  # usage counts the prompt once, not once per choice
        self.fmt = plan.fmt
        self.start_ids = self._encode(self.fmt.open_marker)
        self.splitter: ReasoningParser | None = (plan.reasoning.parser(plan.reasoning_state)
                                                 if plan.reasoning else None)
        self.keep = state.tokenizer.special_ids_of(_markers(plan))
        # the engine's lenient-mode report over the text phases (None: no lenient constraint ran)
        self.violations: list[str] | None = None
        self.budget_closed = False  # some phase's output was closed by budget-aware completion
        self.notes: list[str] = []  # the phases' constraint notes (meta_info["constraint_notes"])
        self.cut_call: int | None = None  # a call the budget cut off (held back, never sent as a call)
        self.truncated: ToolCall | None = None  # that call as far as it was written
        self.thought_out = False  # a forced call's thinking ended (by the model, or at its share of the budget)
        self.header_call: str | None = None  # the tool the last header line named (see _header)
        self.header_end: str | None = None  # the finish reason when the output ended inside a header

    def _sampling(self, **changes: Any) -> SamplingParams:
        """This choice's copy of the plan's settings, with ``changes``."""
        s = self.plan.sampling
        if self.keep:  # the parsers need the markers that are special tokens; other specials stay skipped
            changes = {"keep_special_token_ids": self.keep, **changes}
        if s.seed is not None:
            changes = {"seed": choice_seed(s.seed, self.index), **changes}  # choices must differ even with a fixed seed
        return s.replace(**changes)

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        choice = self.plan.tool_choice
        if choice.forces_call:
            if self.plan.think_marker:  # the model thinks first; the call follows its end marker
                thought = _Phase()
                async for ev in self._think_phase(thought):
                    yield ev
                if not self.thought_out:  # the budget ended in the thinking (or the request was aborted)
                    yield self._finish("length" if self.budget <= 0 else _openai_reason(thought.finish))
                    return
            self.ids += self._encode(self.fmt.forced_prefix)
            # "required": one or more calls (parallel_tool_calls); a named function: that one call
            async for ev in self._call_phase(choice.name, self.plan.max_calls if choice.name is None else 1,
                                             forced=True):
                yield ev
            # cut in the closing text after the last call the turn allows: every call stands whole
            filled = self.cut_call is None and self.calls >= (1 if choice.name else self.plan.max_calls)
            yield self._finish("tool_calls" if self.calls and (filled or not self.cut_off) else self.call_end)
            return
        stops = list(self.plan.sampling.stop)
        openers = self.fmt.auto_openers if choice.mode == "auto" else ()
        stops += openers
        # a prompt ending inside an opener: the answer's first line (and each opener's) is a header
        opened = self.plan.opened and not any(getattr(self.plan.sampling, f, None) for f in CONSTRAINT_FIELDS)
        at_header = opened
        while True:
            if at_header:
                async for ev in self._header(choice.mode == "auto"):
                    yield ev
                if self.header_end is not None:
                    yield self._finish(self.header_end)
                    return
            if at_header and self.header_call is not None:
                async for ev in self._call_phase(self.header_call, written=self.header_call + "\n"):
                    yield ev
                if self.cut_off or self.budget <= 0 or self.calls >= self.plan.max_calls:
                    yield self._finish(self.call_end if self.cut_off else "tool_calls")
                    return
            at_header = False
            phase = _Phase()
            async for ev in self._run(phase, self._sampling(max_new_tokens=self.budget, stop=stops), True):
                yield ev
            fr = phase.finish
            opener = fr.get("matched") if fr.get("type") == "stop" and fr.get("matched") in openers else None
            called = opener is not None
            for ev in self._flush():
                yield ev
            if not called or self.budget <= 0 or self.calls >= self.plan.max_calls:
                reason = "tool_calls" if self.calls and fr.get("type") == "stop" else _openai_reason(fr)
                matched = fr.get("matched") if reason == "stop" else None
                yield self._finish(reason, matched if isinstance(matched, str) else None)
                return
            if opened:  # a header follows the opener
                self.ids += self._through_marker(phase, opener)
                at_header = True
                continue
            self.ids += self._through_marker(phase, opener) + self._encode(self.fmt.resume_after(opener))
            calls_before = self.calls
            async for ev in self._call_phase(None):
                yield ev
            if self.cut_off or self.calls == calls_before:  # the call was cut off: say why
                yield self._finish(self.call_end)
                return
            if self.budget <= 0 or self.calls >= self.plan.max_calls:
                yield self._finish("tool_calls")
                return

    def _finish(self, reason: str, stop_matched: str | None = None) -> ChoiceEvent:
        return ChoiceEvent("finish", finish_reason=reason, violations=self.violations,
                           budget_closed=self.budget_closed, cut_call=self.cut_call, truncated=self.truncated,
                           stop_matched=stop_matched,
                           notes=list(self.notes) or None)

    def _encode(self, text: str) -> list[int]:
        return self.state.tokenizer.encode(text, add_special_tokens=False) if text else []

    def _through_marker(self, phase: _Phase, marker: str | None = None) -> list[int]:
        """The phase's tokens up to and including the stop marker (the family's open marker by
        default; exact ids when they end with it)."""
        marker = self.fmt.open_marker if marker is None else marker
        ids = self.start_ids if marker == self.fmt.open_marker else self._encode(marker)
        if phase.output_ids[-len(ids):] == ids:
            return list(phase.output_ids)
        return self._encode(phase.text + marker)

    async def _think_phase(self, phase: _Phase) -> AsyncIterator[ChoiceEvent]:
        """Free generation up to the reasoning's end marker (a stop string), before a forced call;
        the thinking may take :func:`thinking_share` of the budget, then the server writes the end
        marker itself (as the model would have). Sets ``thought_out`` when a call may follow."""
        marker = self.plan.think_marker or ""
        sampling = self._sampling(max_new_tokens=thinking_share(self.budget), stop=[marker]).reset(
            "json_schema", "json_object", "regex", "reasoning_end")
        async for ev in self._run(phase, sampling, True):
            yield ev
        fr = phase.finish
        matched = fr.get("matched") == marker
        self.thought_out = (matched or fr.get("type") in ("length", "stop")) and self.budget > 0
        # the bound reached, or the model ended its turn: the server closes a thinking the model opened
        close = matched or (self.thought_out and (self.splitter is None or self.splitter.in_reasoning))
        if matched:
            self.ids += self._through_marker(phase, marker)
        elif self.thought_out:
            self.ids += phase.output_ids if fr.get("type") == "length" else self._encode(phase.text)
            self.ids += self._encode(marker) if close else []
        if close:
            for ev in self._split(marker):  # the stop string is trimmed from the text: the parser needs it
                yield ev
            self.ids += self._encode(self.plan.think_resume)
        for ev in self._flush():
            yield ev

    def _split(self, text: str, logprobs: list | None = None) -> list[ChoiceEvent]:
        """A text phase's delta as content (and reasoning) events, through the reasoning parser."""
        if self.splitter is None:
            return [ChoiceEvent("content", text=text, logprobs=logprobs)]
        return _split_events(self.splitter.feed(text), logprobs)

    def _flush(self) -> list[ChoiceEvent]:
        """What the reasoning parser held back, at the end of a text phase that ends the text."""
        return _split_events(self.splitter.finish(), None) if self.splitter is not None else []

    async def _header(self, calls_ok: bool) -> AsyncIterator[ChoiceEvent]:
        """The header line after a ``prompt_opener``: sets ``header_call`` to the tool it names
        (``calls_ok``: a call follows), drops a content header, passes any other line on as content;
        ``header_end`` is the finish reason when the output ended inside the line."""
        self.header_call, self.header_end = None, None
        phase, held = _Phase(), []
        user_stops = list(self.plan.sampling.stop)
        sampling = self._sampling(min_new_tokens=0, max_new_tokens=min(self.budget, _HEADER_TOKENS),
                                  stop=[*user_stops, "\n"])
        async for ev in self._run(phase, sampling, True):
            held.append(ev)
        fr = phase.finish
        if fr.get("type") == "stop" and fr.get("matched") == "\n":
            line = phase.text
            self.ids += self._through_marker(phase, "\n")
            self.header_call = self.fmt.header_call(line, self.plan.tools) if calls_ok else None
            if self.header_call is not None or line + "\n" in _header_lines(self.fmt):
                return
            held += self._split("\n")
        elif phase.text in (h.rstrip() for h in _header_lines(self.fmt)):
            held = []  # the content header alone, cut off: no content
        for ev in held:
            yield ev
        if not (fr.get("type") == "stop" and fr.get("matched") == "\n"):
            if fr.get("type") == "length" and self.budget > 0:  # a long first line: plain text goes on
                self.ids += phase.output_ids
                return
            self.header_end = _openai_reason(fr)

    async def _call_phase(self, name: str | None, max_calls: int = 1, written: str = "",
                          forced: bool = False) -> AsyncIterator[ChoiceEvent]:
        """Constrained call bodies (one, or up to ``max_calls`` in a forced turn) in the family's
        wrapper (``written``: the header of a call the model already named, see :meth:`_header`);
        ``self.calls`` counts the calls it made. A forced turn (``required``, a named function) may
        end as the model ends a turn of calls, with the family's closing text and its end token
        (``grammar.with_model_end``): it makes the calls ``auto`` would make, no more.

        The call stream reads the wrapper text, the generated body and the suffix: a JSON-argument
        call is announced once its head is generated and its arguments stream as they come; others
        are the events the family's parser gives for the whole call text."""
        constraint = (self.fmt.rest_constraint(self.plan.tools, name or "", max_calls) if written
                      else self.fmt.body_constraint(self.plan.tools, name, max_calls))
        if forced:
            constraint = with_model_end(constraint, self.fmt.call_suffix)
        sampling = self._sampling(max_new_tokens=self.budget).reset(*_NOT_IN_CALL_PHASE).replace(**constraint)
        stream, phase = CallStream(self.fmt, self.plan.tools, self.calls), _Phase()
        events = stream.feed(self.fmt.forced_prefix + written)
        held: list[ChoiceEvent] = []  # content of a call phase is raw call markup until it completes
        calls = _HeldCalls()  # a call is sent once it is complete (the next one started, or the phase ended)
        closed_before = self.budget_closed
        async for ev in self._run(phase, sampling, False):
            events += stream.feed(ev.text)
            for out in self._call_events(events):
                if out.kind == "content":
                    held.append(out)
                else:
                    for done in calls.add(out):
                        yield done
            events = []
        suffix = self.fmt.call_suffix
        # the closing text written (by the model, or by the budget's close): every call is complete
        ended = forced and bool(suffix.strip()) and phase.text.rstrip("\n").endswith(suffix.strip())
        complete = ended or phase.finish.get("type") not in ("length", "abort")
        if ended:
            self.budget_closed = closed_before  # closing the turn's markup closes no answer
        if complete and not ended:  # the closing text is the server's to add (the model wrote none)
            events += stream.feed(suffix)
        events += stream.finish(cut=not complete)
        for out in self._call_events(events):
            if out.kind != "content":
                calls.add(out)
            elif complete:
                held.append(out)
        cut = None if complete else stream.cut_index
        for out in calls.release(cut):
            yield out
        for out in held if complete else ():
            if not (ended and not out.text.strip()):  # the newlines after a closing text are not content
                yield out
        if cut is not None:
            self.cut_call, self.truncated = cut, calls.call(cut)
        self.cut_off = not complete
        if self.cut_off or stream.next_index == self.calls:  # cut off by max_tokens (or aborted)
            self.call_end = _openai_reason(phase.finish)
        self.calls = stream.next_index
        if not self.cut_off:
            self.ids += phase.output_ids + ([] if ended else self._encode(suffix))

    def _call_events(self, events: list) -> list[ChoiceEvent]:
        out = []
        for e in events:
            if e.kind == "content":
                out.append(ChoiceEvent("content", text=e.text))
            elif e.kind == "call_start":
                out.append(ChoiceEvent("call_start", call_index=e.index, call_id=e.id, name=e.name))
            else:
                out.append(ChoiceEvent("call_args", text=e.text, call_index=e.index))
        return out

    async def _run(self, phase: _Phase, sampling: SamplingParams, is_text: bool) -> AsyncIterator[ChoiceEvent]:
        """One engine request continuing ``self.ids``; yields content events (text phases) or raw
        text events (call phases), and fills ``phase``."""
        want_lp = self.plan.logprobs and is_text
        if self.state.context_len:  # later phases have longer prompts: stay inside the context
            sampling = sampling.replace(max_new_tokens=max(min(sampling.max_new_tokens,
                                                               self.state.context_len - len(self.ids)), 0))
        kwargs = {"input_ids": list(self.ids), "sampling_params": sampling, "return_logprob": want_lp,
                  "top_logprobs_num": self.plan.top_logprobs if want_lp else 0, "extra_key": self.plan.extra_key}
        rid = self.state.new_rid(self.record, f"-c{self.index}")
        first = self.first_phase or self.index > 0  # later phases' first token is not the request's
        if self.plan.stream:
            chunks = self.state.stream(rid, observe_ttft=first, **kwargs)
            async with aclosing(chunks):
                async for chunk in chunks:
                    for ev in self._events_of(self._absorb(phase, chunk, want_lp), is_text):
                        yield ev
        else:
            result = await self.state.generate(rid, observe_ttft=first, **kwargs)
            for ev in self._events_of(self._absorb(phase, result, want_lp), is_text):
                yield ev
        self.record.add(phase.meta, prompt=self.first_phase)
        self.budget_closed = self.budget_closed or bool(phase.meta.get("budget_closed"))
        self.notes += [n for n in phase.meta.get("constraint_notes") or () if n not in self.notes]
        found = phase.meta.get("constraint_violations")
        if is_text and isinstance(found, list):  # call phases' constraint is ours, always strict
            self.violations = (self.violations or []) + found
        self.first_phase = False
        self.budget -= int(phase.meta.get("completion_tokens", len(phase.output_ids)))

    def _events_of(self, ev: ChoiceEvent, is_text: bool) -> list[ChoiceEvent]:
        """A text phase's raw content event split by the reasoning parser; call phases' as they are."""
        if not is_text or self.splitter is None:
            return [ev]
        return self._split(ev.text, ev.logprobs)

    def _absorb(self, phase: _Phase, chunk: dict[str, Any], want_lp: bool) -> ChoiceEvent:
        ids = list(chunk.get("output_ids") or [])
        phase.text += chunk.get("text", "")
        phase.output_ids += ids
        phase.meta = chunk.get("meta_info", {})
        lps = None
        if want_lp:
            lps = chat_logprobs(self.state.tokenizer, extract(phase.meta, ids), self.plan.top_logprobs)
        return ChoiceEvent("content", text=chunk.get("text", ""), logprobs=lps)


def _markers(plan: ChatPlan) -> list[str]:
    """The marker texts the plan's parsers read (the tool format's when tools are on, the reasoning's)."""
    found = list(plan.fmt.markers()) if plan.tools and plan.tool_choice.mode != "none" else []
    if plan.reasoning is not None:
        found += plan.reasoning.markers()
    return found + [m for m in (plan.think_marker, plan.think_resume) if m]


def _header_lines(fmt: ToolFormat) -> list[str]:
    """The format's content headers as the model writes them after the prompt's opener."""
    return [h[len(fmt.prompt_opener):] for h in fmt.content_headers if h.startswith(fmt.prompt_opener)]


def _split_events(split: Split, logprobs: list | None) -> list[ChoiceEvent]:
    """Reasoning then content events of one parser result (logprobs ride on the content event)."""
    out = [ChoiceEvent("reasoning", text=split.reasoning)] if split.reasoning else []
    if split.content or logprobs:
        out.append(ChoiceEvent("content", text=split.content, logprobs=logprobs))
    return out


def _openai_reason(fr: dict[str, Any]) -> str:
    kind = fr.get("type")
    return {"stop": "stop", "length": "length"}.get(kind, kind or "stop")
