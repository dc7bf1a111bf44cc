"""The torch decoder: KV-cached decoding computes what full recomputation computes."""

import pytest
import torch

from helpers.book.notebook import pick_device, setup
from helpers.counting.models import ModelConfig
from helpers.decoder.model import Decoder

TINY = ModelConfig(name="tiny", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   n_q_heads=4, n_kv_heads=2, head_dim=16, vocab=101, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip


def test_cached_decode_equals_full_recompute():
    torch.manual_seed(0)
    model = Decoder(TINY).eval()
    ids = torch.randint(0, TINY.vocab, (2, 9))
    with torch.no_grad():
        full, _ = model(ids)
        logits, cache = model(ids[:, :5])
        steps = [logits]
        for t in range(5, 9):
            logits, cache = model(ids[:, t : t + 1], cache)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache[0][0].shape == (2, TINY.n_kv_heads, 9, TINY.head_dim)


def test_tied_embeddings_share_one_tensor():
    model = Decoder(TINY)
    assert model.lm_head.weight is model.embed.weight
    assert model(torch.zeros(1, 3, dtype=torch.long), logits="last")[0].shape == (1, 1, 101)


def test_setup_seeds_and_device(monkeypatch):
    monkeypatch.delenv("TEXTBOOK_DEVICE", raising=False)
    assert setup() == pick_device()
    first = torch.rand(3)
    setup()
    assert torch.equal(torch.rand(3), first)
    monkeypatch.setenv("TEXTBOOK_DEVICE", "cpu")
    assert pick_device() == "cpu"
    monkeypatch.setenv("TEXTBOOK_DEVICE", "tpu")
    with pytest.raises(ValueError, match="TEXTBOOK_DEVICE='tpu' is not one of"):
        pick_device()


def _two_attention_layers(q, k, v, mask, positions):
    """Two rounds of RoPE'd causal attention, the second on the first's output: padding
    that broke the first round shows in the real rows of the second (0 × NaN)."""
    import torch.nn.functional as F

    from helpers.decoder.rope import rotate

    x = v
    for _ in range(2):
        x = F.scaled_dot_product_attention(rotate(q, positions), rotate(k, positions), x,
                                           attn_mask=mask)  # fmt: skip
    return x


def test_padded_prefill_gives_each_prompt_what_it_gets_alone():
    from helpers.decoder.masks import padded_prefill

    torch.manual_seed(0)
    lengths = torch.tensor([5, 1, 3, 5])
    longest, dim = 5, 8
    q, k, v = (torch.randn(4, 1, longest, dim) for _ in range(3))
    mask, positions = padded_prefill(lengths)
    assert mask.shape == (4, 1, longest, longest) and mask.dtype == torch.bool
    assert positions.shape == (4, longest) and positions.dtype == torch.long
    out = _two_attention_layers(q, k, v, mask, positions[:, None])
    assert not out.isnan().any()
    for row, n in enumerate(lengths.tolist()):
        real = slice(longest - n, longest)
        alone = _two_attention_layers(q[row:row + 1, :, real], k[row:row + 1, :, real],
                                      v[row:row + 1, :, real], None if n == 1 else
                                      torch.ones(n, n, dtype=torch.bool).tril(),
                                      torch.arange(n))  # fmt: skip
        torch.testing.assert_close(out[row:row + 1, :, real], alone)
    for bad in (torch.tensor([2, 0]), torch.tensor([[2, 3]]), torch.tensor([], dtype=torch.long)):
        with pytest.raises(ValueError, match="lengths must be"):
            padded_prefill(bad)
