"""``Engine``: the in-process serving engine (``from radixlm import Engine``).

    with Engine(max_total_tokens=4096) as engine:       # the embedded tiny model by default
        out = engine.generate("The capital of France is", {"temperature": 0, "max_new_tokens": 16})
        print(out["text"], out["meta_info"]["finish_reason"])

The step loop runs in its own thread (``EngineLoop``); ``generate`` may be called from many
threads at once and their requests are batched together. Return values (see
``delivery``): one dict for one prompt, a list for a batch; a request with ``n > 1``
contributes ``n`` dicts (a list of ``n`` for a single prompt, flattened prompt-major for a batch).
``stream=True`` yields chunks whose ``text`` / ``output_ids`` are deltas; the last chunk carries
``finish_reason``; chunks of a batch (or ``n > 1``) carry an ``"index"``.

Prompt logprobs: ``logprob_start_len=k`` returns ``input_token_logprobs`` for prompt positions
``k ..`` (the first entry's logprob is None, as in SGLang); None or -1 returns none. All logprobs
are ``log_softmax`` of the raw float32 logits, before temperature, penalties and masks.

Start-up objects are kept out of Python's cyclic garbage collector (``freeze_startup_objects``).
Once torch is imported a process holds well over a hundred thousand objects the collector tracks,
and each full (generation-2) collection walks them all: a pause of tens of milliseconds, landing on
whichever decode step or grammar compile is running. Objects that exist when the engine has started
(the model, the tokenizer, torch's own) live as long as the engine, so ``gc.freeze()`` moves them
to the permanent generation and a full collection then walks only what was made since: SGLang and
vLLM do the same after start-up.

Engines nest (tests start several in one process): the objects stay frozen while any engine is
open, and ``gc.unfreeze()`` hands them back to the collector when the last one shuts down, so
the cycles of a closed engine are freed as before.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from radixlm.runtime.engine.delivery import Delivery, RequestHandle, ResultCollector
from radixlm.runtime.engine.grammar_compiler import GrammarCompiler
from radixlm.runtime.engine.inputs import (
    InputLimits,
    build_reqs,
    check_fan_out,
    normalize_extra_keys,
    normalize_inputs,
    normalize_params,
    normalize_rids,
)
from radixlm.runtime.engine.inspection import EngineSummary, inspect_engine, summarize
from radixlm.runtime.engine.step_loop import EngineLoop
from radixlm.runtime.gguf_path import gguf_file
from radixlm.runtime.model.cuda_graph_runner import gpu_feature_enabled
from radixlm.runtime.model.gguf_reader import GGUFFile
from radixlm.runtime.model.model_runner import ModelRunner
from radixlm.runtime.sampling_params import FieldError, SamplingDefaults, SamplingParams
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache
from radixlm.runtime.scheduler.results import StopChecker
from radixlm.runtime.scheduler.scheduler import Scheduler
from radixlm.runtime.scheduler.speculation import SpeculativeConfig
from radixlm.runtime.server_args import ServerArgs

# sampling_params as Engine.generate takes it: shared by every prompt, or one per prompt
SamplingLike = SamplingParams | dict[str, Any] | list[SamplingParams | dict[str, Any] | None] | None

_gc_lock = threading.Lock()
_open_engines = 0  # engines between freeze_startup_objects and thaw_startup_objects


class QueueFullError(RuntimeError):
    """More than ``max_queued_requests`` requests wait (the HTTP server answers 503)."""


class Engine:
    """Continuous-batching generation with the radix cache; see the module docstring."""

    def __init__(self, model_path: str | None = None, **server_args: Any) -> None:
        started = time.perf_counter()
        self.server_args = ServerArgs.from_kwargs(model_path=model_path, **server_args)
        args = self.server_args
        logging.getLogger("radixlm").setLevel(args.log_level.upper())
        from radixlm.runtime.checkpoints.model_source import model_name, resolve_model_path
        from radixlm.runtime.checkpoints.synthetic import default_model_path
        from radixlm.runtime.tokenizer.tokenizer import Tokenizer

        # a hub id (ORG/NAME[@REVISION]) is downloaded, or found in the Hugging Face cache
        self.model_path = resolve_model_path(args.model_path) if args.model_path else default_model_path()
        self.model_name = model_name(self.model_path)
        tokenizer_path = resolve_model_path(args.tokenizer_path, "--tokenizer-path") if args.tokenizer_path else None
        tokenizer_source = tokenizer_path or self.model_path
        gguf = gguf_file(tokenizer_source)  # a GGUF file (or a folder holding one) carries its tokenizer
        if gguf is not None:  # every length, count and offset checked before the tokenizer's converter reads it
            GGUFFile(gguf).close()
        self.tokenizer = (Tokenizer.from_gguf(gguf, args.chat_template) if gguf is not None
                          else Tokenizer(tokenizer_source, args.chat_template))
        loading = time.perf_counter()
        self.runner = ModelRunner(args, self.model_path, self.tokenizer.vocab_size, self.tokenizer.eos_token_ids)
        self.load_weights_s = time.perf_counter() - loading  # the weights, and the KV pool's allocation
        self.model_config = self.runner.model_config
        # what a request's unset temperature, top_p, ... become (a request's own values always win)
        self.sampling_defaults = load_sampling_defaults(args.sampling_defaults_from(), self.model_path)
        cache = ReqCache(self.runner.num_slots, args.max_running_requests, args.page_size,
                         args.disable_radix_cache, args.radix_eviction_policy)
        method, num_draft_tokens = args.speculative_method(self.runner.device.type)
        self.speculative = SpeculativeConfig(num_draft_tokens if method else 0, args.speculative_max_batch_size,
                                             grammar_drafts=args.enable_jump_forward,
                                             row_cost=args.speculative_row_cost)
        self.scheduler = Scheduler(cache, StopChecker(self.tokenizer.eos_token_ids, self.runner.context_len),
                                   schedule_policy=args.schedule_policy,
                                   max_running_requests=args.max_running_requests,
                                   max_prefill_tokens=args.max_prefill_tokens, chunk_size=args.chunk_size,
                                   mixed_chunk=args.enable_mixed_chunk, speculative=self.speculative,
                                   codec=self.tokenizer)
        self._grammar = GrammarCompiler(self.tokenizer, self.runner.vocab_size, args.grammar_compile_timeout_s,
                                        args.grammar_compile_max_memory_mb,
                                        args.grammar_backend, args.grammar_cache_mb,
                                        args.grammar_matcher_max_mb)
        self._limits = InputLimits.build(args, self.runner.context_len, cache.usable_slots,
                                         self.runner.token_vocab_size)
        # a verify step's shape depends on what the step before it accepted: no step runs ahead
        overlap = (not self.speculative.enabled
                   and gpu_feature_enabled(args.disable_overlap_schedule, self.runner.device, needs_cuda=False))
        self._loop = EngineLoop(self.scheduler, self.runner, self._grammar, overlap=overlap)
        self._closed = False
        if args.grammar_warmup:  # in the background: the engine serves at once
            self._grammar.start_backend()
        freeze_startup_objects()  # full collections then skip the model's and torch's objects
        self.startup_s = time.perf_counter() - started

    # ------------------------------------------------------------------ generate

    def generate(self, prompt: str | list[str] | None = None, sampling_params: SamplingLike = None,
                 input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool = False,
                 logprob_start_len: int | None = None, top_logprobs_num: int = 0, stream: bool = False,
                 rid: str | list[str] | None = None, extra_key: str | list[str] | None = None) -> Any:
        """Generate for one prompt or a batch; see the module docstring for the result shapes.

        ``max_new_tokens=0`` only prefills: no output tokens, the prompt enters the radix cache,
        ``finish_reason`` is ``length``. Prompt logprobs (``return_logprob`` with
        ``logprob_start_len=k``) need the logits of positions ``k ..``, so the radix-cache match is
        capped at ``k`` tokens: ``cached_tokens <= k``, and ``k=0`` disables any cache hit for the
        request. ``meta_info["first_token_latency"]`` is the time from submission to the first
        output token (None without one). ``extra_key`` (a string, or one per prompt) puts the
        prompt in its own radix-cache namespace: prompts under different keys share no KV.
        ``sampling_params`` is a ``SamplingParams`` (passed through whole, as the HTTP server does),
        a dict of its fields (SGLang's form), None (the defaults), or a list of those, one per prompt.
        """
        reqs, collector = self._make_reqs(prompt, sampling_params, input_ids, return_logprob,
                                          logprob_start_len, top_logprobs_num, stream, rid, extra_key)
        handle = RequestHandle()
        self._submit(reqs, handle)
        if stream:
            return self._stream(reqs, handle, collector)
        try:
            while not collector.complete:
                collector.add(handle.get())
        except BaseException:
            self._abort_all(reqs)
            raise
        return collector.result()

    async def async_generate(self, prompt: str | list[str] | None = None, sampling_params: SamplingLike = None,
                             input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool = False,
                             logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                             stream: bool = False, rid: str | list[str] | None = None,
                             extra_key: str | list[str] | None = None) -> Any:
        """``generate`` for asyncio: awaits the result, or (``stream=True``) returns an async iterator."""
        reqs, collector = self._make_reqs(prompt, sampling_params, input_ids, return_logprob,
                                          logprob_start_len, top_logprobs_num, stream, rid, extra_key)
        handle = RequestHandle(asyncio.get_running_loop())
        self._submit(reqs, handle)
        if stream:
            return self._astream(reqs, handle, collector)
        try:
            while not collector.complete:
                collector.add(await handle.aget())
        except BaseException:
            self._abort_all(reqs)
            raise
        return collector.result()

    def _make_reqs(self, prompt: Any, sampling_params: Any, input_ids: Any, return_logprob: bool,
                   logprob_start_len: Any, top_logprobs_num: Any, stream: bool,
                   rid: Any, extra_key: Any) -> tuple[list[Req], ResultCollector]:
        items, is_batch = normalize_inputs(prompt, input_ids)
        given = normalize_params(sampling_params, len(items))
        defaulted = {id(p): p.with_defaults(self.sampling_defaults) for p in given}
        params = [defaulted[id(p)] for p in given]
        check_fan_out(len(items), params, self._limits)  # before tokenizing a huge batch
        extra_keys = normalize_extra_keys(extra_key, len(items))
        token_lists = [self.tokenizer.encode(x, add_special_tokens=True) if isinstance(x, str) else x
                       for x in items]
        if any(not ids for ids in token_lists):
            raise ValueError("prompt must be non-empty (it encodes to no tokens)")
        reqs = build_reqs(token_lists, params, normalize_rids(rid, len(items)), limits=self._limits,
                          return_logprob=bool(return_logprob), logprob_start_len=logprob_start_len,
                          top_logprobs_num=top_logprobs_num, stream=bool(stream), extra_keys=extra_keys)
        for req in reqs:
            req.decoded.detokenizer = self.tokenizer.incremental_detokenizer(
                req.params.skip_special_tokens, keep=req.params.keep_special_token_ids)
        return reqs, ResultCollector(len(reqs), single=not is_batch and params[0].n == 1)

    def _submit(self, reqs: list[Req], handle: RequestHandle) -> None:
        limit = self.server_args.queue_limit
        if len(reqs) > limit:  # no retry can help: the request alone overflows an empty queue
            raise FieldError("n", f"n: {len(reqs)} sequences in one request can never fit the waiting queue "
                             f"(max_queued_requests={limit})")
        if self._loop.num_queued() + len(reqs) > limit:
            raise QueueFullError(f"too many queued requests (max_queued_requests={limit})")
        now = time.perf_counter()
        caller = reqs[0].arrival  # one id for the whole call (fair admission between calls)
        for i, req in enumerate(reqs):
            req.delivery = Delivery(handle, i, now)
            req.caller = caller
        self._loop.submit(reqs)

    def _stream(self, reqs: list[Req], handle: RequestHandle,
                collector: ResultCollector) -> Iterator[dict[str, Any]]:
        try:
            while not collector.complete:
                yield collector.chunk(handle.get())
        finally:
            if not collector.complete:
                self._abort_all(reqs)

    async def _astream(self, reqs: list[Req], handle: RequestHandle,
                       collector: ResultCollector) -> AsyncIterator[dict[str, Any]]:
        try:
            while not collector.complete:
                yield collector.chunk(await handle.aget())
        finally:
            if not collector.complete:
                self._abort_all(reqs)

    def _abort_all(self, reqs: list[Req]) -> None:
        for req in reqs:
            self._loop.abort(req.rid)

    # ------------------------------------------------------------------ embeddings

    def embed(self, input_ids: list[list[int]]) -> list[list[float]]:
        """One embedding per token list: the final hidden state pooled as the model declares it
        (``runner.pooling``: a GGUF's ``pooling_type``, a sentence-transformers pooling config, else the
        last token's, as a causal LM's only state that saw the whole input), L2-normalised. Runs on
        the engine thread between steps, in a scratch KV pool: no radix-cache hit, nothing cached.
        ``ValueError`` for an empty list or one longer than the context."""
        if not input_ids:
            raise ValueError("input must hold at least one text")
        for i, ids in enumerate(input_ids):
            if not ids:
                raise FieldError("input", f"input[{i}] is empty (it encodes to no tokens)")
            if len(ids) > self.runner.context_len:
                raise FieldError("input", f"input[{i}] has {len(ids)} tokens, more than the context length "
                                 f"{self.runner.context_len}")
            if min(ids) < 0 or max(ids) >= self.runner.token_vocab_size:
                raise FieldError("input", f"input[{i}] holds a token id outside [0, {self.runner.token_vocab_size})")
        return self._loop.call(lambda: self.runner.embed(input_ids))

    async def async_embed(self, input_ids: list[list[int]]) -> list[list[float]]:
        """``embed`` for asyncio (the caller's event loop keeps serving while the forward runs)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.embed, input_ids)

    # ------------------------------------------------------------------ control

    def abort(self, rid: str) -> None:
        """Abort request ``rid`` (all its samples when ``n > 1``); its result says ``abort``."""
        self._loop.abort(rid)

    def flush_cache(self) -> bool:
        """Empty the radix cache; False (nothing done) while requests are queued or running.
        The compiled-grammar cache is emptied either way (running requests keep their grammars)."""
        self._grammar.flush_cache()
        return self._loop.call(self.scheduler.flush_cache)

    def summary(self) -> EngineSummary:
        """What was loaded and how it runs (the start-up line of ``radixlm serve``)."""
        return summarize(self.model_name, self.server_args, self.runner, self.scheduler.cache.usable_slots,
                         self.sampling_defaults.describe())

    def get_stats(self) -> dict[str, Any]:
        """Cache hit rate, queue and running counts, KV usage, and the step timers."""
        loop, cache = self._loop, self.scheduler.cache
        total = cache.usable_slots
        free = cache.slots.num_free
        return {
            "cache_hit_rate": loop.cached_tokens / loop.prompt_tokens if loop.prompt_tokens else 0.0,
            "cached_tokens": loop.cached_tokens,
            "prompt_tokens": loop.prompt_tokens,
            "finished_requests": loop.finished_requests,
            "num_running_reqs": len(self.scheduler.running) + (self.scheduler.chunked is not None),
            "num_queued_reqs": loop.num_queued(),
            "num_grammar_queue_reqs": len(self._grammar),
            # a snapshot: the engine thread may change the list while this sums it
            "decode_sum_seq_lens": sum(r.prompt_len + r.output_len for r in list(self.scheduler.running)),
            "kv_used_slots": total - free,
            "kv_total_slots": total,
            "kv_usage": (total - free) / total,
            "num_free_slots": free,
            "radix_cache_tokens": cache.tree.total_size() if cache.tree else 0,
            "num_retractions": self.scheduler.num_retractions,
            "idle_memory_releases": loop.idle_releases,
            "extend_memory_releases": loop.extend_releases,
            "timers": loop.timers.as_dict(),
            "grammar_backend": self._grammar.backend_state(),
            "grammar": self._grammar.counts(),
            "startup_s": self.startup_s,
            "load_weights_s": self.load_weights_s,
            "speculative": {"enabled": self.speculative.enabled, **self.scheduler.drafter.stats()},
        }

    def inspect(self, max_nodes: int = 64, shown_ids: int = 32, events_since: int = 0,
                requests_since: int = 0) -> dict[str, Any]:
        """A read-only picture for the dashboard: the radix tree's largest branches, its evictions
        after ``events_since``, the requests finished after ``requests_since``, the grammar cache
        (``inspection.inspect_engine``). Waits for the current step to end."""
        return inspect_engine(self._loop, self.scheduler, self._grammar, max_nodes, shown_ids,
                              events_since, requests_since)

    def check_no_leak(self) -> None:
        """Flush the cache and assert every KV slot and table row is free (for tests)."""
        def check() -> None:
            if not self.scheduler.flush_cache():
                raise AssertionError(f"requests still in the engine: {self.scheduler.all_reqs()}")
            self.scheduler.cache.check_no_leak()
        self._loop.call(check)

    def shutdown(self) -> None:
        """Stop the step loop; requests still in flight fail with ``RuntimeError``."""
        if not self._closed:
            self._closed = True
            self._loop.stop()
            self._grammar.close()
            self.runner.close()  # tensor parallelism: stops the worker processes
            thaw_startup_objects()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


def load_sampling_defaults(source: str | None, model_path: str) -> SamplingDefaults:
    """The model's sampling defaults (``ServerArgs.sampling_defaults_from``): None = the built-in
    ones; ``auto`` = a GGUF's ``general.sampling.*`` keys or the checkpoint's generation_config.json
    (the built-in ones when it has neither); else the generation_config.json in that folder."""
    import json
    from pathlib import Path

    if source is None:
        return SamplingDefaults(source="built-in: --sampling-defaults openai")
    if source == "auto":
        gguf = gguf_file(model_path)
        if gguf is not None:
            with GGUFFile(gguf) as f:
                return SamplingDefaults.from_gguf_metadata(f.metadata, f"{Path(gguf).name} general.sampling.*")
        folder = Path(model_path)
    else:
        folder = Path(source)
        if not (folder / "generation_config.json").is_file():
            raise ValueError(f"generation_config: {source!r} is not a folder holding a generation_config.json")
    path = folder / "generation_config.json"
    if not path.is_file():
        return SamplingDefaults(source="built-in: the model has no generation_config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"generation_config: {path} is not readable JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError(f"generation_config: {path} must hold a JSON object")
    return SamplingDefaults.from_generation_config(config, "generation_config.json")


def freeze_startup_objects() -> None:
    """Collect once, then freeze every object that survives (one more open engine)."""
    global _open_engines
    with _gc_lock:
        _open_engines += 1
        gc.collect()
        gc.freeze()


def thaw_startup_objects() -> None:
    """One engine fewer; with none left, give the frozen objects back to the collector."""
    global _open_engines
    with _gc_lock:
        _open_engines = max(_open_engines - 1, 0)
        if _open_engines == 0:
            gc.unfreeze()
