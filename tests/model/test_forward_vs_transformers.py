"""Our paged-KV forward vs HF transformers on the same checkpoint (float32, logits within 1e-4).

Two checkpoint sources per architecture: our deterministic tiny checkpoints
(``radixlm.runtime.checkpoints.synthetic``) and checkpoints written by transformers itself (``save_pretrained``)
with llama3 / linear RoPE scaling and tied embeddings. KV slots are handed out in a shuffled order so
every request's context is scattered over the pool.
"""

from __future__ import annotations

import random

import pytest
import torch
import transformers
from radixlm.runtime.model.attention import resolve_attention_backend
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.scheduler.batch import BatchSpec
from radixlm.runtime.scheduler.req_cache import ReqSlotAllocator, SlotAllocator
from transformers import AutoModelForCausalLM

ATOL = 1e-4
ARCHS = ("llama", "mistral", "qwen2", "qwen3")
SMALL = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
# What each HF-written checkpoint exercises beyond the architecture itself.
HF_EXTRAS = {
    "llama": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
    "mistral": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen2": {"tie_word_embeddings": True},
    "qwen3": {"head_dim": 32},  # heads * head_dim != hidden_size
}
HF_CLASSES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}


def write_hf_checkpoint(path, arch: str, seed: int = 0) -> None:
    """A tiny ``<Arch>ForCausalLM`` written by transformers, with weights large enough to matter."""
    prefix = HF_CLASSES[arch]
    config = getattr(transformers, f"{prefix}Config")(**{**SMALL, **HF_EXTRAS[arch]})
    torch.manual_seed(seed)
    model = getattr(transformers, f"{prefix}ForCausalLM")(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 1.5 / p.shape[1] ** 0.5)
    model.save_pretrained(path, safe_serialization=True)


