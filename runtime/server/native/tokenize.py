"""``/tokenize`` and ``/detokenize`` (also under ``/v1/``), in SGLang's request and response shapes.

``POST /tokenize`` ``{"prompt": str | [str], "add_special_tokens": true}`` (or ``"messages"``,
rendered with the chat template as a chat request would be) answers ``{"tokens", "count",
"max_model_len"}``, lists for a list of prompts; with ``messages``, ``tools`` (and ``tool_choice``)
render as a chat request's do, so the tokens are the chat prompt's. ``POST /detokenize`` ``{"tokens": [int] | [[int]],
"skip_special_tokens": true}`` answers ``{"text"}``.

Both apply the generation routes' bounds before any tokenizer work: at most
``max_prompts_per_request`` prompts or sequences, each prompt within the character bound
(``PromptEncoder.check_chars``), each sequence at most the context length in ids; the work runs in
the utility pool, never ahead of a generation request's tokenizing.
"""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web
from radixlm.runtime.server.chat.request import check_template_kwargs, parse_messages
from radixlm.runtime.server.chat.tools import parse_tool_choice, parse_tools
from radixlm.runtime.server.transport.body import (
    FieldReader,
    UnknownFields,
    bad_request,
    check_str_list,
    check_token_ids,
    client_message,
)
from radixlm.runtime.server.transport.state import PromptEncoder, ServerState, text_chars


class TokenizeRoutes:
    """Handlers of ``/tokenize`` and ``/detokenize``; ``register`` adds them to an application."""

    def __init__(self, state: ServerState, strict: bool = False):
        self.state = state
        self.strict = strict

    def register(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/tokenize", self.tokenize)
            app.router.add_post(f"{prefix}/detokenize", self.detokenize)

    async def _reader(self, request: web.Request) -> FieldReader:
        r = FieldReader(await self.state.read_json(request), unknown=UnknownFields(self.strict))
        self.state.check_model(r.get("model", "str"))
        return r

    async def tokenize(self, request: web.Request) -> web.Response:
        r = await self._reader(request)
        if r.has("messages") == r.has("prompt"):
            raise bad_request("exactly one of 'prompt' and 'messages' is required", param="prompt")
        add_special = r.get("add_special_tokens", "bool", True)
        if r.has("messages"):
            tools = parse_tools(r.get("tools", "list"))
            choice = parse_tool_choice(r.get("tool_choice", ("str", "object")), tools)
            kwargs = check_template_kwargs(r.get("chat_template_kwargs", "object"))
            if tools and choice.mode != "none":  # as the chat route renders them
                kwargs = {**kwargs, "tools": [t.to_template() for t in tools]}
            messages = parse_messages(r)
            r.reject_unknown()
            self.state.prompts.check_chars(text_chars(messages), "messages")
            text = await self.state.prompts.run_utility(self._render, messages, kwargs)
            self.state.prompts.check_chars(text, "messages")
            prompts, single, add_special = [text], True, False  # the template wrote the special tokens
        else:
            raw = r.get("prompt", ("str", "list"), required=True)
            prompts, single = check_str_list(raw, "prompt", allow_empty=True), isinstance(raw, str)
            r.reject_unknown()
            self._check_count(len(prompts), "prompt")
            for i, prompt in enumerate(prompts):
                self.state.prompts.check_chars(prompt, "prompt" if single else f"prompt[{i}]")
        tokens = await self.state.prompts.run_utility(_encode_all, self.state.prompts, prompts, add_special)
        counts = [len(t) for t in tokens]
        return web.json_response({"tokens": tokens[0] if single else tokens, "count": counts[0] if single else counts,
                                  "max_model_len": self.state.context_len},
                                 headers=r.unknown.report(request.path))

    def _render(self, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> str:
        """The messages through the chat template; a template that cannot render them is a 400."""
        try:
            return self.state.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs)
        except Exception as e:  # noqa: BLE001 - jinja's raise_exception, or these messages do not fit it
            why = f": {client_message(str(e))}" if isinstance(e, (ValueError, jinja2.TemplateError)) else ""
            raise bad_request(f"the chat template cannot render these messages{why}", param="messages",
                              code="invalid_messages") from None

    async def detokenize(self, request: web.Request) -> web.Response:
        r = await self._reader(request)
        raw = r.get("tokens", "list", required=True)
        skip = r.get("skip_special_tokens", "bool", True)
        r.reject_unknown()
        single = not raw or not isinstance(raw[0], list)
        batch = [raw] if single else raw
        self._check_count(len(batch), "tokens")
        params = ["tokens" if single else f"tokens[{i}]" for i in range(len(batch))]
        for ids, param in zip(batch, params):
            self._check_ids(ids, param)
        texts = await self.state.prompts.run_utility(self._decode_all, batch, skip)
        return web.json_response({"text": texts[0] if single else texts}, headers=r.unknown.report(request.path))

    def _check_count(self, count: int, param: str) -> None:
        """400 naming ``param`` for more prompts or sequences than a generation request may hold."""
        most = self.state.engine.server_args.max_prompts_per_request
        if count > most:
            raise bad_request(f"'{param}' holds {count} entries, more than max_prompts_per_request ({most})",
                              param=param, code="too_many_prompts")

    def _check_ids(self, ids: Any, param: str) -> None:
        """400 naming ``param`` unless ``ids`` are token ids of the vocabulary, at most a context's worth."""
        if ids == []:
            return
        check_token_ids(ids, param)
        ctx = self.state.context_len
        if ctx and len(ids) > ctx:
            raise bad_request(f"'{param}' holds {len(ids)} token ids, more than the context length ({ctx})",
                              param=param, code="context_length_exceeded")
        size = self.state.tokenizer.vocab_size
        bad = next((t for t in ids if t >= size), None)
        if bad is not None:
            raise bad_request(f"'{param}' holds token id {bad}, outside the vocabulary (size {size})",
                              param=param, code="out_of_range")

    def _decode_all(self, batch: list[list[int]], skip: bool) -> list[str]:
        return [self.state.tokenizer.decode(ids, skip_special_tokens=skip) if ids else "" for ids in batch]


def _encode_all(encoder: PromptEncoder, prompts: list[str], add_special: bool) -> list[list[int]]:
    return [encoder.encode_sync(p, add_special) for p in prompts]
