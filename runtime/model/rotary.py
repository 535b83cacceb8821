"""Rotary position embedding (RoPE), rotate-half layout, with ``linear`` and ``llama3`` scaling.

Frequencies follow the HF transformers formulas exactly (float32 inverse frequencies, angles
``position * inv_freq`` in float32) so logits match the reference implementation.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def rope_inv_freq(head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies ``[head_dim // 2]`` float32, after ``rope_scaling`` (None = plain RoPE)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (rope_theta**exponents)
    if rope_scaling is None:
        return inv_freq
    rope_type = rope_scaling.get("rope_type")
    if rope_type == "linear":
        return inv_freq / float(rope_scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, rope_scaling)
    if rope_type == "freq_factors":  # llama.cpp's rope_freqs: theta_i = position * inv_freq_i / factor_i
        return inv_freq / torch.tensor(rope_scaling["factors"], dtype=torch.float32)
    raise ValueError(f"rope_scaling type {rope_type!r} is not supported; supported: linear, llama3, freq_factors")


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1 scaling: slow down low frequencies by ``factor``, keep high ones, blend between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    original_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = original_len / low_freq_factor  # wavelengths above this are divided by factor
    high_freq_wavelen = original_len / high_freq_factor  # wavelengths below this are kept
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


class RotaryEmbedding:
    """Computes per-token ``cos``/``sin`` once per forward; ``apply_rotary`` uses them in every layer."""

    def __init__(self, head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None,
                 device: torch.device | str = "cpu") -> None:
        self.head_dim = head_dim
        self.inv_freq = rope_inv_freq(head_dim, rope_theta, rope_scaling).to(device)  # [head_dim // 2]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions ``[num_tokens]`` -> (cos, sin), each ``[num_tokens, 1, head_dim]`` in ``dtype``."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [num_tokens, head_dim // 2]
        angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [num_tokens, 1, head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[num_tokens, num_heads, head_dim]`` by the angles in ``cos``/``sin``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
