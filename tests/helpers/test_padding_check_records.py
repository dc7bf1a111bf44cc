"""Chapter 7 §5's padded prefill as one call (``helpers.decoder.padding_check``): a tiny
decoder's left-padded batch against each prompt alone, run for real."""

import pytest
import torch

from helpers.counting.models import ModelConfig
from helpers.decoder.masks import left_pad
from helpers.decoder.model import Decoder
from helpers.decoder.padding_check import PaddedPrefillCheck, padded_prefill_check

TINY = ModelConfig(name="tiny-gqa", model_type="qwen2", hidden=64, intermediate=96, layers=2,
                   vocab=101, n_q_heads=4, n_kv_heads=2, head_dim=16, tied_embeddings=True,
                   qkv_bias=True)  # fmt: skip


@pytest.fixture(scope="module")
def model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(TINY).eval()


def test_padding_changes_no_first_token_and_the_record_is_the_steps_by_hand(model):
    with torch.no_grad():
        check = padded_prefill_check(model, (5, 1, 3), seed=11)
        # the same steps by hand: the same prompts, padded and alone
        generator = torch.Generator().manual_seed(11)
        prompts = [torch.randint(0, TINY.vocab, (n,), generator=generator).tolist()
                   for n in (5, 1, 3)]  # fmt: skip
        ids, lengths = left_pad(prompts)
        batched, _ = model(ids, logits="last", lengths=lengths)
        alone = [model(torch.tensor([p]), logits="last")[0][0] for p in prompts]
    assert check.lengths == (5, 1, 3) and check.padded_to == 5
    assert check.same == 3 and check.all_same
    assert check.gap == max((batched[r] - alone[r]).abs().max().item() for r in range(3))
    assert check.spread == max(a.std().item() for a in alone)
    assert check.gap < 1e-3 * check.spread  # rounding only: padding reaches no real token


def test_a_record_with_a_changed_token_is_not_all_same():
    assert not PaddedPrefillCheck((4, 2), 4, 1, 0.5, 3.0).all_same


@pytest.mark.parametrize("lengths, match", [((), "lengths is empty"), ((3, 0), "prompt length")])
def test_bad_lengths_are_refused(model, lengths, match):
    with pytest.raises(ValueError, match=match):
        padded_prefill_check(model, lengths)
