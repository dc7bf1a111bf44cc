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


_KNEE = '''
def quantized_knee(step_seconds, n_params, bandwidth, dtype, weight_dtype):
    batches = {order}
    before, last = {ends}
    slope = {slope}
    intercept = {intercept}
    floor = {floor}
    bits = {{"fp32": 32, "bf16": 16, "fp16": 16, "int8": 8, "fp8": 8, "int4": 4}}
    stored = [{stored} for d in {pair}]
    lowered = {lowered}

    def clip(x):
        return {clip}

    return {{"knee": clip((floor - intercept) / slope), "quantized_knee": clip({quantized})}}
'''

_KNEE_RIGHT = {
    "order": "sorted(step_seconds)",
    "ends": "batches[-2:]",
    "slope": "(step_seconds[last] - step_seconds[before]) / (last - before)",
    "intercept": "step_seconds[last] - slope * last",
    "floor": "step_seconds[batches[0]]",
    "stored": "-(-n_params * bits[d] // 8)",
    "pair": "(dtype, weight_dtype)",
    "lowered": "floor - (stored[0] - stored[1]) / bandwidth",
    "clip": "max(0.0, x)",
    "quantized": "(lowered - intercept) / slope",
}


def _knee(**wrong):
    return _KNEE.format(**(_KNEE_RIGHT | wrong))


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
    "ch07_quantized_knee": {
        "the knee on a line through the origin (no fixed cost)": _knee(
            slope="step_seconds[last] / last", intercept="0.0"),
        "the line through the smallest and the largest batch": _knee(
            ends="batches[0], batches[-1]"),
        "the whole floor shrinks by the byte ratio": _knee(
            lowered="floor * stored[1] / stored[0]"),
        "the knee shrinks by the byte ratio": _knee(
            quantized="(floor - intercept) / slope * stored[1] / stored[0]"),
        "the compute line speeds up too (as if int4 did fewer FLOPs)": _knee(
            quantized="(lowered - intercept) / (slope * stored[1] / stored[0])"),
        "int4's half-filled last byte dropped (no rounding up)": _knee(
            stored="n_params * bits[d] / 8"),
        "the sweep's dtype taken as bf16": _knee(pair='("bf16", weight_dtype)'),
        "the batches in the dict's order, not sorted": _knee(order="list(step_seconds)"),
        "the floor is the fastest step, not the smallest batch's": _knee(
            floor="min(step_seconds.values())"),
        "no clamp: a negative knee when compute-bound everywhere": _knee(clip="x"),
        "hard-codes the visible answers": '''
def quantized_knee(step_seconds, n_params, bandwidth, dtype, weight_dtype):
    return {"knee": 40.0, "quantized_knee": 10.0 if weight_dtype == "int4" else 20.0}
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
