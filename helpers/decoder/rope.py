"""Rotary position embeddings (RoPE), as the decoder applies them (chapter 6).

Half-split layout, as in transformers' Llama; the config's θ and Llama-3.1's "llama3"
scaling. Angles are computed in fp32 and then cast, as transformers does.
"""

from __future__ import annotations

import math

import torch

from helpers.counting.models import RopeScaling

__all__ = ["apply_rope", "cos_sin", "rope_frequencies", "rotate"]


def rope_frequencies(
    head_dim: int,
    theta: float = 10000.0,
    scaling: RopeScaling | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """RoPE's inverse frequencies θ^(−2i/head_dim), i < head_dim/2, in fp32 (chapter 6).

    Computed as transformers does (``1 / θ^(2i/d)``), then, for ``scaling`` ("llama3"), long
    wavelengths divided by ``factor`` and the middle band blended (``_compute_llama3_parameters``).
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inverse = 1.0 / (theta**exponents)
    if scaling is None:
        return inverse
    old = scaling.original_max_position_embeddings
    low_wavelen = old / scaling.low_freq_factor
    high_wavelen = old / scaling.high_freq_factor
    wavelen = 2 * math.pi / inverse
    scaled = torch.where(wavelen > low_wavelen, inverse / scaling.factor, inverse)
    smooth = (old / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def cos_sin(
    inverse: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angles (``positions`` × ``inverse`` frequencies), once
    per step for every layer, in ``dtype``."""
    # Angles in fp32, then cast, as transformers does: bf16 positions would lose whole tokens.
    angles = positions.to(torch.float32)[..., None] * inverse
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` rotated by precomputed angles (``cos_sin``), the half-split pairs (i, i + d/2)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def rotate(
    x: torch.Tensor,
    positions: torch.Tensor,
    theta: float = 10000.0,
    scaling: RopeScaling | None = None,
) -> torch.Tensor:
    """Rotary position embedding over the last dimension, half-split layout (as in HF Llama).

    ``x``: [..., tokens, head_dim]; ``positions``: [tokens] (or broadcastable to x's leading
    dimensions followed by tokens).
    """
    cos, sin = cos_sin(rope_frequencies(x.shape[-1], theta, scaling, x.device), positions,
                        x.dtype)  # fmt: skip
    return apply_rope(x, cos, sin)
