"""Timing the decoder's ragged steps (``helpers.decoder.step_times``): each shape runs as
asked, on scattered blocks of random keys, and a shape the pool cannot hold is refused."""

import pytest
import torch

from helpers.counting.models import ModelConfig
from helpers.decoder.model import Decoder
from helpers.decoder.step_times import StepShape, profile_step_times

BLOCK = 4
TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip


def tiny_model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(TINY).eval()


def test_the_profiler_times_the_steps_it_is_asked_for():
    """Each shape runs as asked (spied on, the real forward pass running), on scattered
    blocks filled with random keys, warm-up untimed; one record per shape, in order."""
    model = tiny_model()
    cache = model.new_paged_cache(40, BLOCK)
    seen = []
    forward = model.forward_paged

    def spy(entries, pool):
        seen.append([(len(e.ids), e.start, e.blocks.tolist(), e.emits) for e in entries])
        assert all(pool[e.blocks].abs().mean() > 0.3 for pool in cache.keys for e in entries)
        return forward(entries, pool)

    model.forward_paged = spy
    shapes = [StepShape(decode=3, context=9), (6, 2, 4, 5, False), StepShape(prefill=7)]
    records = profile_step_times(model, cache, shapes, repeats=3, warmup=2)
    assert [r.shape for r in records] == [StepShape(*s) for s in shapes]
    assert [r.timing.n for r in records] == [3, 3, 3] and all(r.timing.min_s > 0 for r in records)
    assert len(seen) == 3 * (2 + 3)
    decodes = seen[0]
    assert [(n, start, len(blocks)) for n, start, blocks, _ in decodes] == [(1, 9, 3)] * 3
    mixed = seen[5]
    assert sorted((n, start, len(blocks), emits) for n, start, blocks, emits in mixed) == [
        (1, 4, 2, True), (1, 4, 2, True), (6, 5, 3, False)]  # fmt: skip
    used = [b for _, _, blocks, _ in mixed for b in blocks]
    assert len(set(used)) == len(used) and used != sorted(used)  # distinct and scattered
    assert seen[10] == [(7, 0, seen[10][0][2], True)] and records[2].shape.heads == 1
    assert records[1].shape.tokens == 8 and records[1].shape.heads == 2


@pytest.mark.parametrize(
    "shapes, kwargs, message",
    [
        ([(0, 0, 5)], {}, "has no tokens"),
        ([(0, 40, 9)], {}, "needs 120 blocks of 4 tokens; the pool has 40"),
        ([(4, -1, 0)], {}, "decode must be an int ≥ 0, got -1"),
        ([(1, 2)], {"repeats": 0}, "repeats must be an int ≥ 1, got 0"),
        ([], {}, "at least one step shape"),
    ],
)
def test_the_profiler_refuses_a_step_it_cannot_run(shapes, kwargs, message):
    model = tiny_model()
    with pytest.raises(ValueError, match=message):
        profile_step_times(model, model.new_paged_cache(40, BLOCK), shapes, **kwargs)
