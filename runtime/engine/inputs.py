"""Turn ``Engine.generate`` arguments into validated ``Req`` objects (errors name the field).

Batching rules: ``prompt`` is a str (one request) or a list of str (a batch); ``input_ids`` is a
list of int (one) or a list of lists (a batch); exactly one of the two. ``sampling_params`` is a
dict, a ``SamplingParams`` or None (shared by all), or a list with one per prompt. A request with
``n > 1`` becomes ``n`` sibling requests (rids ``<rid>_<i>``, seeds ``seed + i``) that share the
prompt's KV through the radix cache.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.sampling_params import FieldError, SamplingParams
from radixlm.runtime.scheduler.req import Req


@dataclass
class InputLimits:
    """Facts the checks need (from the tokenizer and runner) and the per-request limits (server args)."""

    context_len: int
    max_req_input_len: int
    usable_slots: int
    vocab_size: int
    max_prompts: int = 1024
    max_n: int = 64
    max_sequences: int = 1024
    max_logit_bias: int = 1024
    max_stop_strings: int = 64
    max_stop_regex: int = 16
    max_schema_bytes: int = 1 << 20
    max_schema_depth: int = 128

    @classmethod
    def build(cls, args: Any, context_len: int, usable_slots: int, vocab_size: int) -> InputLimits:
        """From ``ServerArgs`` and the facts the runner found."""
        return cls(context_len=context_len, max_req_input_len=args.max_req_input_len or context_len,
                   usable_slots=usable_slots, vocab_size=vocab_size, max_prompts=args.max_prompts_per_request,
                   max_n=args.max_n, max_sequences=args.max_sequences_per_request,
                   max_logit_bias=args.max_logit_bias, max_stop_strings=args.max_stop_strings,
                   max_stop_regex=args.max_stop_regex,
                   max_schema_bytes=args.max_schema_bytes, max_schema_depth=args.max_schema_depth)


def check_fan_out(num_prompts: int, params: list[SamplingParams], limits: InputLimits) -> None:
    """How many sequences one call may queue (checked before anything is tokenized)."""
    if num_prompts > limits.max_prompts:
        raise FieldError("prompt", f"prompt: {num_prompts} prompts in one request, more than max_prompts_per_request "
                         f"({limits.max_prompts})")
    for p in _distinct(params):
        if p.n > limits.max_n:
            raise FieldError("n", f"n must be <= {limits.max_n} (max_n), got {p.n}")
    total = sum(p.n for p in params)
    if total > limits.max_sequences:
        raise FieldError("n", f"n: {total} sequences (prompts x n) in one request, more than "
                         f"max_sequences_per_request ({limits.max_sequences})")
    for p in _distinct(params):
        check_params(p, limits)


def check_params(p: SamplingParams, limits: InputLimits) -> None:
    """Size limits of one request's sampling parameters and constraint."""
    if p.logit_bias:
        if len(p.logit_bias) > limits.max_logit_bias:
            raise FieldError("logit_bias", f"logit_bias has {len(p.logit_bias)} entries, more than {limits.max_logit_bias}")
        bad = [t for t in p.logit_bias if not 0 <= t < limits.vocab_size]
        if bad:
            raise FieldError("logit_bias", f"logit_bias: token id {bad[0]} is outside the vocabulary [0, {limits.vocab_size})")
    if len(p.stop) > limits.max_stop_strings or len(p.stop_token_ids) > limits.max_stop_strings:
        raise FieldError("stop", f"stop: at most {limits.max_stop_strings} stop strings and stop_token_ids")
    if len(p.stop_regex) > limits.max_stop_regex:
        raise FieldError("stop_regex", f"stop_regex has {len(p.stop_regex)} patterns, more than max_stop_regex "
                         f"({limits.max_stop_regex})")
    if p.top_k > limits.vocab_size:
        raise FieldError("top_k", f"top_k must be <= the vocabulary size ({limits.vocab_size}), got {p.top_k}")
    bad_stop = [t for t in p.stop_token_ids if t >= limits.vocab_size]
    if bad_stop:
        raise FieldError("stop_token_ids", f"stop_token_ids: token id {bad_stop[0]} is outside the vocabulary [0, {limits.vocab_size})")
    kind = p.constraint_kind
    if kind in ("json_schema", "regex", "choices"):
        spec = getattr(p, kind)
        size = len(json.dumps(spec, ensure_ascii=False).encode())
        if size > limits.max_schema_bytes:
            raise FieldError(kind, f"{kind} is {size} bytes, more than max_schema_bytes ({limits.max_schema_bytes})")
        depth = json_depth(spec)
        if depth > limits.max_schema_depth:
            raise FieldError(kind, f"{kind} nests {depth} levels deep, more than max_schema_depth ({limits.max_schema_depth})")


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _distinct(params: list[SamplingParams]) -> list[SamplingParams]:
    return list({id(p): p for p in params}.values())


