"""Chapter 3: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "03_roofline"

_BOUNDS_TEMPLATE = '''
def gemm_bounds(cfg, hw, new_tokens, batch=1, dtype="bf16"):
    b = {bytes_per_element}
    ridge = {ridge}
    bounds = {{}}
    for name, (k, n) in cfg.linear_shapes().items():
        m = {head_rows} if name == "lm_head" else {rows}
        intensity = {intensity}
        bounds[name] = "compute" if intensity {compare} ridge else "memory"
    return bounds
'''

_BOUNDS_RIGHT = {
    "bytes_per_element": "memory.dtype_bytes(dtype)",
    "ridge": "hw.peak(dtype) / hw.bandwidth",
    "head_rows": "batch",
    "rows": "batch * new_tokens",
    "intensity": "2 * m * k * n / (b * (m * k + k * n + m * n))",
    "compare": ">=",
}


def _bounds_mutant(**wrong):
    return _BOUNDS_TEMPLATE.format(**(_BOUNDS_RIGHT | wrong))


GEMM_BOUNDS = {
    "LM head over every token, as in training": _bounds_mutant(head_rows="batch * new_tokens"),
    "one LM-head row whatever the batch": _bounds_mutant(head_rows="1"),
    "activations ignored: weights-only bytes": _bounds_mutant(
        intensity="2 * m * k * n / (b * k * n)"),
    "2 bytes per element whatever the dtype": _bounds_mutant(bytes_per_element="2"),
    "bf16 ridge whatever the dtype": _bounds_mutant(ridge='hw.peak("bf16") / hw.bandwidth'),
    "the tie goes to memory (strict >)": _bounds_mutant(compare=">"),
    "batch ignored: one sequence's tokens": _bounds_mutant(rows="new_tokens", head_rows="1"),
    "new_tokens ignored: one row per sequence": _bounds_mutant(rows="batch"),
    "hard-codes the visible answers": '''
def gemm_bounds(cfg, hw, new_tokens, batch=1, dtype="bf16"):
    if new_tokens > 1:
        return {name: "memory" if name == "lm_head" else "compute" for name in cfg.linear_shapes()}
    return {name: "memory" if name in ("k", "v") else "compute" for name in cfg.linear_shapes()}
''',
}

MUTANTS = {
    "ch03_gemm_intensity": {
        "missing the 2 in 2mkn": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    return m * k * n / (memory.dtype_bytes(dtype) * (m * k + k * n + m * n))
''',
        "forgets to write the output": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    return 2 * m * k * n / (memory.dtype_bytes(dtype) * (m * k + k * n))
''',
        "weights only, as the interview answer counts": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    return 2 * m * k * n / (memory.dtype_bytes(dtype) * k * n)
''',
        "bf16 hard-coded: 2 bytes whatever the dtype": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    return 2 * m * k * n / (2 * (m * k + k * n + m * n))
''',
        "bits instead of bytes": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    return 2 * m * k * n / (memory.DTYPE_BITS[dtype] * (m * k + k * n + m * n))
''',
        "hard-codes the visible answers": '''
def gemm_intensity(m, k, n, dtype="bf16"):
    if (m, k, n) == (1024, 3584, 18944):
        return 764.3112391930836
    return 0.999668305038748
''',
    },
    "ch03_roofline_time": {
        "min instead of max": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / peak_flops, bytes_moved / bandwidth
    return min(compute, memory_), "compute" if compute >= memory_ else "memory"
''',
        "adds the two times": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / peak_flops, bytes_moved / bandwidth
    return compute + memory_, "compute" if compute >= memory_ else "memory"
''',
        "bound label inverted at the tie (strict >)": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / peak_flops, bytes_moved / bandwidth
    return max(compute, memory_), "compute" if compute > memory_ else "memory"
''',
        "labels swapped": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / peak_flops, bytes_moved / bandwidth
    return max(compute, memory_), "memory" if compute >= memory_ else "compute"
''',
        "returns a list, not a tuple": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / peak_flops, bytes_moved / bandwidth
    return [max(compute, memory_), "compute" if compute >= memory_ else "memory"]
''',
        "hard-codes the visible answers": '''
def roofline_time(flops, bytes_moved, peak_flops, bandwidth):
    compute, memory_ = flops / 989e12, bytes_moved / 3.35e12  # the H100 of the visible tests
    return max(compute, memory_), "compute" if compute >= memory_ else "memory"
''',
    },
    "ch03_gemm_bounds": GEMM_BOUNDS,
    "ch03_critical_batch": {
        "rule of thumb B = ridge·b/2, activations ignored": '''
import math


def critical_batch(k, n, ridge, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    if 2 * k * n <= ridge * b * (k + n):
        return None
    return math.ceil(ridge * b / 2)
''',
        "off by one: truncates instead of rounding up": '''
def critical_batch(k, n, ridge, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, int(ridge * b * k * n / room))
''',
        "off by one: the last memory-bound batch": '''
def critical_batch(k, n, ridge, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    if 2 * k * n <= ridge * b * (k + n):
        return None
    batch = 1
    while roofline.gemm_intensity(batch + 1, k, n, dtype) < ridge:
        batch += 1
    return batch
''',
        "never returns None": '''
import math


def critical_batch(k, n, ridge, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    room = 2 * k * n - ridge * b * (k + n)
    return max(1, math.ceil(ridge * b * k * n / room)) if room else 1
''',
        "bf16 hard-coded": '''
import math


def critical_batch(k, n, ridge, dtype="bf16"):
    room = 2 * k * n - ridge * 2 * (k + n)
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * 2 * k * n / room))
''',
        "missing the 2 in the FLOPs": '''
import math


def critical_batch(k, n, ridge, dtype="bf16"):
    b = memory.dtype_bytes(dtype)
    room = k * n - ridge * b * (k + n)
    if room <= 0:
        return None
    return max(1, math.ceil(ridge * b * k * n / room))
''',
        "hard-codes the visible answers": '''
def critical_batch(k, n, ridge, dtype="bf16"):
    if n == 128:
        return None
    return 328 if n == 18944 else 354
''',
    },
}
