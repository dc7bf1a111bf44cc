"""One iteration of a continuous-batching scheduler (chapter 7)."""

from __future__ import annotations

from collections.abc import Sequence

from helpers._validate import non_negative_int, positive_int
from helpers.memory import (
    kv_blocks,
)


def schedule_step(
    running: Sequence[tuple[int, int]],
    waiting: Sequence[tuple[int, int]],
    free_blocks: int,
    max_batch: int,
    block_size: int = 16,
) -> dict:
    """One iteration of a continuous-batching scheduler with paged KV memory (chapter 7),
    as Orca schedules and vLLM allocates (the engine of ``serving.simulate`` does the same).

    ``running``: (request id, tokens in its cache) of each sequence decoding; ``waiting``:
    (request id, prompt length), first come first served. Every running sequence decodes
    one token, whose keys and values need a fresh block when its cache fills its blocks
    exactly (cached tokens a multiple of ``block_size``). Then requests are admitted from
    the head of the queue, to be prefilled in this same step, while the batch (running +
    admitted) is below ``max_batch`` and the prompt's ⌈prompt / block_size⌉ blocks fit in
    what is left; the first that does not fit stops admission (the queue's order is kept).
    Returns the ids that decode, the ids admitted, and the free blocks after the step.
    ValueError if the decodes alone need more blocks than are free (a real engine would
    preempt a sequence first).
    """
    non_negative_int(free_blocks, "free_blocks")
    positive_int(max_batch, "max_batch")
    positive_int(block_size, "block_size")
    need = sum(1 for _, cached in running if cached % block_size == 0)
    if need > free_blocks:
        raise ValueError(f"the decodes need {need} new blocks and only {free_blocks} are free: "
                         "preempt a sequence first")  # fmt: skip
    free = free_blocks - need
    admitted: list[int] = []
    for request, prompt in waiting:
        if len(running) + len(admitted) >= max_batch:
            break
        blocks = kv_blocks(prompt, block_size)
        if blocks > free:
            break  # the head waits for memory; nobody overtakes it
        admitted.append(request)
        free -= blocks
    return {"decode": [request for request, _ in running], "prefill": admitted,
            "free_blocks": free}  # fmt: skip
