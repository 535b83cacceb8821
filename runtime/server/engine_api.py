"""What the HTTP server needs from an engine: :class:`ServedEngine`, exactly the members it uses.

The server never imports the engine (the package map keeps ``runtime.server`` off
``runtime.engine``); it is handed an object. ``Engine`` satisfies these protocols, and so does any
test double that forwards to one. Every member listed here is used without a fallback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server_args import ServerArgs


class IncrementalDetokenizer(Protocol):
    """Turns token ids into text as they come (a character split across tokens waits for its end)."""

    def step(self, ids: list[int]) -> str: ...


@runtime_checkable
class ServedTokenizer(Protocol):
    """The tokenizer calls of the routes: encode, decode, the chat template, token bytes."""

    vocab_size: int

    @property
    def chat_template(self) -> str | None: ...

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = True, **kwargs: Any) -> str: ...

    def special_ids_of(self, texts: Iterable[str]) -> list[int]: ...

    def incremental_detokenizer(self) -> IncrementalDetokenizer: ...

    def id_to_bytes(self, token_id: int) -> bytes: ...


@runtime_checkable
class ServedModelConfig(Protocol):
    """The model facts ``/get_model_info`` and the context checks read."""

    architecture: str
    vocab_size: int
    context_len: int


@runtime_checkable
class ServedEngine(Protocol):
    """The engine behind the HTTP server (``radixlm.Engine``'s public API, the parts the routes call)."""

    server_args: ServerArgs
    model_path: str
    model_name: str  # ORG/NAME for a hub snapshot, else the checkpoint's folder or file name
    tokenizer: ServedTokenizer
    model_config: ServedModelConfig

    async def async_generate(self, prompt: str | list[str] | None = None,
                             sampling_params: SamplingParams | dict[str, Any] | None = None,
                             input_ids: list[int] | None = None, return_logprob: bool = False,
                             logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                             stream: bool = False, rid: str | None = None,
                             extra_key: str | None = None) -> Any:
        """The result dict (``stream=False``) or an async iterator of chunk dicts (``stream=True``)."""
        ...

    async def async_embed(self, input_ids: list[list[int]]) -> list[list[float]]:
        """One pooled, L2-normalised embedding per token list (``ValueError`` for bad input)."""
        ...

    def abort(self, rid: str) -> None: ...

    def flush_cache(self) -> bool: ...

    def get_stats(self) -> dict[str, Any]: ...
