"""Chapter 6: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers, or handles only the visible cases); it must run without crashing and be
rejected by the checkers.
"""

CHAPTER = "06_ttft_tpot"

_ATTENTION = '''
def decode_attention_step(q, k_new, v_new, k_cache, v_cache, pos):
    {body}
'''

_LONGEST = '''
def longest_answer(ttft_curve, tpot_curve, prompt_tokens, budget):
    def read(curve, x):
        points = sorted(curve.items())
        if x <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        return points[-1][1]

    {body}
'''

_FIFO = '''
def fifo_first_tokens(arrivals, prefill_s):
    result = [None] * len(arrivals)
    {body}
    return result
'''

_STALL = '''
def stall_report(request, arrivals, token_times):
    own = token_times[request]
    {body}
'''


def _indent(body: str) -> str:
    return body.strip("\n").replace("\n", "\n    ")


def _attention(body: str) -> str:
    return _ATTENTION.format(body=_indent(body))


def _longest(body: str) -> str:
    return _LONGEST.format(body=_indent(body))


def _fifo(body: str) -> str:
    return _FIFO.format(body=_indent(body))


def _stall(body: str) -> str:
    return _STALL.format(body=_indent(body))


MUTANTS = {
    "ch06_decode_attention": {
        "one position for the whole batch (the first sequence's)": _attention('''
p = int(pos[0])
k_cache[:, :, p] = k_new[:, :, 0]
v_cache[:, :, p] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, : p + 1].repeat_interleave(group, dim=1)
values = v_cache[:, :, : p + 1].repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "read to the longest sequence, scores masked, unwritten values kept (0 × NaN)":
            _attention('''
pos = torch.as_tensor(pos)
rows = torch.arange(k_cache.shape[0])
k_cache[rows, :, pos] = k_new[:, :, 0]
v_cache[rows, :, pos] = v_new[:, :, 0]
length = int(pos.max()) + 1
written = torch.arange(length) <= pos[:, None]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, :length].repeat_interleave(group, dim=1)
values = v_cache[:, :, :length].repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
scores = scores.masked_fill(~written[:, None, None, :], -math.inf)
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "read to the longest sequence with a boolean mask, unwritten slots passed to SDPA":
            _attention('''
pos = torch.as_tensor(pos)
rows = torch.arange(k_cache.shape[0])
k_cache[rows, :, pos] = k_new[:, :, 0]
v_cache[rows, :, pos] = v_new[:, :, 0]
length = int(pos.max()) + 1
written = torch.arange(length) <= pos[:, None]
out = F.scaled_dot_product_attention(q, k_cache[:, :, :length], v_cache[:, :, :length],
                                     attn_mask=written[:, None, None, :], enable_gqa=True)
return out, k_cache, v_cache
'''),
        "GQA heads tiled, not grouped: right only in the visible answers' MHA and MQA cases":
            _attention('''
group = q.shape[1] // k_cache.shape[1]
outs = []
for b, p in enumerate(map(int, pos)):
    k_cache[b, :, p] = k_new[b, :, 0]
    v_cache[b, :, p] = v_new[b, :, 0]
    keys = k_cache[b, :, : p + 1].repeat(group, 1, 1)
    values = v_cache[b, :, : p + 1].repeat(group, 1, 1)
    outs.append(F.scaled_dot_product_attention(q[b], keys, values))
return torch.stack(outs), k_cache, v_cache
'''),
        "grows new caches with torch.cat instead of writing the buffers": _attention('''
ends = [int(p) for p in pos]
k_cache = torch.stack([torch.cat((k_cache[b, :, :p], k_new[b], k_cache[b, :, p + 1 :]), dim=1)
                       for b, p in enumerate(ends)])
v_cache = torch.stack([torch.cat((v_cache[b, :, :p], v_new[b], v_cache[b, :, p + 1 :]), dim=1)
                       for b, p in enumerate(ends)])
outs = [F.scaled_dot_product_attention(q[b : b + 1], k_cache[b : b + 1, :, : p + 1],
                                       v_cache[b : b + 1, :, : p + 1], enable_gqa=True)
        for b, p in enumerate(ends)]
return torch.cat(outs), k_cache, v_cache
'''),
        "no 1/sqrt(head_dim) scale": _attention('''
outs = []
for b, p in enumerate(map(int, pos)):
    k_cache[b, :, p] = k_new[b, :, 0]
    v_cache[b, :, p] = v_new[b, :, 0]
    outs.append(F.scaled_dot_product_attention(q[b : b + 1], k_cache[b : b + 1, :, : p + 1],
                                               v_cache[b : b + 1, :, : p + 1], scale=1.0,
                                               enable_gqa=True))
return torch.cat(outs), k_cache, v_cache
'''),
        "each sequence attends over the whole buffer, unwritten slots included": _attention('''
outs = []
for b, p in enumerate(map(int, pos)):
    k_cache[b, :, p] = k_new[b, :, 0]
    v_cache[b, :, p] = v_new[b, :, 0]
    outs.append(F.scaled_dot_product_attention(q[b : b + 1], k_cache[b : b + 1],
                                               v_cache[b : b + 1], enable_gqa=True))
return torch.cat(outs), k_cache, v_cache
'''),
    },
    "ch06_longest_answer": {
        "every step at the prompt's TPOT (the context never grows)": _longest('''
clock, tokens = read(ttft_curve, prompt_tokens), 0
while clock <= budget:
    tokens += 1
    clock += read(tpot_curve, prompt_tokens)
return tokens
'''),
        "each step's cache one token too long (the token it feeds in counted)": _longest('''
clock, tokens = read(ttft_curve, prompt_tokens), 0
while clock <= budget:
    tokens += 1
    clock += read(tpot_curve, prompt_tokens + tokens)
return tokens
'''),
        "the first token costs a decode step too (TTFT + n TPOT)": _longest('''
clock, tokens = read(ttft_curve, prompt_tokens), 0
while clock + read(tpot_curve, prompt_tokens + tokens) <= budget:
    clock += read(tpot_curve, prompt_tokens + tokens)
    tokens += 1
return tokens
'''),
        "the first token is always granted": _longest('''
clock, tokens = read(ttft_curve, prompt_tokens), 1
while clock + read(tpot_curve, prompt_tokens + tokens - 1) <= budget:
    clock += read(tpot_curve, prompt_tokens + tokens - 1)
    tokens += 1
return tokens
'''),
        "a token exactly at the budget counts as late": _longest('''
clock, tokens = read(ttft_curve, prompt_tokens), 0
while clock < budget:
    tokens += 1
    clock += read(tpot_curve, prompt_tokens + tokens - 1)
return tokens
'''),
        "budget / TPOT: the prefill left out": _longest('''
return int(budget // read(tpot_curve, prompt_tokens))
'''),
        "nearest measured point instead of a linear read": '''
def longest_answer(ttft_curve, tpot_curve, prompt_tokens, budget):
    def read(curve, x):
        return curve[min(curve, key=lambda point: abs(point - x))]

    clock, tokens = read(ttft_curve, prompt_tokens), 0
    while clock <= budget:
        tokens += 1
        clock += read(tpot_curve, prompt_tokens + tokens - 1)
    return tokens
''',
        "the curves carried on past their ends": '''
def longest_answer(ttft_curve, tpot_curve, prompt_tokens, budget):
    def read(curve, x):
        points = sorted(curve.items())
        if len(points) == 1:
            return points[0][1]
        pair = next(((a, b) for a, b in zip(points, points[1:]) if x <= b[0]), points[-2:])
        (x0, y0), (x1, y1) = pair
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    clock, tokens = read(ttft_curve, prompt_tokens), 0
    while clock <= budget:
        tokens += 1
        clock += read(tpot_curve, prompt_tokens + tokens - 1)
    return tokens
''',
        "hard-codes the visible answers": '''
def longest_answer(ttft_curve, tpot_curve, prompt_tokens, budget):
    return 3 if budget > 0.4 else 0
''',
    },
    "ch06_fifo_first_tokens": {
        "no queue: every TTFT is its own prefill": _fifo('''
for r, prefill in enumerate(prefill_s):
    result[r] = (0.0, float(prefill))
'''),
        "the engine never idles: each prefill starts when the previous one ends": _fifo('''
free = min(arrivals)
for r in sorted(range(len(arrivals)), key=lambda r: arrivals[r]):
    start = free
    free = start + prefill_s[r]
    result[r] = (float(start - arrivals[r]), float(free - arrivals[r]))
'''),
        "served in list order, not arrival order": _fifo('''
free = -math.inf
for r in range(len(arrivals)):
    start = max(arrivals[r], free)
    free = start + prefill_s[r]
    result[r] = (float(start - arrivals[r]), float(free - arrivals[r]))
'''),
        "TTFT measured from the prefill's start, not the arrival": _fifo('''
free = -math.inf
for r in sorted(range(len(arrivals)), key=lambda r: arrivals[r]):
    start = max(arrivals[r], free)
    free = start + prefill_s[r]
    result[r] = (float(start - arrivals[r]), float(free - start))
'''),
        "the wait counted until the first token, prefill included": _fifo('''
free = -math.inf
for r in sorted(range(len(arrivals)), key=lambda r: arrivals[r]):
    start = max(arrivals[r], free)
    free = start + prefill_s[r]
    result[r] = (float(free - arrivals[r]), float(free - arrivals[r]))
'''),
        "shortest prefill first among those waiting": _fifo('''
pending, clock = set(range(len(arrivals))), -math.inf
while pending:
    clock = max(clock, min(arrivals[r] for r in pending))
    ready = [r for r in pending if arrivals[r] <= clock]
    r = min(ready, key=lambda r: (prefill_s[r], arrivals[r], r))
    pending.remove(r)
    start, clock = clock, clock + prefill_s[r]
    result[r] = (float(start - arrivals[r]), float(clock - arrivals[r]))
'''),
        "ties broken by the longer prefill first": _fifo('''
free = -math.inf
for r in sorted(range(len(arrivals)), key=lambda r: (arrivals[r], -prefill_s[r])):
    start = max(arrivals[r], free)
    free = start + prefill_s[r]
    result[r] = (float(start - arrivals[r]), float(free - arrivals[r]))
'''),
        "hard-codes the visible answers": '''
def fifo_first_tokens(arrivals, prefill_s):
    return [(0.0, 1.0), (0.9, 1.4), (0.0, 0.2)]
''',
    },
    "ch06_stall_report": {
        "the wait for the first token counted as a gap": _stall('''
own = [arrivals[request]] + list(own)
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] < t[0] <= own[i + 1]]}
'''),
        "stallers found by their arrival, not their first token": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, a in enumerate(arrivals)
                       if r != request and own[i] < a <= own[i + 1]]}
