"""The torch decoder: KV-cached decoding computes what full recomputation computes."""

import pytest
import torch

from helpers.decoder import Decoder
from helpers.models import ModelConfig
from helpers.notebook import pick_device, setup

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
