"""The public DSL (SGLang's frontend API): ``import radixlm as sgl`` runs SGLang programs.

```python
@sgl.function
def qa(s, question):
    s += sgl.user(question)
    s += sgl.assistant(sgl.gen("answer", max_tokens=64))
```

This module holds the expressions a program appends (``gen``, ``gen_int``, ``gen_string``,
``select``, roles, ``separate_reasoning``) and gathers the other public names: the program
(:mod:`radixlm.lang.program`), its state (:mod:`radixlm.lang.state`) and the backends
(:mod:`radixlm.lang.backends`, :mod:`radixlm.lang.openai_backend`). The signatures of ``gen``,
``gen_int``, ``gen_string`` and ``select`` follow SGLang's ``sglang.lang.api`` exactly (same
keywords, same positional order), so SGLang programs pass the same arguments; each call checks its
arguments at once (a ``ValueError`` naming the field) rather than when the program reaches it.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backends import RuntimeEndpoint, flush_cache, get_server_info, set_default_backend
from radixlm.lang.choices import (
    ChoicesMethod,
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from radixlm.lang.ir import DTYPE_REGEX
from radixlm.lang.openai_backend import OpenAI
from radixlm.lang.program import SglFunction
from radixlm.lang.state import ProgramState, ProgramStateGroup
from radixlm.runtime.sampling_params import SamplingParams

__all__ = [
    "function", "gen", "gen_int", "gen_string", "select", "image", "video", "system", "user",
    "assistant", "system_begin", "system_end", "user_begin", "user_end", "assistant_begin",
    "assistant_end", "set_default_backend", "flush_cache", "get_server_info", "RuntimeEndpoint",
    "OpenAI", "ProgramState", "ProgramStateGroup", "SglFunction", "DTYPE_REGEX",
    "token_length_normalized", "greedy_token_selection", "unconditional_likelihood_normalized",
    "separate_reasoning",
]

_DTYPE_ALIASES = {"string": "str"}  # SGLang's OpenAI backend also spells str "string"

StrList = str | list[str]


def function(func: Callable | None = None, num_api_spec_tokens: int | None = None):
    """Decorate ``def program(s, ...)``; usable as ``@function`` and ``@function(...)``.

    ``num_api_spec_tokens`` (SGLang's API speculative execution for OpenAI chat models) is
    accepted and has no effect: radixlm sends each gen as its own request.
    """
    if func is None:
        return SglFunction
    return SglFunction(func)


def gen(name: str | None = None, max_tokens: int | None = None, min_tokens: int | None = None,
        n: int | None = None, stop: StrList | None = None, stop_token_ids: list[int] | None = None,
        stop_regex: StrList | None = None, temperature: float | None = None, top_p: float | None = None,
        top_k: int | None = None, min_p: float | None = None, frequency_penalty: float | None = None,
        presence_penalty: float | None = None, ignore_eos: bool | None = None,
        return_logprob: bool | None = None, logprob_start_len: int | None = None,
        top_logprobs_num: int | None = None, return_text_in_logprobs: bool | None = None,
        dtype: Any = None, choices: list[str] | None = None,
        choices_method: ChoicesMethod | None = None, regex: str | None = None,
        json_schema: Any = None, *, ebnf: str | None = None,
        budget_aware_completion: bool | None = None, json_key_order: str | None = None) -> ir.Expr:
    """Generate text into variable ``name``; unset arguments take the run's defaults.

    ``n > 1`` samples n completions: the variable holds the list of n texts (the state's text
    continues with the first) and its meta info the list of n meta infos. ``stop_regex`` stops at
    the earliest match of any of the regexes (cut there). ``dtype`` (int, float, bool, str) becomes
    a regex and wins over ``regex`` (with a warning), as in SGLang; ``json_schema`` is a dict, a
    JSON string or a pydantic model class; ``ebnf`` (radixlm's addition after SGLang's arguments)
    is an EBNF or Lark grammar the output must match (``SamplingParams.ebnf``); ``choices`` makes
    this a :func:`select` (with ``choices_method``, None meaning the default ``token_length_normalized``).
    ``budget_aware_completion=False`` lets a constrained output run to ``max_tokens`` unclosed
    (``SamplingParams.budget_aware_completion``; the meta info's ``budget_closed`` says when it closed).
    ``json_key_order`` (with ``json_schema``): ``"schema"`` (the default: declared properties in
    schema order) or ``"any"`` (members in any order; ``SamplingParams.json_key_order``).
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"gen name must be a string, got {type(name).__name__}")
    if choices:
        return select(name, choices, 0.0 if temperature is None else temperature, choices_method)
    given = {"max_new_tokens": max_tokens, "min_new_tokens": min_tokens, "n": n, "stop": stop,
             "stop_token_ids": stop_token_ids, "stop_regex": stop_regex, "temperature": temperature,
             "top_p": top_p, "top_k": top_k, "min_p": min_p, "frequency_penalty": frequency_penalty,
             "presence_penalty": presence_penalty, "ignore_eos": ignore_eos,
             "regex": _dtype_regex(dtype, regex), "json_schema": _schema_dict(json_schema), "ebnf": ebnf,
             "budget_aware_completion": budget_aware_completion, "json_key_order": json_key_order}
    params = {k: v for k, v in given.items() if v is not None}
    _validate(params)
    logprob = {"return_logprob": return_logprob, "logprob_start_len": logprob_start_len,
               "top_logprobs_num": top_logprobs_num, "return_text_in_logprobs": return_text_in_logprobs}
    return ir.Gen(name, params, {k: v for k, v in logprob.items() if v is not None})


def _typed_gen(dtype: type, summary: str) -> Any:
    """A ``gen`` fixed to ``dtype``, with SGLang's signature for ``gen_int`` / ``gen_string``
    (no ``min_tokens``, ``regex``, ``choices`` or ``json_schema``)."""

    def typed(name: str | None = None, max_tokens: int | None = None, n: int | None = None,
              stop: StrList | None = None, stop_token_ids: list[int] | None = None,
              stop_regex: StrList | None = None, temperature: float | None = None,
              top_p: float | None = None, top_k: int | None = None, min_p: float | None = None,
              frequency_penalty: float | None = None, presence_penalty: float | None = None,
              ignore_eos: bool | None = None, return_logprob: bool | None = None,
              logprob_start_len: int | None = None, top_logprobs_num: int | None = None,
              return_text_in_logprobs: bool | None = None) -> ir.Expr:
        return gen(name, max_tokens, None, n, stop, stop_token_ids, stop_regex, temperature, top_p, top_k,
                   min_p, frequency_penalty, presence_penalty, ignore_eos, return_logprob,
                   logprob_start_len, top_logprobs_num, return_text_in_logprobs, dtype=dtype)

    typed.__doc__ = summary
    return typed


gen_int = _typed_gen(int, "``gen`` constrained to an integer (SGLang's signature).")
gen_int.__name__ = gen_int.__qualname__ = "gen_int"
gen_string = _typed_gen(str, "``gen`` constrained to a double-quoted string (SGLang's signature).")
gen_string.__name__ = gen_string.__qualname__ = "gen_string"


def select(name: str | None = None, choices: list[str] | None = None, temperature: float = 0.0,
           choices_method: ChoicesMethod | None = token_length_normalized) -> ir.Expr:
    """Append the best of ``choices`` (scored with prompt logprobs) and store it as ``name``.

    ``choices_method=None`` means the default, ``token_length_normalized``.
    """
    if not isinstance(choices, (list, tuple)) or not choices or not all(
            isinstance(c, str) and c for c in choices):
        raise ValueError("select choices must be a non-empty list of non-empty strings")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"select temperature must be a number >= 0, got {temperature!r}")
    method = token_length_normalized if choices_method is None else choices_method
    if not isinstance(method, ChoicesMethod):
        raise TypeError("choices_method must be token_length_normalized, greedy_token_selection or "
                        "unconditional_likelihood_normalized")
    return ir.Select(name, list(choices), float(temperature), method)


