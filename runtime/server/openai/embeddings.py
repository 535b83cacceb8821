"""Embeddings: OpenAI's ``POST /v1/embeddings`` and Ollama's ``POST /api/embed`` (and its older
``POST /api/embeddings``), for whatever model is served.

Each input is tokenized (off the event loop) and embedded by the engine (``async_embed``): the
final hidden state pooled as the model declares it (a GGUF's ``pooling_type``, a
sentence-transformers pooling config; otherwise the last token's, the one state of a causal LM that
has read the whole input), L2-normalised, all inputs batched into a few forwards. The forward runs
in a scratch KV pool: no radix-cache hit, nothing cached. ``dimensions`` keeps the first N values
and normalises again (Matryoshka-style, as OpenAI and Ollama do).

OpenAI: ``input`` is a string, a list of strings, a token-id list or a list of them;
``encoding_format`` ``float`` or ``base64`` (little-endian float32, the openai client's default); an
input longer than the context is a 400. Ollama: ``input`` a string or a list of strings (``prompt``
for ``/api/embeddings``); ``truncate`` (default true) cuts an input to the context instead of a 400.
"""

from __future__ import annotations

import base64
import time

import numpy as np
from aiohttp import web
from radixlm.runtime.server.transport.body import (
    APIError,
    FieldReader,
    UnknownFields,
    bad_request,
    check_token_ids,
    is_kind,
    shaped_errors,
)
from radixlm.runtime.server.transport.state import ServerState

OPENAI_IGNORED = frozenset({"user"})
OLLAMA_IGNORED = frozenset({"keep_alive", "options"})


class EmbeddingsRoutes:
    """The embedding routes of both APIs; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self.openai)
        app.router.add_post("/api/embed", shaped_errors(self.ollama))
        app.router.add_post("/api/embeddings", shaped_errors(self.ollama_legacy))

    async def openai(self, request: web.Request) -> web.Response:
        async with self.state.track("/v1/embeddings") as record:
            r = FieldReader(await self.state.read_json(request), unknown=UnknownFields(self.state.strict))
            self.state.check_model(r.get("model", "str"))
            inputs = _openai_inputs(r.get("input", ("str", "list"), required=True))
            fmt = r.get("encoding_format", "str", "float", choices=("float", "base64"))
            dims = r.get("dimensions", "int", lo=1)
            r.reject_unknown(OPENAI_IGNORED)
            ids = await self._encode(inputs, truncate=False)
            vectors = _truncated(await self._embed(ids), dims)
            record.prompt = sum(map(len, ids))
            data = [{"object": "embedding", "index": i, "embedding": _encoded(v, fmt)} for i, v in enumerate(vectors)]
            return web.json_response({"object": "list", "data": data, "model": self.state.model_name,
                                      "usage": {"prompt_tokens": record.prompt, "total_tokens": record.prompt}},
                                     headers=r.unknown.report("/v1/embeddings"))

    async def ollama(self, request: web.Request) -> web.Response:
        async with self.state.track("/api/embed") as record:
            r = FieldReader(await self.state.read_json(request), unknown=UnknownFields(self.state.strict))
            self.state.check_model(_ollama_model(r))
            raw = r.get("input", ("str", "list"), required=True)
            inputs = [raw] if isinstance(raw, str) else raw
            if not inputs or not all(isinstance(x, str) for x in inputs):
                raise bad_request("'input' must be a string or a non-empty array of strings", param="input",
                                  code="invalid_type")
            truncate = r.get("truncate", "bool", True)
            dims = r.get("dimensions", "int", lo=1)
            r.reject_unknown(OLLAMA_IGNORED)
            loaded = time.perf_counter()
            ids = await self._encode([(x, f"input[{i}]" if len(inputs) > 1 else "input") for i, x in enumerate(inputs)],
                                     truncate)
            vectors = _truncated(await self._embed(ids), dims)
            record.prompt = sum(map(len, ids))
            end = time.perf_counter()
            return web.json_response({"model": self.state.model_name, "embeddings": vectors,
                                      "total_duration": int((end - record.start) * 1e9),
                                      "load_duration": int((loaded - record.start) * 1e9),
                                      "prompt_eval_count": record.prompt}, headers=r.unknown.report("/api/embed"))

    async def ollama_legacy(self, request: web.Request) -> web.Response:
        async with self.state.track("/api/embeddings") as record:
            r = FieldReader(await self.state.read_json(request), unknown=UnknownFields(self.state.strict))
            self.state.check_model(_ollama_model(r))
            prompt = r.get("prompt", "str", required=True)
            r.reject_unknown(OLLAMA_IGNORED)
            ids = await self._encode([(prompt, "prompt")], truncate=True)
            record.prompt = len(ids[0])
            (vector,) = await self._embed(ids)
            return web.json_response({"embedding": vector}, headers=r.unknown.report("/api/embeddings"))

    async def _encode(self, inputs: list[tuple[str | list[int], str]], truncate: bool) -> list[list[int]]:
        """Token ids of each ``(input, param)``; longer than the context: cut (``truncate``) or a 400."""
        ctx = self.state.context_len
        out = []
        for value, param in inputs:
            ids = value if isinstance(value, list) else await self.state.prompts.encode(value, param)
            if ctx and len(ids) > ctx:
                if not truncate:
                    raise APIError(400, f"'{param}' has {len(ids)} tokens, more than this model's context length "
                                   f"{ctx}", param=param, code="context_length_exceeded")
                ids = ids[:ctx]
            out.append(ids)
        return out

    async def _embed(self, ids: list[list[int]]) -> list[list[float]]:
        return await self.state.engine.async_embed(ids)


def _ollama_model(r: FieldReader) -> str | None:
    model = r.get("model", "str", required=True)
    return model.removesuffix(":latest")


def _openai_inputs(raw: str | list) -> list[tuple[str | list[int], str]]:
    """OpenAI's four ``input`` forms as ``(text or token ids, param)`` pairs."""
    if isinstance(raw, str):
        return [(raw, "input")]
    if not raw:
        raise bad_request("'input' must not be empty", param="input", code="invalid_value")
    if all(is_kind(t, "int") for t in raw):
        return [(check_token_ids(raw, "input"), "input")]
    out: list[tuple[str | list[int], str]] = []
    for i, item in enumerate(raw):
        param = f"input[{i}]"
        if isinstance(item, str):
            out.append((item, param))
        elif isinstance(item, list):
            out.append((check_token_ids(item, param), param))
        else:
            raise bad_request(f"'{param}' must be a string or an array of token ids", param=param,
                              code="invalid_type")
    return out


def _truncated(vectors: list[list[float]], dims: int | None) -> list[list[float]]:
    """The first ``dims`` values of each vector, normalised again (None: unchanged)."""
    if dims is None or not vectors or dims >= len(vectors[0]):
        return vectors
    cut = np.asarray(vectors, dtype=np.float64)[:, :dims]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return (cut / np.where(norms == 0, 1.0, norms)).tolist()


def _encoded(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector
