"""The native int8-weight GEMVs (``csrc/gemv_int8.c``) and the fused decode layer with int8 weights,
against the torch reference ``F.linear(x, q.float()) * scale``, and ``--quantization int8`` with the
native kernels against the same model on the torch ops.

Tolerances: past 8 rows (or below 32 features) the int8 values convert to float32 exactly and the
sums are float32 in 8 lanes (another order than MKL's), so results agree to ~1e-5 relative, as the
float32 kernels do. At 1-8 rows the activations are quantized per row to int16 and the dot products
are exact integer sums: against the float reference the error is that rounding (X16_RTOL), and
against the same quantization done here it is float32 rounding.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from native_checks import assert_rel_close as _close
from native_checks import decode_logits
from radixlm.kernels import cpu_native
from radixlm.runtime.model.quantization import Int8Linear, int8_linear, quantize_int8

pytestmark = pytest.mark.skipif(cpu_native._unsupported_reason() is not None,
                                reason=f"no native CPU kernels here: {cpu_native._unsupported_reason()}")
GREEDY = {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 10}


@pytest.fixture(scope="module", autouse=True)
def native():
    assert cpu_native.available(), "the native kernels must build on an AVX2 Linux machine with a C compiler"


def _quantized(out_f: int, in_f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_int8(torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(seed)))


X16_RTOL = 1e-4  # int16 activations: each off by <= 0.5 / 32767 of its row's largest |x|


def _x16(rows: int, in_features: int) -> bool:
    """Whether the kernels quantize these activations to int16 (csrc/gemv_int8.c: X16_*)."""
    return rows <= 8 and in_features >= 32


def _x16_rows(x: torch.Tensor) -> torch.Tensor:
    """x as the kernels' int16 rows read it, dequantized: round(x * qmax / amax) * amax / qmax per row,
    qmax = 32767 or less so that no int32 lane of the dot products can overflow."""
    k16 = (x.shape[1] + 15) // 16 * 16
    qmax = min(32767, (2**31 - 1) // (254 * (k16 // 16)))
    amax = x.abs().amax(dim=1, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(float(qmax)) / amax, torch.zeros_like(amax))
    return torch.round(x * inv).double() * (amax.double() / qmax)


# K: a multiple of 8 and not (the scalar tail); N: around the 8-row tiles and the 24-row blocks
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 13])
@pytest.mark.parametrize("out_features,in_features", [(256, 64), (37, 100), (1030, 12), (5, 7), (49, 1031)])
def test_linear_int8_matches_reference(rows, out_features, in_features):
    q, scale = _quantized(out_features, in_features, rows + out_features)
    gen = torch.Generator().manual_seed(in_features)
    x = torch.randn(rows, in_features, generator=gen)
    bias, add = torch.randn(out_features, generator=gen), torch.randn(rows, out_features, generator=gen)
    ref = F.linear(x, q.float()) * scale
    rtol = X16_RTOL if _x16(rows, in_features) else 2e-5
    _close(cpu_native.linear_int8(x, q, scale), ref, rtol)
    _close(cpu_native.linear_int8(x, q, scale, bias, add), ref + bias + add, rtol)
    if _x16(rows, in_features):  # exact integer sums: float32 rounding away from the same quantization
        ref16 = (F.linear(_x16_rows(x), q.double()) * scale.double()).float()
        _close(cpu_native.linear_int8(x, q, scale), ref16, 1e-6)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("inter,hidden", [(96, 64), (35, 40), (1, 8), (7, 21)])
def test_gate_up_silu_int8_matches_reference(rows, inter, hidden):
    q, scale = _quantized(2 * inter, hidden, rows + inter)
    x = torch.randn(rows, hidden, generator=torch.Generator().manual_seed(hidden))
    gate, up = (F.linear(x, q.float()) * scale).split(inter, dim=-1)
    _close(cpu_native.gate_up_silu_int8(x, q, scale), F.silu(gate) * up, X16_RTOL if _x16(rows, hidden) else 2e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_int8_linear_takes_the_native_gemv_for_float32_rows(bias, monkeypatch):
    q, scale = _quantized(40, 72, 3)
    b = torch.randn(40) if bias else None
    calls = []
    fn = cpu_native.linear_int8
    monkeypatch.setattr(cpu_native, "linear_int8", lambda *a: calls.append(a[0].shape[0]) or fn(*a))
    wide = torch.randn(3, 80)[:, 4:76]  # strided rows: made contiguous first
    for x in (torch.randn(1, 72), torch.randn(64, 72), wide, torch.randn(65, 72)):
        ref = F.linear(x, q.float()) * scale + (0 if b is None else b)
        _close(int8_linear(x, q, scale, b), ref, X16_RTOL if _x16(x.shape[0], 72) else 2e-5)
    assert calls == [1, 64, 3]  # 65 rows: past NATIVE_MAX_ROWS, the torch path
    with cpu_native.torch_only():
        int8_linear(torch.randn(2, 72), q, scale, b)
    assert calls == [1, 64, 3]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])  # qwen2: q/k/v biases; qwen3: q/k norms
def test_int8_model_decode_native_matches_torch_path(arch, checkpoint, monkeypatch):
    from radixlm.runtime.model.model_loader import load_model

    calls = []  # (kernel, its weight's data pointer)
    for name in ("decode_layer", "linear_int8"):
        fn = getattr(cpu_native, name)
        monkeypatch.setattr(cpu_native, name, lambda *a, _fn=fn, _name=name: calls.append(
            (_name, a[1].data_ptr() if _name == "linear_int8" else None)) or _fn(*a))
    model, cfg = load_model(checkpoint(arch, "tiny"), "float32", "cpu", quantization="int8")
    assert isinstance(model.layers[0].o_proj, Int8Linear)
    native = decode_logits(model, cfg, native=True)
    params = model.native.params(model.layers[0])
    assert params.s_qkv and params.s_down  # the layer ran on int8 weights
    assert calls.count(("decode_layer", None)) == 3 * cfg.num_layers  # 3 decode steps, every layer fused
    # the int8 LM head: the prefill's and every decode step's
    assert calls.count(("linear_int8", model.quantized_lm_head.qweight.data_ptr())) == 4
    _close(native, decode_logits(model, cfg, native=False), rtol=1e-4)


@pytest.fixture
def keep_log_level():
    """Engine(log_level=...) sets the "radixlm" logger's level: restore it for the tests after."""
    logger = logging.getLogger("radixlm")
    level = logger.level
    yield
    logger.setLevel(level)


def test_engine_int8_greedy_native_equals_torch_ops(tiny_llama, keep_log_level):
    from radixlm import Engine

    prompts = ["The keeper climbed the stairs of the old lighthouse", "Once upon a time, in a village by the sea,"]
    outs = []
    for native in (True, False):
        with nullcontext() if native else cpu_native.torch_only():
            # float32 KV in both (auto would pick float16 for the native engine only): float32-order
            # differences between the paths must not become float16 ulps of stored keys
            engine = Engine(tiny_llama, quantization="int8", max_total_tokens=1024, log_level="error",
                            kv_cache_dtype="float32")
            try:
                outs.append([o["output_ids"] for o in engine.generate(prompts, sampling_params=GREEDY)])
            finally:
                engine.shutdown()
    assert outs[0] == outs[1] and all(len(o) == GREEDY["max_new_tokens"] for o in outs[0])
