"""The GGUF block matmul (``kernels/gguf_blocks``) against its reference: the ``gguf`` package's
dequantization and a torch matmul, for every supported type, each ISA path this CPU runs
(scalar, AVX2, AVX-512 VNNI) and batches 1 to 64 (decode rows, row tiles, 16-row VNNI panels).

Tolerances. The quantized types quantize each activation row to int8 blocks of 32 (``q = round(x /
dx)``, ``dx = max|x| / 127`` of the block) and sum the products exactly in int32, so:
- against the reference run on those same quantized activations (``quantize_activations``) the
  result agrees to float32 rounding (``FLOAT_RTOL`` of the output's largest magnitude);
- against the reference on ``x`` itself, each activation is off by at most ``dx / 2 = max|x_block| /
  254``, so each output is off by at most ``sum_k |W[n, k]| * max|x_block(k)| / 254`` (``act_bound``),
  checked element by element (plus float32 rounding).
The float types (F32, F16, BF16) multiply float32 activations: float32 rounding only.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, quants
from native_checks import assert_rel_close
from radixlm.kernels import cpu_native, gguf_blocks_native
from radixlm.kernels.gguf_blocks import SUPPORTED_TYPES, BlockWeight, block_linear, block_rows, dequantize
from radixlm.kernels.gguf_blocks_ref import block_linear_ref
from real_models import QWEN_CODER, real_gguf_file

T = GGMLQuantizationType
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
QUANTIZABLE = (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1)  # gguf.quants.quantize writes these
K_TYPES = (T.Q4_K, T.Q5_K, T.Q6_K)  # random blocks with finite fp16 scales (gguf cannot quantize them)
FP16_FIELDS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}  # d (and dmin) byte offsets in a block
FLOAT_RTOL = 1e-5
BATCHES = (1, 2, 3, 4, 8, 17, 64)  # up to 16: the decode rows (csrc/gguf_decode.c, gguf_decode_k.c); more: tiles, panels
ALL_TYPES = FLOAT_TYPES + QUANTIZABLE + K_TYPES


def _isas() -> list[str]:
    if not gguf_blocks_native.available():
        return []
    return gguf_blocks_native.machine_isas()


ISAS = _isas()
needs_native = pytest.mark.skipif(not ISAS, reason=f"no native CPU kernels here: {cpu_native.unavailable_reason()}")


def random_k_blocks(qtype: T, out_f: int, in_f: int, seed: int) -> BlockWeight:
    """Random bytes for every field, the fp16 scales set to small finite values."""
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (out_f, in_f // block, size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        scales = rng.uniform(1e-3, 1e-2, raw.shape[:2]).astype(np.float16)
        raw[..., off:off + 2] = scales.view(np.uint8).reshape(*raw.shape[:2], 2)
    return BlockWeight(int(qtype), torch.from_numpy(raw.reshape(out_f, -1).copy()), (out_f, in_f))


def make_weight(qtype: T, out_f: int = 37, seed: int = 0) -> BlockWeight:
    """37 rows (a partial tile); in_features 72 for float types (not a multiple of 16), 96 for 32-blocks
    (not a multiple of 64), 512 for K-quants."""
    if qtype in K_TYPES:
        return random_k_blocks(qtype, out_f, 512, seed)
    in_f = 72 if qtype in FLOAT_TYPES else 96
    return BlockWeight.from_float(torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(seed)), int(qtype))


def act_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per output, the largest error int8 activation blocks of 32 can cause: |W| @ (max|x_block| / 254)."""
    blocks = x.abs().reshape(x.shape[0], -1, 32).amax(-1, keepdim=True)
    return (blocks.expand(-1, -1, 32).reshape(x.shape) / 254.0) @ w.abs().T


@needs_native
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ISAS)
def test_block_linear_matches_reference(qtype: T, isa: str) -> None:
    w = make_weight(qtype)
    dense = dequantize(w)
    gen = torch.Generator().manual_seed(1)
    for m in BATCHES:
        x = torch.randn(m, w.shape[1], generator=gen)
        with gguf_blocks_native.forced_isa(isa):
            y = block_linear(x, w)
        ref = block_linear_ref(x, w)
        if qtype in FLOAT_TYPES:
            assert_rel_close(y, ref, FLOAT_RTOL)
            continue
        assert_rel_close(y, block_linear_ref(gguf_blocks_native.quantize_activations(x), w), FLOAT_RTOL)
        slack = FLOAT_RTOL * ref.abs().max()
        assert ((y - ref).abs() <= act_bound(x, dense) * 1.0001 + slack).all(), f"batch {m}: beyond the int8 bound"


