"""The ``SamplingParams`` fields of an OpenAI body: sampler fields, and constraints outside ``response_format``.

Sampler fields use OpenAI's names (``max_tokens``, ``stop``, ``logit_bias``, ...) plus SGLang's
extensions (``top_k``, ``min_p``, ``min_tokens``, ...); :func:`read_sampler_fields` returns them
under ``SamplingParams`` names, range-checked with OpenAI's limits.

Constraints may come as SGLang's and vLLM's request fields too (vLLM clients send them in
``extra_body``); each maps onto one ``SamplingParams`` field (:func:`read_structured_fields`):

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
from radixlm.runtime.server.request_fields import FieldReader, check_str_list, is_kind

# SGLang extensions accepted on the OpenAI routes: kind, lower and upper bound.
_EXTENSIONS = {"top_k": ("int", None, None), "min_p": ("number", 0.0, 1.0),
               "repetition_penalty": ("number", 0.0, None), "min_tokens": ("int", 0, None),
               "ignore_eos": ("bool", None, None), "stop_token_ids": ("list", None, None),
               "no_stop_trim": ("bool", None, None), "skip_special_tokens": ("bool", None, None),
               "spaces_between_special_tokens": ("bool", None, None), "stop_regex": (("str", "list"), None, None),
               "budget_aware_completion": ("bool", None, None), "json_key_order": ("str", None, None)}
_EXTENSION_TARGET = {"min_tokens": "min_new_tokens"}  # request name -> SamplingParams name

# request field -> (SamplingParams field, JSON kinds accepted)
_TOP_LEVEL = {"regex": ("regex", "str"), "guided_regex": ("regex", "str"),
              "ebnf": ("ebnf", "str"), "guided_grammar": ("ebnf", "str"),
              "json_schema": ("json_schema", ("object", "str")), "guided_json": ("json_schema", ("object", "str")),
              "guided_choice": ("choices", ("list", "str"))}
_NESTED = {"regex": ("regex", "str"), "grammar": ("ebnf", "str"), "json": ("json_schema", ("object", "str")),
           "choice": ("choices", ("list", "str")), "json_object": ("json_object", "bool")}
_NESTED_NOOPS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties")


def read_sampler_fields(r: FieldReader, max_tokens_keys: tuple[str, ...]) -> dict[str, Any]:
    """Sampler fields shared by completions and chat, under ``SamplingParams`` names; only the
    fields the body sets (``max_new_tokens`` from the last of ``max_tokens_keys`` given)."""
    s: dict[str, Any] = {}
    for key in max_tokens_keys:
        value = r.get(key, "int", lo=0)
        if value is not None:
            s["max_new_tokens"] = value
    for key, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0), ("presence_penalty", -2.0, 2.0),
                        ("frequency_penalty", -2.0, 2.0)):
        value = r.get(key, "number", lo=lo, hi=hi)
        if value is not None:  # unset: the engine's default (the model's, see SamplingDefaults)
            s[key] = value
    if s.get("top_p") == 0.0:
        raise bad_request("'top_p' must be in (0, 1]", param="top_p", code="out_of_range")
    seed = r.get("seed", "int")
    if seed is not None:
        s["seed"] = seed
    stop = r.get("stop", ("str", "list"))
    if stop is not None:
        s["stop"] = check_str_list(stop, "stop")
    bias = r.get("logit_bias", "object")
    if bias:
        s["logit_bias"] = _logit_bias(bias)
    for key, (kind, lo, hi) in _EXTENSIONS.items():
        value = r.get(key, kind, lo=lo, hi=hi)
        if value is not None:
            s[_EXTENSION_TARGET.get(key, key)] = value
    return s


def _logit_bias(bias: dict) -> dict[int, float]:
    out = {}
    for key, value in bias.items():
        if not (isinstance(key, str) and key.isdigit()) or not is_kind(value, "number"):
            raise bad_request(f"'logit_bias' must map token ids to numbers, got {key!r}: {value!r}",
                              param="logit_bias", code="invalid_type")
        if not -100 <= value <= 100:
            raise bad_request(f"'logit_bias[{key}]' must be in [-100, 100], got {value}",
                              param="logit_bias", code="out_of_range")
        out[int(key)] = float(value)
    return out


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
