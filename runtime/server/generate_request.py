"""Parsing a ``POST /generate`` body (SGLang's ``GenerateReqInput``) into a :class:`GenerateRequest`.

A batch is ``text`` (or ``input_ids``) as a list; then every per-request field may be one value
shared by all items or a list with one entry per item: ``sampling_params``, ``rid``,
``return_logprob``, ``logprob_start_len`` and ``top_logprobs_num``. Inside ``sampling_params``,
``null`` means absent (SGLang's client sends ``stop_regex: null``), ``sampling_seed`` is SGLang's
name for ``seed``, and keys ``SamplingParams`` does not have follow the request's
:class:`~radixlm.runtime.server.request_fields.UnknownFields` policy, like unknown top-level fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.http_errors import bad_request, client_message
from radixlm.runtime.server.request_fields import FieldReader, UnknownFields, check_token_ids, read_cache_salt

_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
_SAMPLING_ALIASES = {"sampling_seed": "seed"}  # SGLang's name -> ours


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed ``/generate`` body; every list holds one entry per prompt (batch item)."""

    prompts: list[str | list[int]]
    is_batch: bool
    is_ids: bool
    sampling: list[SamplingParams]  # built here, once; the engine takes them whole
    rids: list[str | None]
    stream: bool = False
    return_logprob: list[bool] = field(default_factory=list)
    logprob_start_len: list[int | None] = field(default_factory=list)
    top_logprobs_num: list[int] = field(default_factory=list)
    return_text_in_logprobs: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace
    ignored: UnknownFields = field(default_factory=UnknownFields)


def parse_generate_request(body: dict[str, Any], strict: bool = False) -> GenerateRequest:
    """Validate a ``/generate`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    prompts, is_batch, is_ids = _prompts(r)
    n = len(prompts)
    raw = per_item(r.get("sampling_params", ("object", "list"), {}), n, "sampling_params")
    sampling = [_sampling(sp, f"sampling_params[{i}]" if is_batch else "sampling_params", r.unknown)
                for i, sp in enumerate(raw)]
    rid = r.get("rid", ("str", "list"))
    rids = per_item(rid, n, "rid") if isinstance(rid, list) else [rid] * n
    if rid is not None and not isinstance(rid, list) and is_batch:
        rids = [f"{rid}-{i}" for i in range(n)]
    starts = _item_values(r, "logprob_start_len", "int", n, None, lo=-1)
    req = GenerateRequest(
        prompts, is_batch, is_ids, sampling, rids,
        stream=r.get("stream", "bool", False),
        return_logprob=_item_values(r, "return_logprob", "bool", n, False),
        logprob_start_len=[None if s == -1 else s for s in starts],
        top_logprobs_num=_item_values(r, "top_logprobs_num", "int", n, 0, lo=0, hi=100),
        return_text_in_logprobs=r.get("return_text_in_logprobs", "bool", False),
        salt=read_cache_salt(r), ignored=r.unknown,
    )
    r.reject_unknown()
    return req


def _prompts(r: FieldReader) -> tuple[list[str | list[int]], bool, bool]:
    """(prompts, is_batch, is_ids) from exactly one of ``text`` and ``input_ids``."""
    text = r.get("text", ("str", "list"))
    ids = r.get("input_ids", "list")
    if (text is None) == (ids is None):
        raise bad_request("exactly one of 'text' and 'input_ids' is required", param="text")
    if text is None:
        is_batch = bool(ids) and isinstance(ids[0], list)
        prompts = [check_token_ids(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if is_batch \
            else [check_token_ids(ids, "input_ids")]
        return prompts, is_batch, True
    is_batch = isinstance(text, list)
    prompts = text if is_batch else [text]
    if not prompts:
        raise bad_request("'text' must not be an empty list", param="text", code="invalid_value")
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p:
            raise bad_request("'text' must be a non-empty string or a list of them",
                              param=f"text[{i}]" if is_batch else "text", code="invalid_type")
    return prompts, is_batch, False


def per_item(value: Any, n: int, param: str) -> list[Any]:
    """A per-request value: one shared value, or a list with one entry per batch item."""
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise bad_request(f"'{param}' has {len(value)} entries but the batch has {n} prompts", param=param)
    return value


def _item_values(r: FieldReader, key: str, kind: str, n: int, default: Any,
                 lo: float | None = None, hi: float | None = None) -> list[Any]:
    """``key`` as one value per item: a shared value or a list of them, each checked like ``r.get``."""
    value = r.get(key, (kind, "list"), default, lo=lo, hi=hi)
    if not isinstance(value, list):
        return [value] * n
    return [FieldReader({f"{key}[{i}]": v}).get(f"{key}[{i}]", kind, default, lo=lo, hi=hi)
            for i, v in enumerate(per_item(value, n, key))]


def _sampling(sp: Any, where: str, unknown: UnknownFields) -> SamplingParams:
    """One item's ``sampling_params``: nulls dropped, SGLang's names mapped, unknown keys handled,
    then built into ``SamplingParams`` (400 naming the field)."""
    if sp is None:
        return SamplingParams()
    if not isinstance(sp, dict):
        raise bad_request(f"'{where}' must be an object", param=where, code="invalid_type")
    out: dict[str, Any] = {}
    for key, value in sp.items():
        if value is None:
            continue
        name = _SAMPLING_ALIASES.get(key, key)
        if name in out:
            raise bad_request(f"'{where}.{key}' repeats '{name}'", param=f"{where}.{key}", code="invalid_value")
        out[name] = value
    unknown.found([f"{where}.{k}" for k in sorted(set(out) - _SAMPLING_FIELDS)])
    out = {k: v for k, v in out.items() if k in _SAMPLING_FIELDS}
    try:
        return SamplingParams.from_dict(out)
    except (TypeError, ValueError) as e:  # a TypeError's text is Python's, not a reason for the client
        why = client_message(str(e)) if isinstance(e, ValueError) else "a field has the wrong type"
        name = getattr(e, "field", None)
        raise bad_request(f"sampling_params: {why}", param=f"{where}.{name}" if name else where,
                          code="invalid_value") from None
