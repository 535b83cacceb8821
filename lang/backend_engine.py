"""The in-process backend: drives a ``radixlm.Engine`` through its public API only.

The engine batches concurrent ``generate`` calls from many threads, which is how forks and batch
members share a step. The calls the interpreter makes are described in
:mod:`radixlm.lang.backend_base`.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from radixlm.lang.backend_base import Backend
from radixlm.lang.chat_template import RoleTemplate


class EngineBackend(Backend):
    """Adapter from the interpreter's backend calls to ``Engine.generate``."""

    def __init__(self, engine: Any):
        super().__init__(lambda: RoleTemplate.from_tokenizer(engine.tokenizer))
        self.engine = engine

    def flush_cache(self) -> bool:
        """``Engine.flush_cache``: False while requests are queued or running."""
        return self.engine.flush_cache() is not False

    def get_stats(self) -> dict:
        """``Engine.get_stats``."""
        return self.engine.get_stats()

    def get_server_info(self) -> dict:
        """What ``GET /get_server_info`` reports for this engine: version, server args, stats."""
        args = self.engine.server_args
        return {"version": _package_version(),
                "server_args": dataclasses.asdict(args) if dataclasses.is_dataclass(args) else dict(vars(args)),
                "stats": self.engine.get_stats()}

    def _generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                  input_ids: list | None, logprob: dict[str, Any]) -> dict | list[dict]:
        out = self.engine.generate(prompt=text, sampling_params=sampling_params, input_ids=input_ids,
                                   **logprob)
        if logprob["return_logprob"]:
            for item in out if isinstance(out, list) else [out]:
                self._fill_token_text(item["meta_info"])
        return out

    def _stream(self, text: str, sampling_params: dict[str, Any],
                logprob: dict[str, Any]) -> Iterator[dict]:
        for chunk in self.engine.generate(prompt=text, sampling_params=sampling_params, stream=True, **logprob):
            if logprob.get("return_logprob"):
                self._fill_token_text(chunk.get("meta_info", {}))
            yield chunk

    def _fill_token_text(self, meta: dict) -> None:
        # The engine leaves logprob entries' token text unset (None); decode it from the token id.
        tok = self.engine.tokenizer
        for key in ("input_token_logprobs", "output_token_logprobs"):
            for entry in meta.get(key) or []:
                if len(entry) > 2 and entry[2] is None:
                    entry[2] = tok.decode([entry[1]], skip_special_tokens=False)


def _package_version() -> str | None:
    # lang may not import the radixlm facade (docs/DESIGN.md), so read the installed metadata.
    try:
        return importlib.metadata.version("radixlm")
    except importlib.metadata.PackageNotFoundError:
        return None


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
    raise TypeError(f"backend must be a radixlm Engine, a RuntimeEndpoint or an OpenAI backend, "
                    f"got {type(obj).__name__}")
