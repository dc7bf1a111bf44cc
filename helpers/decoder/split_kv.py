"""Flash-Decoding's split-KV attention of one decode token (chapter 6, Dao et al. 2023)."""

from __future__ import annotations

import math

import torch

__all__ = ["split_kv_attention"]


def split_kv_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, chunks: int
) -> torch.Tensor:
    """One decode token's attention, Flash-Decoding's way: ``softmax(q·Kᵀ/√d)·V`` with the
    cache split along its sequence into ``chunks`` pieces attended independently, then merged.

    ``q`` [batch, n_q, 1, d]; ``keys``, ``values`` [batch, n_kv, T, d], query head ``h``
    reading kv head ``h // g`` (``g = n_q / n_kv``), as ``Attention.forward`` does. Chunk
    sizes are ⌈T/C⌉ or ⌊T/C⌋ (``torch.tensor_split``'s), each group of equal-sized chunks a
    view of the cache, so each is one batched matmul over (batch, kv head, chunk).

    Each chunk yields its partial numerator ``o_c = Σ exp(s − m_c)·v``, its max score ``m_c``
    and its sum ``ℓ_c = Σ exp(s − m_c)`` (log-sum-exp ``m_c + log ℓ_c``). With ``M = max m_c``
    the merge is ``Σ e^{m_c−M} o_c / Σ e^{m_c−M} ℓ_c``: exactly the softmax over the whole
    cache, whatever the split. The arithmetic is in float32; the result has ``q``'s dtype.
    """
    batch, n_q, new, d = q.shape
    n_kv, length = keys.shape[1], keys.shape[2]
    if new != 1 or n_q % n_kv or values.shape != keys.shape:
        raise ValueError("split_kv_attention: one query token, n_q a multiple of n_kv, "
                         "keys and values of one shape")  # fmt: skip
    if type(chunks) is not int or not 1 <= chunks <= length:
        raise ValueError(f"chunks must be an int in [1, {length}], got {chunks!r}")
    packed = q.view(batch, n_kv, 1, n_q // n_kv, d).float() / math.sqrt(d)
    size, longer = divmod(length, chunks)  # the first `longer` chunks hold size + 1 tokens
    maxima, sums, partials = [], [], []
    groups = ((0, longer, size + 1), (longer * (size + 1), chunks - longer, size))
    for start, count, width in groups:
        if count == 0:
            continue
        stop = start + count * width
        k = keys[:, :, start:stop].unflatten(2, (count, width)).float()  # [b, n_kv, c, w, d]
        v = values[:, :, start:stop].unflatten(2, (count, width)).float()
        scores = packed @ k.transpose(-1, -2)  # [b, n_kv, c, g, w]
        top = scores.amax(-1, keepdim=True)
        weights = torch.exp(scores - top)
        maxima.append(top)
        sums.append(weights.sum(-1, keepdim=True))
        partials.append(weights @ v)  # [b, n_kv, c, g, d]
    top, total, out = (torch.cat(t, dim=2) for t in (maxima, sums, partials))
    scale = torch.exp(top - top.amax(2, keepdim=True))  # each chunk's rescale to the global max
    merged = (scale * out).sum(2) / (scale * total).sum(2)  # [b, n_kv, g, d]
    return merged.reshape(batch, n_q, 1, d).to(q.dtype)
