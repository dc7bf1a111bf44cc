"""Chapter 7: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "07_batching"

_AT = '''
def batch_at_context(step_seconds, context, serve_context, kv_bytes_per_token, bandwidth,
                     kv_room, tpot_slo):
    extra_read = {extra}
    best, best_rate = None, 0.0
    for batch in {order}:
        step = {step}
        fits = {fits}
        if fits and {meets} and {better}:
            best, best_rate = batch, {rate}
    return best
'''

_AT_RIGHT = {
    "extra": "(serve_context - context) * kv_bytes_per_token / bandwidth",
    "order": "sorted(step_seconds)",
    "step": "step_seconds[batch] + batch * extra_read",
    "fits": "batch * serve_context * kv_bytes_per_token <= kv_room",
    "meets": "step <= tpot_slo",
    "better": "batch / step > best_rate",
    "rate": "batch / step",
}


def _at(**wrong):
    return _AT.format(**(_AT_RIGHT | wrong))


_KNEE = '''
def quantized_knee(step_seconds, n_params, bandwidth, dtype, quantized_dtype):
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
    "pair": "(dtype, quantized_dtype)",
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
    "ch07_batch_at_context": {
        "the sweep read as is: the context ignored": _at(extra="0.0"),
        "the extra KV read once a step, not once a sequence": _at(
            step="step_seconds[batch] + extra_read"),
        "the whole new cache added, as if the sweep read none": _at(
            extra="serve_context * kv_bytes_per_token / bandwidth"),
        "every sequence's extra read scaled by the batch twice (B^2)": _at(
            step="step_seconds[batch] + batch * batch * extra_read"),
        "memory ignored": _at(fits="True"),
        "memory checked at the sweep's context": _at(
            fits="batch * context * kv_bytes_per_token <= kv_room"),
        "the largest batch that meets both, not the most tokens/s": _at(
            better="True", rate="0.0"),
        "TPOT as the step shared out (step / B)": _at(meets="step / batch <= tpot_slo"),
        "a tie goes to the larger batch": _at(better="batch / step >= best_rate"),
        "hard-codes the visible answers": '''
def batch_at_context(step_seconds, context, serve_context, kv_bytes_per_token, bandwidth,
                     kv_room, tpot_slo):
    return 32 if kv_room > 2e10 else 8
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
        "the sweep's dtype taken as bf16": _knee(pair='("bf16", quantized_dtype)'),
        "the batches in the dict's order, not sorted": _knee(order="list(step_seconds)"),
        "the floor is the fastest step, not the smallest batch's": _knee(
            floor="min(step_seconds.values())"),
        "no clamp: a negative knee when compute-bound everywhere": _knee(clip="x"),
        "hard-codes the visible answers": '''
def quantized_knee(step_seconds, n_params, bandwidth, dtype, quantized_dtype):
    if step_seconds[1] > 0.0029:
        return {"knee": 44.0, "quantized_knee": 14.0}
    return {"knee": 40.0, "quantized_knee": 10.0 if quantized_dtype == "int4" else 20.0}
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
