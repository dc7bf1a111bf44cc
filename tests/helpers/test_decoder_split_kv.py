"""Flash-Decoding's split-KV attention computes what plain decode attention computes."""

import pytest
import torch
import torch.nn.functional as F

from helpers.decoder.split_kv import split_kv_attention


def _case(batch, n_q, n_kv, length, d, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_q, 1, d, generator=gen) * scale
    k = torch.randn(batch, n_kv, length, d, generator=gen) * scale
    v = torch.randn(batch, n_kv, length, d, generator=gen)
    return q, k, v


def _plain(q, k, v):
    # Query head h reads kv head h // g: repeat each kv head g times along the head axis.
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    return weights @ v


@pytest.mark.parametrize(
    "batch, n_q, n_kv, length, chunks",
    [(1, 14, 2, 1000, 1), (1, 14, 2, 1000, 8), (2, 4, 2, 37, 5), (1, 8, 8, 64, 64),
     (3, 6, 1, 101, 7), (1, 4, 2, 10, 3), (2, 4, 4, 513, 512)],
)  # fmt: skip
def test_split_equals_plain_attention(batch, n_q, n_kv, length, chunks):
    q, k, v = _case(batch, n_q, n_kv, length, 16, seed=length + chunks)
    out = split_kv_attention(q, k, v, chunks)
    assert out.shape == (batch, n_q, 1, 16) and out.dtype == q.dtype
    torch.testing.assert_close(out, _plain(q, k, v), rtol=1e-5, atol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, enable_gqa=n_q != n_kv)
    torch.testing.assert_close(out, sdpa, rtol=1e-5, atol=1e-5)


def test_one_chunk_is_plain_attention_and_the_split_does_not_matter():
    q, k, v = _case(2, 14, 2, 300, 64, seed=1)
    one = split_kv_attention(q, k, v, 1)
    torch.testing.assert_close(one, _plain(q, k, v), rtol=1e-5, atol=1e-5)
    for chunks in (2, 7, 299, 300):  # dividing T and not
        torch.testing.assert_close(split_kv_attention(q, k, v, chunks), one,
                                   rtol=1e-5, atol=1e-5)  # fmt: skip


def test_large_scores_are_merged_without_overflow():
    # Scores of a few hundred: exp would overflow float32 without each chunk's max subtracted,
    # and the chunks' maxima differ widely, so the merge's rescale is exercised.
    q, k, v = _case(1, 4, 2, 200, 16, seed=2, scale=6.0)
    k[:, :, 150:] *= 3.0
    out = split_kv_attention(q, k, v, 9)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _plain(q.double(), k.double(), v.double()).float(),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_group_order_follows_the_decoder():
    # Each query head must read its own kv head: kv heads made distinct, groups checked apart.
    q, k, v = _case(1, 4, 2, 50, 8, seed=3)
    v[:, 1] += 100.0
    out = split_kv_attention(q, k, v, 4)
    assert (out[:, :2] < 50).all() and (out[:, 2:] > 50).all()


def test_a_view_of_a_larger_cache_and_bf16():
    q, k, v = _case(1, 14, 2, 96, 16, seed=4)
    view_k, view_v = k[:, :, 10:90], v[:, :, 10:90]  # a cache's filled slots: not contiguous
    torch.testing.assert_close(split_kv_attention(q, view_k, view_v, 6),
                               _plain(q, view_k, view_v), rtol=1e-5, atol=1e-5)  # fmt: skip
    low = split_kv_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 5)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), _plain(*(t.bfloat16().float() for t in (q, k, v))),
                               rtol=1e-2, atol=1e-2)  # fmt: skip


@pytest.mark.parametrize("chunks", [0, 97, 2.0])
def test_bad_chunk_counts_are_refused(chunks):
    q, k, v = _case(1, 4, 2, 96, 8, seed=5)
    with pytest.raises(ValueError, match="chunks"):
        split_kv_attention(q, k, v, chunks)


def test_bad_shapes_are_refused():
    q, k, v = _case(1, 4, 2, 10, 8, seed=6)
    with pytest.raises(ValueError):
        split_kv_attention(q.expand(1, 4, 2, 8), k, v, 2)  # two query tokens
    with pytest.raises(ValueError):
        split_kv_attention(q[:, :3], k, v, 2)  # 3 query heads over 2 kv heads
