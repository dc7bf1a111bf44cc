"""Chapter 6: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers, or handles only the visible cases); it must run without crashing and be
rejected by the checkers.
"""

CHAPTER = "06_ttft_tpot"

_TRACE = '''
def trace_metrics(start_s, token_times):
    n = len(token_times)
    ttft = token_times[0] - start_s
    e2e = token_times[-1] - start_s
    gaps = [later - earlier for earlier, later in zip(token_times, token_times[1:])]
    {body}
'''

_ATTENTION = '''
def decode_attention_step(q, k_new, v_new, k_cache, v_cache, pos):
    {body}
'''

_PREDICT = '''
def predict_e2e(ttft_curve, tpot_curve, prompt_tokens, output_tokens):
    def read(curve, x):
        points = sorted(curve.items())
        if x <= points[0][0]:
            return float(points[0][1])
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
        return float(points[-1][1])

    {body}
'''

_DIAGNOSE = '''
def diagnose_first_token(ttft_s, prompt_tokens, idle_ttft_curve):
    def read(curve, x):
        points = sorted(curve.items())
        if x <= points[0][0]:
            return float(points[0][1])
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
        return float(points[-1][1])

    {body}
'''


def _indent(body: str) -> str:
    return body.strip("\n").replace("\n", "\n    ")


def _trace(body: str) -> str:
    return _TRACE.format(body=_indent(body))


def _attention(body: str) -> str:
    return _ATTENTION.format(body=_indent(body))


def _predict(body: str) -> str:
    return _PREDICT.format(body=_indent(body))


def _diagnose(body: str) -> str:
    return _DIAGNOSE.format(body=_indent(body))


