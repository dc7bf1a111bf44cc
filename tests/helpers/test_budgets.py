"""The references behind chapters 6-8's budget exercises, worked by hand: the longest answer
within an end-to-end budget (``latency.longest_answer``), the batch to serve at another
context than a sweep's (``latency.batch_at_context``) and a long prompt prefilled in chunks
beside running decodes (``serving.chunked_prefill``)."""

import pytest

from helpers import serving
from helpers.counting import latency

TTFT = {100: 0.2, 300: 0.6}
TPOT = {0: 0.010, 1000: 0.020}


def test_longest_answer_counts_the_prefill_once_and_each_steps_own_cache():
    # TTFT(200) = 0.4; steps start with 200, 201, 202 cached: 12, 12.01, 12.02 ms
    assert latency.longest_answer(TTFT, TPOT, 200, 0.4) == 1
    assert latency.longest_answer(TTFT, TPOT, 200, 0.4121) == 2
    assert latency.longest_answer(TTFT, TPOT, 200, 0.43) == 3
    assert latency.longest_answer(TTFT, TPOT, 200, 0.39) == 0
    # the same as predict_e2e's inverse, everywhere between two tokens
    for n in range(1, 40):
        middle = 0.5 * (latency.predict_e2e(TTFT, TPOT, 150, n)
                        + latency.predict_e2e(TTFT, TPOT, 150, n + 1))
        assert latency.longest_answer(TTFT, TPOT, 150, middle) == n
    # exact in binary: the third token out at the budget counts
    assert latency.longest_answer({100: 0.25}, {0: 0.125}, 100, 0.5) == 3
    with pytest.raises(ValueError, match="positive"):
        latency.longest_answer(TTFT, {0: 0.0}, 200, 1.0)


SWEEP = {1: 0.010, 8: 0.011, 32: 0.024, 64: 0.045}


def test_batch_at_context_adds_the_kv_read_once_a_sequence():
    # 3,584 more tokens of 128 KiB at 1 TB/s: 0.47 ms more a sequence, so batch 64 takes
    # 75 ms and 32 takes 39 ms
    assert latency.batch_at_context(SWEEP, 512, 4096, 131072, 1e12, 40e9, 0.050) == 32
    assert latency.sweep_summary(SWEEP, 0.050)["best_batch"] == 64  # the sweep as measured
    assert latency.batch_at_context(SWEEP, 512, 512, 131072, 1e12, 40e9, 0.050) == 64
    # 15 GB holds 27 caches of 4,096 tokens: memory stops the batch at 8
    assert latency.batch_at_context(SWEEP, 512, 4096, 131072, 1e12, 15e9, 0.050) == 8
    assert latency.batch_at_context(SWEEP, 512, 4096, 131072, 1e12, 1e6, 0.050) is None
    assert latency.batch_at_context({3: 0.003, 6: 0.006}, 10, 20, 1000, 1e12, 1e9, 1.0) == 3
    with pytest.raises(ValueError, match="bandwidth"):
        latency.batch_at_context(SWEEP, 512, 4096, 131072, 0.0, 40e9, 0.050)


def test_steps_at_context_adds_each_sequence_its_own_read():
    # 3,584 more tokens of 128 KiB at 1 TB/s: 0.4698 ms a sequence, B times over
    extra = 3584 * 131072 / 1e12
    steps = latency.steps_at_context(SWEEP, 512, 4096, 131072, 1e12)
    assert steps == pytest.approx({b: s + b * extra for b, s in SWEEP.items()}, rel=1e-12)
    assert steps[64] == pytest.approx(0.045 + 64 * extra)  # 75 ms: over a 50 ms target
    # a shorter context than the sweep's reads less
    assert latency.steps_at_context(SWEEP, 512, 256, 131072, 1e12)[1] < SWEEP[1]
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        latency.steps_at_context(SWEEP, 512, 4096, 0, 1e12)


def test_chunked_prefill_by_hand():
    # chunks of 4 (6 minus 2 decodes): 4, 4, 2 tokens after 0, 4, 8 cached; the decodes
    # hold 5, 6, 7 tokens: keys 12 + 10, 14 + 26, 16 + 19
    cost = {"fixed": 1.0, "per_token": 0.1, "per_key": 0.01}
    done = serving.chunked_prefill(10, 2, 5, 6, cost)
    assert done["steps"] == 3
    assert done["ttft"] == pytest.approx(1.82 + 2.00 + 1.75)
    assert done["worst_gap"] == pytest.approx(2.00)
    whole = serving.chunked_prefill(10, 2, 5, 100, cost)
    assert whole["steps"] == 1 and whole["worst_gap"] == whole["ttft"]
    # smaller chunks: more steps, a shorter worst gap, a longer TTFT (the re-reads, the
    # decodes' share of every step)
    small = serving.chunked_prefill(1000, 8, 100, 72, cost)
    large = serving.chunked_prefill(1000, 8, 100, 520, cost)
    assert small["steps"] > large["steps"]
    assert small["worst_gap"] < large["worst_gap"] and small["ttft"] > large["ttft"]
    for bad in ({"fixed": 1.0}, {"fixed": -1.0, "per_token": 0.0, "per_key": 0.0}):
        with pytest.raises(ValueError, match="cost"):
            serving.chunked_prefill(10, 2, 5, 6, bad)
    with pytest.raises(ValueError, match="no room"):
        serving.chunked_prefill(10, 6, 5, 6, cost)
