"""The HTTP backend: a radixlm (or SGLang-native) server's ``/generate`` route.

Requests go through one pooled ``requests.Session`` per backend: connections are kept alive and
reused, and up to ``POOL_SIZE`` interpreter threads (``run_batch``) can block on requests at once,
each on its own connection. The chat template comes from the server's model when its path is readable here (the usual case for
a local server); otherwise ChatML is assumed. A server streams the whole text so far in every chunk
(SGLang's default) unless its ``/get_server_info`` says ``incremental_streaming_output``; either
way :meth:`RuntimeEndpoint._stream` yields deltas, as the interpreter expects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import requests
from radixlm.lang.backend_base import Backend
from radixlm.lang.chat_template import RoleTemplate
from requests.adapters import HTTPAdapter

POOL_SIZE = 64  # kept-alive connections per backend (run_batch's default thread count fits)


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
