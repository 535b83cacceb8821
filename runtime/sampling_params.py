"""Sampling parameters: the one dataclass that carries a request's sampler and constraint settings.

It crosses every boundary (HTTP, Engine, DSL, scheduler, sampler, grammar backend) whole, and is
validated at construction, with errors that name the bad field (``FieldError``; the field checks
here serve ``ServerArgs`` too). Nothing changes one in place: a request phase that needs other
settings takes a validated copy (:meth:`SamplingParams.replace`).

Each one remembers which fields its caller set (``explicit``): the model's own defaults
(:class:`SamplingDefaults`, from its ``generation_config.json`` or a GGUF's ``general.sampling.*``
keys) fill only the others, so an explicit value always wins, even one equal to the default.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.stop_regex import StopRegexError, check_stop_regexes

CONSTRAINT_FIELDS = ("json_schema", "regex", "ebnf", "choices", "json_object")
# json_schema objects: "schema" (declared properties in schema order, extras only where the schema
# declares them) or "any" (members in any order, extras wherever JSON Schema allows them).
JSON_KEY_ORDERS = ("schema", "any")


MAX_TEMPERATURE = 100.0  # far past uniform sampling already; larger values are a client bug
SEED_RANGE = (-(2**63), 2**63 - 1)  # 64-bit seeds; sibling i of an n > 1 request draws with choice_seed(seed, i)
# Below this a temperature is greedy, as in SGLang (dividing by it would overflow the logits to inf).
GREEDY_TEMPERATURE = 1e-6
MAX_LOGIT_BIAS = 100.0  # |bias| at most this, as OpenAI allows: past it a token is already forced or banned
MAX_REPETITION_PENALTY = 2.0  # SGLang's range (0, 2]
MAX_STOP_REGEX_CEILING = 256  # patterns compiled at most (the engine's max_stop_regex is the real limit)
MAX_TOP_K = 2**31 - 1  # past any vocabulary; the engine also checks top_k against its own vocabulary

# The sampler fields a model may default (the ones vLLM's --generation-config auto and SGLang's
# --sampling-defaults model read from generation_config.json), with their Python type
MODEL_DEFAULT_FIELDS: dict[str, type] = {"temperature": float, "top_p": float, "top_k": int, "min_p": float,
                                         "repetition_penalty": float}
# A GGUF's sampling keys (llama.cpp's gguf-py Keys.General.SAMPLING_*) -> SamplingParams field; the
# others (sequence, xtc_*, penalty_last_n, mirostat*) name samplers radixlm does not have
GGUF_SAMPLING_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_p": "top_p",
                      "general.sampling.top_k": "top_k", "general.sampling.min_p": "min_p",
                      "general.sampling.penalty_repeat": "repetition_penalty"}

logger = logging.getLogger(__name__)


# ---- field checks (SamplingParams' and ServerArgs'): each raises FieldError naming the field ------


class FieldError(ValueError):
    """Bad input in one named field; ``field`` is its name (the HTTP error's ``param``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    """``value`` is an integer (not a bool), inside ``[lo, hi]`` when given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise FieldError(name, f"{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise FieldError(name, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise FieldError(name, f"{name} must be <= {hi}, got {value}")


def check_num(name: str, value: Any, lo: float | None = None, hi: float | None = None) -> None:
    """``value`` is a finite real number (not a bool, NaN or infinity), inside ``[lo, hi]`` when given."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FieldError(name, f"{name} must be a finite number, got {value!r}")
    if lo is not None and value < lo:
        raise FieldError(name, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise FieldError(name, f"{name} must be <= {hi}, got {value}")


def check_bools(obj: Any, names: tuple[str, ...]) -> None:
    """Every attribute ``names`` of ``obj`` is a bool."""
    for name in names:
        if not isinstance(getattr(obj, name), bool):
            raise FieldError(name, f"{name} must be a boolean")


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice ``index`` of an ``n > 1`` request: ``seed + index`` wrapped into the
    64-bit range, so a valid seed never yields an invalid one (the sampler reads it mod 2**64)."""
    return (seed + index - SEED_RANGE[0]) % 2**64 + SEED_RANGE[0]


@dataclass
class SamplingParams:
    """Per-request sampling and constraint settings (SGLang's names and defaults)."""

    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    stop_regex: list[str] = field(default_factory=list)  # stop once the output text matches one (SGLang)
    ignore_eos: bool = False
    no_stop_trim: bool = False
    skip_special_tokens: bool = True
    # Special tokens decoded even with skip_special_tokens (a chat format's markers: [TOOL_CALLS], ...).
    keep_special_token_ids: list[int] = field(default_factory=list)
    spaces_between_special_tokens: bool = True
    n: int = 1
    # Constraints: at most one of json_schema / regex / ebnf / choices / json_object.
    json_schema: dict | str | None = None
    regex: str | None = None
    ebnf: str | None = None  # an EBNF (GBNF ``::=``) or Lark grammar, as SGLang accepts it
    choices: list[str] | None = None
    json_object: bool = False
    strict: bool = True
    json_key_order: str = "schema"  # one of JSON_KEY_ORDERS (radixlm's extension)
    whitespace_pattern: str | None = None
    disable_jump_forward: bool = False
    # Constrained output completes within max_new_tokens when any valid document fits (radixlm).
    budget_aware_completion: bool = True
    # The text that ends a reasoning model's thinking: the constraint applies only after it (None: at once).
    reasoning_end: str | None = None
    # meta_info["token_origins"]: where each output token came from (runtime/scheduler/req.py: TokenOrigins)
    return_token_origins: bool = False

    def __post_init__(self) -> None:
        self._normalise()
        self.validate()

    @classmethod
    def from_dict(cls, d: dict[str, Any] | SamplingParams | None) -> SamplingParams:
        """Build from a JSON-like dict (a ``SamplingParams`` is returned as it is); unknown keys
        raise ``ValueError`` naming them."""
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return d
        if not isinstance(d, dict):
            raise FieldError("sampling_params", f"sampling_params must be an object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise FieldError(unknown[0], f"unknown sampling_params field(s): {', '.join(unknown)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of ``from_dict``)."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with ``changes`` applied, validated again (``dataclasses.replace`` runs
        ``__post_init__``); the changed fields count as set. Later request phases derive their
        parameters this way; none mutates."""
        out = dataclasses.replace(self, **changes)
        out._explicit = self._explicit | frozenset(changes)
        return out

    def reset(self, *names: str) -> SamplingParams:
        """A validated copy with the fields ``names`` back at their defaults (and unset again)."""
        out = self.replace(**{name: _DEFAULTS[name]() for name in names})
        out._explicit = self._explicit - frozenset(names)
        return out

    @property
    def explicit(self) -> frozenset[str]:
        """The fields the caller set: constructor keywords, ``from_dict`` keys, ``replace`` changes."""
        return self._explicit

    def with_defaults(self, defaults: SamplingDefaults) -> SamplingParams:
        """A copy whose unset fields take ``defaults`` (the model's); the set ones keep their values."""
        unset = {name: value for name, value in defaults.values.items() if name not in self._explicit}
        if not unset:
            return self
        out = self.replace(**unset)
        out._explicit = self._explicit  # still unset: the defaults are not the caller's choice
        return out

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE or self.top_k == 1

    @property
    def constraint_kind(self) -> str | None:
        """Which constraint this request carries, or None."""
        for name in CONSTRAINT_FIELDS:
            if getattr(self, name) not in (None, False):
                return name
        return None

    def _normalise(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        if isinstance(self.stop_regex, str):
            self.stop_regex = [self.stop_regex]
        elif self.stop_regex is None:
            self.stop_regex = []
        if isinstance(self.stop_token_ids, int):
            self.stop_token_ids = [self.stop_token_ids]
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise FieldError("logit_bias", "logit_bias must be an object mapping token id to bias")
            try:
                self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
            except (TypeError, ValueError) as e:
                raise FieldError("logit_bias", f"logit_bias must map integer token ids to numbers: {e}") from None
        if isinstance(self.json_schema, str):
            try:
                self.json_schema = json.loads(self.json_schema)
            except json.JSONDecodeError as e:
                raise FieldError("json_schema", f"json_schema is not valid JSON: {e}") from None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first out-of-range or ill-typed field."""
        check_int("max_new_tokens", self.max_new_tokens, lo=0)
        check_int("min_new_tokens", self.min_new_tokens, lo=0)
        if self.min_new_tokens > self.max_new_tokens:
            raise FieldError("min_new_tokens", "min_new_tokens must be <= max_new_tokens")
        check_num("temperature", self.temperature, lo=0.0, hi=MAX_TEMPERATURE)
        check_num("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise FieldError("top_p", f"top_p must be in (0, 1], got {self.top_p}")
        check_int("top_k", self.top_k, hi=MAX_TOP_K)
        if self.top_k == 0 or self.top_k < -1:
            raise FieldError("top_k", f"top_k must be -1 (disabled) or >= 1, got {self.top_k}")
        check_num("min_p", self.min_p, lo=0.0, hi=1.0)
        check_num("repetition_penalty", self.repetition_penalty, hi=MAX_REPETITION_PENALTY)
        if self.repetition_penalty <= 0.0:
            raise FieldError("repetition_penalty", f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for bias in (self.logit_bias or {}).values():
            check_num("logit_bias", bias, lo=-MAX_LOGIT_BIAS, hi=MAX_LOGIT_BIAS)
        check_num("frequency_penalty", self.frequency_penalty, lo=-2.0, hi=2.0)
        check_num("presence_penalty", self.presence_penalty, lo=-2.0, hi=2.0)
        if self.seed is not None:
            check_int("seed", self.seed, lo=SEED_RANGE[0], hi=SEED_RANGE[1])
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise FieldError("stop", "stop must be a non-empty string or a list of non-empty strings")
        if not isinstance(self.stop_regex, list) or not all(isinstance(r, str) and r for r in self.stop_regex):
            raise FieldError("stop_regex", "stop_regex must be a non-empty string or a list of non-empty strings")
        if len(self.stop_regex) > MAX_STOP_REGEX_CEILING:
            raise FieldError("stop_regex", f"stop_regex has {len(self.stop_regex)} patterns, more than "
                             f"{MAX_STOP_REGEX_CEILING}")
        try:
            check_stop_regexes(self.stop_regex)
        except StopRegexError as e:
            raise FieldError("stop_regex", str(e)) from None
        if not isinstance(self.stop_token_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            raise FieldError("stop_token_ids", "stop_token_ids must be a list of non-negative integers")
        if not isinstance(self.keep_special_token_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.keep_special_token_ids
        ):
            raise FieldError("keep_special_token_ids", "keep_special_token_ids must be a list of non-negative integers")
        check_int("n", self.n, lo=1)
        check_bools(self, ("ignore_eos", "no_stop_trim", "skip_special_tokens", "json_object", "strict",
                     "disable_jump_forward", "spaces_between_special_tokens", "budget_aware_completion",
                     "return_token_origins"))
        kinds = [n for n in CONSTRAINT_FIELDS if getattr(self, n) not in (None, False)]
        if len(kinds) > 1:
            raise FieldError(kinds[1], f"at most one constraint may be set, got {', '.join(kinds)}")
        if self.json_schema is not None and not isinstance(self.json_schema, (dict, bool)):
            raise FieldError("json_schema", "json_schema must be an object (or a JSON string of one)")
        if self.json_schema is False:  # the schema nothing matches; never read as "no constraint"
            raise FieldError("json_schema", "json_schema false matches no output: send an object schema, "
                             "true for any JSON, or leave it unset")
        if self.regex is not None and (not isinstance(self.regex, str) or not self.regex):
            raise FieldError("regex", "regex must be a non-empty string")
        if self.ebnf is not None and (not isinstance(self.ebnf, str) or not self.ebnf.strip()):
            raise FieldError("ebnf", "ebnf must be a non-empty string (an EBNF or Lark grammar)")
        if self.choices is not None and (
            not isinstance(self.choices, list) or not self.choices
            or not all(isinstance(c, str) and c for c in self.choices)
        ):
            raise FieldError("choices", "choices must be a non-empty list of non-empty strings")
        if self.reasoning_end is not None and (not isinstance(self.reasoning_end, str) or not self.reasoning_end):
            raise FieldError("reasoning_end", "reasoning_end must be a non-empty string")
        if self.json_key_order not in JSON_KEY_ORDERS:
            raise FieldError("json_key_order", f"json_key_order must be one of {', '.join(map(repr, JSON_KEY_ORDERS))}, "
                             f"got {self.json_key_order!r}")
        if self.whitespace_pattern is not None and not isinstance(self.whitespace_pattern, str):
            raise FieldError("whitespace_pattern", "whitespace_pattern must be a string (a regex)")


_dataclass_init = SamplingParams.__init__


@functools.wraps(_dataclass_init)
def _init_recording_explicit(self: SamplingParams, **fields: Any) -> None:
    _dataclass_init(self, **fields)
    self._explicit = frozenset(fields)


SamplingParams.__init__ = _init_recording_explicit  # type: ignore[method-assign]


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request's unset sampler fields become: ``values`` (field -> value, a subset of
    ``MODEL_DEFAULT_FIELDS``) and where they came from, for the start-up line. Empty values: the
    ``SamplingParams`` defaults (SGLang's and OpenAI's: temperature 1, top_p 1, no top-k)."""

    values: dict[str, Any] = field(default_factory=dict)
    source: str = "radixlm"

    @classmethod
    def from_generation_config(cls, config: Mapping[str, Any], source: str) -> SamplingDefaults:
        """From a Hugging Face ``generation_config.json`` (``top_k`` 0 means off there: -1 here)."""
        found = {name: config[name] for name in MODEL_DEFAULT_FIELDS if config.get(name) is not None}
        if found.get("top_k") == 0:
            found["top_k"] = -1
        return cls(_checked_defaults(found, source), source)

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any], source: str) -> SamplingDefaults:
        """From a GGUF's ``general.sampling.*`` keys (``top_k`` 0 means off in llama.cpp: -1 here)."""
        found = {name: metadata[key] for key, name in GGUF_SAMPLING_KEYS.items() if metadata.get(key) is not None}
        if found.get("top_k") == 0:
            found["top_k"] = -1
        return cls(_checked_defaults(found, source), source)

    def describe(self) -> str:
        """``temperature=0.6 top_p=0.95 (generation_config.json)``, or the built-in defaults and why."""
        if not self.values:
            why = self.source if self.source.startswith("built-in") else f"built-in: {self.source} sets none"
            return f"temperature=1.0 top_p=1.0 top_k=-1 ({why})"
        return " ".join(f"{name}={value}" for name, value in self.values.items()) + f" ({self.source})"


def _checked_defaults(found: dict[str, Any], source: str) -> dict[str, Any]:
    """The values that are valid sampler settings, in ``MODEL_DEFAULT_FIELDS`` order; each other one
    is logged and left out (a request then gets radixlm's default for it)."""
    kept = {}
    for name, kind in MODEL_DEFAULT_FIELDS.items():
        if name not in found:
            continue
        value = found[name]
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
                raise FieldError(name, f"{name} must be a number, got {value!r}")
            SamplingParams(**{name: kind(value)})
        except ValueError as e:
            logger.warning("%s: %s; the default is radixlm's", source, e)
            continue
        kept[name] = kind(value)
    return kept


# field -> a factory of its default (lists get a fresh one each time)
_DEFAULTS = {f.name: (f.default_factory if f.default_factory is not dataclasses.MISSING else
                      (lambda v=f.default: v)) for f in dataclasses.fields(SamplingParams)}
