"""The paged, ragged forward pass (``helpers.decoder.paged_step``): what ``Decoder.forward``
computes, whatever the blocks.

Tiny random models (Qwen2-style GQA with biases, Mistral-style GQA with a 5-token window,
Llama-style MHA with rope scaling) run the same tokens through ``Decoder.forward`` (one
contiguous cache) and through ``Decoder.forward_paged`` (blocks of 4 tokens, scattered in a
pool, chunks and decodes mixed). "Equal" in fp32 means the largest logit difference is within
1e-5 of the largest logit; the two paths differ only in the order of floating-point sums.
"""

import itertools

import pytest
import torch

from helpers.counting.models import ModelConfig, RopeScaling
from helpers.decoder.kv_cache import PagedKVCache
from helpers.decoder.model import Decoder
from helpers.decoder.paged_step import DECODE_GROUP_FILL, PagedEntry, PagedEntryError, paged_plan

REL = 1e-5
BLOCK = 4
SMALL = dict(hidden=64, intermediate=96, layers=2, vocab=101)
CONFIGS = {
    "qwen2-gqa": ModelConfig(name="qwen2-gqa", model_type="qwen2", n_q_heads=4, n_kv_heads=2,
                             head_dim=16, tied_embeddings=True, qkv_bias=True,
                             rope_theta=1e6, **SMALL),
    "mistral-window": ModelConfig(name="mistral-window", model_type="mistral", n_q_heads=8,
                                  n_kv_heads=2, head_dim=8, tied_embeddings=False,
                                  qkv_bias=False, sliding_window=5, **SMALL),
    "llama-mha-scaled": ModelConfig(name="llama-mha-scaled", model_type="llama", n_q_heads=4,
                                    n_kv_heads=4, head_dim=16, tied_embeddings=False,
                                    qkv_bias=False, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 16),
                                    **SMALL),
}  # fmt: skip


def model_of(name: str, seed: int = 0) -> Decoder:
    torch.manual_seed(seed)
    return Decoder(CONFIGS[name]).eval()


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.float() - reference.float()).abs().max() / reference.abs().max()).item()


def full_logits(model: Decoder, ids: torch.Tensor) -> torch.Tensor:
    """Every position's logits from the contiguous path, [tokens, vocab]."""
    with torch.no_grad():
        return model(ids[None])[0][0]


def scattered_table(blocks: int, pool: int, seed: int) -> list[int]:
    """``blocks`` distinct block ids drawn at random from a pool of ``pool``, in random order."""
    return torch.randperm(pool, generator=torch.Generator().manual_seed(seed))[:blocks].tolist()


@pytest.mark.parametrize("name", CONFIGS)
def test_chunked_prefill_and_decodes_equal_the_contiguous_forward(name):
    model = model_of(name)
    ids = torch.randint(0, 101, (23,))
    reference = full_logits(model, ids)
    cache = model.new_paged_cache(16, BLOCK)
    table = scattered_table(6, 16, seed=1)
    # Chunks cross block boundaries and start mid-block; the window (5) is shorter than the
    # later contexts; then one decode per token.
    bounds = [0, 7, 8, 13, 17, *range(18, 24)]
    for a, b in itertools.pairwise(bounds):
        got = model.forward_paged([PagedEntry(ids[a:b], a, table)], cache, logits="all")
        assert got.shape == (b - a, 101)
        error = relative_error(got, reference[a:b])
        assert error < REL, f"{name}, tokens {a} … {b - 1}: relative error {error:.1e}"
        last = model.forward_paged([(ids[a:b], a, table)], cache)  # rewrites the same slots
        assert last.shape == (1, 101) and relative_error(last, reference[b - 1 : b]) < REL


