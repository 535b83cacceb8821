"""``OpenAI``: drive any OpenAI-compatible server (``/v1/chat/completions``, ``/v1/completions``).

Follows SGLang's OpenAI backend: a chat model (the default) sends the finished turns as
``messages``, so a gen must open an assistant turn (``sgl.assistant(sgl.gen(...))``); a completion
model (``is_chat_model=False``) sends the text. Streaming works for both; ``n > 1`` returns every
sample. What an OpenAI API cannot do raises a ``ValueError`` naming the argument instead of being
dropped: regex / JSON-schema / stop-regex constraints, logprobs, and typed gens other than
``dtype=str`` (which, as in SGLang, is a completion between quotes).

``select`` on a completion model is scored by echoed prompt logprobs (:func:`select_by_echo`); on a
chat model it raises ``BackendCapabilityError`` (a ``NotImplementedError``, as SGLang raises).
SGLang's OpenAI backend picks choices by biasing OpenAI's own tokenizer (tiktoken) token by token,
which only works for OpenAI's models. Instead we ask the server to echo ``context + choice`` with
``logprobs`` and ``max_tokens=0`` (one batched request), find the choice's tokens by their text
offsets, and let the same ``ChoicesMethod`` as the native backends decide. Any server that
supports ``echo`` with ``logprobs`` (radixlm, SGLang, vLLM) works.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from radixlm.lang.backends import ChatContext
from radixlm.lang.chat_template import RoleTemplate
from radixlm.lang.choices import ChoicesDecision, ChoicesMethod, Entry
from radixlm.lang.ir import dtype_of_regex

INSTRUCT_MODEL_NAMES = ("gpt-3.5-turbo-instruct",)  # SGLang's list of completion-only models
# Constraints an OpenAI API has no field for: refuse rather than silently return unconstrained text.
_UNSUPPORTED = ("regex", "json_schema", "ebnf", "stop_regex")
_PLAIN = ("n", "stop", "temperature", "top_p", "frequency_penalty", "presence_penalty")


class BackendCapabilityError(NotImplementedError):
    """What the OpenAI API cannot do for this model kind (SGLang raises ``NotImplementedError`` here
    too, so programs that catch that keep working)."""


@dataclass
class TokenUsage:
    """Tokens billed so far (summed over every request of this backend)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def reset(self) -> None:
        self.prompt_tokens = self.completion_tokens = 0


class OpenAI:
    """A backend for ``model_name`` on an OpenAI-compatible API.

    Extra arguments go to ``openai.OpenAI`` (``base_url=...``, ``api_key=...``), or to
    ``openai.AzureOpenAI`` with ``is_azure=True``. ``chat_template`` (a ``RoleTemplate``) only
    renders the state's text; it defaults to ChatML.
    """

    needs_chat_context = True

    def __init__(self, model_name: str, is_chat_model: bool | None = None,
                 chat_template: RoleTemplate | None = None, is_azure: bool = False,
                 *args: Any, **kwargs: Any):
        import openai  # imported here: only programs that use this backend need the package

        if chat_template is not None and not isinstance(chat_template, RoleTemplate):
            raise TypeError("chat_template must be a radixlm.lang.chat_template.RoleTemplate")
        self.client = (openai.AzureOpenAI if is_azure else openai.OpenAI)(*args, **kwargs)
        self.model_name = model_name
        self.is_chat_model = model_name not in INSTRUCT_MODEL_NAMES if is_chat_model is None \
            else bool(is_chat_model)
        self.role_template = chat_template or RoleTemplate.chatml()
        self.token_usage = TokenUsage()
        self._usage_lock = threading.Lock()

    # ---- the backend calls ---------------------------------------------------------------
    def generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                 input_ids: list | None = None, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 return_text_in_logprobs: bool | None = None,
                 chat: ChatContext | None = None) -> dict | list[dict]:
        """One completion (a list of n for ``n > 1``) in ``Engine.generate``'s result shape."""
        if input_ids is not None or not isinstance(text, str):
            raise ValueError("the OpenAI backend sends one text prompt per request (no batches or "
                             "token ids)")
        if sampling_params.get("max_new_tokens") == 0 and not return_logprob:
            # A pre-fill hint for a local prefix cache: nothing to do on a remote API.
            return {"text": "", "output_ids": [], "meta_info": {}}
        _refuse_logprobs(return_logprob)
        kwargs, dtype = self._kwargs(sampling_params)
        if dtype is not None:
            return self._typed(text, kwargs, dtype)
        if self.is_chat_model:
            ret = self.client.chat.completions.create(messages=self._messages(chat), **kwargs)
            texts = [c.message.content or "" for c in ret.choices]
        else:
            ret = self.client.completions.create(prompt=text, **kwargs)
            texts = [c.text for c in ret.choices]
        return self._results(ret, texts)

    def generate_stream(self, text: str, sampling_params: dict[str, Any],
                        chat: ChatContext | None = None, return_logprob: bool | None = None,
                        **_logprob: Any) -> Iterator[tuple[str, dict]]:
        """Yield ``(text_delta, meta_info)``; the finish reason and usage come in the last ones."""
        _refuse_logprobs(return_logprob)
        kwargs, dtype = self._kwargs(sampling_params)
        if dtype is not None:
            raise ValueError(f"gen(dtype={dtype}) cannot stream on the OpenAI backend (SGLang: unknown "
                             "dtype); run without stream=True")
        options = {"stream": True, "stream_options": {"include_usage": True}, **kwargs}
        if self.is_chat_model:
            events = self.client.chat.completions.create(messages=self._messages(chat), **options)
        else:
            events = self.client.completions.create(prompt=text, **options)
        for event in events:
            if event.usage is not None:
                self._add_usage(event.usage)
                yield "", {"prompt_tokens": event.usage.prompt_tokens,
                           "completion_tokens": event.usage.completion_tokens}
            if not event.choices:
                continue
            choice = event.choices[0]
            delta = (choice.delta.content if self.is_chat_model else choice.text) or ""
            reason = choice.finish_reason
            yield delta, ({"finish_reason": {"type": reason, "matched": None}} if reason else {})

    def select_choices(self, context: str, choices: list[str], method: ChoicesMethod,
                       temperature: float = 0.0) -> ChoicesDecision:
        """``select``: completion models only (scored by echoed prompt logprobs)."""
        if self.is_chat_model:
            raise BackendCapabilityError(
                "select/choices is not supported for chat models on the OpenAI backend; use a "
                "completion model (OpenAI(..., is_chat_model=False), e.g. gpt-3.5-turbo-instruct)")
        return select_by_echo(self.client, self.model_name, context, choices, method, temperature)

    def flush_cache(self) -> bool:
        """An OpenAI API has no prefix cache to control: nothing is flushed (False)."""
        return False

    def get_server_info(self) -> dict:
        """What this backend knows about its server: model, URL, mode and token usage."""
        return {"backend": "openai", "model_name": self.model_name, "base_url": str(self.client.base_url),
                "is_chat_model": self.is_chat_model, "token_usage": asdict(self.token_usage)}

    # ---- helpers -------------------------------------------------------------------------
    def _kwargs(self, params: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """OpenAI request fields for our sampling params, and the gen's dtype (if typed).

        Like SGLang, the sampler fields OpenAI lacks (top_k, min_p, ignore_eos, ...) are dropped.
        """
        dtype = dtype_of_regex(params.get("regex"))
        for key in _UNSUPPORTED:
            if params.get(key) and not (key == "regex" and dtype is not None):
                raise ValueError(f"gen({key}=...) is not supported by the OpenAI backend: an OpenAI "
                                 f"API has no such constraint (use RuntimeEndpoint or an Engine)")
        kwargs = {k: params[k] for k in _PLAIN if params.get(k) is not None}
        # o1-style models take max_completion_tokens instead of max_tokens (as SGLang switches).
        reasoning = self.model_name.startswith(("o1", "o3")) or "o1" in self.model_name
        kwargs["max_completion_tokens" if reasoning else "max_tokens"] = params.get("max_new_tokens", 128)
        return {"model": self.model_name, **kwargs}, dtype

    def _typed(self, text: str, kwargs: dict[str, Any], dtype: str) -> dict | list[dict]:
        """SGLang's typed gens on an OpenAI API: only ``str``, as a completion closed by a quote."""
        if self.is_chat_model:
            raise ValueError(f"gen(dtype={dtype}) is not supported on chat models by the OpenAI backend "
                             "(constrained types need a completion model)")
        if dtype != "str":
            raise ValueError(f"gen(dtype={dtype}) is not supported by the OpenAI backend: SGLang biases "
                             "OpenAI's own tokenizer for ints (tiktoken), which no other server shares")
        kwargs = {**kwargs, "stop": '"'}
        ret = self.client.completions.create(prompt=text + '"', **kwargs)
        return self._results(ret, ['"' + c.text + '"' for c in ret.choices])

    def _messages(self, chat: ChatContext | None) -> list[dict[str, Any]]:
        if chat is None or not chat.at_assistant_start:
            raise RuntimeError("For OpenAI chat models, sgl.gen must be right after sgl.assistant "
                               "(e.g. s += sgl.assistant(sgl.gen('answer'))); API speculative "
                               "execution (num_api_spec_tokens) is not supported")
        return chat.messages

    def _results(self, ret: Any, texts: list[str]) -> dict | list[dict]:
        usage = getattr(ret, "usage", None)
        if usage is not None:
            self._add_usage(usage)
        out = []
        for choice, text in zip(ret.choices, texts):
            meta = {"id": ret.id, "finish_reason": {"type": choice.finish_reason, "matched": None},
                    "prompt_tokens": getattr(usage, "prompt_tokens", None),
                    "completion_tokens": getattr(usage, "completion_tokens", None)}
            out.append({"text": text, "output_ids": [], "meta_info": meta})
        return out[0] if len(out) == 1 else out

    def _add_usage(self, usage: Any) -> None:
        with self._usage_lock:
            self.token_usage.prompt_tokens += usage.prompt_tokens or 0
            self.token_usage.completion_tokens += usage.completion_tokens or 0


def _refuse_logprobs(return_logprob: bool | None) -> None:
    if return_logprob:
        raise ValueError("return_logprob is not supported by the OpenAI backend (SGLang returns no "
                         "meta info there); use RuntimeEndpoint or an Engine")


# ---- select by echoed prompt logprobs ----------------------------------------------------------


def select_by_echo(client: Any, model: str, context: str, choices: list[str], method: ChoicesMethod,
                   temperature: float = 0.0) -> ChoicesDecision:
    """Score each choice as a continuation of ``context`` and pick one with ``method``."""
    prompts = [context + c for c in choices]
    scored = _echo(client, model, prompts)
    cond = [_tokens_after(lps, len(context), len(p)) for lps, p in zip(scored, prompts)]
    uncond = None
    if method.requires_unconditional_logprobs:
        alone = _echo(client, model, list(choices))
        # Align by position from the end: the choice alone may tokenise slightly differently.
        uncond = [_tokens_after(lps, 0, len(c))[-len(entries):] if entries else []
                  for lps, c, entries in zip(alone, choices, cond)]
        uncond = [_pad(u, len(entries)) for u, entries in zip(uncond, cond)]
    return method(list(choices), cond, uncond, temperature=temperature)


def _echo(client: Any, model: str, prompts: list[str]) -> list[Any]:
    """The legacy ``logprobs`` object of each prompt, echoed back with no new tokens."""
    ret = client.completions.create(model=model, prompt=prompts, max_tokens=0, echo=True, logprobs=0,
                                    temperature=0)
    by_index = {c.index: c.logprobs for c in ret.choices}
    missing = [i for i in range(len(prompts)) if by_index.get(i) is None]
    if missing:
        raise RuntimeError("the server returned no echoed logprobs for select: it must support "
                           "/v1/completions with echo=true and logprobs")
    return [by_index[i] for i in range(len(prompts))]


def _tokens_after(logprobs: Any, start: int, end: int) -> list[Entry]:
    """Entries ``[logprob, None, token]`` of the tokens whose text ends past ``start`` (up to ``end``).

    A token's span runs to the next token's offset, so zero-width tokens (BOS) are skipped and a
    token that merges the end of the context with the start of the choice is counted.
    """
    offsets = list(logprobs.text_offset)
    ends = offsets[1:] + [max(end, offsets[-1] if offsets else end)]
    out = []
    for tok, lp, off, stop in zip(logprobs.tokens, logprobs.token_logprobs, offsets, ends):
        if stop > start and off < end:
            out.append([lp, None, tok])
    return out


def _pad(entries: list[Entry], n: int) -> list[Entry]:
    return [[0.0, None, ""]] * (n - len(entries)) + entries
