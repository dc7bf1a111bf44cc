"""Chapter 7 §5 (`07_batching`): a static batch's prompts prefilled together, left-padded
(``masks.left_pad``, the decoder given their ``lengths``), against each prompt prefilled
alone, as one call: ``padded_prefill_check`` → ``PaddedPrefillCheck``. Padding must change
nothing a real token computes, so each prompt's first token should be the one it gets alone,
its logits equal up to rounding (a different batch shape may sum in another order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers.counting._validate import positive_int
from helpers.decoder.masks import left_pad
from helpers.decoder.model import Decoder

__all__ = ["PaddedPrefillCheck", "padded_prefill_check"]


@dataclass(frozen=True)
class PaddedPrefillCheck:
    """Prompts of ``lengths`` tokens, prefilled left-padded to ``padded_to`` and alone:
    ``same``, how many got the same first token (the argmax of the last position's logits)
    both ways; ``gap``, the largest difference of a logit between the two; ``spread``, the
    largest standard deviation of one prompt's logits alone (what the gap is small against)."""

    lengths: tuple[int, ...]
    padded_to: int
    same: int
    gap: float
    spread: float

    @property
    def all_same(self) -> bool:
        return self.same == len(self.lengths)


def padded_prefill_check(model: Decoder, lengths: Sequence[int] = (12, 3, 7, 1),
                         seed: int = 7, device: str = "cpu") -> PaddedPrefillCheck:  # fmt: skip
    """Draw one random prompt of each of ``lengths`` tokens (token ids from a torch
    generator seeded with ``seed``), prefill them as one left-padded batch with the LM head
    on the last position only, and each alone, on ``model`` (on ``device``); compare the
    last position's logits. Call it under ``torch.no_grad()``, as for any inference."""
    if not lengths:
        raise ValueError("lengths is empty: the check needs at least one prompt")
    for n in lengths:
        positive_int(n, "each prompt length")
    generator = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, model.cfg.vocab, (n,), generator=generator).tolist()
               for n in lengths]  # fmt: skip
    ids, padded_lengths = left_pad(prompts, device=device)
    batched, _ = model(ids, logits="last", lengths=padded_lengths)
    alone = [model(torch.tensor([p], device=device), logits="last")[0][0] for p in prompts]
    rows = range(len(prompts))
    same = sum(bool(torch.equal(batched[row].argmax(-1), alone[row].argmax(-1))) for row in rows)
    gap = max((batched[row] - alone[row]).abs().max().item() for row in rows)
    spread = max(logits.std().item() for logits in alone)
    return PaddedPrefillCheck(tuple(lengths), int(ids.shape[1]), same, gap, spread)