def test_greedy_decoding_through_pages_gives_generates_tokens():
    model = model_of("mistral-window", seed=2)
    prompt = torch.randint(0, 101, (9,))
    expected = model.generate(prompt[None], 10)[0]
    cache, table = model.new_paged_cache(8, BLOCK), [6, 1, 4, 0, 7]
    logits = model.forward_paged([(prompt[:5], 0, table, False), ], cache)
    assert logits.shape == (0, 101)  # a chunk that emits nothing runs no LM head row
    logits = model.forward_paged([(prompt[5:], 5, table)], cache)
    tokens = [logits[0].argmax().item()]
    for position in range(9, 18):
        logits = model.forward_paged([(torch.tensor(tokens[-1:]), position, table)], cache)
        tokens.append(logits[0].argmax().item())
    assert tokens == expected.tolist()


@pytest.mark.parametrize("name", CONFIGS)
def test_a_ragged_step_equals_each_sequence_alone(name):
    """One step: a prompt's second chunk, a whole short prompt that emits nothing, and three
    decodes at different contexts (two past the window), given decodes first. Unused slots
    of the pool hold large stale values, as freed blocks do: masking must hide them."""
    model = model_of(name, seed=3)
    lengths = {"chunked": 11, "short": 3, "d1": 14, "d2": 2, "d3": 9}
    ids = {k: torch.randint(0, 101, (n,)) for k, n in lengths.items()}
    cache = model.new_paged_cache(24, BLOCK)
    for pool in (*cache.keys, *cache.values):
        pool.normal_(0.0, 100.0)
    tables, free = {}, scattered_table(24, 24, seed=4)
    for key, n in lengths.items():
        tables[key], free = free[: -(-n // BLOCK)], free[-(-n // BLOCK) :]
    before = {"chunked": 6, "short": 0, "d1": 13, "d2": 1, "d3": 8}  # tokens cached first
    for key, cached in before.items():
        if cached:
            model.forward_paged([(ids[key][:cached], 0, tables[key])], cache)
    step = [PagedEntry(ids[k][before[k] :], before[k], tables[k], emits=k != "short")
            for k in ("d1", "chunked", "d2", "short", "d3")]  # fmt: skip
    alone = [model.forward_paged([e], PagedKVCache([k.clone() for k in cache.keys],
                                                   [v.clone() for v in cache.values]),
                                 logits="all") for e in step]  # fmt: skip
    together = model.forward_paged(step, cache, logits="all")
    last = model.forward_paged(step, cache)
    assert together.shape == (sum(len(e.ids) for e in step), 101) and last.shape == (4, 101)
    rows = together.split([len(e.ids) for e in step])
    emitting = [r[-1] for r, e in zip(rows, step, strict=True) if e.emits]
    assert relative_error(last, torch.stack(emitting)) < REL  # the LM head on fewer rows
    for entry, got, single in zip(step, rows, alone, strict=True):
        key = next(k for k in lengths if tables[k] is entry.blocks)
        reference = full_logits(model, ids[key])[entry.start :]
        assert relative_error(got, single) < REL, key
        assert relative_error(got, reference) < REL, f"{name}, {key}"


def test_two_sequences_in_shuffled_blocks_compute_what_each_computes_alone():
    """Two sequences interleaved in one pool in shuffled blocks give, bit for bit, what the
    same steps give in blocks laid out in order, and each sequence what it gives alone."""
    model = model_of("qwen2-gqa", seed=5)
    ids = {"a": torch.randint(0, 101, (11,)), "b": torch.randint(0, 101, (7,))}
    steps = [[("a", 0, 6), ("b", 0, 5)], [("a", 6, 10), ("b", 5, 6)], [("b", 6, 7), ("a", 10, 11)]]
    placements = {"shuffled": {"a": [5, 2, 7], "b": [0, 6]},
                  "in order": {"a": [0, 1, 2], "b": [3, 4]}}  # fmt: skip
    pools = {name: model.new_paged_cache(8, BLOCK) for name in placements}
    reference = {k: full_logits(model, ids[k]) for k in ids}
    for step in steps:
        got = {name: model.forward_paged([(ids[k][i:j], i, tables[k]) for k, i, j in step],
                                         pools[name], logits="all")
               for name, tables in placements.items()}  # fmt: skip
        assert torch.equal(got["shuffled"], got["in order"])
        want = torch.cat([reference[k][i:j] for k, i, j in step])
        assert relative_error(got["shuffled"], want) < REL


def test_keys_and_values_are_written_in_place_into_their_blocks_only():
    model = model_of("llama-mha-scaled", seed=6)
    ids = torch.randint(0, 101, (10,))
    cache = model.new_paged_cache(6, BLOCK)
    pools = [t.data_ptr() for t in (*cache.keys, *cache.values)]
    table = [4, 0, 3]
    model.forward_paged([(ids[:7], 0, table)], cache)
    for t in range(7, 10):
        model.forward_paged([(ids[t : t + 1], t, table)], cache)
    assert [t.data_ptr() for t in (*cache.keys, *cache.values)] == pools
    with torch.no_grad():
        _, contiguous = model(ids[None])
    for layer in range(model.cfg.layers):
        keys, values = cache.sequence(layer, table, 10)
        # (relative_error, not torch.testing.assert_close: that imports DTensor, 2-4 s)
        assert keys.shape == values.shape == (4, 10, 16)
        assert relative_error(keys, contiguous.keys[layer][0]) < REL
        assert relative_error(values, contiguous.values[layer][0]) < REL
        for pool in (cache.keys[layer], cache.values[layer]):
            assert not pool[[1, 2, 5]].any()  # blocks outside the table: never written
            assert not pool[3, 2:].any()  # the last block's unused slots: never written


def test_bf16_pages_stay_near_fp32():
    model = model_of("qwen2-gqa", seed=7)
    ids = torch.randint(0, 101, (12,))
    reference = full_logits(model, ids)
    half = model.to(torch.bfloat16)
    cache = half.new_paged_cache(5, BLOCK)
    assert cache.dtype == torch.bfloat16
    table = [3, 1, 4]
    got = [half.forward_paged([(ids[:9], 0, table)], cache, logits="all")]
    got += [half.forward_paged([(ids[t : t + 1], t, table)], cache) for t in range(9, 12)]
    got = torch.cat(got)
    assert got.dtype == torch.bfloat16
    assert relative_error(got, reference) < 3e-2  # bf16 keeps ~3 significant digits


ONE = torch.tensor([7])


@pytest.mark.parametrize(
    "entries, message",
    [
        ([], "non-empty list of entries"),
        ([(torch.tensor([], dtype=torch.long), 0, [0])], "entry 0: it has no tokens"),
        ([(ONE, 0, [0]), (torch.tensor([1.0]), 0, [1])],
         r"entry 1: ids must be a 1-D torch.long tensor .* got torch.float32 \(1,\)"),
        ([(ONE, -1, [0])], "entry 0: start must be an int ≥ 0"),
        ([(torch.arange(6), 0, [2])],
         r"entry 0: its block table has 1 blocks \(4 tokens\), too few for start \+ new = "
         r"0 \+ 6 = 6"),
        ([(ONE, 0, [0]), (ONE, 4, [1, 8])], r"entry 1: block id 8 is outside the pool's 0 … 7"),
        ([(ONE, 4, [1, 1])], "entry 0: its block table repeats a block"),
        ([(ONE, 32, list(range(8)))],
         "entry 0: positions 0 … 32 need 9 blocks of 4 tokens, more than the pool's 8"),
        ([(ONE, 1, [3, 1]), (torch.tensor([3, 4]), 0, [3])],
         "entry 1: it writes block 3, slot 1, as entry 0 does"),
        ([(torch.tensor([5, 101]), 0, [0])], "entry 0: token id 101 is outside the vocabulary"),
        ([(ONE, 0, [[0, 1]])], "entry 0: blocks must be a 1-D list"),
        ([(ONE, 0)], r"entry 0: expected \(ids, start, blocks\[, emits\]\)"),
    ],
)
def test_bad_entries_raise_naming_the_entry_and_write_nothing(entries, message):
    model = model_of("qwen2-gqa")
    cache = model.new_paged_cache(8, BLOCK)
    with pytest.raises(PagedEntryError, match=message):
        model.forward_paged(entries, cache)
    assert not any(t.any() for t in (*cache.keys, *cache.values))


def test_the_error_says_which_entry_to_drop_and_the_rest_runs():
    model = model_of("qwen2-gqa")
    cache = model.new_paged_cache(8, BLOCK)
    step = [(ONE, 0, [0]), (torch.tensor([3, 4, 5]), 2, [1]), (ONE, 0, [2])]
    with pytest.raises(PagedEntryError) as error:
        model.forward_paged(step, cache)
    assert error.value.entry == 1
    logits = model.forward_paged([e for i, e in enumerate(step) if i != error.value.entry], cache)
    assert logits.shape == (2, 101)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m.forward_paged([(ONE, 0, [0])], m.new_cache(1, 4)),
         "cache must be a PagedKVCache, got KVCache"),
        (lambda m: m.forward_paged([(ONE, 0, [0])],
                                   PagedKVCache.allocate(CONFIGS["mistral-window"], 4, 4)),
         r"the pool has 2 layers × \(2, 8\) \(n_kv_heads, head_dim\); this model needs "
         r"2 × \(2, 16\)"),
        (lambda m: m.forward_paged([(ONE, 0, [0])],
                                   PagedKVCache.allocate(m.cfg, 4, 4, dtype=torch.bfloat16)),
         "the pool is torch.bfloat16 on cpu, the model torch.float32"),
        (lambda m: m.forward_paged([(ONE, 0, [0])], m.new_paged_cache(4, 4), logits="first"),
         "logits must be 'all' or 'last'"),
        (lambda m: m.new_paged_cache(0, 4), "num_blocks must be a positive int, got 0"),
        (lambda m: PagedKVCache([torch.zeros(2, 4, 2, 16)], [torch.zeros(2, 4, 2, 8)]),
         "must have the same shape"),
    ],
)
def test_a_wrong_pool_or_option_raises_naming_it(call, message):
    with pytest.raises(ValueError, match=message):
        call(model_of("qwen2-gqa"))


