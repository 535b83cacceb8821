"""``ModelRunner``: the model, its KV pool and req_to_token table, and one step's forward + sampling.

This and ``forward_batch`` are the only places the scheduler's lists become tensors.
``run(batch)`` builds the ``ForwardBatch``, runs the forward, computes logprobs (``log_softmax`` of
the raw float32 logits, before any processing), applies the sampler's logit processors, the
grammar bitmasks and the tokenizer-vocabulary mask, samples, and returns plain lists. A verify
step (speculative decoding) masks every draft position under the grammar's state after the drafts
before it and keeps what the model would have produced (``Sampler.verify``).

Tensor parallelism (``tp_size > 1``): the engine's runner is rank 0; it spawns ranks 1..N-1
(``tp_worker``), each of which builds its own ``ModelRunner`` and ``follow()``s: rank 0 broadcasts
every step's ``BatchSpec`` before its forward, all ranks run the same forward on their shard, and
rank 0 alone samples from the gathered logits. ``close()`` stops the workers.

``embed(token_lists)`` is the embeddings' forward: one prefill in a scratch KV pool (the serving
pool and the radix cache are untouched), the final hidden state pooled as the model declares it
(``declared_pooling``) and L2-normalised.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from radixlm.kernels import get_ops
from radixlm.runtime import free_port
from radixlm.runtime.gguf_path import gguf_file
from radixlm.runtime.model import native_decode
from radixlm.runtime.model.attention import resolve_attention_backend
from radixlm.runtime.model.cuda_graph_runner import (
    DecodeGraphRunner,
    Graph,
    cuda_graph_factory,
    gpu_feature_enabled,
)
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.gguf_loader import check_gguf_options
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable, kv_cache_dtype
from radixlm.runtime.model.memory_placement import (
    move_weights_to_huge_pages,
    release_free_memory,
    tune_malloc,
)
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.model.parallel.distributed import TPGroup, tp_device
from radixlm.runtime.model.parallel.layers import check_tp_size
from radixlm.runtime.model.parallel.tp_worker import TPWorkerError, TPWorkers
from radixlm.runtime.model.sampler import Sampler, SamplingInfo, apply_logit_processors
from radixlm.runtime.scheduler.batch import BatchResult, BatchSpec, ScheduledBatch
from radixlm.runtime.scheduler.constraint import fill_draft_masks
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.server_args import ServerArgs

CPU_MAX_DEFAULT_SLOTS = 32768  # without max_total_tokens, a CPU pool stays modest (float32 slots; 16-bit: twice)
EMBED_TOKENS_PER_FORWARD = 8192  # embeddings: inputs are batched into forwards of at most this many tokens
# llama.cpp's pooling_type: 0 none (per token; served as last), 1 mean, 2 cls, 3 last, 4 rank (last)
GGUF_POOLING = {0: "last", 1: "mean", 2: "cls", 3: "last", 4: "last"}


def declared_pooling(model_path: str) -> str:
    """How the checkpoint pools token states into one embedding: ``mean``, ``cls`` or ``last``.

    A GGUF file's ``<arch>.pooling_type``; a sentence-transformers folder's ``1_Pooling/config.json``
    (``pooling_mode_mean_tokens``, ``_cls_token``, ``_lasttoken``); otherwise ``last``, the causal LM's
    one state that has seen the whole input."""
    gguf = gguf_file(model_path)
    if gguf is not None:
        from radixlm.runtime.model.gguf_reader import GGUFFile

        with GGUFFile(gguf) as reader:
            arch = reader.metadata.get("general.architecture", "")
            kind = reader.metadata.get(f"{arch}.pooling_type")
        return GGUF_POOLING.get(int(kind), "last") if kind is not None else "last"
    config = Path(model_path) / "1_Pooling" / "config.json"
    if config.is_file():
        modes = json.loads(config.read_text())
        for mode, name in (("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "cls"),
                           ("pooling_mode_lasttoken", "last")):
            if modes.get(mode):
                return name
    return "last"


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class ModelRunner:
    """Loads the model and runs batches. ``num_slots`` and ``context_len`` are facts found here.

    ``tp_rank``/``tp_port``: set only in spawned tensor-parallel workers (ranks > 0).
    """

    def __init__(self, args: ServerArgs, model_path: str, token_vocab_size: int,
                 eos_token_ids: Sequence[int], tp_rank: int = 0, tp_port: int | None = None) -> None:
        self.workers: TPWorkers | None = None
        self._broken: TPWorkerError | None = None
        self.tp = self._init_tp(args, model_path, token_vocab_size, eos_token_ids, tp_rank, tp_port)
        try:
            self._build(args, model_path, token_vocab_size, eos_token_ids)
        except BaseException as e:
            workers = self.workers
            self.close(graceful=False)
            if workers is not None:
                workers.check_alive()  # a worker that died while loading explains the failure best
            raise e

    def _init_tp(self, args: ServerArgs, model_path: str, token_vocab_size: int, eos_token_ids: Sequence[int],
                 tp_rank: int, tp_port: int | None) -> TPGroup:
        """Rank 0 of ``tp_size > 1`` checks the split, spawns the workers; every rank joins the group."""
        device = resolve_device(args.device)
        if gguf_file(model_path) is not None:  # block kernels: CPU only, one rank (checked before any spawn)
            device = torch.device("cpu") if args.device == "auto" else device
            check_gguf_options(args.dtype, device, args.tp_size, args.quantization)
        if args.tp_size == 1:
            return TPGroup.single(device)
        device = tp_device(device, tp_rank, args.tp_size)
        if tp_rank == 0:
            check_tp_size(ModelConfig.from_path(model_path), args.tp_size)
            tp_port = free_port()
            self.workers = TPWorkers.start(args.tp_size, run_tp_rank,
                                           (args, model_path, token_vocab_size, list(eos_token_ids), tp_port))
        try:
            return TPGroup.init(tp_rank, args.tp_size, tp_port, device)
        except BaseException:
            if self.workers is not None:
                self.workers.join(timeout_s=0.5)
            raise

    def _build(self, args: ServerArgs, model_path: str, token_vocab_size: int,
               eos_token_ids: Sequence[int]) -> None:
        self.device = self.tp.device
        if self.device.type == "cpu":
            tune_malloc()  # the forward's large temporaries otherwise page-fault in on every use
        self.model, self.model_config = load_model(model_path, args.dtype, self.device,
                                                   attention_backend=args.attention_backend, tp=self.tp,
                                                   quantization=args.quantization)
        if self.device.type == "cpu":
            move_weights_to_huge_pages(self.model)  # streamed every decode step: fewer TLB misses
            release_free_memory()  # the float weights that quantization or the copies above left behind
        self.dtype = self.model.norm.weight.dtype
        self.context_len = args.context_length or self.model_config.context_len
        self.vocab_size = self.model_config.vocab_size  # logit width (may exceed the tokenizer's)
        self.token_vocab_size = min(token_vocab_size, self.vocab_size)
        self.eos_token_ids = list(eos_token_ids)
        backend = resolve_attention_backend(args.attention_backend, self.device)
        cfg = self.model_config
        self.kv_dtype = kv_cache_dtype(args.kv_cache_dtype, self.dtype, self._kv_half_ok(backend))
        self.num_slots = self.tp.min_int(self._num_slots(args))  # every rank's pool has the same slots
        self.kv_pool = KVPool(self.num_slots, cfg.num_layers, self.model.num_kv_heads, cfg.head_dim,
                              self.kv_dtype, self.device)
        self.req_to_token = ReqToTokenTable(args.max_running_requests, self.context_len, self.device)
        self.ops = get_ops(backend)
        # cascade decode attention over a batch-wide shared prefix exists in the torch backend only
        self.detect_shared_prefix = backend == "torch"
        self.sampler = Sampler(self.device, args.random_seed)
        self.pooling = declared_pooling(model_path)  # embeddings: mean | cls | last
        self.graph_runner: DecodeGraphRunner | None = None
        # CUDA graphs: the Triton kernels need no host syncs; TP ranks would all have to capture
        if (backend == "triton" and self.tp.size == 1
                and gpu_feature_enabled(args.disable_cuda_graph, self.device, needs_cuda=True)):
            self.enable_decode_graphs(cuda_graph_factory(), min(args.cuda_graph_max_bs, args.max_running_requests))

    def _kv_half_ok(self, backend: str) -> bool:
        """Whether the active attention kernels read a float16 KV pool natively (``--kv-cache-dtype auto``)."""
        if self.device.type == "cuda":
            return backend == "triton"
        cfg = self.model_config
        return native_decode.kv_half_ok(self.device, self.dtype, backend, cfg.num_heads, cfg.num_kv_heads,
                                        cfg.head_dim)

    def _num_slots(self, args: ServerArgs) -> int:
        """Slots for ``max_total_tokens``, else for ``mem_fraction`` of free memory counted in bytes of the
        KV dtype (a 16-bit pool: twice the slots); the CPU's default cap is in float32 slots' bytes too."""
        if args.max_total_tokens is not None:
            return args.max_total_tokens
        cfg = self.model_config
        per_slot = KVPool.bytes_per_slot(cfg.num_layers, self.model.num_kv_heads, cfg.head_dim, self.kv_dtype)
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return max(int(free * args.mem_fraction) // per_slot, 2)
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        cap = CPU_MAX_DEFAULT_SLOTS * 4 // self.kv_dtype.itemsize
        return max(min(int(avail * args.mem_fraction) // per_slot, cap), 2)

    # ------------------------------------------------------------------ one step

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> BatchResult:
        """Forward ``batch`` and sample the next token of every request in ``batch.sample_reqs``."""
        fb = ForwardBatch.from_spec(batch.spec, self.req_to_token, self.device,
                                    detect_shared_prefix=self.detect_shared_prefix)
        start = time.perf_counter()
        logits = self._forward(batch, fb)  # [num_logit_rows, vocab]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        result = BatchResult(next_token_ids=[], forward_s=time.perf_counter() - start)
        if batch.logprob_spans:
            self._input_logprobs(batch, logits, result)
        if batch.is_verify:
            self._verify(batch, logits, result)
        elif batch.sample_reqs:
            self._sample(batch.sample_reqs, logits[torch.tensor(batch.sample_rows, device=self.device)], result)
        return result

    # ------------------------------------------------------------------ embeddings

    @torch.inference_mode()
    def embed(self, token_lists: list[list[int]]) -> list[list[float]]:
        """The pooled (``self.pooling``), L2-normalised final hidden state of each non-empty token
        list, batched into forwards of at most ``EMBED_TOKENS_PER_FORWARD`` tokens. Call it on the
        engine thread between steps."""
        if self.tp.is_parallel:
            raise ValueError("embeddings are not served with tensor parallelism (--tp-size > 1)")
        out: list[list[float]] = []
        group: list[list[int]] = []
        for ids in token_lists:
            if group and sum(map(len, group)) + len(ids) > EMBED_TOKENS_PER_FORWARD:
                out += self._embed_group(group)
                group = []
            group.append(ids)
        return out + (self._embed_group(group) if group else [])

    def _embed_group(self, token_lists: list[list[int]]) -> list[list[float]]:
        lens = [len(ids) for ids in token_lists]
        total, cfg = sum(lens), self.model_config
        pool = KVPool(total + 1, cfg.num_layers, self.model.num_kv_heads, cfg.head_dim, self.kv_dtype, self.device)
        spec = BatchSpec(is_decode=False, req_pool_indices=list(range(len(lens))),
                         input_ids=[t for ids in token_lists for t in ids], prefix_lens=[0] * len(lens),
                         extend_lens=lens, out_cache_loc=list(range(1, total + 1)),
                         logits_indices=BatchSpec.last_token_indices(lens))
        fb = ForwardBatch.from_spec(spec, ReqToTokenTable(len(lens), max(lens), self.device), self.device)
        states: list[torch.Tensor] = []  # the last layer's output, before the final norm
        hook = self.model.layers[-1].register_forward_hook(lambda _m, _args, out: states.append(out))
        try:
            self.model.forward(fb, pool)  # the logits of the last rows are computed and dropped
        finally:
            hook.remove()
        hidden = self.model.norm(states[0])  # [total, hidden_size]
        starts = [end - n for end, n in zip(torch.tensor(lens).cumsum(0).tolist(), lens)]
        if self.pooling == "mean":
            pooled = torch.stack([hidden[s:s + n].float().mean(0) for s, n in zip(starts, lens)])
        else:
            rows = starts if self.pooling == "cls" else [s + n - 1 for s, n in zip(starts, lens)]
            pooled = hidden[torch.tensor(rows, device=self.device)].float()  # [bs, hidden_size]
        return torch.nn.functional.normalize(pooled, dim=-1).tolist()

    # ------------------------------------------------------------------ CUDA graphs (hook)

    def enable_decode_graphs(self, graph_factory: Callable[[], Graph], max_bs: int) -> DecodeGraphRunner:
        """Capture decode graphs for batch sizes up to ``max_bs``; eligible decode steps replay them.

        Called at start-up on CUDA; CPU tests pass ``EagerReplayGraph`` to check the padding.
        """
        runner = DecodeGraphRunner(lambda fb: self.model.forward(fb, self.kv_pool), max_bs,
                                   self.context_len, self.device, graph_factory)
        with torch.inference_mode():
            runner.capture()
        self.graph_runner = runner
        return runner

    def _forward(self, batch: ScheduledBatch, fb: ForwardBatch) -> torch.Tensor:
        """The model forward; under tensor parallelism the workers are told to run it too."""
        if self.graph_runner is not None and self.graph_runner.can_run(fb):
            return self.graph_runner.replay(fb)
        if self.workers is None:
            return self.model.forward(fb, self.kv_pool)
        if self._broken is not None:
            raise self._broken
        try:
            self.workers.check_alive()
            self.tp.send_spec(batch.spec)
            return self.model.forward(fb, self.kv_pool)
        except Exception as e:
            try:
                self.workers.check_alive(grace_s=1.0)  # a dead worker explains the failure best
                self._broken = TPWorkerError(f"tensor-parallel step failed: {type(e).__name__}: {e}")
            except TPWorkerError as dead:
                self._broken = dead
            raise self._broken from e

    @torch.inference_mode()
    def follow(self) -> None:
        """Ranks > 0: run rank 0's forwards (same batches, same pool and table) until it says stop."""
        while (spec := self.tp.recv_spec()) is not None:
            fb = ForwardBatch.from_spec(spec, self.req_to_token, self.device,
                                        detect_shared_prefix=self.detect_shared_prefix)
            self.model.forward(fb, self.kv_pool)

    def close(self, graceful: bool = True) -> None:
        """Rank 0: stop the workers (join, then terminate); every rank: leave the group. Idempotent."""
        workers, self.workers = self.workers, None
        if workers is not None:
            if graceful and self._broken is None and self.tp.is_parallel:
                try:
                    workers.check_alive()
                    self.tp.send_spec(None)
                except Exception:  # noqa: BLE001 - the workers are terminated below anyway
                    graceful = False
            workers.join(timeout_s=10.0 if graceful else 0.5)
        self.tp.destroy()

    def _input_logprobs(self, batch: ScheduledBatch, logits: torch.Tensor, result: BatchResult) -> None:
        for span in batch.logprob_spans:
            rows = logits[span.first_row:span.first_row + len(span.target_ids)]  # [n, vocab]
            logprobs = torch.log_softmax(rows.float(), dim=-1)
            targets = torch.tensor(span.target_ids, dtype=torch.int64, device=self.device)
            result.input_logprobs.append(logprobs.gather(1, targets.unsqueeze(1)).squeeze(1).tolist())
            result.input_top_logprobs.append(_top_logprobs(logprobs, span.req.logprobs.top_num))

    def _sample(self, reqs: list[Req], logits: torch.Tensor, result: BatchResult) -> None:
        """Sample every row at once. If that raises, sample row by row, so that a request's own
        failure (its logit processors, its grammar mask, its generator) fails it alone: its
        exception goes into ``result.errors`` and its row gets a placeholder token."""
        want_logprobs = any(r.logprobs.return_logprob for r in reqs)
        top_k = max(r.logprobs.top_num for r in reqs) if want_logprobs else 0
        try:
            rows = [self._sample_rows(reqs, logits, want_logprobs, top_k)]
        except Exception:  # noqa: BLE001 - find the request(s) that raised
            rows = []
            for i, req in enumerate(reqs):
                try:
                    rows.append(self._sample_rows([req], logits[i:i + 1], want_logprobs, top_k))
                except Exception as e:  # noqa: BLE001 - this request fails, the batch goes on
                    result.errors[i] = e
                    rows.append(([0], [0.0] if want_logprobs else [], [[]] if want_logprobs else []))
        for ids, lps, tops in rows:
            result.next_token_ids += ids
            result.next_token_logprobs += lps
            result.next_top_logprobs += tops

    def _sample_rows(self, reqs: list[Req], logits: torch.Tensor, want_logprobs: bool,
                     top_k: int) -> tuple[list[int], list[float], list[list[tuple[float, int]]]]:
        """Next token ids of ``reqs`` from their logit rows ``[len(reqs), vocab]`` (and logprobs)."""
        logits = logits.float()  # [bs, vocab] (a copy: indexing gathered the rows)
        raw_logprobs = torch.log_softmax(logits, dim=-1) if want_logprobs else None
        apply_logit_processors(logits, reqs, self.eos_token_ids)
        if any(r.constraint is not None for r in reqs):
            self.ops.apply_token_bitmask(logits, self._grammar_bitmask(reqs))
        if self.token_vocab_size < self.vocab_size:  # ids the tokenizer cannot decode
            logits[:, self.token_vocab_size:] = float("-inf")
        info = SamplingInfo.build(reqs, self.vocab_size, self.device)
        next_ids = self.sampler.sample(logits, reqs, info)  # [bs]
        if raw_logprobs is None:
            return next_ids.tolist(), [], []
        chosen = raw_logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1)
        return next_ids.tolist(), chosen.tolist(), _top_logprobs(raw_logprobs, top_k)

    def _verify(self, batch: ScheduledBatch, logits: torch.Tensor, result: BatchResult) -> None:
        """A verify step's results: per request, the drafts kept and the model's token after them
        (``result.accepted``, ``next_token_ids``), and their logprobs; a request whose rows fail
        (its logit processors, its grammar, its generator) fails alone."""
        want_logprobs = any(r.logprobs.return_logprob for r in batch.sample_reqs)
        top_k = max(r.logprobs.top_num for r in batch.sample_reqs) if want_logprobs else 0
        for i, (req, draft) in enumerate(zip(batch.sample_reqs, batch.drafts)):
            first = batch.sample_rows[i]
            try:
                accepted, token, lps, tops = self._verify_rows(req, draft, logits[first:first + len(draft) + 1],
                                                               want_logprobs, top_k)
            except Exception as e:  # noqa: BLE001 - this request fails, the batch goes on
                result.errors[i] = e
                accepted, token, lps, tops = 0, 0, [0.0], [[]]
            result.accepted.append(accepted)
            result.next_token_ids.append(token)
            if want_logprobs:
                result.next_token_logprobs.append(lps[-1])
                result.next_top_logprobs.append(tops[-1])
                result.draft_logprobs.append(lps[:-1])
                result.draft_top_logprobs.append(tops[:-1])

    def _verify_rows(self, req: Req, draft: list[int], rows: torch.Tensor, want_logprobs: bool, top_k: int
                     ) -> tuple[int, int, list[float], list[list[tuple[float, int]]]]:
        """``(accepted, token, logprobs, tops)`` of one request from its rows ``[len(draft) + 1,
        vocab]``; the logprobs are those of the kept drafts and the token (raw, as ``_sample_rows``)."""
        n = len(draft) + 1
        logits = rows.float()  # [n, vocab] (a copy: slicing a view, then the dtype)
        if logits.data_ptr() == rows.data_ptr():
            logits = logits.clone()
        raw_logprobs = torch.log_softmax(logits, dim=-1) if want_logprobs else None
        same = [req] * n  # every row is this request (drafts never carry penalties: speculation.spec_blocker)
        apply_logit_processors(logits, same, self.eos_token_ids)
        if req.constraint is not None:
            bitmask = torch.full((n, math.ceil(self.vocab_size / 32)), -1, dtype=torch.int32)
            fill_draft_masks(req.constraint, draft, bitmask)
            self.ops.apply_token_bitmask(logits, bitmask.to(self.device, non_blocking=True))
        if self.token_vocab_size < self.vocab_size:
            logits[:, self.token_vocab_size:] = float("-inf")
        accepted, token = self.sampler.verify(logits, req, draft, SamplingInfo.build([req], self.vocab_size,
                                                                                      self.device))
        if raw_logprobs is None:
            return accepted, token, [], []
        kept = draft[:accepted] + [token]
        rows_lp = raw_logprobs[:len(kept)]
        chosen = rows_lp.gather(1, torch.tensor(kept, device=self.device).unsqueeze(1)).squeeze(1).tolist()
        return accepted, token, chosen, _top_logprobs(rows_lp, top_k)

    def _grammar_bitmask(self, reqs: list[Req]) -> torch.Tensor:
        """int32 ``[bs, ceil(vocab / 32)]``: constrained rows from their matchers, others all ones."""
        bitmask = torch.full((len(reqs), math.ceil(self.vocab_size / 32)), -1, dtype=torch.int32)
        for i, req in enumerate(reqs):
            if req.constraint is not None:
                req.constraint.fill_mask(bitmask[i])
        return bitmask.to(self.device, non_blocking=True)


def _top_logprobs(logprobs: torch.Tensor, k: int) -> list[list[tuple[float, int]]]:
    """Per row, the ``k`` best ``(logprob, token_id)`` pairs (empty lists when ``k == 0``)."""
    if k <= 0:
        return [[] for _ in range(logprobs.shape[0])]
    values, ids = torch.topk(logprobs, min(k, logprobs.shape[1]), dim=-1)
    return [list(zip(v, i)) for v, i in zip(values.tolist(), ids.tolist())]


def run_tp_rank(rank: int, args: ServerArgs, model_path: str, token_vocab_size: int, eos_token_ids: list[int],
               port: int) -> None:
    """Entry point of rank ``rank``: build this rank's ``ModelRunner`` and follow rank 0 until told to stop."""
    # Ctrl-C reaches the whole process group: rank 0 handles it and sends the stop message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("radixlm").setLevel(args.log_level.upper())
    runner = ModelRunner(args, model_path, token_vocab_size, eos_token_ids, tp_rank=rank, tp_port=port)
    try:
        runner.follow()
    finally:
        runner.close()
