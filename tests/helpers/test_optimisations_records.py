"""Chapter 8's simulator experiments as records (``helpers.serving.optimisations``): each
record agrees with its steps run by hand, its verdicts flip where they should, and bad
input is refused naming the problem."""

import numpy as np
import pytest

from helpers import serving
from helpers.counting import memory
from helpers.serving import Step, WorstStall, optimisations

QWEN_H100 = ("Qwen2.5-7B", "H100 SXM")


# ---------------------------------------------------------------- a trace under budgets


def test_chunked_trace_runs_are_the_simulations_by_hand():
    study = optimisations.chunked_trace_study(budgets=(1024, 512), n=60)
    assert [run.budget for run in study.runs] == [None, 1024, 512]
    steps, kv = serving.roofline_engine(*QWEN_H100)
    trace = serving.poisson_trace(60, 3.0, 2048, 256, seed=1, max_prompt=16384,
                                  max_output=2048)  # fmt: skip
    for run in study.runs:
        recorder = WorstStall(steps)
        policy = "continuous" if run.budget is None else "chunked"
        summary = serving.simulate(trace, recorder, kv, policy, token_budget=run.budget).summary()
        assert run.worst_stall == recorder.worst
        assert (run.tpot_p99, run.ttft_mean, run.ttft_p99, run.throughput) == (
            summary["tpot_p99"], summary["ttft_mean"], summary["ttft_p99"], summary["throughput"])
    assert study.stall_shrink == study.runs[0].worst_stall / study.runs[-1].worst_stall > 1


def test_chunked_trace_table_names_every_run_and_the_budgets_between():
    lines = optimisations.chunked_trace_study(budgets=(2048, 1024, 512), n=40).table().split("\n")
    assert [line.split("  ")[0] for line in lines[1:5]] == [
        "whole prompts", "chunked 2048", "chunked 1024", "chunked 512"]
    assert lines[5].startswith("whole prompts -> chunked 512: worst stall ")
    assert "; budgets 2048 and 1024: TPOT p99 " in lines[5]
    one = optimisations.chunked_trace_study(budgets=(512,), n=40).table().split("\n")
    assert len(one) == 4 and "budget" not in one[-1]


@pytest.mark.parametrize("budgets, problem", [((), "budgets"), ((0,), "budgets"),
                                              ((256,), "token_budget")])  # fmt: skip
def test_chunked_trace_refuses_bad_budgets(budgets, problem):
    # 256 is no budget for an engine of up to 256 decodes: the simulator names it
    with pytest.raises(ValueError, match=problem):
        optimisations.chunked_trace_study(budgets=budgets, n=20)


# ------------------------------------------------------------- one prompt's chunks


def test_chunk_costs_rows_are_the_passes_by_hand():
    costs = optimisations.chunk_cost_study(prompt=1000, chunks=(1000, 300))
    steps, _ = serving.roofline_engine(*QWEN_H100)
    kappa = memory.kv_bytes_per_token(steps.cfg)
    whole, small = costs.rows
    assert (whole.passes, whole.reread_bytes) == (1, 0)
    # chunks of 300 start at 0, 300, 600 and 900; the last holds the remaining 100
    assert small.passes == 4 and small.reread_bytes == kappa * (300 + 600 + 900)
    parts = [steps.parts(Step(((n, before),), 0, 0, int(before == 900)))
             for n, before in ((300, 0), (300, 300), (300, 600), (100, 900))]  # fmt: skip
    assert small.linear_s == pytest.approx(sum(p["linear"] for p in parts), rel=1e-12)
    assert small.attention_s == pytest.approx(sum(p["attention"] for p in parts), rel=1e-12)
    one_pass = steps.parts(Step(((1000, 0),), 0, 0, 1))
    assert (whole.linear_s, whole.attention_s) == (one_pass["linear"], one_pass["attention"])
    assert costs.whole_s == sum(one_pass.values())
    assert costs.ridge == steps.hw.peak("bf16") / steps.hw.bandwidth
    assert costs.small is small


def test_chunk_costs_verdicts_flip_across_the_ridge():
    # the H100's ridge is about 295 FLOPs a byte: a chunk of 2,048 tokens computes, one of
    # 64 waits on the weights
    assert not optimisations.chunk_cost_study(chunks=(8192, 2048)).weight_bound
    small = optimisations.chunk_cost_study(chunks=(8192, 64))
    assert small.weight_bound and small.small_linear_s > small.weights_read_s
    assert "reading the weights" in small.table() and "compute-bound" not in small.table()
    # chunking leaves attention within 1%, not exactly as it was
    assert optimisations.chunk_cost_study(chunks=(8192, 256)).attention_unchanged
    strict = optimisations.chunk_cost_study(chunks=(8192, 256), tolerance=0.0)
    assert not strict.attention_unchanged and "(changed:" in strict.table()