def test_decodes_of_different_lengths_are_padded_by_at_most_a_third():
    """Decodes attend in groups of similar length: the blocks a step gathers exceed those its
    decodes' caches fill by at most 1/DECODE_GROUP_FILL − 1 = 1/3, so attention's cost follows
    the step's total context, not its longest context times its batch."""
    model = model_of("qwen2-gqa")
    cache = model.new_paged_cache(64, BLOCK)
    widths = [1, 9, 3, 8, 1, 7, 2, 12]  # blocks each decode's cache fills
    tables = [list(range(sum(widths[:i]), sum(widths[: i + 1]))) for i in range(len(widths))]
    prompts = [torch.randint(0, 101, (BLOCK * w,)) for w in widths]
    model.forward_paged([(p[:-1], 0, t) for p, t in zip(prompts, tables, strict=True)], cache)
    entries = [(p[-1:], len(p) - 1, t) for p, t in zip(prompts, tables, strict=True)]
    plan = paged_plan(entries, cache, model.cfg, torch.device("cpu"))
    groups = [(last - first, blocks.shape[1]) for first, last, blocks, _ in plan.decode_groups]
    assert sum(n for n, _ in groups) == len(widths) and len(groups) > 1
    gathered = sum(n * width for n, width in groups)
    assert gathered <= sum(widths) / DECODE_GROUP_FILL < len(widths) * max(widths)
    got = model.forward_paged(entries, cache)
    for prompt, logits in zip(prompts, got, strict=True):
        assert relative_error(logits, full_logits(model, prompt)[-1]) < REL