@needs_native
@pytest.mark.parametrize("qtype", QUANTIZABLE + K_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", [i for i in ISAS if i != "scalar"])
def test_a_row_does_not_depend_on_the_rows_beside_it(qtype: T, isa: str) -> None:
    """Up to 16 rows, each row's result is the one-row result bit for bit (the decode kernels meet
    each decoded weight block with 1, 2, 4 or 8 rows, each summed alone): a verify step's rows give
    the logits one token a step gives, whatever else is in the batch."""
    w = make_weight(qtype)
    x = torch.randn(16, w.shape[1], generator=torch.Generator().manual_seed(3))
    with gguf_blocks_native.forced_isa(isa):
        alone = torch.cat([block_linear(x[i:i + 1], w) for i in range(16)])
        for m in (2, 3, 5, 9, 16):
            assert torch.equal(block_linear(x[:m], w), alone[:m]), f"{m} rows"


@needs_native
@pytest.mark.parametrize("isa", ISAS)
def test_bias_leading_dims_and_zero_rows(isa: str) -> None:
    w = make_weight(T.Q5_0, out_f=9)
    bias = torch.randn(9)
    x = torch.randn(2, 3, 96)
    x[1, 2] = 0.0  # a zero row: dx = 0, output = bias exactly
    with gguf_blocks_native.forced_isa(isa):
        y = block_linear(x, w, bias)
    assert y.shape == (2, 3, 9)
    assert torch.equal(y[1, 2], bias)
    ref = block_linear_ref(gguf_blocks_native.quantize_activations(x.reshape(6, 96)), w, bias).reshape(2, 3, 9)
    assert_rel_close(y, ref, FLOAT_RTOL)
    assert block_linear(torch.empty(0, 96), w).shape == (0, 9)


@needs_native
@pytest.mark.parametrize("qtype", QUANTIZABLE + K_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_unpacked_rows_are_the_gguf_values(qtype: T, isa: str) -> None:
    """The kernels' view of a row, ws * u + c per group of 16, equals gguf's dequantization."""
    w = make_weight(qtype)
    dense = dequantize(w)
    with gguf_blocks_native.forced_isa(isa):
        for row in (0, 36):
            u, ws, c = gguf_blocks_native.unpack_row(w, row)
            values = ws.repeat_interleave(16) * u.float() + c.repeat_interleave(16)
            torch.testing.assert_close(values, dense[row], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_block_rows_and_dequantize_equal_gguf(qtype: T) -> None:
    w = make_weight(qtype)
    full = quants.dequantize(w.data.numpy(), qtype).reshape(w.shape)
    assert torch.equal(dequantize(w), torch.from_numpy(np.ascontiguousarray(full, dtype=np.float32)))
    ids = torch.tensor([[3, 0], [36, 3]])
    assert torch.equal(block_rows(w, ids), dequantize(w)[ids.reshape(-1)])


def test_bad_inputs_raise_precise_errors() -> None:
    w = make_weight(T.Q8_0, out_f=4)
    with pytest.raises(ValueError, match="x must be"):
        block_linear(torch.randn(2, 95), w)
    with pytest.raises(TypeError, match="float32"):
        block_linear(torch.randn(2, 96, dtype=torch.float64), w)
    with pytest.raises(ValueError, match="bias"):
        block_linear(torch.randn(2, 96), w, torch.zeros(5))
    with pytest.raises(IndexError, match="ids: 4"):
        block_rows(w, torch.tensor([0, 4]))
    with pytest.raises(TypeError, match="ids"):
        block_rows(w, torch.tensor([0.5]))
    with pytest.raises(ValueError, match="Q2_K is not supported"):
        BlockWeight(int(T.Q2_K), w.data, w.shape)
    with pytest.raises(ValueError, match="multiple of Q4_K's block of 256"):
        BlockWeight(int(T.Q4_K), w.data, (4, 96))
    with pytest.raises(ValueError, match=r"data must be \(4, 102\) bytes"):
        BlockWeight(int(T.Q8_0), w.data[:, :100].contiguous(), w.shape)
    with pytest.raises(TypeError, match="uint8"):
        BlockWeight(int(T.Q8_0), w.data.to(torch.int16), w.shape)
    assert int(T.Q2_K) not in SUPPORTED_TYPES


@needs_native
def test_isa_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gguf_blocks_native.ISA_ENV, "scalar")
    assert gguf_blocks_native.isa() == "scalar"
    with gguf_blocks_native.forced_isa("avx2"):
        assert gguf_blocks_native.isa() == "avx2"
    monkeypatch.setenv(gguf_blocks_native.ISA_ENV, "sse")
    with pytest.raises(ValueError, match="RADIXLM_GGUF_ISA"):
        gguf_blocks_native.isa()
    monkeypatch.delenv(gguf_blocks_native.ISA_ENV)
    assert gguf_blocks_native.isa() == gguf_blocks_native.best_isa()


def test_reference_path_without_native_kernels() -> None:
    """With the native kernels switched off, block_linear is the reference itself."""
    w = make_weight(T.Q4_0, out_f=5)
    x = torch.randn(2, 96)
    with cpu_native.torch_only():
        assert torch.equal(block_linear(x, w), block_linear_ref(x, w))


@pytest.fixture(scope="module")
def qwen_reader() -> GGUFReader:
    return GGUFReader(real_gguf_file(QWEN_CODER))


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize(("name", "type_name"), [("blk.0.attn_q.weight", "Q5_0"), ("blk.11.ffn_down.weight", "Q4_K"),
                                                ("blk.0.ffn_down.weight", "Q6_K"), ("output.weight", "Q8_0")])
def test_real_qwen_tensors(qwen_reader: GGUFReader, name: str, type_name: str) -> None:
    """A Q5_0, a Q4_K, a Q6_K and a Q8_0 tensor of the real Qwen2.5-Coder file (its first 64 rows)."""
    tensor = next(t for t in qwen_reader.tensors if t.name == name)
    in_f = int(tensor.shape[0])
    raw = np.asarray(tensor.data).view(np.uint8).reshape(int(tensor.shape[1]), -1)[:64]
    w = BlockWeight(int(tensor.tensor_type), torch.from_numpy(raw.copy()), (64, in_f))
    assert w.type_name == type_name
    x = torch.randn(5, in_f, generator=torch.Generator().manual_seed(2))
    ref_q = block_linear_ref(gguf_blocks_native.quantize_activations(x), w)
    for isa in ISAS:
        with gguf_blocks_native.forced_isa(isa):
            assert_rel_close(block_linear(x, w), ref_q, FLOAT_RTOL)