'''),
        "the gap's end excluded": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] < t[0] < own[i + 1]]}
'''),
        "the gap's start included (and with it the request's own first token)": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times) if own[i] <= t[0] <= own[i + 1]]}
'''),
        "the gap's start included, its end excluded (the request itself left out)": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] <= t[0] < own[i + 1]]}
'''),
        "both of the gap's ends included (the request itself left out)": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] <= t[0] <= own[i + 1]]}
'''),
        "the mean gap reported as the worst": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(sum(gaps) / len(gaps)), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] < t[0] <= own[i + 1]]}
'''),
        "the last of equal worst gaps, not the first": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = max(range(len(gaps)), key=lambda i: (gaps[i], i))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] < t[0] <= own[i + 1]]}
'''),
        "any token of another request in the gap, decode steps included": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and any(own[i] < x <= own[i + 1] for x in t)]}
'''),
        "the gap's start reported as the token that closed it": _stall('''
gaps = [b - a for a, b in zip(own, own[1:])]
i = gaps.index(max(gaps))
return {"worst_itl": float(gaps[i]), "gap_start": float(own[i + 1]),
        "stalled_by": [r for r, t in enumerate(token_times)
                       if r != request and own[i] < t[0] <= own[i + 1]]}
'''),
        "hard-codes the visible answers": '''
def stall_report(request, arrivals, token_times):
    return {"worst_itl": 0.35, "gap_start": 0.65, "stalled_by": [1]}
''',
    },
}
