"""GGUF models (``--model-path FILE.gguf``): config, tokenizer and block-format weights from one file.

Each GGUF here is written from a tiny synthetic checkpoint with a mix of Q8_0, Q5_0, Q4_0, F16 and F32
tensors (``tests/gguf_files.py``); its twin is the HF checkpoint of the same weights dequantized to
float32. The GGUF model computes on the blocks (``kernels/gguf_blocks``, whose native kernels round
the activations to 8-bit blocks as llama.cpp does), the twin in float32: their logits agree within
``LOGIT_MAX_REL`` of the largest logit, hence their greedy tokens wherever the twin's top-1/top-2 gap
exceeds twice that error; the tied-head models' gaps are far wider, so their greedy outputs are equal.
Llama files have their Q/K rows permuted per head by the converter, Qwen2 files do not (and carry
q/k/v biases): both are checked.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch
from gguf_files import MIXED, write_dequantized, write_gguf
from prefill_logits import prefill_logits
from radixlm.runtime.gguf_path import GGUFPathError, gguf_file
from radixlm.runtime.model.block_linear import BlockEmbedding, BlockLinear, BlockLMHead
from radixlm.runtime.model.gguf_loader import check_gguf_options
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

# Largest |logit difference| allowed, relative to the largest |logit| of the row set (measured
# 1.5% on the tiny models: the activations' 8-bit rounding in the native block kernels).
LOGIT_MAX_REL = 0.04
AGREEMENT_FLOOR = 0.9  # top-1 agreement over all positions, small gaps included
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" \
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
PROMPTS = ["The keeper climbed the stairs of the old lighthouse", "Once upon a time, in a village by the sea,",
           "She opened the letter and read the first line:"]
GREEDY = {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 12}


@pytest.fixture(scope="module")
def twins(checkpoint, tmp_path_factory):
    """(arch, tie) -> (GGUF file, its dequantized HF twin), written once per module."""
    made: dict[tuple[str, bool], tuple[str, str]] = {}

    def get(arch: str, tie: bool = False) -> tuple[str, str]:
        if (arch, tie) not in made:
            root = tmp_path_factory.mktemp(f"gguf-{arch}-{tie}")
            src = checkpoint(arch, "tiny")
            gguf = write_gguf(src, root / "model.gguf", MIXED, tie=tie, chat_template=TEMPLATE)
            made[arch, tie] = (str(gguf), str(write_dequantized(src, root / "float", MIXED, tie=tie)))
        return made[arch, tie]

    return get


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_logits_match_the_dequantized_float32_model(twins, arch, tie):
    gguf, float_dir = twins(arch, tie)
    model, _ = load_model(gguf)
    ref, _ = load_model(float_dir, "float32")
    layer = model.layers[0]
    assert isinstance(layer.qkv_proj, BlockLinear) and isinstance(layer.down_proj, BlockLinear)
    assert [p.type_name for p in layer.qkv_proj.parts] == ["Q8_0", "Q4_0"]  # q+k joined, v apart
    assert [p.type_name for p in layer.gate_up_proj.parts] == ["Q8_0", "Q4_0"]
    assert isinstance(model.quantized_embedding, BlockEmbedding) and model.embed_tokens is None
    head = model.quantized_lm_head
    assert isinstance(head, BlockLMHead) and head.weight.type_name == ("Q8_0" if tie else "Q5_0")
    assert (head.weight is model.quantized_embedding.weight) == tie
    tok = Tokenizer(float_dir)
    agree = total = 0
    for text in PROMPTS:
        a, b = prefill_logits(model, tok.encode(text)), prefill_logits(ref, tok.encode(text))
        err = (a - b).abs().max().item()
        assert err <= LOGIT_MAX_REL * b.abs().max().item(), (text, err)
        top2 = b.topk(2, dim=-1).values
        wide = (top2[:, 0] - top2[:, 1]) > 2 * err  # there the top-1 cannot differ
        assert (a.argmax(-1) == b.argmax(-1))[wide].all()
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
    assert agree / total >= AGREEMENT_FLOOR


def test_engine_greedy_output_equals_the_dequantized_model(twins):
    from radixlm import Engine

    gguf, float_dir = twins("llama", tie=True)
    outputs = []
    for path in (gguf, float_dir):
        engine = Engine(path, max_total_tokens=1024, log_level="error")
        try:
            outputs.append([engine.generate(p, sampling_params=GREEDY)["output_ids"] for p in PROMPTS])
        finally:
            engine.shutdown()
    assert outputs[0] == outputs[1] and all(len(ids) == 12 for ids in outputs[0])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_config_round_trips(twins, arch):
    gguf, float_dir = twins(arch)
    got, want = ModelConfig.from_path(gguf), ModelConfig.from_path(float_dir)
    assert got == dataclasses.replace(want, torch_dtype=None)
    assert got.qkv_bias == (arch == "qwen2")


def test_tokenizer_and_chat_template_round_trip(twins):
    gguf, float_dir = twins("qwen2")
    ours, want = Tokenizer.from_gguf(gguf), Tokenizer(float_dir)
    for text in [*PROMPTS, "<|im_start|>user\nhi<|im_end|>", "  spaces\tand\nnewlines 123 ünïcode"]:
        assert ours.encode(text) == want.encode(text), text
    assert ours.eos_token_ids[0] == want.eos_token_ids[0] == want.hf.token_to_id("<|im_end|>")
    assert ours.bos_token_id == want.bos_token_id and ours.vocab_size == want.vocab_size
    assert ours.special_token_ids == want.special_token_ids
    messages = [{"role": "user", "content": "hi"}]
    assert ours.chat_template == TEMPLATE
    assert ours.apply_chat_template(messages) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert Tokenizer.from_gguf(gguf, chat_template="{{ messages[0].content }}!").apply_chat_template(messages) == "hi!"


def test_a_folder_with_one_gguf_is_served_from_it(twins, tmp_path):
    gguf, _ = twins("qwen2")
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(gguf, folder / "m.gguf")
    assert gguf_file(folder) == folder / "m.gguf"
    assert ModelConfig.from_path(folder) == ModelConfig.from_path(gguf)
    model, _ = load_model(folder)
    assert isinstance(model.layers[0].o_proj, BlockLinear)


@pytest.mark.unit
def test_gguf_path_dispatch(tmp_path):
    assert gguf_file(None) is None and gguf_file(tmp_path / "missing.gguf") is None
    (tmp_path / "a.gguf").write_bytes(b"")
    assert gguf_file(tmp_path / "a.gguf") == tmp_path / "a.gguf" and gguf_file(tmp_path) == tmp_path / "a.gguf"
    (tmp_path / "b.GGUF").write_bytes(b"")
    with pytest.raises(GGUFPathError, match=r"2 GGUF files \(a\.gguf, b\.GGUF\)"):
        gguf_file(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # an HF checkpoint folder stays one
    assert gguf_file(tmp_path) is None
    (tmp_path / "x.safetensors").write_bytes(b"")
    assert gguf_file(tmp_path / "x.safetensors") is None


@pytest.mark.unit
def test_options_a_gguf_model_cannot_take():
    check_gguf_options("auto", "cpu", 1, None)
    with pytest.raises(ValueError, match="quantization 'int8': a GGUF model is quantized already"):
        check_gguf_options("auto", "cpu", 1, "int8")
    with pytest.raises(ValueError, match="tp_size 2: tensor parallelism is not supported for GGUF"):
        check_gguf_options("auto", "cpu", 2, None)
    with pytest.raises(ValueError, match="device 'cuda': GGUF models run on the CPU"):
        check_gguf_options("auto", "cuda", 1, None)
    with pytest.raises(ValueError, match="dtype 'bfloat16': GGUF models compute in float32"):
        check_gguf_options("bfloat16", "cpu", 1, None)


def _tiny_file(path, arch: str, tensors: dict) -> str:
    """A GGUF with llama-style metadata under ``arch`` and ``tensors`` (name -> (array, raw type or None))."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (("context_length", 64), ("embedding_length", 32), ("block_count", 1),
                       ("feed_forward_length", 32)):
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-5)
    for name, (array, raw) in tensors.items():
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_unsupported_architecture_and_tensor_type_are_named(twins, tmp_path):
    import numpy as np

    embed = np.zeros((64, 32), dtype=np.float32)
    falcon = _tiny_file(tmp_path / "falcon.gguf", "falcon", {"token_embd.weight": (embed, None)})
    with pytest.raises(ValueError, match="GGUF architecture 'falcon' is not supported; supported: llama"):
        load_model(falcon)
    gguf, _ = twins("qwen2")
    with pytest.raises(ValueError, match="quantization 'int8'"):
        load_model(gguf, quantization="int8")


