"""From a parsed chat request to its :class:`ChatPlan`: the prompt, the final sampling settings, the formats.

:func:`plan_chat` renders the messages with the chat template, checks the context length, fits
``max_new_tokens`` to the context left when the request set none, checks that the tool-call format
can express a forced call's schema, and adds the server's reasoning format. Each step derives a
new ``SamplingParams`` from the request's (``replace``); the request itself is never changed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import jinja2
from radixlm.runtime.chat_formats.reasoning.base import CLOSED, ReasoningFormat
from radixlm.runtime.chat_formats.tool_formats.base import FormatUnsupported, ToolFormat
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS, SamplingParams
from radixlm.runtime.server.http_errors import APIError, bad_request, client_message
from radixlm.runtime.server.openai_requests import ChatRequest
from radixlm.runtime.server.prompt_encoder import text_chars
from radixlm.runtime.server.state import ServerState
from radixlm.runtime.server.tool_calls import MAX_CALLS_PER_TURN, ToolChoice, constraint_error, error_pointer


@dataclass(frozen=True)
class ChatPlan:
    """Everything fixed for one chat request; ``sampling`` already holds the final ``max_new_tokens``."""

    prompt_ids: list[int]
    sampling: SamplingParams
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    extra_key: str | None = None  # the radix-cache namespace (tenant and salt); every phase shares it
    fmt: ToolFormat = field(default_factory=lambda: FORMATS["hermes"])  # the family's call syntax
    max_calls: int = MAX_CALLS_PER_TURN  # 1 with parallel_tool_calls: false
    reasoning: ReasoningFormat | None = None  # splits the output into reasoning / content (None: all content)
    reasoning_state: str = "none"  # where the prompt left the thinking (reasoning.base: open/closed/none)
    think_marker: str | None = None  # a forced call waits for the model to write this (its thinking's end)
    think_resume: str = ""  # then this text precedes the call (harmony: a new message)
    opened: bool = False  # the prompt ends with the format's prompt_opener: the answer starts with a header


def plan_chat(state: ServerState, req: ChatRequest, extra_key: str | None) -> ChatPlan:
    """The plan of ``req`` (400 for messages the template cannot render, a context overflow, or a
    forced call's schema the tool-call format cannot express)."""
    state.prompts.check_chars(text_chars(req.messages), "messages")  # before rendering: the text holds them all
    text = _render(state, req)
    state.prompts.check_chars(text, "messages")  # before tokenizing a text that cannot fit
    ids = state.prompts.encode_sync(text, add_special_tokens=False)
    ctx = state.context_len
    if ctx and len(ids) >= ctx:
        raise APIError(400, f"this model's maximum context length is {ctx} tokens, but the messages "
                       f"take {len(ids)} tokens", param="messages", code="context_length_exceeded")
    sampling = req.sampling
    if not req.max_tokens_given:  # the server's default, within the context left
        default = state.max_new_tokens_default
        sampling = sampling.replace(max_new_tokens=min(default, max(ctx - len(ids) - 1, 1)) if ctx else default)
    elif ctx and len(ids) + sampling.max_new_tokens > ctx:
        raise APIError(400, f"this model's maximum context length is {ctx} tokens; the messages take "
                       f"{len(ids)} and max_tokens asks for {sampling.max_new_tokens}",
                       param="max_tokens", code="context_length_exceeded")
    callable_tools = req.tool_choice.callable_tools(req.tools)  # the prompt lists them all (allowed_tools)
    if req.tool_choice.forces_call:  # a layout that cannot express a tool's schema: 400 before generating
        try:
            state.tool_format.body_constraint(callable_tools, req.tool_choice.name)
        except FormatUnsupported as e:
            raise schema_error(req, e) from None
    plan = ChatPlan(ids, sampling, callable_tools, req.tool_choice, req.stream, req.logprobs, req.top_logprobs,
                    extra_key, state.tool_format, MAX_CALLS_PER_TURN if req.parallel_tool_calls else 1,
                    opened=bool(state.tool_format.prompt_opener) and text.endswith(state.tool_format.prompt_opener))
    return _with_reasoning(state, req, plan, text)


def _render(state: ServerState, req: ChatRequest) -> str:
    """The prompt text: the messages (and tools) through the chat template."""
    tools = [t.to_template() for t in req.tools] if req.tools and req.tool_choice.mode != "none" else None
    try:
        text = state.tokenizer.apply_chat_template(req.messages, tools=tools,
                                                   add_generation_prompt=req.add_generation_prompt,
                                                   **req.chat_template_kwargs)
        if req.continue_final_message:
            text = _continue_final(text, req.messages[-1])
    except Exception as e:  # jinja's raise_exception, or a template that cannot render these messages
        # the template's own words (raise_exception, jinja errors) help; a Python error's do not
        why = f": {client_message(str(e))}" if isinstance(e, (ValueError, jinja2.TemplateError)) else ""
        raise bad_request(f"the chat template cannot render these messages{why}", param="messages",
                          code="invalid_messages") from None
    return text


def _with_reasoning(state: ServerState, req: ChatRequest, plan: ChatPlan, prompt: str) -> ChatPlan:
    """``plan`` with the server's reasoning format: the output split (unless ``separate_reasoning``
    is false) and the wait for the thinking to end before a constraint."""
    fmt = state.reasoning_format
    if fmt is None:
        return plan
    changes: dict[str, Any] = {}
    reasoning_state = fmt.prompt_state(prompt)
    if req.separate_reasoning:
        changes.update(reasoning=fmt, reasoning_state=reasoning_state)
    sampling = plan.sampling
    if fmt.name == "gpt-oss" and "skip_special_tokens" not in req.sampling_fields:
        sampling = sampling.replace(skip_special_tokens=False)  # harmony's markers are special tokens
    if reasoning_state != CLOSED:  # else the template ended the thinking: the answer (and grammar) starts now
        changes.update(think_marker=fmt.call_after[0], think_resume=fmt.call_after[1])
        if any(getattr(sampling, k) for k in CONSTRAINT_FIELDS):
            sampling = sampling.replace(reasoning_end=fmt.gate_marker)  # the engine's gate: grammar after it
    return dataclasses.replace(plan, sampling=sampling, **changes)


def schema_error(req: ChatRequest, e: ValueError) -> Exception:
    """Point a constraint error at ``tools`` or ``response_format`` instead of our wrapper schema."""
    if isinstance(e, FormatUnsupported):  # the family's layout cannot express this tool's schema
        return APIError(400, str(e), param=f"tools[{e.index}].function.parameters", code="unsupported_schema")
    if error_pointer(e) is None:
        return e
    if req.tools and req.tool_choice.mode != "none":
        return constraint_error(e, req.tools, req.tool_choice.name) or e
    if req.response_format.kind == "json_schema":
        return APIError(400, f"response_format.json_schema.schema: {client_message(str(e))}",
                        param="response_format.json_schema.schema", code="unsupported_schema")
    if req.constraint_field is not None:
        return APIError(400, f"{req.constraint_field}: {client_message(str(e))}", param=req.constraint_field,
                        code="unsupported_schema")
    return e


def _continue_final(text: str, last: dict[str, Any]) -> str:
    """The rendered prompt cut right after the last message's content, so the answer continues it
    (the template's end-of-turn text after it is dropped, as transformers' continue_final_message does)."""
    content = last.get("content") or ""
    at = text.rfind(content) if content else -1
    if at < 0:
        raise ValueError("continue_final_message: the chat template does not render the last message's "
                         "content verbatim")
    return text[:at + len(content)]
