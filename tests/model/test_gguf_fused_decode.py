"""The fused native decode layer (``cpu_native.decode_layer``) on GGUF block weights.

A decode step of a GGUF model runs each layer as one native call whose projections are the
``BlockLinear`` parts (``LayerParams.blocks``: fused q/k/v and gate/up of two block types each, Qwen2's
q/k/v biases, the o/down residual adds). Its logits must equal the per-op path's (the same block
kernels between torch ops) to float32 rounding, for a batch of one and of several requests.
"""

from __future__ import annotations

import pytest
import torch
from gguf_files import MIXED, write_gguf
from radixlm.kernels import gguf_blocks_native
from radixlm.runtime.model.block_linear import BlockLinear, native_blocks
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.scheduler.batch import BatchSpec

pytestmark = pytest.mark.skipif(not gguf_blocks_native.available(), reason="native block kernels unavailable")
MAX_REL = 1e-4  # of the largest |logit|: float32 rounding (summation order of bias, residual, SiLU)


def _decode_logits(model, lens: list[int], fused: bool) -> torch.Tensor:
    """Prefill requests of ``lens`` tokens, then one decode step (fused layers or per-op) -> its logits."""
    c, bs, total = model.config, len(lens), sum(lens)
    pool = KVPool(total + bs + 1, c.num_layers, model.num_kv_heads, c.head_dim, torch.float32, "cpu")
    table = ReqToTokenTable(bs, max(lens) + 2, "cpu")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, c.vocab_size, (total,), generator=gen).tolist()
    prefill = BatchSpec(False, list(range(bs)), ids, [0] * bs, lens, list(range(1, total + 1)),
                        BatchSpec.last_token_indices(lens))
    next_ids = model.forward(ForwardBatch.from_spec(prefill, table, "cpu"), pool).argmax(-1).tolist()
    decode = BatchSpec(True, list(range(bs)), next_ids, lens, [1] * bs, list(range(total + 1, total + 1 + bs)),
                       list(range(bs)))
    batch = ForwardBatch.from_spec(decode, table, "cpu")
    if fused:
        assert model.native.step(batch, torch.empty(bs, c.hidden_size), *model.rotary.cos_sin(
            batch.positions, torch.float32), pool, 1) is not None
        return model.forward(batch, pool)
    model.native.step = lambda *args: None  # the per-op path: BlockLinear between torch ops
    try:
        return model.forward(batch, pool)
    finally:
        del model.native.step  # the class's method again


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fused_decode_layer_equals_the_per_op_path(checkpoint, tmp_path, arch):
    model, _ = load_model(str(write_gguf(checkpoint(arch, "tiny"), tmp_path / "model.gguf", MIXED)))
    layer = model.layers[0]
    assert isinstance(layer.qkv_proj, BlockLinear) and len(layer.qkv_proj.parts) == 2
    params = model.native.params(layer)
    assert params is not None  # the layers take the fused path
    assert params.blocks[0].parts == 2 and params.blocks[3].parts == 1
    for lens in ([7], [5, 9, 3]):
        fused, per_op = _decode_logits(model, lens, True), _decode_logits(model, lens, False)
        assert fused.shape == per_op.shape == (len(lens), model.config.vocab_size)
        err = (fused - per_op).abs().max().item()
        assert err <= MAX_REL * per_op.abs().max().item(), (lens, err)
        assert torch.equal(fused.argmax(-1), per_op.argmax(-1))


def test_native_blocks_declines_what_the_fused_layer_cannot_take(checkpoint, tmp_path):
    model, _ = load_model(str(write_gguf(checkpoint("llama", "tiny"), tmp_path / "model.gguf", MIXED)))
    proj = model.layers[0].qkv_proj
    assert native_blocks(model.layers[0].input_layernorm) is None  # not a BlockLinear
    four = BlockLinear([*proj.parts, *proj.parts])  # more parts than the fused layer holds
    assert native_blocks(four) is None
    blocks = native_blocks(proj)
    assert [blocks.rows[i] for i in range(2)] == [p.shape[0] for p in proj.parts]
    assert [blocks.qtype[i] for i in range(2)] == [p.qtype for p in proj.parts]


@pytest.mark.parametrize("rows", [1, 5, 70])
def test_block_linear_with_residual_equals_its_parts(checkpoint, tmp_path, rows):
    """``BlockLinear(x, add)`` (one native call over the parts, bias and residual fused) equals the parts'
    own matmuls side by side, plus the bias, plus the residual."""
    model, _ = load_model(str(write_gguf(checkpoint("qwen2", "tiny"), tmp_path / "model.gguf", MIXED)))
    proj = model.layers[0].qkv_proj
    assert len(proj.parts) == 2 and proj.bias is not None
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(rows, proj.in_features, generator=gen)
    residual = torch.randn(rows, proj.out_features, generator=gen)
    want = torch.cat([gguf_blocks_native.linear(x, p) for p in proj.parts], dim=-1) + proj.bias
    torch.testing.assert_close(proj(x), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(proj(x, residual), residual + want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(proj(x.view(1, rows, -1)), want.view(1, rows, -1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5, 70])
def test_block_gate_up_silu_equals_split_silu_times_up(checkpoint, tmp_path, rows):
    model, _ = load_model(str(write_gguf(checkpoint("llama", "tiny"), tmp_path / "model.gguf", MIXED)))
    proj = model.layers[0].gate_up_proj
    assert len(proj.parts) == 2
    x = torch.randn(rows, proj.in_features, generator=torch.Generator().manual_seed(3))
    gate, up = proj(x).split(proj.out_features // 2, dim=-1)
    torch.testing.assert_close(proj.gate_up_silu(x), torch.nn.functional.silu(gate) * up, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 9])
def test_gate_up_silu_with_a_part_across_the_halves(checkpoint, tmp_path, rows):
    """Parts of a gate/up stack whose middle one holds rows of both halves: the native call goes through
    its [T, 2I] scratch and still equals silu(first half) * (second half)."""
    model, _ = load_model(str(write_gguf(checkpoint("llama", "tiny"), tmp_path / "model.gguf", MIXED)))
    w = model.layers[0].gate_up_proj.parts[0]
    n = w.shape[0]
    assert n % 4 == 0

    def piece(a: int, b: int):
        return type(w)(w.qtype, w.data[a:b].contiguous(), (b - a, w.shape[1]))

    proj = BlockLinear([piece(0, n // 4), piece(n // 4, 3 * n // 4), piece(3 * n // 4, n)])
    assert native_blocks(proj) is not None
    x = torch.randn(rows, proj.in_features, generator=torch.Generator().manual_seed(4))
    g, u = proj(x).split(n // 2, dim=-1)
    torch.testing.assert_close(proj.gate_up_silu(x), torch.nn.functional.silu(g) * u, rtol=1e-5, atol=1e-6)
