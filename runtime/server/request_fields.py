"""Typed, range-checked reads of JSON request fields, with errors that name the field.

Both the native and the OpenAI routes read their bodies through :class:`FieldReader`, so a wrong
type or an out-of-range value is always a 400 whose ``param`` is the offending field's path.

A field no route reads is handled by the request's :class:`UnknownFields` policy: ignored and
remembered (the default, as SGLang and vLLM do: the route logs one warning line and names them in
the ``x-radixlm-ignored-fields`` response header), or a 400 with ``ServerArgs.strict_api``. The
policy holds at any depth: a reader built without one (a message, a tool, a content block) takes
the policy of the body being read in the same task (the last top-level reader given one), so an
unknown key in ``tools[0]`` is named ``tools[0].strict`` in the header. A wrong type on a field
that is read stays a 400 naming it.
"""

from __future__ import annotations

import json
import logging
import re
from contextvars import ContextVar
from typing import Any

from radixlm.runtime.server.http_errors import bad_request

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
IGNORED_HEADER = "x-radixlm-ignored-fields"
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