@pytest.mark.parametrize("kwargs, name", [({"prompt": 0}, "prompt"), ({"chunks": ()}, "chunks"),
                                          ({"chunks": (512, -1)}, "chunks")])  # fmt: skip
def test_chunk_costs_refuse_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        optimisations.chunk_cost_study(**kwargs)


# ------------------------------------------------------------------ Sarathi-Serve


def test_sarathi_rows_and_capacity_follow_the_runs():
    study = optimisations.sarathi_study(whole_rates=(1, 30), chunked_rates=(2,), requests=200)
    assert [(row.label, row.rate) for row in study.rows] == [
        ("whole prompts", 1), ("whole prompts", 30), ("chunked 512", 2)]
    steps, kv = serving.roofline_engine("Mistral-7B-v0.1", "A100 80GB SXM")
    trace = serving.poisson_trace(400, 30, 1024, 256, seed=2, max_prompt=8192, max_output=2048)
    long = serving.simulate(trace, steps, kv, "continuous").steady()
    row = study.rows[1]
    assert row.itl_p99[1] == long.percentiles((99,))["itl_p99"]
    assert row.ttft_p99[1] == float(np.percentile(long.ttft, 99))
    assert row.meets == (False, False) and study.rows[0].met and study.rows[2].met
    assert study.settled
    assert study.capacity("whole prompts") == (1, 30)
    assert study.capacity("chunked 512") == (2, None)
    assert study.chunk_step_s == steps(Step(((512, 0),), 0, 0, 1))
    assert "whole prompts between 1 and 30 requests/s, chunked 512 at least 2" in study.table()


def test_sarathi_verdicts_flip_with_the_slo():
    study = optimisations.sarathi_study(whole_rates=(1,), chunked_rates=(1,), requests=200,
                                        itl_slo=1e-4)  # fmt: skip
    assert not any(row.met for row in study.rows)
    assert study.capacity("whole prompts") == (None, 1)
    assert "not bracketed by these rates" in study.table()


# ------------------------------------------------------------------ prefix caching


def test_prefix_sharing_rows_are_the_prefix_cache_study():
    sharing = optimisations.prefix_sharing_study(shares=(0.0, 1.0))
    for row in sharing.rows:
        study = serving.prefix_cache_study(row.share, 2048)
        assert (row.hit_rate, row.ttft_mean, row.ttft_p99) == (
            study["hit_rate"], study["ttft_mean"], study["ttft_p99"])
    none, full = sharing.rows
    assert none.saved == (0.0, 0.0) and full.saved[0] > 0
    assert list(sharing.verdicts) == [1.0]  # no sharing, no verdict
    mean, p99 = full.saved
    expected = "more" if p99 - mean > 0.02 else "less" if mean - p99 > 0.02 else "about the same"
    assert sharing.verdicts[1.0] == expected
    # a tie as wide as every share: always about the same
    assert optimisations.prefix_sharing_study((1.0,), tie=1.0).verdicts == {1.0: "about the same"}


@pytest.mark.parametrize("shares", [(), (0.5, 1.5), (-0.1,)])
def test_prefix_sharing_refuses_shares_outside_0_1(shares):
    with pytest.raises(ValueError, match="shares"):
        optimisations.prefix_sharing_study(shares)


# ---------------------------------------------------------- speculation at large batch


def test_spec_rows_are_the_largest_batches_by_hand():
    study = optimisations.spec_batch_study(contexts=(128, 8192))
    steps, kv = serving.roofline_engine(*QWEN_H100)
    for row in study.rows:
        fits = kv.capacity_tokens // row.context
        costs = serving.verify_costs(steps.cfg, steps.hw, row.context)
        assert (row.fits, row.largest) == (fits, serving.spec_largest_batch(costs, 0.8, 4, 0.05,
                                                                             fits))
    assert [row.pays_everywhere for row in study.rows] == [False, True]
    # the search's answer is the first context of 512, 520, … that pays everywhere
    assert study.every % 8 == 0 and 512 <= study.every <= 1024

    def everywhere(context):
        fits = kv.capacity_tokens // context
        costs = serving.verify_costs(steps.cfg, steps.hw, context)
        return serving.spec_largest_batch(costs, 0.8, 4, 0.05, fits) == fits

    assert everywhere(study.every) and not everywhere(study.every - 8)


def test_spec_never_paying_leaves_no_context():
    study = optimisations.spec_batch_study(r=1.0, contexts=(1024,), search=(512, 600, 8))
    assert study.rows[0].largest == 0 and study.every is None
    assert study.table().endswith("at no context searched")
    with pytest.raises(ValueError, match="context"):
        optimisations.spec_batch_study(contexts=(0,))
