"""Chapter 5: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "05_matmuls"

MUTANTS = {
    "ch05_predicted_time": {
        "missing the 2 in 2mkn": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    compute = m * k * n / peak
    memory_time = memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / bandwidth
    return float(max(compute, memory_time))
''',
        "bf16 bytes whatever the dtype": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    compute = 2 * m * k * n / peak
    memory_time = 2 * (m * k + k * n + m * n) / bandwidth
    return float(max(compute, memory_time))
''',
        "activation traffic ignored: weights only": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    compute = 2 * m * k * n / peak
    memory_time = memory.dtype_bytes(dtype) * k * n / bandwidth
    return float(max(compute, memory_time))
''',
        "compute and memory times added, not overlapped": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    compute = 2 * m * k * n / peak
    memory_time = memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / bandwidth
    return float(compute + memory_time)
''',
        "min instead of max": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    compute = 2 * m * k * n / peak
    memory_time = memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / bandwidth
    return float(min(compute, memory_time))
''',
        "hard-codes the visible answers": '''
def predicted_time(m, k, n, peak, bandwidth, dtype="bf16"):
    if m == 1:
        return 0.01811141973333333
    return 2.317492770133333
''',
    },
    "ch05_knee_tokens": {
        "activations ignored: ridge · b / 2, and never None": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    import math
    return max(1, math.ceil(peak / bandwidth * memory.dtype_bytes(dtype) / 2))
''',
        "missing the 2 in 2mkn": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    import math
    ridge, b = peak / bandwidth, memory.dtype_bytes(dtype)
    room = k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * b * k * n / room))
''',
        "bf16 bytes whatever the dtype": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    import math
    ridge, b = peak / bandwidth, 2
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * b * k * n / room))
''',
        "ridge inverted: bandwidth / peak": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    import math
    ridge, b = bandwidth / peak, memory.dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * b * k * n / room))
''',
        "off by one: truncates instead of rounding up": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    ridge, b = peak / bandwidth, memory.dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, int(ridge * b * k * n / room))
''',
        "never returns None": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    import math
    ridge, b = peak / bandwidth, memory.dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    return max(1, math.ceil(ridge * b * k * n / room))
''',
        "hard-codes the visible answers": '''
def knee_tokens(k, n, peak, bandwidth, dtype="bf16"):
    return 17 if dtype == "fp32" else 328
''',
    },
    "ch05_prediction_error": {
        "sign flipped: (measured - predicted) / measured": '''
def prediction_error(predicted, measured):
    return float((measured - predicted) / measured)
''',
        "wrong denominator: divides by the prediction": '''
def prediction_error(predicted, measured):
    return float((predicted - measured) / predicted)
''',
        "inverted ratio: measured / predicted - 1": '''
def prediction_error(predicted, measured):
    return float(measured / predicted - 1)
''',
        "absolute value": '''
def prediction_error(predicted, measured):
    return float(abs(predicted / measured - 1))
''',
        "in per cent": '''
def prediction_error(predicted, measured):
    return float(100 * (predicted / measured - 1))
''',
        "hard-codes the visible answers": '''
def prediction_error(predicted, measured):
    return -0.25 if predicted < measured else 0.5
''',
    },
    "ch05_layer_time": {
        "max instead of sum: the slowest matmul only": '''
def layer_time(shapes, m, peak, bandwidth, dtype="bf16"):
    return float(max(roofline.predicted_time(m, k, n, peak, bandwidth, dtype)
                     for k, n in shapes.values()))
''',
        "each distinct shape counted once": '''
def layer_time(shapes, m, peak, bandwidth, dtype="bf16"):
    return float(sum(roofline.predicted_time(m, k, n, peak, bandwidth, dtype)
                     for k, n in set(shapes.values())))
''',
        "one roofline for the whole layer": '''
def layer_time(shapes, m, peak, bandwidth, dtype="bf16"):
    total_flops = sum(2 * m * k * n for k, n in shapes.values())
    total_bytes = sum(memory.dtype_bytes(dtype) * (m * k + k * n + m * n)
                      for k, n in shapes.values())
    return float(max(total_flops / peak, total_bytes / bandwidth))
''',
        "activation traffic ignored": '''
def layer_time(shapes, m, peak, bandwidth, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    return float(sum(max(2 * m * k * n / peak, b * k * n / bandwidth)
                     for k, n in shapes.values()))
''',
        "hard-codes the visible answers": '''
def layer_time(shapes, m, peak, bandwidth, dtype="bf16"):
    return 0.06216963413333333 if m == 1 else 7.9546373461333335
''',
    },
}
