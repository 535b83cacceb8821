"""The request body: read with its size bounded, decoded, its fields read typed and named as the route's
client wrote them.

Decoding a request body: UTF-8 JSON whose nesting depth and value count are measured before it is decoded.

``json.loads`` recurses once per nesting level, so a body of 10,000 ``[`` raises ``RecursionError``
(and every later walk over a deep value risks the same). :func:`nesting_depth` measures the depth
on the raw bytes first, without recursion and at C speed (bytes methods and numpy), so a body
deeper than ``max_json_depth`` is a 400 and never reaches the decoder.

A body's decoding cost (time and memory: ~50 bytes of Python object per value) follows its number
of values, not its bytes: 18 MB of ``{},`` is six million objects. :func:`value_count` bounds the
values from the same scan (one more than the commas and opening brackets outside strings), so a
body of more than ``max_json_values`` is a 400 before decoding. ``json.loads`` holds the GIL for
its whole run, so the bound, not the thread it runs in, is what keeps the event loop responsive;
the server still decodes large bodies in a small pool of its own (``ServerState.read_json``), so
several of them at once wait their turn instead of multiplying the memory.

A compressed body (``Content-Encoding: gzip`` or ``deflate``; the server turns aiohttp's automatic
decompression off) is inflated by :func:`decompress_body` in bounded steps, stopping with a 413 as
soon as the output passes the body limit: a small bomb never expands in memory.

Typed, range-checked reads of JSON request fields, with errors that name the field.

Both the native and the OpenAI routes read their bodies through :class:`FieldReader`, so a wrong
type or an out-of-range value is always a 400 whose ``param`` is the offending field's path.

A field no route reads is handled by the request's :class:`UnknownFields` policy: ignored and
remembered (the default, as SGLang and vLLM do: the route logs one warning line and names them in
the ``x-radixlm-ignored-fields`` response header), or a 400 with ``ServerArgs.strict_api``. The
policy holds at any depth: a reader built without one (a message, a tool, a content block) takes
the policy of the body being read in the same task (the last top-level reader given one), so an
unknown key in ``tools[0]`` is named ``tools[0].strict`` in the header. A wrong type on a field
that is read stays a 400 naming it.

Errors name fields as the route's request wrote them.

An OpenAI request's fields become ``SamplingParams`` fields (``max_tokens`` -> ``max_new_tokens``,
a prompt of token ids -> ``input_ids``); an error the engine raises names its own field. Wrapped by
:func:`with_route_names`, a handler's 400 names the field as the client wrote it, in ``param`` and
in the message (``OPENAI_NAMES`` on the OpenAI routes; the native routes use the engine's names),
and a constraint error with no field names the constraint's field.

OpenAI-shaped HTTP errors: ``{"error": {"message", "type", "param", "code"}}``.

Every handler raises :class:`APIError` (or lets a ``ValueError`` escape, which means bad input);
the server's error middleware turns both into one JSON shape, so clients see the same error body
on the native and the OpenAI routes.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import zlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import numpy as np
from aiohttp import web
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS

# +1 for an opening bracket, -1 for a closing one, 0 for every other byte.
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_COMMA, _OPEN_ARRAY, _OPEN_OBJECT = ord(","), ord("["), ord("{")
_QUOTE = ord('"')
_CHUNK = 1 << 20  # brackets per running-sum slice: bounds the int64 scratch to 8 MiB
_INFLATE_STEP = 1 << 20  # most bytes one decompress call may produce
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """``raw`` decoded from its ``Content-Encoding`` (gzip, deflate or identity), at most ``limit``
    bytes of output (413 beyond it; 415 for another encoding, 400 for a corrupt stream)."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return raw
    if name not in _WBITS:
        raise APIError(415, f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)",
                       code="unsupported_encoding")
    wbits = _WBITS[name]
    if name == "deflate" and raw[:1] != b"\x78":  # raw deflate, without the zlib header some clients skip
        wbits = -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    out, size, pending = [], 0, raw
    try:
        while pending and not inflater.eof:
            piece = inflater.decompress(pending, _INFLATE_STEP)
            pending = inflater.unconsumed_tail
            size += len(piece)
            if size > limit:
                raise APIError(413, f"request body too large: more than {limit} bytes once decompressed "
                               "(max_body_bytes)", code="request_too_large")
            out.append(piece)
    except zlib.error as e:
        raise APIError(400, f"request body is not valid {name} data ({e})", code="invalid_encoding") from None
    return b"".join(out)


