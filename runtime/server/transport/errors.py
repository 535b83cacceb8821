"""OpenAI-shaped HTTP errors: ``{"error": {"message", "type", "param", "code"}}``.

Every handler raises :class:`APIError` (or lets a ``ValueError`` escape, which means bad input);
the server's error middleware turns both into one JSON shape, so clients see the same error body
on the native and the OpenAI routes.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

RETRY_AFTER_S = 1  # what a 503 tells clients to wait: the queue drains in decode steps, not minutes
# A bug below the server can surface inside a ValueError's message, wrapped as "...: compile failed:
# TypeError: <Python text>"; that text is for the log, not for clients.
_WRAPPED_PYTHON_ERROR = re.compile(r"(?:^|(?<=: ))[A-Z]\w*(?:Error|Exception): .*", re.S)
logger = logging.getLogger("radixlm.server")

# HTTP status -> OpenAI error "type"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    414: "invalid_request_error",
    499: "client_closed_request",
    500: "internal_server_error",
    503: "server_overloaded",
}


class APIError(Exception):
    """An error with an HTTP status, rendered as an OpenAI error object.

    ``param`` names the offending request field (dotted path, e.g. ``messages[2].role``) when
    one is to blame; ``code`` is a short machine-readable reason.
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        if retry_after_s is None and status == 503:
            retry_after_s = RETRY_AFTER_S
        self.retry_after_s = retry_after_s

    @property
    def type(self) -> str:
        return _ERROR_TYPES.get(self.status, "invalid_request_error")

    def to_dict(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def headers(self) -> dict[str, str]:
        """``WWW-Authenticate`` on a 401, ``Retry-After`` (seconds) on a 503."""
        out = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        if self.retry_after_s is not None:
            out["Retry-After"] = str(self.retry_after_s)
        return out

    def to_response(self) -> web.Response:
        return web.json_response(self.to_dict(), status=self.status, headers=self.headers())

    def to_sse(self) -> bytes:
        """The error as one SSE event, for failures after a stream has started."""
        return b"data: " + json.dumps(self.to_dict()).encode() + b"\n\n"


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 error; ``param`` names the bad field."""
    return APIError(400, message, param=param, code=code)


def not_found(message: str, param: str | None = None, code: str = "not_found") -> APIError:
    return APIError(404, message, param=param, code=code)


def from_exception(exc: BaseException) -> APIError:
    """Map an exception escaping a handler or the engine to an :class:`APIError`.

    ``ValueError`` (which includes the constraint compiler's ``ConstraintError``) is bad input:
    400, with the JSON pointer in ``param`` when the error carries one. A full waiting queue
    (any exception class named ``QueueFullError``) is 503, and so is an exception marked
    ``retryable`` (the constraint compiler's ``CompileUnavailable``: its worker died). Anything else is a 500 whose message
    says nothing about the exception (the error middleware logs it): Python exception text is for
    the log, never for clients.
    """
    if isinstance(exc, APIError):
        return exc
    if type(exc).__name__ == "QueueFullError":
        return APIError(503, str(exc) or "the waiting queue is full; retry later", code="queue_full")
    if isinstance(exc, web.HTTPException):
        return _from_http_exception(exc)
    if getattr(exc, "retryable", False):  # the server's fault (a compile worker died): a retry may work
        return APIError(503, client_message(str(exc)), code="server_fault")
    if isinstance(exc, ValueError):
        param = getattr(exc, "pointer", None) or getattr(exc, "field", None)  # JSON pointer, or field name
        return APIError(400, client_message(str(exc)), param=param, code=_code_for(exc))
    return APIError(500, "internal error; the server log has the details", code="internal_error")


def client_message(message: str) -> str:
    """``message`` without the Python exception text a wrapped internal error carries (logged instead)."""
    clean = _WRAPPED_PYTHON_ERROR.sub("an internal error (the server log has the details)", message)
    if clean != message:
        logger.warning("internal error in a client error: %s", message)
    return clean


def _code_for(exc: ValueError) -> str:
    name = type(exc).__name__
    if name == "ConstraintError":
        return "unsupported_schema"
    if "context" in str(exc).lower():
        return "context_length_exceeded"
    return "invalid_value"


def _from_http_exception(exc: web.HTTPException) -> APIError:
    status = exc.status
    if status == 404:
        return APIError(404, "unknown route", code="unknown_route")
    if status == 405:
        return APIError(405, f"method not allowed ({exc.reason})", code="method_not_allowed")
    if status == 413:
        return APIError(413, f"request body too large: {exc.text}", code="request_too_large")
    return APIError(status, exc.text or exc.reason, code=None)


IGNORED_HEADER = "x-radixlm-ignored-fields"  # the request fields a lenient route read past (body.UnknownFields)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OLLAMA_PREFIX = "/api/"
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                    503: "overloaded_error"}


def anthropic_error(err: APIError) -> dict[str, Any]:
    """Anthropic's error body for ``err``."""
    kind = _ANTHROPIC_TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_response(path: str, err: APIError) -> web.Response:
    """``err`` as its route's clients read it: Anthropic's shape under ``/v1/messages``, Ollama's
    ``{"error": "..."}`` under ``/api/``, OpenAI's everywhere else (401, 404, 405, 415 included)."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return web.json_response(anthropic_error(err), status=err.status, headers=err.headers())
    if path.startswith(OLLAMA_PREFIX):
        return web.json_response({"error": err.message}, status=err.status, headers=err.headers())
    return err.to_response()


def shaped_errors(handler: Handler) -> Handler:
    """``handler`` whose failures answer in its route's protocol shape (:func:`error_response`),
    before any middleware sees them."""
    async def shaped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as e:  # noqa: BLE001 - every failure becomes this API's error body
            return error_response(request.path, from_exception(e))

    return shaped