def normalize_inputs(prompt: Any, input_ids: Any) -> tuple[list[Any], bool]:
    """``(items, is_batch)``: items are str prompts or lists of token ids."""
    if (prompt is None) == (input_ids is None):
        raise FieldError("prompt", "pass exactly one of prompt and input_ids")
    if prompt is not None:
        if isinstance(prompt, str):
            items, is_batch = [prompt], False
        elif isinstance(prompt, (list, tuple)) and all(isinstance(p, str) for p in prompt):
            items, is_batch = list(prompt), True
        else:
            raise FieldError("prompt", "prompt must be a string or a list of strings")
        if not items or any(not p for p in items):
            raise FieldError("prompt", "prompt must be non-empty")
        return items, is_batch
    if isinstance(input_ids, (list, tuple)) and input_ids and all(_is_int(t) for t in input_ids):
        return [list(input_ids)], False
    if (isinstance(input_ids, (list, tuple)) and input_ids
            and all(isinstance(x, (list, tuple)) and all(_is_int(t) for t in x) for x in input_ids)):
        items = [list(x) for x in input_ids]
        if any(not x for x in items):
            raise FieldError("input_ids", "input_ids must be non-empty")
        return items, True
    raise FieldError("input_ids", "input_ids must be a non-empty list of ints or a list of such lists")


def normalize_params(sampling_params: Any, count: int) -> list[SamplingParams]:
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != count:
            raise FieldError("sampling_params", f"sampling_params has {len(sampling_params)} entries for {count} prompts")
        return [SamplingParams.from_dict(p) for p in sampling_params]
    params = SamplingParams.from_dict(sampling_params)
    return [params] * count


def normalize_rids(rid: Any, count: int) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(count)]
    rids = [rid] if isinstance(rid, str) else rid
    if not isinstance(rids, (list, tuple)) or len(rids) != count or not all(isinstance(r, str) and r for r in rids):
        raise FieldError("rid", f"rid must be a non-empty string, or a list of {count} strings for a batch")
    if len(set(rids)) != len(rids):
        raise FieldError("rid", "rid values must be distinct")
    return list(rids)


def check_request(ids: list[int], params: SamplingParams, limits: InputLimits,
                  logprob_start_len: int | None, top_logprobs_num: Any) -> None:
    """Raise ``ValueError`` naming the field when the request can never run."""
    if any(not 0 <= t < limits.vocab_size for t in ids):
        raise FieldError("input_ids", f"input_ids contains token ids outside [0, {limits.vocab_size})")
    if len(ids) > limits.max_req_input_len or len(ids) >= limits.context_len:
        raise FieldError("prompt", f"prompt has {len(ids)} tokens, longer than the limit "
                         f"({min(limits.max_req_input_len, limits.context_len - 1)}; context length "
                         f"{limits.context_len})")
    if len(ids) + params.max_new_tokens > limits.context_len:
        raise FieldError("max_new_tokens", f"max_new_tokens: prompt ({len(ids)} tokens) + max_new_tokens "
                         f"({params.max_new_tokens}) exceeds the context length {limits.context_len}")
    if len(ids) + params.max_new_tokens > limits.usable_slots:
        raise FieldError("max_new_tokens", f"max_total_tokens: prompt ({len(ids)} tokens) + max_new_tokens "
                         f"({params.max_new_tokens}) can never fit in {limits.usable_slots} KV slots")
    if logprob_start_len is not None and (not _is_int(logprob_start_len) or not -1 <= logprob_start_len < len(ids)):
        raise FieldError("logprob_start_len", f"logprob_start_len must be -1 or in [0, {len(ids)}), got {logprob_start_len!r}")
    if not _is_int(top_logprobs_num) or top_logprobs_num < 0:
        raise FieldError("top_logprobs_num", f"top_logprobs_num must be a non-negative integer, got {top_logprobs_num!r}")


def normalize_extra_keys(extra_key: Any, count: int) -> list[str | None]:
    """One radix-cache namespace per prompt (None: the shared one); prompts under different keys
    never share KV, so their ``cached_tokens`` say nothing about each other."""
    keys = extra_key if isinstance(extra_key, (list, tuple)) else [extra_key] * count
    if len(keys) != count or not all(k is None or (isinstance(k, str) and k) for k in keys):
        raise FieldError("extra_key", f"extra_key (cache_salt) must be a non-empty string, or a list of {count} for a batch")
    return list(keys)


def build_reqs(token_lists: list[list[int]], params: list[SamplingParams], rids: list[str], *,
               limits: InputLimits, return_logprob: bool, logprob_start_len: int | None,
               top_logprobs_num: int, stream: bool, extra_keys: list[str | None] | None = None) -> list[Req]:
    """One ``Req`` per prompt and sample, in prompt-major order."""
    reqs = []
    start = None if logprob_start_len in (None, -1) else logprob_start_len
    extra_keys = extra_keys or [None] * len(token_lists)
    for ids, p, rid, key in zip(token_lists, params, rids, extra_keys):
        check_request(ids, p, limits, logprob_start_len, top_logprobs_num)
        for i in range(p.n):
            req = Req(rid if p.n == 1 else f"{rid}_{i}", ids, p, return_logprob=return_logprob,
                      logprob_start_len=start, top_logprobs_num=top_logprobs_num, stream=stream,
                      seed_offset=i, extra_key=key)
            req.group_rid = rid
            reqs.append(req)
    return reqs


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
