"""Chapter 9's interview on the roofline (``helpers.counting.interview``): the upgrade study's
rows are the library's speedups, each claim's numbers are the formulas worked by hand, and
every verdict flips where the rule says it should."""

import pytest

from helpers.counting import flops, hardware, interview, latency, memory, models, roofline
from helpers.counting.interview import Claim, Claims, PhaseShares

QWEN, H100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")
LLAMA8 = models.get("Llama-3.1-8B")


def test_pass_intensity_is_a_whole_passs_flops_over_its_bytes():
    ops = flops.forward_flops(QWEN, 64, context=128, batch=2, attention="causal", logits="last")
    moved = memory.forward_bytes(QWEN, 64, context=128, batch=2, dtype="bf16", logits="last")
    assert interview.pass_intensity(QWEN, 64, 128, 2) == ops.total / sum(moved.values())
    dense = flops.forward_flops(QWEN, 64, logits="last").total
    assert interview.pass_intensity(QWEN, 64, attention="dense") == dense / sum(
        memory.forward_bytes(QWEN, 64, logits="last").values())


def test_the_upgrade_study_holds_the_librarys_speedups_and_picks_the_larger():
    workloads = (("one stream", 256, 32, 1), ("long prompts", 8192, 4, 4))
    study = interview.upgrade_study(QWEN, H100, workloads)
    assert [r.label for r in study.rows] == ["one stream", "long prompts"]
    for row, (_, prompt, output, batch) in zip(study.rows, workloads, strict=True):
        gain = latency.upgrade_speedups(QWEN, H100, prompt, output, batch)
        assert (row.prefill_share, row.flops, row.bandwidth) == (
            gain["prefill_share"], gain["flops"], gain["bandwidth"])
        assert row.flops_to_match == latency.flops_to_match(QWEN, H100, prompt, output, batch,
                                                            2.0)  # fmt: skip
    assert [r.buy for r in study.rows] == ["bandwidth", "FLOPs"]  # decode-bound, prefill-bound
    assert study.critical_batch == roofline.critical_batch_split(QWEN, H100)
    table = study.table().splitlines()
    assert len(table) == 1 + 2 + 1 and "2x FLOPs" in table[0]
    assert table[0].split()[1:4] == ["prompt", "output", "streams"]  # each run's own lengths
    assert table[2].split()[2:5] == ["8,192", "4", "4"]  # "long prompts": prompt, output, streams
    assert table[1].rstrip().endswith("none") == (study.rows[0].flops_to_match is None)
    assert "3x bandwidth" in interview.upgrade_study(QWEN, H100, workloads, 3.0).table()
    with pytest.raises(ValueError, match="workloads"):
        interview.upgrade_study(QWEN, H100, ())


def test_the_verdict_rule_holds_caveats_and_fails():
    assert interview.claim_verdict(True, [False, False]) == interview.HOLDS
    assert interview.claim_verdict(True, [False, True]) == interview.CAVEAT
    assert interview.claim_verdict(False, [False]) == interview.FAILS
    claim = Claim("c", "said", "found", True, (False,))
    assert claim.verdict == "holds"
    report = Claims((claim, Claim("d", "s", "f", False, ()))).report()
    assert report.startswith("1. c\n   interview answer: said\n   the book found:   found\n")
    assert "   verdict:          holds\n\n2. d\n" in report and report.endswith("fails\n")


def test_the_shortest_compute_bound_prompt_is_where_prefill_turns_compute_bound():
    short = interview.shortest_compute_bound_prompt(QWEN, H100)
    assert latency.prefill_time(QWEN, H100, short).bound == "compute"
    assert latency.prefill_time(QWEN, H100, short - 1).bound == "memory"
    assert interview.shortest_compute_bound_prompt(QWEN, H100, longest=short - 1) is None


def test_the_prefill_claim_sets_the_formula_beside_the_pass():
    claim = interview.prefill_claim(QWEN, H100, prompt=1024)
    said = roofline.interview_prefill_intensity(flops.param_count(QWEN), 2,
                                                memory.kv_bytes_per_token(QWEN), 1024)
    assert claim.said == f"{said:,.0f} FLOP/B at S = 1,024"
    assert claim.found.startswith(f"{interview.pass_intensity(QWEN, 1024):,.0f} FLOP/B")
    assert claim.core and claim.verdict == interview.CAVEAT  # the LM head is below the ridge
    # A 64-token prompt's pass is memory-bound: the core fails.
    assert interview.prefill_claim(QWEN, H100, prompt=64).verdict == interview.FAILS
    with pytest.raises(ValueError, match="prompt"):
        interview.prefill_claim(QWEN, H100, prompt=0)


def test_the_decode_claim_reads_batch_one_attention_and_a_batch_apart():
    claim = interview.decode_claim(QWEN, H100)
    one = interview.pass_intensity(QWEN, 1, context=1024)
    assert claim.found.startswith(f"{one:.3f} at batch 1") and "an H100" in claim.found
    assert claim.said.endswith("at 32k") and f"(GQA group {QWEN.group_size})" in claim.found
    assert claim.core and claim.caveats[1]  # attention at about the group size
    assert claim.verdict == interview.CAVEAT


def test_the_batching_claim_flips_with_the_batch():
    claim = interview.batching_claim(LLAMA8, H100, context=4096, batch=64)
    t1 = latency.decode_step_time(LLAMA8, H100, 1, 4096)
    t64 = latency.decode_step_time(LLAMA8, H100, 64, 4096)
    assert f"batch 64 gives {64 * t1 / t64:.0f}x" in claim.found
    assert f"rises {t64 / t1:.2f}x" in claim.found and ", below the critical batch" in claim.found
    assert claim.verdict == interview.CAVEAT
    assert interview.batching_claim(LLAMA8, H100, batch=2).verdict == interview.FAILS  # 2x < 10x


def test_the_ttft_tpot_claim_words_the_simulated_shares():
    light, heavy = PhaseShares(2.0, 1000, 0.8, 0.98), PhaseShares(30.0, 1000, 0.7, 0.95)
    longer = PhaseShares(30.0, 2000, 0.7, 0.95)
    claim = interview.ttft_tpot_claim(light, heavy, longer, 64, 1.02, H100, 1024, 256)
    assert claim.verdict == interview.HOLDS
    assert claim.found.startswith("one H100, continuous batching, prompts ~1k, outputs ~256, "
                                  "1,000 requests: at 2 req/s the prefill alone is 80%")
    assert "(on 2,000 requests 70% and 95%;" in claim.found
    queued = heavy._replace(prefill_of_ttft=0.3)
    assert interview.ttft_tpot_claim(light, queued, longer, 64, 1.0, H100, 1024,
                                     256).verdict == interview.CAVEAT  # fmt: skip
    slow = light._replace(prefill_of_ttft=0.4)
    assert interview.ttft_tpot_claim(slow, heavy, longer, 64, 1.0, H100, 1024,
                                     256).verdict == interview.FAILS  # fmt: skip
    assert interview.short_name(hardware.get("A100 80GB SXM")) == "A100"
