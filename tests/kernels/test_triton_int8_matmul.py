"""The Triton int8 weight-only matmul (``kernels/int8_matmul.py``) against its torch reference, on the
CPU interpreter (``TRITON_INTERPRET=1``, see ``kernels/testing/interpreted.py``).

Tolerances: float32 1e-4 relative to the output's scale (the interpreter's ``tl.dot`` sums K in
blocks, the reference in one go); bfloat16 / float16: one ulp of the output's dtype at the output's
scale (the kernel rounds once, from its float32 accumulator, as the reference does).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from radixlm.kernels.int8_matmul_ref import int8_matmul_ref
from radixlm.kernels.testing.interpreted import interpreted

REL_TOL = {torch.float32: 1e-4, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def _operands(m: int, n: int, k: int, dtype: torch.dtype, bias: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) * 0.02 + 1e-3  # float32, one per output channel
    b = torch.randn(n, generator=g).to(dtype) if bias else None
    return x, w, scale, b


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    err = (got.float() - want.float()).abs().max().item()
    bound = REL_TOL[dtype] * max(want.float().abs().max().item(), 1.0)
    assert err <= bound, f"max abs error {err} > {bound}"


def test_reference_is_dequantize_then_linear():
    x, w, scale, b = _operands(5, 7, 9, torch.float32, True, seed=0)
    want = F.linear(x.double(), w.double() * scale.double()[:, None], b.double()).float()
    torch.testing.assert_close(int8_matmul_ref(x, w, scale, b), want, rtol=1e-6, atol=1e-6)


def test_reference_rejects_bad_operands():
    x, w, scale, b = _operands(2, 3, 4, torch.float32, True, seed=0)
    with pytest.raises(TypeError, match="weight must be int8"):
        int8_matmul_ref(x, w.float(), scale)
    with pytest.raises(ValueError, match="x has K=4 input features but weight has 5"):
        int8_matmul_ref(x, torch.zeros(3, 5, dtype=torch.int8), scale)
    with pytest.raises(ValueError, match=r"scale must be \[N=3\]"):
        int8_matmul_ref(x, w, scale[:2])
    with pytest.raises(ValueError, match=r"bias must be \[N=3\]"):
        int8_matmul_ref(x, w, scale, b[:1])


CASES = [  # (m, n, k, dtype, bias): odd sizes cross every block edge; m=1 is a decode step
    (1, 67, 130, torch.float32, False),
    (3, 129, 257, torch.float32, True),
    (17, 64, 64, torch.float32, True),
    (40, 33, 200, torch.float32, False),
    (70, 100, 96, torch.float32, True),
    (1, 96, 256, torch.bfloat16, True),
    (5, 71, 135, torch.bfloat16, False),
    (9, 50, 77, torch.float16, True),
]


@pytest.mark.parametrize("m,n,k,dtype,bias", CASES)
@interpreted
def test_triton_int8_matmul_matches_reference(m, n, k, dtype, bias):
    from radixlm.kernels.int8_matmul import int8_matmul

    x, w, scale, b = _operands(m, n, k, dtype, bias, seed=m * 1000 + n)
    _close(int8_matmul(x, w, scale, b), int8_matmul_ref(x, w, scale, b), dtype)


@interpreted
def test_triton_int8_matmul_strided_input_and_empty_batch():
    from radixlm.kernels.int8_matmul import int8_matmul

    x, w, scale, b = _operands(6, 40, 48, torch.float32, True, seed=7)
    wide = torch.randn(6, 100)
    wide[:, 10:58] = x
    strided = wide[:, 10:58]  # row stride 100, not K
    assert not strided.is_contiguous()
    _close(int8_matmul(strided, w, scale, b), int8_matmul_ref(x, w, scale, b), torch.float32)
    empty = int8_matmul(x[:0], w, scale, b)
    assert empty.shape == (0, 40) and empty.dtype == torch.float32


@interpreted
def test_triton_int8_matmul_checks_its_operands(monkeypatch):
    from radixlm.kernels.int8_matmul import int8_matmul

    x, w, scale, _ = _operands(2, 8, 16, torch.float32, False, seed=1)
    with pytest.raises(TypeError, match="weight must be int8"):
        int8_matmul(x, w.to(torch.int16), scale)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="triton backend needs CUDA"):
        int8_matmul(x, w, scale)


@interpreted
def test_int8_model_on_the_triton_path_matches_the_torch_path(tmp_path):
    # the CUDA code path (Triton attention + Triton int8 matmuls) against the CPU one, same weights
    from radixlm.runtime.checkpoints.synthetic import make_checkpoint
    from radixlm.runtime.model.forward_batch import ForwardBatch
    from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
    from radixlm.runtime.model.model_loader import load_model
    from radixlm.runtime.scheduler.batch import BatchSpec

    path = make_checkpoint(tmp_path / "q8", "qwen2", "tiny", overrides={"num_hidden_layers": 2})  # q/k/v biases
    ids = [5, 300, 41, 977, 12, 8, 2000, 63, 77]
    logits = {}
    for backend in ("torch", "triton"):
        model, config = load_model(path, "float32", attention_backend=backend, quantization="int8")
        assert model.layers[0].qkv_proj.backend == backend == model.quantized_lm_head.backend
        pool = KVPool(16, config.num_layers, model.num_kv_heads, config.head_dim, torch.float32, "cpu")
        table = ReqToTokenTable(1, 16, "cpu")
        spec = BatchSpec(False, [0], ids, [0], [len(ids)], list(range(1, len(ids) + 1)), list(range(len(ids))))
        logits[backend] = model.forward(ForwardBatch.from_spec(spec, table, "cpu"), pool)
    scale = logits["torch"].abs().max().item()
    assert (logits["triton"] - logits["torch"]).abs().max().item() <= 1e-4 * scale
