"""The backends a program runs on: the ``Backend`` base, its two radixlm implementations, and the default.

Every backend offers the same calls: ``generate`` (one prompt or a batch, optionally with prompt
logprobs), ``generate_stream`` (text deltas), ``role_template`` (role prefixes from the model's
chat template), ``flush_cache`` and ``get_server_info``. ``Backend`` owns the argument handling of
those calls, so an implementation only says how to send one request (``_generate``) or a streamed
one (``_stream``):

- ``EngineBackend``: a ``radixlm.Engine`` in this process, through its public API only. The engine
  batches concurrent ``generate`` calls from many threads, which is how forks and batch members
  share a step.
- ``RuntimeEndpoint``: a radixlm (or SGLang-native) server's ``/generate`` route, through one pooled
  ``requests.Session``: connections are kept alive and reused, and up to ``POOL_SIZE`` interpreter
  threads (``run_batch``) can block on requests at once, each on its own connection. The chat
  template comes from the server's model when its path is readable here (the usual case for a
  local server); otherwise ChatML is assumed. A server streams the whole text so far in every
  chunk (SGLang's default) unless its ``/get_server_info`` says ``incremental_streaming_output``;
  either way :meth:`RuntimeEndpoint._stream` yields deltas, as the interpreter expects.

A backend that talks to a chat API (``OpenAI``, :mod:`radixlm.lang.openai_backend`) sets
``needs_chat_context``; the interpreter then passes ``chat=ChatContext(...)`` (the finished turns)
to ``generate`` and ``generate_stream``.

The default backend (``set_default_backend``) and the module-level calls made on it follow SGLang's
``api.py``: ``flush_cache()`` and ``get_server_info()`` act on the default backend (or the one
passed), and return ``False`` / ``None`` when there is none.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
from radixlm.lang.chat_template import LazyRoleTemplate, RoleTemplate
from requests.adapters import HTTPAdapter

LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs")
POOL_SIZE = 64  # RuntimeEndpoint's kept-alive connections (run_batch's default thread count fits)


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


# ---- in process: an Engine -----------------------------------------------------------------


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
        for key in LOGPROB_KEYS:
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


# ---- the default backend ----------------------------------------------------------------------

_default_backend: Any = None


def set_default_backend(backend: Any) -> None:
    """Use ``backend`` (an ``Engine``, ``RuntimeEndpoint`` or ``OpenAI``) when a run names none.

    None clears it.
    """
    global _default_backend
    _default_backend = None if backend is None else as_backend(backend)


def get_default_backend() -> Any:
    """The backend set by :func:`set_default_backend`, or None."""
    return _default_backend


def resolve_backend(backend: Any) -> Any:
    """``backend`` as a backend object, else the default one; ``ValueError`` when neither exists."""
    if backend is not None:
        return as_backend(backend)
    if _default_backend is None:
        raise ValueError("no backend: pass backend=... or call set_default_backend(Engine(...) or "
                         "RuntimeEndpoint(url)) first")
    return _default_backend


def flush_cache(backend: Any = None) -> bool:
    """Drop the prefix cache of ``backend`` (default: the default backend).

    True when flushed; False when there is no backend or it flushed nothing (requests running,
    or a remote API without a cache to control).
    """
    target = as_backend(backend) if backend is not None else _default_backend
    if target is None:
        return False
    return bool(target.flush_cache())


def get_server_info(backend: Any = None) -> dict | None:
    """The server information of ``backend`` (default: the default backend); None without one."""
    target = as_backend(backend) if backend is not None else _default_backend
    if target is None:
        return None
    return target.get_server_info()


# ---- over HTTP: a server's /generate ------------------------------------------------------------


class RuntimeEndpoint(Backend):
    """A backend talking to ``base_url`` (e.g. ``http://127.0.0.1:30000``).

    ``api_key`` is sent as a bearer token. Server errors are raised as ``ValueError`` (HTTP 400:
    bad input, e.g. an unsupported schema), ``PermissionError`` (401) or ``RuntimeError``, each
    carrying the server's message.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 600.0):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        super().__init__(self._load_template)
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=POOL_SIZE, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.model_info = self._request("GET", "/get_model_info")
        self._cumulative: bool | None = None  # whether stream chunks hold everything so far

    def flush_cache(self) -> bool:
        """``POST /flush_cache``; False when the server declines (requests still running)."""
        try:
            self._request("POST", "/flush_cache", {})
        except ValueError:  # HTTP 400: the server's "requests are still running"
            return False
        return True

    def get_server_info(self) -> dict:
        """``GET /get_server_info``."""
        return self._request("GET", "/get_server_info")

    def _generate(self, text: str | list[str] | None, sampling_params: dict[str, Any],
                  input_ids: list | None, logprob: dict[str, Any]) -> dict | list[dict]:
        # The server fills in the logprob entries' token text (return_text_in_logprobs).
        return self._request("POST", "/generate", self._body(text, sampling_params, input_ids, **logprob))

    def _stream(self, text: str, sampling_params: dict[str, Any],
                logprob: dict[str, Any]) -> Iterator[dict]:
        """The chunks of the SSE stream until ``data: [DONE]``."""
        body = self._body(text, sampling_params, None, **logprob)
        body["stream"] = True
        if self._cumulative is None:
            info = self.get_server_info()
            self._cumulative = not info.get("incremental_streaming_output", False)
        deltas = _Deltas() if self._cumulative else None
        with self._open("POST", "/generate", body, stream=True) as resp:
            for raw in resp.iter_lines():
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:"):].strip()
                if payload == "[DONE]":
                    return
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise _error_from(400, chunk)
                yield deltas.take(chunk) if deltas is not None else chunk

    def _body(self, text, sampling_params, input_ids, return_logprob=False, logprob_start_len=None,
              top_logprobs_num=0) -> dict[str, Any]:
        body: dict[str, Any] = {"sampling_params": dict(sampling_params)}
        if input_ids is not None:
            body["input_ids"] = input_ids
        else:
            body["text"] = text
        if return_logprob:
            body.update(return_logprob=True, return_text_in_logprobs=True,
                        top_logprobs_num=top_logprobs_num or 0)
            if logprob_start_len is not None:
                body["logprob_start_len"] = logprob_start_len
        return body

    def _open(self, method: str, path: str, body: dict | None = None, stream: bool = False) -> requests.Response:
        try:
            resp = self.session.request(method, self.base_url + path, json=body, stream=stream,
                                        timeout=self.timeout_s)
        except requests.ConnectionError as e:
            raise ConnectionError(f"cannot reach {self.base_url}: {e}") from None
        if resp.status_code >= 400:
            try:
                payload = resp.json()
            except ValueError:
                payload = {}
            resp.close()
            raise _error_from(resp.status_code, payload if isinstance(payload, dict) else {})
        return resp

    def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        with self._open(method, path, body) as resp:
            raw = resp.content
        return json.loads(raw) if raw.strip() else {}

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def _load_template(self) -> RoleTemplate:
        path = self.model_info.get("model_path") or self.model_info.get("tokenizer_path")
        if isinstance(path, str) and os.path.isdir(path):
            from radixlm.runtime.tokenizer.tokenizer import Tokenizer

            return RoleTemplate.from_tokenizer(Tokenizer(path))
        return RoleTemplate.chatml()


class _Deltas:
    """Turns cumulative stream chunks (text, output ids, output logprob lists so far) into deltas."""

    _GROWING = ("output_ids", "meta_info.output_token_logprobs", "meta_info.output_top_logprobs")

    def __init__(self) -> None:
        self.text_len = 0
        self.seen: dict[str, int] = {}

    def take(self, chunk: dict) -> dict:
        text = chunk.get("text") or ""
        out = {**chunk, "text": text[self.text_len:], "meta_info": dict(chunk.get("meta_info") or {})}
        self.text_len = max(self.text_len, len(text))
        for path in self._GROWING:
            holder = out["meta_info"] if path.startswith("meta_info.") else out
            key = path.rsplit(".", 1)[-1]
            if isinstance(holder.get(key), list):
                done = self.seen.get(key, 0)
                self.seen[key] = len(holder[key])
                holder[key] = holder[key][done:]
        for key in ("input_token_logprobs", "input_top_logprobs"):  # once, with the first chunk
            if self.seen.setdefault(key, 0) and key in out["meta_info"]:
                del out["meta_info"][key]
            elif key in out["meta_info"]:
                self.seen[key] = 1
        return out


def _error_from(status: int, payload: dict) -> Exception:
    err = payload.get("error") if isinstance(payload, dict) else None
    message = err.get("message") if isinstance(err, dict) else (err or json.dumps(payload)[:500])
    if status == 400:
        return ValueError(message)
    if status == 401:
        return PermissionError(message)
    return RuntimeError(f"server returned HTTP {status}: {message}")
