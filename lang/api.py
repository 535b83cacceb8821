"""The public DSL (SGLang's frontend API): ``import radixlm as sgl`` runs SGLang programs.

```python
@sgl.function
def qa(s, question):
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=64))
```
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backend_http import RuntimeEndpoint
from radixlm.lang.choices import (
    ChoicesMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixlm.lang.program import SglFunction, set_default_backend
from radixlm.lang.state import ProgramState, ProgramStateGroup
from radixlm.runtime.sampling_params import SamplingParams

__all__ = [
    "function", "gen", "gen_int", "gen_string", "select", "image", "system", "user", "assistant",
    "system_begin", "system_end", "user_begin", "user_end", "assistant_begin", "assistant_end",
    "set_default_backend", "RuntimeEndpoint", "ProgramState", "ProgramStateGroup", "SglFunction",
    "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
]

# dtype -> regex; bounded so that a constrained gen always terminates on its own.
DTYPE_REGEX: dict[str, str] = {
    "int": r"[-+]?[0-9]{1,9}",
    "float": r"[-+]?[0-9]{1,9}\.[0-9]{1,6}",
    "bool": r"(True|False)",
    "str": r'"[^"\\\n]{0,64}"',
}


def function(func: Callable | None = None, **_options: Any):
    """Decorate ``def program(s, ...)``; usable as ``@function`` and ``@function()``."""
    if func is None:
        return SglFunction
    return SglFunction(func)


def gen(name: str | None = None, max_tokens: int | None = None, min_tokens: int | None = None,
        stop: str | list[str] | None = None, stop_token_ids: list[int] | None = None,
        temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
        min_p: float | None = None, frequency_penalty: float | None = None,
        presence_penalty: float | None = None, ignore_eos: bool | None = None,
        return_logprob: bool | None = None, logprob_start_len: int | None = None,
        top_logprobs_num: int | None = None, dtype: Any = None, choices: list[str] | None = None,
        regex: str | None = None, json_schema: Any = None,
        choices_method: ChoicesMethod = token_length_normalized) -> ir.Expr:
    """Generate text into variable ``name``; unset arguments take the run's defaults.

    ``dtype`` (int, float, bool, str) becomes a regex; ``json_schema`` is a dict, a JSON string or
    a pydantic model class; ``choices`` makes this a :func:`select`.
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"gen name must be a string, got {type(name).__name__}")
    if choices is not None:
        return select(name, choices, temperature=temperature or 0.0, choices_method=choices_method)
    given = {"max_new_tokens": max_tokens, "min_new_tokens": min_tokens, "stop": stop,
             "stop_token_ids": stop_token_ids, "temperature": temperature, "top_p": top_p, "top_k": top_k,
             "min_p": min_p, "frequency_penalty": frequency_penalty, "presence_penalty": presence_penalty,
             "ignore_eos": ignore_eos, "regex": _dtype_regex(dtype, regex),
             "json_schema": _schema_dict(json_schema)}
    params = {k: v for k, v in given.items() if v is not None}
    _validate(params)
    logprob = {k: v for k, v in {"return_logprob": return_logprob, "logprob_start_len": logprob_start_len,
                                 "top_logprobs_num": top_logprobs_num}.items() if v is not None}
    return ir.Gen(name, params, logprob)


def gen_int(name: str | None = None, max_tokens: int | None = None, **kwargs: Any) -> ir.Expr:
    """``gen`` constrained to an integer."""
    return gen(name, max_tokens, dtype=int, **kwargs)


def gen_string(name: str | None = None, max_tokens: int | None = None, **kwargs: Any) -> ir.Expr:
    """``gen`` constrained to a double-quoted string."""
    return gen(name, max_tokens, dtype=str, **kwargs)


def select(name: str | None = None, choices: list[str] | None = None, temperature: float = 0.0,
           choices_method: ChoicesMethod = token_length_normalized) -> ir.Expr:
    """Append the best of ``choices`` (scored with prompt logprobs) and store it as ``name``."""
    if not isinstance(choices, (list, tuple)) or not choices or not all(
            isinstance(c, str) and c for c in choices):
        raise ValueError("select choices must be a non-empty list of non-empty strings")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"select temperature must be a number >= 0, got {temperature!r}")
    if not isinstance(choices_method, ChoicesMethod):
        raise TypeError("choices_method must be token_length_normalized, greedy_token_selection or "
                        "unconditional_likelihood_normalized")
    return ir.Select(name, list(choices), float(temperature), choices_method)


def image(path: Any) -> ir.Expr:
    """Images need a vision model; radixlm serves text-only models."""
    raise ValueError("image() is not supported: radixlm serves text-only models (no vision encoder)")


def system(expr: Any = None) -> ir.ExprList:
    """A system turn holding ``expr`` (empty without it)."""
    return ir.role_turn("system", expr)


def user(expr: Any = None) -> ir.ExprList:
    """A user turn holding ``expr`` (empty without it)."""
    return ir.role_turn("user", expr)


def assistant(expr: Any = None) -> ir.ExprList:
    """An assistant turn holding ``expr`` (empty without it)."""
    return ir.role_turn("assistant", expr)


def system_begin() -> ir.Expr:
    """Start a system turn; ``system_end()`` closes it."""
    return ir.RoleBegin("system")


def system_end() -> ir.Expr:
    """End the system turn opened by ``system_begin()``."""
    return ir.RoleEnd("system")


def user_begin() -> ir.Expr:
    """Start a user turn; ``user_end()`` closes it."""
    return ir.RoleBegin("user")


def user_end() -> ir.Expr:
    """End the user turn opened by ``user_begin()``."""
    return ir.RoleEnd("user")


def assistant_begin() -> ir.Expr:
    """Start an assistant turn; ``assistant_end()`` closes it."""
    return ir.RoleBegin("assistant")


def assistant_end() -> ir.Expr:
    """End the assistant turn opened by ``assistant_begin()``."""
    return ir.RoleEnd("assistant")


def _dtype_regex(dtype: Any, regex: str | None) -> str | None:
    if dtype is None:
        return regex
    if regex is not None:
        raise ValueError("gen takes dtype or regex, not both")
    key = dtype.__name__ if isinstance(dtype, type) else dtype
    if key not in DTYPE_REGEX:
        raise ValueError(f"dtype must be one of int, float, bool, str; got {dtype!r}")
    return DTYPE_REGEX[key]


def _schema_dict(schema: Any) -> dict | None:
    if schema is None or isinstance(schema, dict):
        return schema
    if isinstance(schema, str):
        try:
            value = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise ValueError("json_schema must be a JSON object")
        return value
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    raise TypeError(f"json_schema must be a dict, a JSON string or a pydantic model class, "
                    f"got {type(schema).__name__}")


def _validate(params: dict[str, Any]) -> None:
    """Range-check the fields given now (ValueError naming the field) rather than at run time."""
    check = dict(params)
    min_tokens = check.get("min_new_tokens", 0)
    check.setdefault("max_new_tokens", max(128, min_tokens if isinstance(min_tokens, int) else 0))
    SamplingParams(**check)
