"""Gemma 3 (text) forward over the paged KV pool vs transformers' ``Gemma3ForCausalLM`` (float32).

Tiny checkpoints written by transformers (``tests/gemma3_checkpoint.py``), prompts longer than
the window. The second checkpoint adds a final logit soft cap and linear RoPE scaling on the global layers.
"""

from __future__ import annotations

import json

import pytest
import torch
from gemma3_checkpoint import TINY, WINDOW, write_gemma3_checkpoint
from radixlm.runtime.model.gemma3 import Gemma3ForCausalLM
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_loader import load_model
from test_forward_vs_transformers import Paged, assert_close, hf_logits, prompts
from transformers import AutoModelForCausalLM

VARIANTS = {
    "plain": {},
    "softcap-scaled": {"final_logit_softcapping": 30.0,
                       "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                              "rope_theta": 1_000_000.0},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}},
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def models(request, tmp_path_factory):
    """(our model, transformers' model) from one transformers-written checkpoint."""
    path = tmp_path_factory.mktemp(f"gemma3-{request.param}")
    write_gemma3_checkpoint(path, VARIANTS[request.param])
    ours, config = load_model(path, dtype="float32", device="cpu", attention_backend="torch")
    assert isinstance(ours, Gemma3ForCausalLM) and config.architecture == "Gemma3ForCausalLM"
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    return ours, ref


def test_prompt_longer_than_the_window(models):
    ours, ref = models
    (ids,) = prompts(ours.config.vocab_size, [29])
    assert_close(Paged(ours).run([0], [0], [ids]), hf_logits(ref, ids))


def test_ragged_batch_and_chunked_prefill(models):
    ours, ref = models
    batch = prompts(ours.config.vocab_size, [5, 23, 12], seed=2)
    logits, start = Paged(ours).run([0, 1, 2], [0, 0, 0], batch), 0
    for ids in batch:
        assert_close(logits[start:start + len(ids)], hf_logits(ref, ids))
        start += len(ids)
    (ids,) = prompts(ours.config.vocab_size, [31], seed=5)
    paged, expected = Paged(ours), hf_logits(ref, ids)
    for lo, hi in [(0, 3), (3, 14), (14, 15), (15, 31)]:  # chunks shorter and longer than the window
        assert_close(paged.run([3], [lo], [ids[lo:hi]]), expected[lo:hi])


def test_cached_prefix_longer_than_the_window(models):
    """A second request extends another's cached 20-token prefix (the radix-cache path)."""
    ours, ref = models
    prefix, tail_a, tail_b = prompts(ours.config.vocab_size, [20, 4, 11], seed=7)
    paged = Paged(ours)
    paged.run([0], [0], [prefix + tail_a])
    cached = paged.table.read(0, len(prefix))
    logits = paged.run([1], [len(prefix)], [tail_b], table_writes=[(1, 0, cached)])
    assert_close(logits, hf_logits(ref, prefix + tail_b)[len(prefix):])


def test_greedy_decode_matches_transformers(models):
    """Twenty greedy decode steps for a batch of three: logits and the tokens equal transformers'."""
    ours, ref = models
    seqs = prompts(ours.config.vocab_size, [3, 14, 9], seed=3)
    starts = [list(s) for s in seqs]
    paged, rows = Paged(ours), [4, 0, 2]
    step_logits = [paged.run(rows, [0] * 3, seqs, all_logits=False)]
    for _ in range(20):
        next_ids = step_logits[-1].argmax(dim=-1).tolist()
        prefix_lens = [len(s) for s in seqs]
        for seq, tok in zip(seqs, next_ids):
            seq.append(tok)
        step_logits.append(paged.run(rows, prefix_lens, [[t] for t in next_ids], is_decode=True))
    ours_steps = torch.stack(step_logits, dim=1)  # [3, 21, vocab]
    for i, seq in enumerate(seqs):
        assert_close(ours_steps[i], hf_logits(ref, seq)[-21:])
        with torch.no_grad():
            hf_greedy = ref.generate(torch.tensor([starts[i]]), max_new_tokens=20, do_sample=False,
                                     min_new_tokens=20)[0].tolist()
        assert seq == hf_greedy


def test_config_forms(tmp_path):
    """4.x fields (pattern, local base), a multimodal ``text_config`` with defaults, and refusals."""
    old = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], **TINY, "num_hidden_layers": 7,
           "sliding_window_pattern": 3, "rope_theta": 500_000.0, "rope_local_base_freq": 20_000.0,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "hidden_activation": "gelu_pytorch_tanh"}
    del old["layer_types"]
    c = ModelConfig.from_dict(old)
    assert [t == "full_attention" for t in c.layer_types] == [False, False, True, False, False, True, False]
    assert (c.rope_theta, c.local_rope_theta, c.rope_scaling) == (500_000.0, 20_000.0,
                                                                  {"rope_type": "linear", "factor": 8.0})
    assert c.context_len == 256 and c.sliding_window == WINDOW and c.attention_scale == 24 ** -0.5
    mm = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
          "text_config": {"hidden_size": 2560, "num_hidden_layers": 34, "sliding_window": 1024,
                          "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}}
    c = ModelConfig.from_dict(mm)
    assert c.architecture == "Gemma3ForConditionalGeneration" and c.num_heads == 8 and c.head_dim == 256
    assert c.layer_types.count("full_attention") == 5 and c.vocab_size == 262_208 and c.tie_word_embeddings
    (tmp_path / "config.json").write_text(json.dumps({**old, "hidden_activation": "relu"}))
    with pytest.raises(ValueError, match="hidden_activation 'relu'"):
        ModelConfig.from_path(tmp_path)
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        ModelConfig.from_dict({**old, "attn_logit_softcapping": 50.0})


@pytest.mark.parametrize("prefix", ["model.language_model.", "language_model.model."])
def test_multimodal_checkpoint_loads_its_text_model(tmp_path, prefix):
    """A ``Gemma3ForConditionalGeneration`` folder (either transformers layout): the language model's
    tensors are renamed, the vision tower's skipped; the logits are the text model's."""
    from safetensors.torch import load_file, save_file

    text_dir = write_gemma3_checkpoint(tmp_path / "text", {})
    weights = {prefix + k.removeprefix("model."): v for k, v in load_file(text_dir / "model.safetensors").items()}
    weights["model.vision_tower.vision_model.post_layernorm.weight" if prefix.startswith("model.")
            else "vision_tower.vision_model.post_layernorm.weight"] = torch.ones(8)
    mm_dir = tmp_path / "mm"
    mm_dir.mkdir()
    save_file(weights, str(mm_dir / "model.safetensors"))
    text_config = json.loads((text_dir / "config.json").read_text())
    (mm_dir / "config.json").write_text(json.dumps({"architectures": ["Gemma3ForConditionalGeneration"],
                                                    "model_type": "gemma3", "text_config": text_config}))
    mm, config = load_model(mm_dir, dtype="float32")
    text, _ = load_model(text_dir, dtype="float32")
    assert config.architecture == "Gemma3ForConditionalGeneration" and config.layer_types == tuple(TINY["layer_types"])
    (ids,) = prompts(TINY["vocab_size"], [21], seed=9)
    assert torch.equal(Paged(mm).run([0], [0], [ids]), Paged(text).run([0], [0], [ids]))
