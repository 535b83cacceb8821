"""Constraints given outside ``response_format``: SGLang's and vLLM's request fields.

Both OpenAI routes (and vLLM clients' ``extra_body``) may carry them; each maps onto one
``SamplingParams`` field:

| request field | SamplingParams |
|---|---|
| ``regex``, ``guided_regex``, ``structured_outputs.regex`` | ``regex`` |
| ``ebnf``, ``guided_grammar``, ``structured_outputs.grammar`` | ``ebnf`` |
| ``json_schema`` (object or JSON text), ``guided_json``, ``structured_outputs.json`` | ``json_schema`` |
| ``guided_choice``, ``structured_outputs.choice`` | ``choices`` |
| ``structured_outputs.json_object: true`` | ``json_object`` |
| ``guided_whitespace_pattern``, ``structured_outputs.whitespace_pattern`` | ``whitespace_pattern`` |

A request takes one constraint: a second one is a 400 naming it. ``guided_decoding_backend`` and
``structured_outputs``' ``disable_*`` switches are accepted and change nothing (one backend here).
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import FieldReader, check_str_list

# request field -> (SamplingParams field, JSON kinds accepted)
_TOP_LEVEL = {"regex": ("regex", "str"), "guided_regex": ("regex", "str"),
              "ebnf": ("ebnf", "str"), "guided_grammar": ("ebnf", "str"),
              "json_schema": ("json_schema", ("object", "str")), "guided_json": ("json_schema", ("object", "str")),
              "guided_choice": ("choices", ("list", "str"))}
_NESTED = {"regex": ("regex", "str"), "grammar": ("ebnf", "str"), "json": ("json_schema", ("object", "str")),
           "choice": ("choices", ("list", "str")), "json_object": ("json_object", "bool")}
_NESTED_NOOPS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties")


class _Constraint:
    """The one constraint a request may carry, and the field that set it."""

    def __init__(self) -> None:
        self.sampling: dict[str, Any] = {}
        self.source: str | None = None

    def put(self, target: str, value: Any, param: str) -> None:
        if value is None or value is False:
            return
        if self.source is not None:
            raise bad_request(f"'{param}' cannot be combined with '{self.source}': a request takes one "
                              "constraint", param=param, code="invalid_value")
        self.sampling[target] = _checked(target, value, param)
        self.source = param


def read_structured_fields(r: FieldReader) -> tuple[dict[str, Any], str | None]:
    """The sampling fields these extensions set, and the request field holding the constraint
    (None without one); 400 naming the field for a wrong type or a second constraint."""
    found = _Constraint()
    for key, (target, kind) in _TOP_LEVEL.items():
        found.put(target, r.get(key, kind), key)
    ws = r.get("guided_whitespace_pattern", "str")
    r.get("guided_decoding_backend", "str")
    nested = r.get("structured_outputs", "object")
    if nested is not None:
        sub = r.sub(nested, "structured_outputs")
        for key, (target, kind) in _NESTED.items():
            found.put(target, sub.get(key, kind), sub.path(key))
        ws = sub.get("whitespace_pattern", "str", ws)
        for key in _NESTED_NOOPS:
            sub.get(key, "bool")
        sub.reject_unknown()
    out = dict(found.sampling)
    if ws is not None:
        out["whitespace_pattern"] = ws
    return out, found.source


def _checked(target: str, value: Any, param: str) -> Any:
    """A JSON-text schema parsed, choices as a list of strings, strings non-empty."""
    if target == "choices":
        return check_str_list(value, param)
    if target == "json_schema" and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise bad_request(f"'{param}' is not valid JSON: {e}", param=param, code="invalid_json") from None
        if not isinstance(value, dict):
            raise bad_request(f"'{param}' must be a JSON schema object", param=param, code="invalid_type")
    if isinstance(value, str) and not value.strip():
        raise bad_request(f"'{param}' must be a non-empty string", param=param, code="invalid_value")
    return value