MUTANTS = {
    "ch06_trace_metrics": {
        "TPOT as e2e / n (the first token's prefill counted as decode)": _trace('''
return {"ttft": float(ttft), "tpot": float(e2e / n), "e2e": float(e2e),
        "max_itl": float(max(gaps)) if gaps else 0.0}
'''),
        "TPOT over n, not n − 1 steps": _trace('''
return {"ttft": float(ttft), "tpot": float((e2e - ttft) / n), "e2e": float(e2e),
        "max_itl": float(max(gaps)) if gaps else 0.0}
'''),
        "the wait for the first token counted as an inter-token gap": _trace('''
gaps = [token_times[0] - start_s] + gaps
return {"ttft": float(ttft), "tpot": float((e2e - ttft) / (n - 1)) if n > 1 else 0.0,
        "e2e": float(e2e), "max_itl": float(max(gaps))}
'''),
        "the mean gap reported as the worst": _trace('''
return {"ttft": float(ttft), "tpot": float((e2e - ttft) / (n - 1)) if n > 1 else 0.0,
        "e2e": float(e2e), "max_itl": float(sum(gaps) / len(gaps)) if gaps else 0.0}
'''),
        "times measured from zero, not from the arrival": _trace('''
ttft, e2e = token_times[0], token_times[-1]
return {"ttft": float(ttft), "tpot": float((e2e - ttft) / (n - 1)) if n > 1 else 0.0,
        "e2e": float(e2e), "max_itl": float(max(gaps)) if gaps else 0.0}
'''),
        "hard-codes the visible answers": '''
def trace_metrics(start_s, token_times):
    return {"ttft": 0.5, "tpot": 0.1125, "e2e": 0.95, "max_itl": 0.29}
''',
    },
    "ch06_decode_attention": {
        "forgets to write the new key and value into the cache": _attention('''
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
values = v_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "attends over the cached tokens but not the new one (off by one)": _attention('''
k_cache[:, :, pos] = k_new[:, :, 0]
v_cache[:, :, pos] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, :pos].repeat_interleave(group, dim=1)
values = v_cache[:, :, :pos].repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "no 1/sqrt(head_dim) scale": _attention('''
k_cache[:, :, pos] = k_new[:, :, 0]
v_cache[:, :, pos] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
values = v_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
return (q @ keys.transpose(-1, -2)).softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "attends over the whole buffer, unwritten slots included": _attention('''
k_cache[:, :, pos] = k_new[:, :, 0]
v_cache[:, :, pos] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache.repeat_interleave(group, dim=1)
values = v_cache.repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "grows a new cache with torch.cat instead of writing the buffers": _attention('''
k_cache = torch.cat((k_cache[:, :, :pos], k_new), dim=2)
v_cache = torch.cat((v_cache[:, :, :pos], v_new), dim=2)
group = q.shape[1] // k_cache.shape[1]
keys = k_cache.repeat_interleave(group, dim=1)
values = v_cache.repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "writes a copy of the cache and returns it (right values, not in place)": _attention('''
k_cache, v_cache = k_cache.clone(), v_cache.clone()
k_cache[:, :, pos] = k_new[:, :, 0]
v_cache[:, :, pos] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
values = v_cache[:, :, : pos + 1].repeat_interleave(group, dim=1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
        "GQA heads tiled, not grouped: right only in the visible answers' MHA and MQA cases":
            _attention('''
k_cache[:, :, pos] = k_new[:, :, 0]
v_cache[:, :, pos] = v_new[:, :, 0]
group = q.shape[1] // k_cache.shape[1]
keys = k_cache[:, :, : pos + 1].repeat(1, group, 1, 1)
values = v_cache[:, :, : pos + 1].repeat(1, group, 1, 1)
scores = q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1])
return scores.softmax(dim=-1) @ values, k_cache, v_cache
'''),
    },
    "ch06_predict_e2e": {
        "one TPOT, read at the prompt length, for every step": _predict('''
return read(ttft_curve, prompt_tokens) + (output_tokens - 1) * read(tpot_curve, prompt_tokens)
'''),
        "each step's context one token too many": _predict('''
total = read(ttft_curve, prompt_tokens)
for step in range(1, output_tokens):
    total += read(tpot_curve, prompt_tokens + step)
return total
'''),
        "n decode steps, not n − 1 (the first token counted twice)": _predict('''
total = read(ttft_curve, prompt_tokens)
for step in range(1, output_tokens + 1):
    total += read(tpot_curve, prompt_tokens + step - 1)
return total
'''),
        "nearest measured point instead of a linear read": '''
def predict_e2e(ttft_curve, tpot_curve, prompt_tokens, output_tokens):
    def read(curve, x):
        return float(curve[min(curve, key=lambda point: abs(point - x))])

    total = read(ttft_curve, prompt_tokens)
    for step in range(1, output_tokens):
        total += read(tpot_curve, prompt_tokens + step - 1)
    return total
''',
        "hard-codes the visible answers": '''
def predict_e2e(ttft_curve, tpot_curve, prompt_tokens, output_tokens):
    return 0.42401
''',
    },
    "ch06_diagnose_first_token": {
        "waiting not clamped at zero": _diagnose('''
prefill_s = read(idle_ttft_curve, prompt_tokens)
queue_s = float(ttft_s) - prefill_s
return {"prefill_s": prefill_s, "queue_s": queue_s,
        "cause": "prefill" if prefill_s >= queue_s else "queueing"}
'''),
        "a tie called queueing": _diagnose('''
prefill_s = read(idle_ttft_curve, prompt_tokens)
queue_s = max(0.0, float(ttft_s) - prefill_s)
return {"prefill_s": prefill_s, "queue_s": queue_s,
        "cause": "prefill" if prefill_s > queue_s else "queueing"}
'''),
        "prefill compared with the whole TTFT, not with the waiting": _diagnose('''
prefill_s = read(idle_ttft_curve, prompt_tokens)
queue_s = max(0.0, float(ttft_s) - prefill_s)
return {"prefill_s": prefill_s, "queue_s": queue_s,
        "cause": "prefill" if prefill_s >= float(ttft_s) else "queueing"}
'''),
        "nearest measured point instead of a linear read": '''
def diagnose_first_token(ttft_s, prompt_tokens, idle_ttft_curve):
    nearest = min(idle_ttft_curve, key=lambda point: abs(point - prompt_tokens))
    prefill_s = float(idle_ttft_curve[nearest])
    queue_s = max(0.0, float(ttft_s) - prefill_s)
    return {"prefill_s": prefill_s, "queue_s": queue_s,
            "cause": "prefill" if prefill_s >= queue_s else "queueing"}
''',
        "hard-codes the visible answers": '''
def diagnose_first_token(ttft_s, prompt_tokens, idle_ttft_curve):
    if ttft_s == 2.0:
        return {"prefill_s": 0.8, "queue_s": 1.2, "cause": "queueing"}
    return {"prefill_s": 0.8, "queue_s": 0.1, "cause": "prefill"}
''',
    },
}