def _structure(raw: bytes) -> np.ndarray:
    """The bytes of the JSON text ``raw`` (UTF-8) that lie outside strings."""
    # Drop escaped backslashes, then escaped quotes, so every remaining quote opens or closes a
    # string (left-to-right pairing is JSON's escape rule: a run of 2k+1 backslashes escapes the
    # next byte). In UTF-8, bytes below 0x80 only ever encode ASCII, so the byte view is exact.
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    codes = np.frombuffer(text, dtype=np.uint8)
    in_string = np.bitwise_xor.accumulate((codes == _QUOTE).view(np.uint8))
    return codes[~in_string.view(bool)]


def value_count(raw: bytes) -> int:
    """An upper bound of the values ``json.loads(raw)`` makes: one more than the commas and opening
    brackets outside strings (exact for arrays of scalars; at most 2x for nested empty containers)."""
    return _value_count(_structure(raw))


def nesting_depth(raw: bytes, limit: int | None = None) -> int:
    """The deepest ``[``/``{`` nesting of the JSON text ``raw`` (UTF-8), brackets inside strings
    excluded (0 for a scalar). With ``limit``, counting stops once the depth passes it (the result
    is then some value > limit)."""
    return _depth(_structure(raw), limit)


def _value_count(codes: np.ndarray) -> int:
    return 1 + sum(int(np.count_nonzero(codes == c)) for c in (_COMMA, _OPEN_ARRAY, _OPEN_OBJECT))


def _depth(codes: np.ndarray, limit: int | None) -> int:
    brackets = codes[_STEP[codes] != 0]
    steps = _STEP[brackets]
    depth = deepest = 0
    for start in range(0, steps.size, _CHUNK):
        running = np.cumsum(steps[start:start + _CHUNK], dtype=np.int64) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
        if limit is not None and deepest > limit:
            break
    return deepest


def check_shape(raw: bytes, max_depth: int, max_values: int | None) -> None:
    """400 when ``raw`` holds more than ``max_values`` values or nests deeper than ``max_depth``;
    one scan of its bytes, skipped when too few brackets and commas appear anywhere to matter."""
    brackets = raw.count(b"[") + raw.count(b"{")
    needs_depth = brackets > max_depth
    needs_count = max_values is not None and brackets + raw.count(b",") >= max_values
    if not (needs_depth or needs_count):
        return
    codes = _structure(raw)
    if needs_count:
        count = _value_count(codes)
        if count > max_values:
            raise APIError(400, f"request body holds about {count} JSON values, more than max_json_values "
                           f"({max_values})", code="json_too_many_values")
    if needs_depth and _depth(codes, max_depth) > max_depth:
        raise APIError(400, f"request body nests deeper than max_json_depth ({max_depth} levels of arrays "
                       "and objects)", code="json_too_deep")


def parse_json_body(raw: bytes, max_depth: int, max_values: int | None = None) -> dict[str, Any]:
    """Decode a request body that must be a UTF-8 JSON object at most ``max_depth`` deep and of at
    most ``max_values`` values (400 otherwise)."""
    try:
        text = raw.decode("utf-8-sig")  # JSON over HTTP is UTF-8 (RFC 8259); the depth scan relies on it
    except UnicodeDecodeError as e:
        raise APIError(400, f"request body is not valid UTF-8 (byte {e.start})", code="invalid_json") from None
    check_shape(raw, max_depth, max_values)
    # Python refuses to convert integers of more digits than its limit (a ValueError naming no
    # field): such bodies decode with a hook that marks those integers, then name the first one.
    big = sys.get_int_max_str_digits()
    hook = _mark_big_int if big and re.search(rb"[0-9]{%d}" % (big + 1), raw) else None
    try:
        body = json.loads(text, parse_int=hook)
    except json.JSONDecodeError as e:
        raise APIError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:  # only if max_json_depth was set near Python's recursion limit
        raise APIError(400, "request body nests too deep to decode", code="json_too_deep") from None
    if not isinstance(body, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(body).__name__}",
                       code="invalid_json")
    if hook is not None:
        _reject_big_ints(body)
    return body


