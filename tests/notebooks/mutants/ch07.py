"""Chapter 7: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "07_batching"

_SWEEP = '''
def sweep_summary(step_seconds, tpot_slo):
    tpot = {{batch: float(seconds) for batch, seconds in sorted(step_seconds.items())}}
    throughput = {{batch: {rate} for batch, seconds in tpot.items()}}
    tpot = {{batch: {latency} for batch, seconds in tpot.items()}}
    best = None
    for batch in tpot:
        if {meets} and (best is None or {better}):
            best = batch
    return {{"tpot": tpot, "throughput": throughput, "best_batch": best}}
'''

_SWEEP_RIGHT = {
    "rate": "batch / seconds",
    "latency": "seconds",
    "meets": "tpot[batch] <= tpot_slo",
    "better": "throughput[batch] > throughput[best]",
}


def _sweep(**wrong):
    return _SWEEP.format(**(_SWEEP_RIGHT | wrong))


_CAP = '''
def max_batch(cfg, memory_bytes, context, weight_dtype="bf16", reserve_bytes=0):
    bits = {{"bf16": 16, "fp16": 16, "int8": 8, "fp8": 8, "int4": 4}}[weight_dtype]
    weights = {weights}
    kv_per_token = {kv}
    free = {free}
    {clamp}
    return int({count})
'''

_CAP_RIGHT = {
    "weights": "-(-flops.param_count(cfg) * bits // 8)",
    "kv": "2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim * 2",
    "free": "memory_bytes - weights - reserve_bytes",
    "clamp": "if free <= 0:\n        return 0",
    "count": "free // (kv_per_token * context)",
}


def _cap(**wrong):
    return _CAP.format(**(_CAP_RIGHT | wrong))


_STEP = '''
def schedule_step(running, waiting, free_blocks, max_batch, block_size=16):
    decoding = list(running)
    need = sum(1 for _, cached in decoding if {full})
    free, preempted = free_blocks, []
    while need > free:
        request_id, cached = decoding.{victim}
        free += {freed}
        if {full}:
            need -= 1
        preempted.append(request_id)
    free -= need
    admitted = []
    if {admit_guard}:
        {guard}
        for request_id, prompt in waiting:
            if {room}:
                break
            blocks = {blocks}
            if blocks > free:
                {blocked}
            admitted.append(request_id)
            free -= blocks
    return {{"decode": [request_id for request_id, _ in {decoded}], "preempted": preempted,
            "prefill": admitted, "free_blocks": free}}
'''

_STEP_RIGHT = {
    "full": "cached % block_size == 0",
    "victim": "pop()",
    "freed": "(cached + block_size - 1) // block_size",
    "admit_guard": "not preempted",
    "guard": "pass",
    "room": "len(decoding) + len(admitted) >= max_batch",
    "blocks": "(prompt + block_size - 1) // block_size",
    "blocked": "break",
    "decoded": "decoding",
}


def _step(**wrong):
    return _STEP.format(**(_STEP_RIGHT | wrong))


_PREFILL = '''
def padded_prefill(lengths):
    longest = int(lengths.max())
    slot = torch.arange(longest)
    pad = {pad}
    real = {real}
    causal = {causal}
    itself = torch.eye(longest, dtype=torch.bool)
    mask = {mask}
    positions = {positions}
    return mask[:, None], positions
'''

_PREFILL_RIGHT = {
    "pad": "(longest - lengths)[:, None]",
    "real": "slot[None, :] >= pad",
    "causal": "slot[None, :] <= slot[:, None]",
    "mask": "(causal[None] & real[:, None, :]) | itself[None]",
    "positions": "torch.where(real, slot[None, :] - pad, 0)",
}


def _prefill(**wrong):
    return _PREFILL.format(**(_PREFILL_RIGHT | wrong))


MUTANTS = {
    "ch07_sweep_summary": {
        "throughput per request (1 / step), not aggregate": _sweep(rate="1 / seconds"),
        "TPOT as the step shared out (step / B)": _sweep(latency="seconds / batch"),
        "best batch ignores the TPOT target": _sweep(meets="True"),
        "best batch = the largest that meets the target": _sweep(better="True"),
        "the target as a strict bound (<)": _sweep(meets="tpot[batch] < tpot_slo"),
        "a tie goes to the larger batch": _sweep(better="throughput[batch] >= throughput[best]"),
        "hard-codes the visible answers": '''
def sweep_summary(step_seconds, tpot_slo):
    tpot = {batch: float(seconds) for batch, seconds in step_seconds.items()}
    return {"tpot": tpot, "throughput": {b: b / t for b, t in tpot.items()}, "best_batch": 32}
''',
    },
    "ch07_max_batch": {
        "weights not subtracted": _cap(free="memory_bytes - reserve_bytes"),
        "KV counted with the query heads": _cap(
            kv="2 * cfg.layers * cfg.n_q_heads * cfg.head_dim * 2"),
        "no ×2 for K and V": _cap(kv="cfg.layers * cfg.n_kv_heads * cfg.head_dim * 2"),
        "weights always bf16: the quantization ignored": _cap(
            weights="2 * flops.param_count(cfg)"),
        "the reserve ignored": _cap(free="memory_bytes - weights"),
        "int4's half-filled last byte dropped (floor, not ceiling)": _cap(
            weights="flops.param_count(cfg) * bits // 8"),
        "no clamp: a negative batch when the weights do not fit": _cap(clamp="pass"),
        "KV cache in the weights' dtype too": _cap(
            kv="2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim * bits / 8"),
        "hard-codes the visible answers": '''
def max_batch(cfg, memory_bytes, context, weight_dtype="bf16", reserve_bytes=0):
    return 76 if weight_dtype == "int4" else 65
''',
    },
    "ch07_schedule_step": {
        "admits past max_batch (counts only the admitted)": _step(
            room="len(admitted) >= max_batch"),
        "lets the queue skip its blocked head": _step(blocked="continue"),
        "prefills only when no decodes run": _step(
            guard="waiting = [] if running else waiting"),
        "forgets the decodes' new blocks": _step(full="False"),
        "floor for the prompt's blocks": _step(blocks="max(1, prompt // block_size)"),
        "a decode needs a block one token early": _step(full="(cached + 1) % block_size == 0"),
        "preempts the oldest sequence, not the latest admitted": _step(victim="pop(0)"),
        "a preempted sequence frees one block, not all of its blocks": _step(freed="1"),
        "admits from the queue in the step that preempted": _step(admit_guard="True"),
        "lists the preempted sequences among the decodes": _step(decoded="running"),
        "hard-codes the visible answers": '''
def schedule_step(running, waiting, free_blocks, max_batch, block_size=16):
    if free_blocks == 1:
        return {"decode": [0], "preempted": [1], "prefill": [], "free_blocks": 2}
    return {"decode": [r for r, _ in running], "preempted": [],
            "prefill": [w for w, _ in waiting[:1]], "free_blocks": 3}
''',
    },
    "ch07_padded_prefill": {
        "positions count from column 0, padding included": _prefill(
            positions="slot[None, :].repeat(len(lengths), 1)"),
        "not causal: only the padding is masked": _prefill(
            causal="torch.ones(longest, longest, dtype=torch.bool)"),
        "a padding slot sees no key (NaN at the next layer)": _prefill(
            mask="causal[None] & real[:, None, :]"),
        "padding keys visible: causal only": _prefill(
            mask="causal[None].repeat(len(lengths), 1, 1)"),
        "right-padded: the prompt in the first columns": _prefill(
            real="slot[None, :] < lengths[:, None]",
            positions="torch.where(real, slot[None, :], 0)"),
        "one padding slot too few": _prefill(pad="(longest - lengths - 1).clamp(min=0)[:, None]"),
        "keys after the query (the causal mask transposed)": _prefill(
            causal="slot[None, :] >= slot[:, None]"),
        "hard-codes the visible answers": '''
def padded_prefill(lengths):
    mask = torch.tensor([[[1, 0, 0], [1, 1, 0], [1, 1, 1]], [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                         [[1, 0, 0], [0, 1, 0], [0, 1, 1]]], dtype=torch.bool)[:, None]
    return mask, torch.tensor([[0, 1, 2], [0, 0, 0], [0, 0, 1]])
''',
    },
}
