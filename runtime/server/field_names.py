"""Errors name fields as the route's request wrote them.

An OpenAI request's fields become ``SamplingParams`` fields (``max_tokens`` -> ``max_new_tokens``,
a prompt of token ids -> ``input_ids``); an error the engine raises names its own field. Wrapped by
:func:`with_route_names`, a handler's 400 names the field as the client wrote it, in ``param`` and
in the message (``OPENAI_NAMES`` on the OpenAI routes; the native routes use the engine's names),
and a constraint error with no field names the constraint's field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS
from radixlm.runtime.server.http_errors import APIError, from_exception

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# engine field -> the OpenAI request fields that set it, the default first
OPENAI_NAMES: dict[str, tuple[str, ...]] = {
    "max_new_tokens": ("max_tokens", "max_completion_tokens"),
    "min_new_tokens": ("min_tokens",),
    "input_ids": ("prompt",),
    "choices": ("guided_choice", "structured_outputs"),
    "ebnf": ("guided_grammar", "ebnf", "structured_outputs"),
}
# the fields that carry a constraint, in the order a request is read
CONSTRAINT_KEYS = ("response_format", "json_schema", "guided_json", "regex", "guided_regex", "ebnf",
                   "guided_grammar", "guided_choice", "structured_outputs", "tools")


def with_route_names(handler: Handler, names: dict[str, tuple[str, ...]] | None = None) -> Handler:
    """``handler`` whose 400s name the fields as the request wrote them: ``names`` maps engine
    fields to the route's (none: the route uses the engine's names)."""
    names = names or {}

    async def named(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as e:  # noqa: BLE001 - 400s renamed, everything else re-raised as it is
            err = from_exception(e)
            if err.status != 400 or not _needs_naming(err, names):
                raise
            raise renamed(err, await _body(request), names) from e

    return named


def renamed(err: APIError, body: dict[str, Any], names: dict[str, tuple[str, ...]]) -> APIError:
    """``err`` with the engine's field names replaced by the ones ``body`` used."""
    param, message = err.param, err.message
    for internal, route_names in names.items():
        if param == internal or _named_in(internal, message):
            name = next((n for n in route_names if n in body), route_names[0])
            message = re.sub(rf"\b{internal}\b", name, message) if "_" in internal else message
            if param == internal:
                param = name
    if param is None and err.code == "unsupported_schema":
        param = constraint_param(body)
    return APIError(err.status, message, param=param, code=err.code)


def constraint_param(body: dict[str, Any]) -> str | None:
    """The field that carries ``body``'s constraint (``sampling_params.regex`` on ``/generate``)."""
    sampling = body.get("sampling_params")
    if isinstance(sampling, dict):
        key = next((k for k in CONSTRAINT_FIELDS if sampling.get(k) not in (None, False)), None)
        if key is not None:
            return f"sampling_params.{key}"
    return next((k for k in CONSTRAINT_KEYS if k in body), None)


def _needs_naming(err: APIError, names: dict[str, tuple[str, ...]]) -> bool:
    if err.param is None and err.code == "unsupported_schema":
        return True
    return any(err.param == k or _named_in(k, err.message) for k in names)


def _named_in(internal: str, message: str) -> bool:
    """Whether ``message`` names ``internal`` (only names no English word can be mistaken for)."""
    return "_" in internal and re.search(rf"\b{internal}\b", message) is not None


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's body as read (aiohttp keeps it), or ``{}``."""
    try:
        body = json.loads(await request.read())
    except (ValueError, web.HTTPException):
        return {}
    return body if isinstance(body, dict) else {}
