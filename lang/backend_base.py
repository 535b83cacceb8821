"""``Backend``: what the interpreter needs from a model, shared by the Engine and HTTP backends.

Every backend offers the same calls: ``generate`` (one prompt or a batch, optionally with prompt
logprobs), ``generate_stream`` (text deltas), ``role_template`` (role prefixes from the model's
chat template), ``flush_cache`` and ``get_server_info``. This base class owns the argument
handling of those calls, so a backend only says how to send one request (``_generate``) or a
streamed one (``_stream``).

A backend that talks to a chat API (``OpenAI``) sets ``needs_chat_context``; the interpreter then
passes ``chat=ChatContext(...)`` (the finished turns) to ``generate`` and ``generate_stream``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from radixlm.lang.chat_template import LazyRoleTemplate, RoleTemplate

LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs")


@dataclass
class ChatContext:
    """The conversation a gen continues: the finished turns, and whether it opens an assistant turn."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    at_assistant_start: bool = False


class Backend(ABC):
    """Base of the DSL backends; ``load_template`` builds the role template on first use."""

    needs_chat_context = False

    def __init__(self, load_template: Callable[[], RoleTemplate]):
        self._template = LazyRoleTemplate(load_template)

    @property
    def role_template(self) -> RoleTemplate:
        """Role prefixes and suffixes of the model's chat template."""
        return self._template.get()

    def generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                 input_ids: list | None = None, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                 return_text_in_logprobs: bool | None = None) -> dict | list[dict]:
        """What ``Engine.generate`` returns (a list for a batch or ``n > 1``).

        Logprob entries carry their token text unless ``return_text_in_logprobs`` is False.
        """
        logprob = {"return_logprob": return_logprob, "logprob_start_len": logprob_start_len,
                   "top_logprobs_num": top_logprobs_num or 0}
        out = self._generate(text, dict(sampling_params), input_ids, logprob)
        if return_text_in_logprobs is False:
            for item in out if isinstance(out, list) else [out]:
                strip_logprob_text(item.get("meta_info", {}))
        return out

    def generate_stream(self, text: str, sampling_params: dict[str, Any],
                        return_text_in_logprobs: bool | None = None,
                        **logprob_args: Any) -> Iterator[tuple[str, dict]]:
        """Yield ``(text_delta, meta_info)`` pairs; logprobs in each are those of its new tokens."""
        # Unset logprob arguments are left out so that the receiving side's defaults apply.
        logprob = {k: v for k, v in logprob_args.items() if v is not None}
        for chunk in self._stream(text, dict(sampling_params), logprob):
            meta = chunk.get("meta_info", {})
            if return_text_in_logprobs is False:
                strip_logprob_text(meta)
            # Streamed chunks carry only the new text, not the text so far.
            yield chunk.get("text") or "", meta

    @abstractmethod
    def flush_cache(self) -> bool:
        """Drop the model's prefix cache; False when nothing was flushed."""

    @abstractmethod
    def get_server_info(self) -> dict:
        """Server arguments, version and statistics."""

    @abstractmethod
    def _generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                  input_ids: list | None, logprob: dict[str, Any]) -> dict | list[dict]:
        """Send one (possibly batched) request; ``logprob`` holds the ``return_logprob`` family.

        Logprob entries must come back with their token text (``[logprob, token_id, text]``).
        """

    @abstractmethod
    def _stream(self, text: str, sampling_params: dict[str, Any],
                logprob: dict[str, Any]) -> Iterator[dict]:
        """Send one streamed request and yield its chunks (``text`` delta and ``meta_info``)."""


def strip_logprob_text(meta: dict) -> None:
    """Blank the token text of logprob entries, as SGLang does for ``return_text_in_logprobs=False``."""
    for key in LOGPROB_KEYS:
        for entry in meta.get(key) or []:
            if isinstance(entry, list) and len(entry) > 2:
                entry[2] = None
