"""Chapter 9 §1's measured chain (``helpers.decoder.chain_times``): the harness times each
callable in turn and restores torch's threads, a real run at a tiny size keeps its record's
invariants, and the roofline reading is the library's formulas, its verdict flipping where it
should on records built by hand."""

import pytest
import torch

from helpers.counting import hardware, interview, latency, models, roofline
from helpers.counting.models import ModelConfig
from helpers.decoder import chain_times
from helpers.decoder.chain_times import ChainDecoder, ChainTiming
from helpers.decoder.model import random_decoder

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip
QWEN, H100 = models.get("Qwen2.5-7B"), hardware.get("H100 SXM")


@pytest.fixture(scope="module")
def setting() -> ChainDecoder:
    torch.manual_seed(0)
    prompt = torch.randint(0, TINY.vocab, (1, 6))
    return ChainDecoder(TINY, random_decoder(TINY), "fp32", "cpu", prompt, 2)


def test_medians_in_turn_warms_up_then_takes_the_calls_in_rounds():
    order = []
    threads = torch.get_num_threads()
    seconds = chain_times.medians_in_turn([lambda: order.append("a"), lambda: order.append("b")],
                                          3, "cpu")  # fmt: skip
    assert order == ["a", "b"] * 4  # one warm-up round, then three
    assert len(seconds) == 2 and all(s >= 0 for s in seconds)
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="rounds"):
        chain_times.medians_in_turn([lambda: None], 0, "cpu")
    with pytest.raises(ValueError, match="calls"):
        chain_times.medians_in_turn([], 1, "cpu")


def test_a_chain_timing_times_one_pass_against_its_serial_steps(setting):
    chain = chain_times.pass_against_chain(setting)
    assert (chain.cfg, chain.dtype, chain.device, chain.tokens, chain.rounds) == (
        TINY, "fp32", "cpu", 6, 2)
    assert chain.pass_s > 0 and chain.chain_s > 0
    assert chain.step_s == chain.chain_s / 6 and chain.ratio == chain.chain_s / chain.pass_s
    assert chain.pass_steps == pytest.approx(chain.pass_s / chain.step_s)
    report = chain.report().splitlines()
    assert report[0] == "tiny-gqa on cpu, 6 tokens; medians of 2 rounds, the two in turn"
    assert report[-1] == f"  serial / one pass: {chain.ratio:.1f}x for the same 6 tokens"


def test_the_chapters_decoder_on_a_cpu_is_one_layer_in_fp32():
    torch.manual_seed(0)
    setting = chain_times.chain_decoder("cpu")
    assert (setting.cfg.layers, setting.cfg.vocab, setting.dtype) == (1, 4096, "fp32")
    assert setting.tokens == chain_times.CPU_TOKENS and setting.rounds == 9
    assert setting.model.embed.weight.dtype == torch.float32
    assert int(setting.prompt.max()) < 4096


def timing(pass_s: float, chain_s: float) -> ChainTiming:
    return ChainTiming(TINY, "fp32", "cpu", 16, 9, pass_s, chain_s)


def test_the_roofline_reading_is_the_librarys_prefill_and_decode_steps():
    reading = chain_times.chain_on_roofline(timing(0.01, 0.09), QWEN, H100, prompt=64)
    assert reading.prefill_s == latency.prefill_time(QWEN, H100, 64).seconds
    assert reading.serial_s == pytest.approx(
        sum(latency.decode_step_time(QWEN, H100, 1, c) for c in range(64)), rel=1e-12)
    assert reading.prefill_bound == latency.prefill_time(QWEN, H100, 64).bound == "memory"
    assert reading.ridge == roofline.ridge_point(H100) and reading.chip == "H100"
    assert reading.pass_intensity == interview.pass_intensity(TINY, 16, dtype="fp32",
                                                              attention="dense")  # fmt: skip
    assert reading.roofline_ratio == reading.serial_s / reading.prefill_s
    assert reading.prefill_steps == pytest.approx(reading.prefill_s * 64 / reading.serial_s)
    # 0.01 s against steps of 0.09 / 16 s: the pass costs 1.8 steps, more than its weight read
    assert reading.pass_costs_more and "its FLOPs, if" in reading.report()
    cheap = chain_times.chain_on_roofline(timing(0.006, 0.09), QWEN, H100, prompt=64)
    assert not cheap.pass_costs_more and cheap.report().endswith("as a memory-bound pass costs")
    assert "H100's ridge" in chain_times.chain_on_roofline(timing(0.01, 0.09), QWEN, "H100 SXM",
                                                           prompt=8).report()  # fmt: skip
    with pytest.raises(ValueError, match="prompt"):
        chain_times.chain_on_roofline(timing(0.01, 0.09), QWEN, H100, prompt=0)
