"""One chat choice generated: the engine's output as :class:`ChoiceEvent` s (text, thinking, calls, finish),
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
first runs a *think* phase that stops at the format's end marker, then the call phase.

A lenient constraint (``strict=False``) has the engine list what the output violates in
``meta_info["constraint_violations"]``; the finish event carries the text phases' lists (None when no
lenient constraint ran), which the OpenAI routes show as the choice's ``constraint_violations``.

Budgets: the finish event says whether budget-aware completion closed a phase's output
(``budget_closed``) and which call the budget cut off (``cut_call``: announced, never completed);
a call phase's content is raw call markup, so it is held and dropped unless the call completed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.chat_formats.reasoning.base import ReasoningParser, Split
from radixlm.runtime.chat_formats.tool_formats.base import ToolFormat
from radixlm.runtime.chat_formats.tool_formats.grammar import with_model_end
from radixlm.runtime.chat_formats.tool_formats.scanner import CallStream
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS, SamplingParams, choice_seed
from radixlm.runtime.server.chat.request import ChatPlan
from radixlm.runtime.server.transport.state import RequestRecord, ServedTokenizer, ServerState


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
    cut_call: int | None = None  # finish: index of a call cut off by the budget (not a complete call)
    notes: list[str] | None = None  # finish: the constraints' notes (why an output was cut or closed)
    stop_matched: str | None = None  # finish: the request's stop string that ended the answer, if one did


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
        self.cut_call: int | None = None  # a call announced but cut off by the budget
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
                if thought.finish.get("matched") != self.plan.think_marker:
                    yield self._finish(_openai_reason(thought.finish))
                    return
            self.ids += self._encode(self.fmt.forced_prefix)
            # "required": one or more calls (parallel_tool_calls); a named function: that one call
            async for ev in self._call_phase(choice.name, self.plan.max_calls if choice.name is None else 1,
                                             forced=True):
                yield ev
            yield self._finish("tool_calls" if self.calls and not self.cut_off else self.call_end)
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
                           budget_closed=self.budget_closed, cut_call=self.cut_call, stop_matched=stop_matched,
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
        """Free generation up to the reasoning's end marker (a stop string), before a forced call."""
        marker = self.plan.think_marker or ""
        sampling = self._sampling(max_new_tokens=self.budget, stop=[marker]).reset(
            "json_schema", "json_object", "regex", "reasoning_end")
        async for ev in self._run(phase, sampling, True):
            yield ev
        if phase.finish.get("matched") == marker:
            for ev in self._split(marker):  # the stop string is trimmed from the text: the parser needs it
                yield ev
            self.ids += self._through_marker(phase, marker) + self._encode(self.plan.think_resume)
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
        closed_before = self.budget_closed
        async for ev in self._run(phase, sampling, False):
            events += stream.feed(ev.text)
            for out in self._call_events(events):
                if out.kind == "content":
                    held.append(out)
                else:
                    yield out
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
                yield out
            elif complete:
                held.append(out)
        for out in held if complete else ():
            if not (ended and not out.text.strip()):  # the newlines after a closing text are not content
                yield out
        if not complete and stream.cut_index is not None:
            self.cut_call = stream.cut_index
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
