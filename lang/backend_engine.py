"""The in-process backend: drives a ``radixlm.Engine`` through its public API only.

Every backend offers the same four calls to the interpreter: ``generate`` (one prompt or a batch,
optionally with prompt logprobs), ``generate_stream`` (text deltas), ``role_template`` (role
prefixes from the model's chat template) and ``flush_cache``. The engine batches concurrent
``generate`` calls from many threads, which is how forks and batch members share a step.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .chat_template import LazyRoleTemplate, RoleTemplate


class EngineBackend:
    """Adapter from the interpreter's backend calls to ``Engine.generate``."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._template = LazyRoleTemplate(lambda: RoleTemplate.from_tokenizer(engine.tokenizer))

    @property
    def role_template(self) -> RoleTemplate:
        return self._template.get()

    def generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                 input_ids: list | None = None, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0) -> dict | list[dict]:
        """``Engine.generate``; prompt-logprob entries get their token text filled in."""
        out = self.engine.generate(prompt=text, sampling_params=dict(sampling_params), input_ids=input_ids,
                                   return_logprob=return_logprob, logprob_start_len=logprob_start_len,
                                   top_logprobs_num=top_logprobs_num or 0)
        if return_logprob:
            for item in out if isinstance(out, list) else [out]:
                self._fill_text(item["meta_info"])
        return out

    def generate_stream(self, text: str, sampling_params: dict[str, Any],
                        **logprob_args: Any) -> Iterator[tuple[str, dict]]:
        """Yield ``(text_delta, meta_info)`` pairs; the last pair carries the final meta info."""
        emitted = ""
        for chunk in self.engine.generate(prompt=text, sampling_params=dict(sampling_params), stream=True,
                                          **_clean(logprob_args)):
            delta, emitted = stream_delta(chunk, emitted)
            yield delta, chunk.get("meta_info", {})

    def flush_cache(self) -> None:
        self.engine.flush_cache()

    def get_stats(self) -> dict:
        return self.engine.get_stats()

    def _fill_text(self, meta: dict) -> None:
        tok = self.engine.tokenizer
        for key in ("input_token_logprobs", "output_token_logprobs"):
            for entry in meta.get(key) or []:
                if len(entry) > 2 and entry[2] is None:
                    entry[2] = tok.decode([entry[1]], skip_special_tokens=False)


def stream_delta(chunk: dict, emitted: str) -> tuple[str, str]:
    """The new text in a streamed chunk (chunks carry deltas) and the text emitted so far."""
    text = chunk.get("text") or ""
    return text, emitted + text


def _clean(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


_WRAPPERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WRAPPERS_LOCK = threading.Lock()


def as_backend(obj: Any) -> Any:
    """A backend for ``obj``: backends pass through; an ``Engine`` gets one cached adapter."""
    if hasattr(obj, "role_template") and hasattr(obj, "generate_stream"):
        return obj
    if hasattr(obj, "generate") and hasattr(obj, "tokenizer"):
        with _WRAPPERS_LOCK:
            wrapper = _WRAPPERS.get(obj)
            if wrapper is None:
                wrapper = EngineBackend(obj)
                _WRAPPERS[obj] = wrapper
            return wrapper
    raise TypeError(f"backend must be a radixlm Engine or a RuntimeEndpoint, got {type(obj).__name__}")
