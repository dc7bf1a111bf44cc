"""Which keys each new token may see, and prompts of different lengths in one batch.

Causal, within Mistral's sliding window (a token attends to itself and the
``sliding_window − 1`` tokens before it), never a padding slot. Prompts of different lengths
are batched by left padding (``left_pad``), so every prompt ends in the last column;
``padded_prefill`` gives such a batch's mask and RoPE positions (chapter 7).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["left_pad", "padded_prefill", "rope_positions", "visible_keys"]


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths as one [batch, longest] id tensor, left-padded so every
    prompt ends in the last column, and their lengths (for ``Decoder(..., lengths=…)``)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("left_pad needs at least one prompt, and no empty prompt")
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    return ids, lengths


def visible_keys(
    query_slots: torch.Tensor,
    key_slots: torch.Tensor,
    pad: torch.Tensor | None,
    window: int | None,
) -> torch.Tensor | None:
    """Which keys each new token may see: causal, within the window, never padding.
    None when every key is visible (SDPA's fastest path)."""
    i, j = query_slots[:, None], key_slots[None, :]
    visible = j <= i
    if window is not None:
        visible = visible & (i - j < window)
    if pad is not None:
        # A padding query sees itself only: a row with no visible key would give NaN.
        visible = visible[None] & ((j[None] >= pad[:, None, None]) | (j == i)[None])
        return visible[:, None]  # [batch, 1 (heads), new, keys]
    if query_slots.numel() == 1 and window is None:
        return None  # one new token after the cache sees every key
    return visible


def rope_positions(query_slots: torch.Tensor, pad: torch.Tensor | None) -> torch.Tensor:
    """RoPE positions of the new tokens: their slots, less each row's left padding (a
    prompt's first real token is at 0); padding slots at 0."""
    if pad is None:
        return query_slots
    return (query_slots[None] - pad[:, None]).clamp(min=0)


def padded_prefill(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask and RoPE positions of a left-padded prefill (chapter 7): prompts of
    ``lengths`` (1-D) in a [batch, longest] batch, each ending in the last column
    (``left_pad``), nothing cached before them. Returns ``mask``, bool [batch, 1, longest,
    longest], True where query slot i may attend to key slot j (a real token: the real
    tokens up to itself; a padding slot: itself only, since a row with no visible key gives
    NaN, which reaches the real tokens at the next layer as 0 × NaN), and ``positions``,
    long [batch, longest]. What ``Decoder.forward(ids, lengths=…)`` uses."""
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or not len(lengths) or bool((lengths < 1).any()):
        raise ValueError(f"lengths must be a 1-D tensor of prompt lengths >= 1, got {lengths}")
    longest = int(lengths.max())
    slots = torch.arange(longest, device=lengths.device)
    pad = longest - lengths
    return visible_keys(slots, slots, pad, None), rope_positions(slots, pad)