def separate_reasoning(expr: Any = None, model_type: str | None = None) -> ir.ExprList:
    """``expr`` (gens / selects, possibly inside roles) whose named results are each split into the
    answer (``<name>``, also all the text keeps) and the thinking (``<name>_reasoning_content``),
    written in ``model_type``'s markers (``deepseek-r1``, ``qwen3``, ``gpt-oss``: the
    ``--reasoning-parser`` names). A gen without a name is a ``ValueError``, as in SGLang."""
    if expr is None:
        return ir.ExprList([])
    from radixlm.runtime.chat_formats.reasoning.registry import get_format  # lazily: the parsers

    if not isinstance(model_type, str):
        raise ValueError("separate_reasoning needs model_type (deepseek-r1, qwen3, gpt-oss, ...)")
    get_format(model_type)  # ValueError naming the known formats
    items = []
    for item in ir.to_exprs(expr):
        if isinstance(item, (ir.Gen, ir.Select)):
            if not item.name:
                raise ValueError("separate_reasoning needs every gen / select in expr to have a name")
            item = dataclasses.replace(item, reasoning=model_type)
        items.append(item)
    return ir.ExprList(items)


def image(path: Any) -> ir.Expr:
    """Images need a vision model; radixlm serves text-only models."""
    raise ValueError("image() is not supported: radixlm serves text-only models (no vision encoder)")


def video(path: Any, num_frames: int = 0) -> ir.Expr:
    """Videos need a vision model; radixlm serves text-only models."""
    raise ValueError("video() is not supported: radixlm serves text-only models (no vision encoder)")


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
    key = dtype.__name__ if isinstance(dtype, type) else dtype
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_REGEX:
        raise ValueError(f"dtype must be one of int, float, bool, str; got {dtype!r}")
    if regex is not None:  # SGLang's rule: dtype wins
        warnings.warn(f"gen got both dtype ({key}) and regex; only dtype is used", stacklevel=3)
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
