"""``gen``, ``gen_int``, ``gen_string`` and ``select``: the expressions that call the model.

Signatures follow SGLang's ``sglang.lang.api`` exactly (same keywords, same positional order), so
SGLang programs pass the same arguments. Each call checks its arguments at once (a ``ValueError``
naming the field) rather than when the program reaches it.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from radixlm.lang import ir
from radixlm.lang.choices import ChoicesMethod, token_length_normalized
from radixlm.runtime.sampling_params import SamplingParams

# dtype -> regex; bounded so that a constrained gen always terminates on its own. (SGLang's
# unbounded REGEX_INT etc. live in ``radixlm.lang.ir`` for programs that name them.)
DTYPE_REGEX: dict[str, str] = {
    "int": r"[-+]?[0-9]{1,9}",
    "float": r"[-+]?[0-9]{1,9}\.[0-9]{1,6}",
    "bool": r"(True|False)",
    "str": r'"[^"\\\n]{0,64}"',
}
_DTYPE_ALIASES = {"string": "str"}  # SGLang's OpenAI backend also spells str "string"

StrList = str | list[str]


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


def dtype_of_regex(regex: str | None) -> str | None:
    """The dtype name whose regex ``gen(dtype=...)`` put into the params, if it is one of them."""
    return next((k for k, v in DTYPE_REGEX.items() if v == regex), None)


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
