"""Speculative decoding's formulas: tokens a pass, speedup, the best gamma, and the largest
batch at which verifying gamma drafts still pays."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import serving
from helpers.counting import flops, hardware, memory, models
from helpers.serving import spec


def _costs(kv_bytes=0.0, attention_flops=0.0):
    # Unit peak and bandwidth: a pass over k queries at batch B takes max(kB, 100) for the
    # linear layers plus max(k B attention_flops, B kv_bytes) for attention.
    return {"weight_bytes": 100.0, "linear_flops": 1.0, "kv_bytes": kv_bytes,
            "attention_flops": attention_flops, "peak": 1.0, "bandwidth": 1.0}


def test_worked_by_hand():
    # gamma 1, alpha 0.5: 1.5 tokens a pass; free drafts. Without a cache, max(2B, 100) / 1.5
    # < max(B, 100) holds up to B = 74 (2B / 1.5 < 100).
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 0.0, 500) == 74
    # A cache of 1 byte a sequence, read once for both queries: (2B + B) / 1.5 < 100 + B
    # holds up to B = 99, and past B = 100 both sides are 2B: never strictly lower.
    assert serving.spec_largest_batch(_costs(kv_bytes=1.0), 0.5, 1, 0.0, 500) == 99
    # The cap binds, and a draft that costs a whole step (c = 1) never pays at gamma 1.
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 0.0, 30) == 30
    assert serving.spec_largest_batch(_costs(), 0.5, 1, 1.0, 500) == 0


def test_no_draft_never_pays_and_a_perfect_draft_always_does():
    costs = serving.verify_costs(models.get("Qwen2.5-7B"), hardware.get("H100 SXM"), 512)
    assert serving.spec_largest_batch(costs, 0.9, 0, 0.0, 256) == 0  # equal, not lower
    assert serving.spec_largest_batch(costs, 1.0, 3, 0.0, 256) == 256


def test_a_longer_context_keeps_speculation_paying_at_larger_batches():
    qwen, h100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    largest = [serving.spec_largest_batch(serving.verify_costs(qwen, h100, context), 0.7, 4,
                                          0.05, 4096) for context in (128, 512, 2048)]
    assert 1 < largest[0] <= largest[1] <= largest[2]
    assert largest[0] < 4096 and largest[2] == 4096


def test_verify_costs_from_the_formulas():
    qwen, h100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
    costs = serving.verify_costs(qwen, h100, 1000)
    # Qwen2.5-7B is untied: a pass reads all its weights but the input embedding table
    # (152,064 x 3,584), and multiplies all but that table: 14.14 GFLOP a token, the step
    # model's 13.05 of linear layers plus 1.09 of LM head.
    table = 152064 * 3584
    assert costs["weight_bytes"] == memory.weight_bytes(qwen) - 2 * table
    # (the matrices' FLOPs: norms and biases, a few hundred thousand parameters, multiply none)
    assert costs["linear_flops"] == pytest.approx(2 * (flops.param_count(qwen) - table), rel=1e-4)
    assert round(costs["linear_flops"] / 1e9, 2) == 14.14
    small = models.get("Qwen2.5-0.5B")
    tied = serving.verify_costs(small, h100, 1000)  # its table is its LM head: read, multiplied
    assert tied["weight_bytes"] == memory.weight_bytes(small)
    assert tied["linear_flops"] == pytest.approx(2 * flops.param_count(small), rel=1e-3)
    assert costs["kv_bytes"] == 1000 * memory.kv_bytes_per_token(qwen)
    assert costs["attention_flops"] == 4 * 28 * 28 * 128 * 1000
    assert costs["peak"] == h100.peak("bf16") and costs["bandwidth"] == h100.bandwidth
    with pytest.raises(ValueError):
        serving.spec_largest_batch(costs, 0.8, 2, 0.05, 0)


# The closed forms of Leviathan et al. (ICML 2023); the Monte Carlo that checks them
# against real rejection sampling is in test_serving.py.


def test_spec_worked_check():
    # α = 0.8, γ = 4: 1 + 0.8 + 0.64 + 0.512 + 0.4096 = 3.3616 tokens per target pass;
    # at c = 0.05 one pass costs 4·0.05 + 1 = 1.2 target steps: 3.3616 / 1.2 = 2.8013×.
    assert spec.spec_expected_tokens(0.8, 4) == pytest.approx(3.3616, rel=1e-12)
    assert spec.spec_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2, rel=1e-12)
    assert round(spec.spec_speedup(0.8, 4, 0.05), 2) == 2.80


def test_spec_edges():
    assert spec.spec_expected_tokens(0.3, 0) == 1.0  # no draft: plain decoding
    assert spec.spec_expected_tokens(1.0, 5) == 6.0  # every draft kept, plus the bonus
    assert spec.spec_expected_tokens(0.0, 5) == 1.0  # every draft rejected
    assert spec.spec_speedup(0.6, 0, 0.5) == 1.0
    assert spec.spec_speedup(1.0, 3, 0.0) == 4.0


def test_spec_best_gamma():
    # α = 0.8, c = 0.05: speedups 2.80 (γ = 4), 3.0396 (6), 3.0823 (7), 3.0921 (8),
    # 3.0780 (9): the best is 8. A free, perfect draft is best at the largest γ allowed; a
    # draft as costly as the target (c = 1) at α = 0.5 never pays: γ = 0.
    assert spec.spec_best_gamma(0.8, 0.05) == 8
    assert spec.spec_speedup(0.8, 8, 0.05) == pytest.approx(3.09208, rel=1e-5)
    assert spec.spec_best_gamma(1.0, 0.0, max_gamma=10) == 10
    assert spec.spec_best_gamma(0.5, 1.0) == 0


@given(st.floats(0.0, 0.99), st.floats(0.0, 1.0), st.integers(0, 30))
def test_spec_best_gamma_beats_every_other_gamma(alpha, c, max_gamma):
    best = spec.spec_best_gamma(alpha, c, max_gamma)
    top = spec.spec_speedup(alpha, best, c)
    assert all(spec.spec_speedup(alpha, g, c) <= top for g in range(max_gamma + 1))


def test_bad_spec_arguments():
    with pytest.raises(ValueError, match=r"alpha \(acceptance rate\) must be in \[0, 1\]"):
        spec.spec_expected_tokens(1.2, 3)
    with pytest.raises(ValueError, match="gamma .* must be an int >= 0, got -1"):
        spec.spec_expected_tokens(0.5, -1)
    with pytest.raises(ValueError, match="c .* must be >= 0"):
        spec.spec_speedup(0.5, 2, -0.1)


# --- greedy verification of a draft from one target pass (chapter 9) -----------------------


def _serial_greedy(choice, drafts, lengths, stop):
    """What serial greedy decoding emits, read one position at a time, and how many of the
    emitted tokens were drafted there."""
    emitted, accepted = [], 0
    for row, guesses, n in zip(choice.tolist(), drafts.tolist(), lengths.tolist(), strict=True):
        tokens = []
        for j, own in enumerate(row[: n + 1]):
            tokens.append(own)
            drafted = j < n and guesses[j] == own
            accepted += drafted
            if own == stop or not drafted:
                break
        emitted.append(tokens)
    return emitted, accepted


def test_greedy_verify_by_hand():
    import torch

    hot = torch.eye(5) * 3
    logits = torch.stack([hot[[1, 2, 3]], hot[[4, 0, 0]], hot[[2, 2, 2]], hot[[1, 3, 4]]])
    drafts = torch.tensor([[1, 2], [4, 1], [0, 2], [1, 3]])
    # all stand and the bonus; the second falls (the target says 0); the first falls at once;
    # the fourth's one draft stands and its bonus is row 1's 3 (its row 2 scores padding)
    full = torch.tensor([2, 2, 2, 1])
    assert serving.greedy_verify(logits, drafts, full) == ([[1, 2, 3], [4, 0], [2], [1, 3]], 4)
    assert serving.greedy_verify(logits[:, :1], drafts[:, :0], torch.zeros(4, dtype=torch.long)
                                 ) == ([[1], [4], [2], [1]], 0)  # fmt: skip
    none = torch.zeros(4, dtype=torch.long)  # all padding: each emits row 0's token
    assert serving.greedy_verify(logits, drafts, none) == ([[1], [4], [2], [1]], 0)
    # stop token 2: the first ends at its accepted second draft (no bonus), the third at once
    assert serving.greedy_verify(logits, drafts, full, stop=2) == (
        [[1, 2], [4, 0], [2], [1, 3]], 4)
    assert serving.greedy_verify(logits, drafts, full, stop=1) == (
        [[1], [4, 0], [2], [1]], 3)  # a stop draft that stands is emitted and counted


@given(st.integers(1, 4), st.integers(0, 6), st.integers(2, 9), st.integers(0, 10**6),
       st.booleans())  # fmt: skip
def test_greedy_verify_equals_serial_decoding(batch, gamma, vocab, seed, with_stop):
    import torch

    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, gamma + 1, vocab, generator=generator)
    choice = logits.argmax(dim=-1)
    drafts = torch.where(torch.rand(batch, gamma, generator=generator) < 0.7,
                         choice[:, :gamma], torch.randint(0, vocab, (batch, gamma),
                                                          generator=generator))  # fmt: skip
    lengths = torch.randint(0, gamma + 1, (batch,), generator=generator)
    stop = int(torch.randint(0, vocab, (), generator=generator)) if with_stop else None
    assert serving.greedy_verify(logits, drafts, lengths, stop) == _serial_greedy(
        choice, drafts, lengths, stop)


def test_greedy_verify_refuses_mismatched_shapes():
    import torch

    three = torch.full((2,), 3)
    with pytest.raises(ValueError, match="for drafts"):
        serving.greedy_verify(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), three)
    with pytest.raises(ValueError, match="for drafts"):
        serving.greedy_verify(torch.zeros(2, 4, 5), torch.zeros(2, 3, dtype=torch.long),
                              torch.full((3,), 3))  # fmt: skip
    with pytest.raises(ValueError, match="lengths must lie"):
        serving.greedy_verify(torch.zeros(2, 4, 5), torch.zeros(2, 3, dtype=torch.long),
                              torch.tensor([1, 4]))  # fmt: skip