class _BigInt(int):
    """An integer literal of more digits than Python converts; holds its digit count."""


def _mark_big_int(digits: str) -> int:
    if len(digits.lstrip("-")) > sys.get_int_max_str_digits():
        return _BigInt(len(digits.lstrip("-")))
    return int(digits)


def _reject_big_ints(body: dict[str, Any]) -> None:
    """400 naming the first integer of ``body`` too long to convert, by its path (``a.b[2]``)."""
    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _BigInt):
            raise APIError(400, f"'{path}': an integer of {int(value)} digits is too large (at most "
                           f"{sys.get_int_max_str_digits()} digits)", param=path, code="invalid_value")
        if isinstance(value, dict):
            stack.extend((item, f"{path}.{key}" if path else str(key)) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(value))))


_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "str": (str,),
    "object": (dict,),
    "list": (list,),
}
_KIND_WORDS = {"int": "an integer", "number": "a number", "bool": "a boolean", "str": "a string",
               "object": "an object", "list": "an array"}

_MISSING = object()
logger = logging.getLogger("radixlm.server")
# the unknown-field policy of the body being read in this task (each HTTP request is its own task)
_BODY_POLICY: ContextVar[UnknownFields | None] = ContextVar("radixlm_body_policy", default=None)


class UnknownFields:
    """What a request does with fields nobody reads: 400 (``strict``), or ignore and remember them."""

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.names: list[str] = []  # paths of the ignored fields, in the order met

    def found(self, paths: list[str]) -> None:
        """Fields of one object that nothing read: a 400 naming the first when strict."""
        if paths and self.strict:
            raise bad_request(f"unrecognized request argument '{paths[0]}'", param=paths[0],
                              code="unknown_field")
        self.names.extend(p for p in paths if p not in self.names)

    def report(self, route: str) -> dict[str, str]:
        """The response header naming the ignored fields (none: empty), logged once per request."""
        if not self.names:
            return {}
        logger.warning("%s: ignored unknown field(s) %s", route, ", ".join(self.names))
        return {IGNORED_HEADER: ",".join(self.names)}


def is_kind(value: Any, kind: str) -> bool:
    """Whether ``value`` has JSON type ``kind`` (booleans are not numbers here)."""
    if kind in ("int", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _KINDS[kind])