def test_unsupported_tensor_type_is_named(checkpoint, tmp_path):
    from gguf import GGMLQuantizationType as T

    path = write_gguf(checkpoint("qwen2", "tiny"), tmp_path / "q2k.gguf", {"o_proj.weight": T.Q2_K})
    with pytest.raises(ValueError, match=r"unsupported GGUF tensor type\(s\) Q2_K \(e\.g\. 'blk\.0\.attn_output"
                                         r"\.weight'\); supported: BF16, F16, F32, Q4_0"):
        load_model(path)


def test_startup_checks_name_the_gguf_problem(twins, tmp_path):
    from radixlm.startup import StartupError, check_checkpoint

    gguf, _ = twins("qwen2")
    check_checkpoint(gguf)
    shutil.copy(gguf, tmp_path / "a.gguf")
    check_checkpoint(str(tmp_path))
    shutil.copy(gguf, tmp_path / "b.gguf")
    with pytest.raises(StartupError, match=r"holds 2 GGUF files \(a\.gguf, b\.gguf\)"):
        check_checkpoint(str(tmp_path))


@pytest.mark.unit
def test_rope_freqs_factors_divide_the_frequencies():
    from radixlm.runtime.model.attention import rope_inv_freq

    factors = tuple([1.0] * 8 + [4.0] * 8)
    plain = rope_inv_freq(32, 500000.0, None)
    scaled = rope_inv_freq(32, 500000.0, {"rope_type": "freq_factors", "factors": factors})
    torch.testing.assert_close(scaled, plain / torch.tensor(factors))
    raw = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 64, "max_position_embeddings": 64, "vocab_size": 10,
           "rope_scaling": {"rope_type": "freq_factors", "factors": factors}}
    assert ModelConfig.from_dict(raw).rope_scaling == {"rope_type": "freq_factors", "factors": factors}
