"""``Backend``: what the interpreter needs from a model, shared by the Engine and HTTP backends.

Every backend offers the same four calls: ``generate`` (one prompt or a batch, optionally with
prompt logprobs), ``generate_stream`` (text deltas), ``role_template`` (role prefixes from the
model's chat template) and ``flush_cache``. This base class owns the argument handling of those
calls, so a backend only says how to send one request (``_generate``) or a streamed one
(``_stream``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from radixlm.lang.chat_template import LazyRoleTemplate, RoleTemplate


class Backend(ABC):
    """Base of the DSL backends; ``load_template`` builds the role template on first use."""

    def __init__(self, load_template: Callable[[], RoleTemplate]):
        self._template = LazyRoleTemplate(load_template)

    @property
    def role_template(self) -> RoleTemplate:
        """Role prefixes and suffixes of the model's chat template."""
        return self._template.get()

    def generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                 input_ids: list | None = None, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0) -> dict | list[dict]:
        """What ``Engine.generate`` returns; prompt-logprob entries carry their token text."""
        logprob = {"return_logprob": return_logprob, "logprob_start_len": logprob_start_len,
                   "top_logprobs_num": top_logprobs_num or 0}
        return self._generate(text, dict(sampling_params), input_ids, logprob)

    def generate_stream(self, text: str, sampling_params: dict[str, Any],
                        **logprob_args: Any) -> Iterator[tuple[str, dict]]:
        """Yield ``(text_delta, meta_info)`` pairs; the last pair carries the final meta info."""
        # Unset logprob arguments are left out so that the receiving side's defaults apply.
        logprob = {k: v for k, v in logprob_args.items() if v is not None}
        for chunk in self._stream(text, dict(sampling_params), logprob):
            # Streamed chunks carry only the new text, not the text so far.
            yield chunk.get("text") or "", chunk.get("meta_info", {})

    @abstractmethod
    def flush_cache(self) -> None:
        """Drop the model's prefix cache."""

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