class FieldReader:
    """Reads fields from one JSON object; remembers which were read so extras can be found.

    ``unknown`` decides what :meth:`reject_unknown` does with them; a top-level reader given one
    makes it the policy of the body (see the module docstring); None takes the body's policy, or,
    outside a body's parse, always a 400."""

    def __init__(self, body: dict[str, Any], prefix: str = "", unknown: UnknownFields | None = None):
        if not isinstance(body, dict):
            raise bad_request(f"{prefix or 'body'} must be an object", param=prefix or None)
        if unknown is not None and not prefix:
            _BODY_POLICY.set(unknown)
        self.body = body
        self.prefix = prefix
        self.unknown = unknown if unknown is not None else (_BODY_POLICY.get() if prefix else None)
        self.seen: set[str] = set()

    def sub(self, value: Any, key: str) -> FieldReader:
        """A reader of the object ``value`` found at ``key`` (sharing the unknown-field policy)."""
        return FieldReader(value, self.path(key), self.unknown)

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return self.body.get(key) is not None

    def get(self, key: str, kind: str | tuple[str, ...], default: Any = None, *, required: bool = False,
            lo: float | None = None, hi: float | None = None, choices: tuple | None = None) -> Any:
        """The value of ``key`` checked against ``kind`` (one kind or several), bounds and choices.

        ``null`` counts as absent and yields ``default``; a missing required field is a 400.
        """
        self.seen.add(key)
        value = self.body.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise bad_request(f"missing required field '{self.path(key)}'", param=self.path(key),
                                  code="missing_field")
            return default
        kinds = (kind,) if isinstance(kind, str) else kind
        if not any(is_kind(value, k) for k in kinds):
            words = " or ".join(_KIND_WORDS[k] for k in kinds)
            raise bad_request(f"'{self.path(key)}' must be {words}, got {json.dumps(value)[:80]}",
                              param=self.path(key), code="invalid_type")
        if lo is not None and isinstance(value, (int, float)) and value < lo:
            raise bad_request(f"'{self.path(key)}' must be >= {lo}, got {value}", param=self.path(key),
                              code="out_of_range")
        if hi is not None and isinstance(value, (int, float)) and value > hi:
            raise bad_request(f"'{self.path(key)}' must be <= {hi}, got {value}", param=self.path(key),
                              code="out_of_range")
        if choices is not None and value not in choices:
            raise bad_request(f"'{self.path(key)}' must be one of {', '.join(map(str, choices))}, got "
                              f"{json.dumps(value)[:80]}", param=self.path(key), code="invalid_value")
        return value

    def reject_unknown(self, ignored: frozenset[str] = frozenset()) -> None:
        """Fields neither read nor explicitly ``ignored``: a 400 naming the first, unless the
        reader's :class:`UnknownFields` policy ignores them. ``ignored`` fields (accepted without
        effect) are never a 400 but are named with the others."""
        policy = self.unknown or UnknownFields(strict=True)
        extra = sorted(set(self.body) - self.seen - ignored)
        if not policy.strict:  # a null asks for nothing: not worth naming
            extra = [k for k in extra if self.body[k] is not None]
        policy.found([self.path(k) for k in extra])
        # accepted without effect: never a 400, but named like any other dropped field
        policy.names.extend(p for p in (self.path(k) for k in sorted(ignored & set(self.body) - self.seen)
                                        if self.body[k] is not None) if p not in policy.names)


def check_str_list(value: Any, param: str, allow_empty: bool = False) -> list[str]:
    """A string or a list of strings, as a list (400 naming ``param`` otherwise)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad_request(f"'{param}' must be a string or an array of strings", param=param,
                          code="invalid_type")
    if not allow_empty and any(not s for s in value):
        raise bad_request(f"'{param}' must not contain empty strings", param=param, code="invalid_value")
    return value


def check_token_ids(value: Any, param: str) -> list[int]:
    """A non-empty list of non-negative integer token ids."""
    if not isinstance(value, list) or not value or not all(is_kind(t, "int") and t >= 0 for t in value):
        raise bad_request(f"'{param}' must be a non-empty array of non-negative integer token ids",
                          param=param, code="invalid_type")
    return value


def read_cache_salt(r: FieldReader) -> str | None:
    """The request's radix-cache namespace: ``cache_salt`` (vLLM's name) and/or ``extra_key``
    (SGLang's), non-empty strings. Prompts under different salts never share cached KV; each field
    is tagged with its name, so the same value in the two fields names two namespaces."""
    salts = {}
    for key in ("cache_salt", "extra_key"):
        value = r.get(key, "str")
        if value is not None and not value:
            raise bad_request(f"'{r.path(key)}' must be a non-empty string", param=r.path(key),
                              code="invalid_value")
        if value is not None:
            salts[key] = value
    return json.dumps(salts, sort_keys=True) if salts else None


# a JSON escape of a surrogate (\ud800-\udfff): the only way a body's text can hold a lone one
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def reject_lone_surrogates(raw: bytes, body: Any) -> None:
    """400 naming the first string of ``body`` (parsed from ``raw``) that holds a lone surrogate
    (``"\\ud800"``): no UTF-8 text, prompt or token can hold one. Pairs (escaped emoji) pass."""
    if not _SURROGATE_ESCAPE.search(raw):
        return
    path = _surrogate_path(body, "")
    if path is not None:
        raise bad_request(f"'{path or 'body'}' holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape "
                          "without its pair), which is not text", param=path or None, code="invalid_unicode")


def _surrogate_path(value: Any, path: str) -> str | None:
    """The dotted path (``messages[0].content``) of the first string holding a lone surrogate."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            found = _surrogate_path(key, name) if isinstance(key, str) else None
            found = found if found is not None else _surrogate_path(item, name)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_path(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


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