@pytest.fixture(scope="module", params=[(s, a) for s in ("ours", "hf") for a in ARCHS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def models(request, tmp_path_factory, checkpoint):
    """(our model, HF reference model) loaded from the same checkpoint directory."""
    source, arch = request.param
    if source == "ours":
        path = checkpoint(arch, "tiny")
    else:
        path = tmp_path_factory.mktemp(f"hf-{arch}")
        write_hf_checkpoint(path, arch)
    ours, _ = load_model(path, dtype="float32", device="cpu", attention_backend="torch")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return ours, ref


def hf_logits(ref, ids: list[int]) -> torch.Tensor:
    """HF logits ``[len(ids), vocab]`` for one unpadded sequence."""
    with torch.no_grad():
        return ref(torch.tensor([ids])).logits[0].float()


class Paged:
    """A KV pool, table and allocators, with slots handed out in a shuffled (scattered) order."""

    def __init__(self, model, num_slots: int = 512, max_reqs: int = 8, max_len: int = 128,
                 device: str = "cpu") -> None:
        c = model.config
        self.model, self.device = model, device
        dtype = model.norm.weight.dtype  # the compute dtype (a GGUF model has no float embedding)
        self.pool = KVPool(num_slots, c.num_layers, c.num_kv_heads, c.head_dim, dtype, device)
        self.table = ReqToTokenTable(max_reqs, max_len, device)
        self.slots = SlotAllocator(num_slots)
        self.rows = ReqSlotAllocator(max_reqs)
        everything = self.slots.alloc(self.slots.num_free)
        random.Random(0).shuffle(everything)
        self.slots.free(everything)

    def run(self, rows: list[int], prefix_lens: list[int], new_ids: list[list[int]], all_logits: bool = True,
            is_decode: bool = False, table_writes=()) -> torch.Tensor:
        extend_lens = [len(ids) for ids in new_ids]
        num_tokens = sum(extend_lens)
        spec = BatchSpec(
            is_decode=is_decode, req_pool_indices=rows, input_ids=[t for ids in new_ids for t in ids],
            prefix_lens=prefix_lens, extend_lens=extend_lens, out_cache_loc=self.slots.alloc(num_tokens),
            logits_indices=list(range(num_tokens)) if all_logits else BatchSpec.last_token_indices(extend_lens),
            table_writes=list(table_writes))
        logits = self.model.forward(ForwardBatch.from_spec(spec, self.table, self.device), self.pool)
        assert logits.dtype == torch.float32
        assert logits.shape == (len(spec.logits_indices), self.model.config.vocab_size)
        return logits


def prompts(vocab: int, lens: list[int], seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lens]


def assert_close(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert ours.shape == ref.shape
    diff = (ours - ref).abs().max().item()
    assert diff <= ATOL, f"max abs logit diff {diff:.3g} > {ATOL}"


def test_single_prompt(models):
    ours, ref = models
    (ids,) = prompts(ours.config.vocab_size, [19])
    logits = Paged(ours).run([0], [0], [ids])
    assert_close(logits, hf_logits(ref, ids))
    logits[:, 0] = float("-inf")  # the sampler masks returned logits in place


def test_ragged_batch_of_three(models):
    ours, ref = models
    batch = prompts(ours.config.vocab_size, [5, 23, 11])
    logits = Paged(ours).run([0, 1, 2], [0, 0, 0], batch)
    start = 0
    for ids in batch:
        assert_close(logits[start:start + len(ids)], hf_logits(ref, ids))
        start += len(ids)
    # Last-token-only logits are the same rows.
    last = Paged(ours).run([2, 0, 1], [0, 0, 0], batch, all_logits=False)
    assert_close(last, torch.stack([hf_logits(ref, ids)[-1] for ids in batch]))


@pytest.mark.parametrize("num_chunks", [2, 5])
def test_chunked_prefill(models, num_chunks):
    ours, ref = models
    (ids,) = prompts(ours.config.vocab_size, [31], seed=num_chunks)
    cuts = sorted(random.Random(num_chunks).sample(range(1, len(ids)), num_chunks - 1))
    bounds = [0, *cuts, len(ids)]
    paged, expected = Paged(ours), hf_logits(ref, ids)
    for lo, hi in zip(bounds, bounds[1:]):
        # each chunk attends to the previous chunks through the pool
        assert_close(paged.run([3], [lo], [ids[lo:hi]]), expected[lo:hi])


def test_shared_prefix_via_table_writes(models):
    """A new request reuses another's cached prefix slots (the radix-cache path)."""
    ours, ref = models
    prefix, tail_a, tail_b = prompts(ours.config.vocab_size, [12, 4, 7], seed=7)
    paged = Paged(ours)
    paged.run([0], [0], [prefix + tail_a])
    cached = paged.table.read(0, len(prefix))
    logits = paged.run([1], [len(prefix)], [tail_b], table_writes=[(1, 0, cached)])
    assert_close(logits, hf_logits(ref, prefix + tail_b)[len(prefix):])


def test_decode_twenty_steps_batch_of_four(models):
    ours, ref = models
    seqs = prompts(ours.config.vocab_size, [3, 14, 6, 9], seed=3)
    paged = Paged(ours)
    rows = [4, 0, 6, 2]
    logits = paged.run(rows, [0] * 4, seqs, all_logits=False)
    step_logits = [logits]
    for _ in range(20):
        next_ids = step_logits[-1].argmax(dim=-1).tolist()
        prefix_lens = [len(s) for s in seqs]
        for seq, tok in zip(seqs, next_ids):
            seq.append(tok)
        step_logits.append(paged.run(rows, prefix_lens, [[t] for t in next_ids], is_decode=True))
    ours_steps = torch.stack(step_logits, dim=1)  # [4, 21, vocab]: prefill's last row, then 20 decodes
    for i, seq in enumerate(seqs):
        assert_close(ours_steps[i], hf_logits(ref, seq)[-21:])


@pytest.mark.parametrize("name, device, expected", [("auto", "cpu", "torch"), ("torch", "cpu", "torch")])
def test_resolve_attention_backend(name, device, expected):
    assert resolve_attention_backend(name, device) == expected


def test_resolve_attention_backend_rejects_unknown():
    with pytest.raises(ValueError, match="attention_backend"):
        resolve_attention_backend("flashinfer", "cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_default_dtype_and_backend_match_cpu(checkpoint):
    """On CUDA: dtype auto -> bfloat16, backend auto -> triton; logits track the float32 CPU run."""
    path = checkpoint("llama", "tiny")
    gpu, _ = load_model(path, device="cuda")
    assert gpu.embed_tokens.dtype == torch.bfloat16 and resolve_attention_backend("auto", "cuda") == "triton"
    cpu, _ = load_model(path, dtype="float32", device="cpu")
    batch = prompts(cpu.config.vocab_size, [5, 23, 11])
    cpu_paged, gpu_paged = Paged(cpu), Paged(gpu, device="cuda")
    expected = cpu_paged.run([0, 1, 2], [0, 0, 0], batch, all_logits=False)
    logits = gpu_paged.run([0, 1, 2], [0, 0, 0], batch, all_logits=False).cpu()
    for _ in range(3):  # decode steps exercise decode_attention
        step = [[t] for t in expected.argmax(-1).tolist()]
        prefix_lens = [len(ids) for ids in batch]
        batch = [ids + t for ids, t in zip(batch, step)]
        expected = torch.cat([expected, cpu_paged.run([0, 1, 2], prefix_lens, step, is_decode=True)])
        logits = torch.cat([logits, gpu_paged.run([0, 1, 2], prefix_lens, step, is_decode=True).cpu()])
    scale = expected.abs().max().item()
    assert (logits - expected).abs().max().item() < 0.05 * scale  # bfloat16 weights and activations
    assert (logits.argmax(-1) == expected.argmax(-1)).float().mean().item() > 0.9
