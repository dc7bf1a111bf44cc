"""Chapter 9's follow-ups (``helpers.serving.capstone``): the verifying pass on a tiny decoder
emits what serial greedy decoding does, and each roofline or simulated study's record holds
the library's numbers worked by hand, its verdicts flipping where they should."""

import numpy as np
import pytest
import torch

from helpers import serving
from helpers.counting import hardware, interview, memory, models
from helpers.counting.models import ModelConfig
from helpers.decoder.chain_times import ChainDecoder
from helpers.decoder.model import random_decoder
from helpers.serving import capstone

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
QWEN, HALF, H100 = models.get("Qwen2.5-7B"), models.get("Qwen2.5-0.5B"), hardware.get("H100 SXM")


@pytest.fixture(scope="module")
def setting() -> ChainDecoder:
    torch.manual_seed(0)
    return ChainDecoder(TINY, random_decoder(TINY, scale=0.5), "fp32", "cpu",
                        torch.randint(0, TINY.vocab, (1, 5)), 1)  # fmt: skip


def test_one_pass_emits_what_serial_greedy_decoding_does(setting):
    check = capstone.greedy_check(setting, gamma=4, wrong=2)
    right, wrong = check.cases
    assert right == ("every guess right", 5, 4, True)  # every guess, and the bonus token
    assert wrong == ("the 3rd guess wrong", 3, 2, True)  # two guesses, then the target's own
    assert check.all_same and check.gamma == 4 and check.rounds == 1
    assert check.ratio == check.steps_s / check.verify_s
    assert check.within_bound == (check.ratio <= 5)
    report = check.report().splitlines()
    assert report[1] == ("the 3rd guess wrong: one pass emits 3 tokens, 2 of them guesses, the "
                         "same as serial greedy decoding")  # fmt: skip
    assert report[-1].startswith("at most 5x, as a pass costs at least one step: ")
    assert capstone.greedy_check(setting, gamma=1, wrong=0).cases[1].label == (
        "the 1st guess wrong")
    with pytest.raises(ValueError, match="wrong"):
        capstone.greedy_check(setting, gamma=4, wrong=4)


def test_speculation_by_batch_is_spec_tpot_at_its_best_gamma():
    study = capstone.spec_by_batch(QWEN, HALF, H100, context=2048, batches=(1, 8, 600),
                                   gammas=range(1, 4))  # fmt: skip
    for row in study.rows:
        tpots = {g: serving.spec_tpot(QWEN, HALF, H100, row.batch, 2048, 0.8, g)
                 for g in range(4)}  # fmt: skip
        assert row.plain == tpots[0] and row.spec == tpots[row.gamma]
        assert row.gamma == min(range(1, 4), key=tpots.get)
        assert study.speedup(row.batch) == row.plain / row.spec
    room = H100.memory_bytes - memory.weight_bytes(QWEN) - memory.weight_bytes(HALF)
    fits = int(room // (2048 * (memory.kv_bytes_per_token(QWEN)
                                + memory.kv_bytes_per_token(HALF))))  # fmt: skip
    assert study.pair_fits == fits and [r.fits for r in study.rows] == [True, True, False]
    table = study.table().splitlines()
    assert table[-2] == (f"{fits} sequences of 2,048 tokens fit on the H100 beside both models "
                         "(weights and caches)")  # fmt: skip
    assert table[-1].startswith("speedup at batch 1: ") and "; at batch 8: " in table[-1]
    with pytest.raises(ValueError, match="batches"):
        capstone.spec_by_batch(QWEN, HALF, H100, batches=())


def test_the_retrieval_diagnosis_simulates_each_fix_beside_the_prefill_alone():
    small = dict(document=2048, trimmed=512, requests=30)
    diagnosis = capstone.retrieval_diagnosis(QWEN, H100, **small)
    assert [f.name for f in diagnosis.fixes] == ["as sent", "trim the prompt", "prefix caching",
                                                 "chunked prefill 512"]  # fmt: skip
    steps = serving.RooflineSteps(QWEN, H100)
    trace = serving.poisson_trace(30, 2.0, 1024, 256, seed=9, max_prompt=4096, max_output=1024,
                                  shared_prefix=2048, shared_fraction=1.0)  # fmt: skip
    kv = serving.KVMemory(serving.kv_capacity_tokens(QWEN, H100.memory_bytes))
    result = serving.simulate(trace, steps, kv)
    alone = capstone.prefill_alone(steps, trace)
    assert alone[0] == steps(serving.Step(((trace[0].prompt, 0),), 0, 0, 1))
    sent = diagnosis.as_sent
    assert (sent.ttft, sent.own, sent.tpot) == (float(np.median(result.ttft)),
                                                float(np.median(alone)),
                                                float(np.nanmedian(result.tpot)))  # fmt: skip
    assert diagnosis.prefill_share == sent.own / sent.ttft
    assert diagnosis.cause == "the prompt"  # an idle engine: the prefill is the TTFT
    assert diagnosis.ttft_ratio("prefix caching") < 1 and diagnosis.fixes[2].own == sent.own
    assert len(diagnosis.table().splitlines()) == 1 + 4 + 1 + 3
    queued = capstone.retrieval_diagnosis(QWEN, H100, **{**small, "requests": 60}, rate=100.0)
    assert queued.cause == "a queue"  # arrivals far beyond what one engine prefills


def test_the_claims_gather_the_roofline_claims_and_the_simulated_shares():
    claims = capstone.interview_claims(QWEN, H100, models.get("Llama-3.1-8B"), requests=40)
    assert [c.claim for c in claims.claims[:2]] == [interview.prefill_claim(QWEN, H100).claim,
                                                    interview.decode_claim(QWEN, H100).claim]
    assert claims.claims[3] == interview.batching_claim(models.get("Llama-3.1-8B"), H100)
    steps = serving.RooflineSteps(QWEN, H100)
    kv = serving.KVMemory(serving.kv_capacity_tokens(QWEN, H100.memory_bytes))
    light = capstone.phase_shares(steps, kv, 2.0, 1024, requests=40)
    trace = serving.poisson_trace(40, 2.0, 1024, 256, seed=5, max_prompt=4096, max_output=1024)
    share = serving.PhaseShare(steps)
    result = serving.simulate(trace, share, kv)
    kept = np.isin(result.arrival, result.steady().arrival)
    assert light.prefill_of_ttft == pytest.approx(
        np.median(capstone.prefill_alone(steps, trace)[kept]) / np.median(result.ttft[kept]))
    assert light.decode_of_tpot == share.decode_wait / share.total_wait
    assert f"at 2 req/s the prefill alone is {light.prefill_of_ttft:.0%}" in claims.claims[2].found
    assert "40 requests:" in claims.claims[2].found and "(on 80 requests" in claims.claims[2].found
    assert len(claims.verdicts) == 4
