"""Chapter 3: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "03_roofline"

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
        "weights only, as the seed counts": '''
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
    "ch03_ridge_point": {
        "inverted: bandwidth over peak": '''
def ridge_point(peak_flops, bandwidth):
    return bandwidth / peak_flops
''',
        "rounded to a whole number, as tables print it": '''
def ridge_point(peak_flops, bandwidth):
    return round(peak_flops / bandwidth)
''',
        "floor division": '''
def ridge_point(peak_flops, bandwidth):
    return peak_flops // bandwidth
''',
        "datasheet figure with sparsity (twice the dense peak)": '''
def ridge_point(peak_flops, bandwidth):
    return 2 * peak_flops / bandwidth
''',
        "hard-codes the visible answer": '''
def ridge_point(peak_flops, bandwidth):
    return 295.2238805970149
''',
    },
    "ch03_attainable_flops": {
        "max instead of min": '''
def attainable_flops(intensity, peak_flops, bandwidth):
    return max(peak_flops, intensity * bandwidth)
''',
        "no compute roof": '''
def attainable_flops(intensity, peak_flops, bandwidth):
    return intensity * bandwidth
''',
        "divides by the bandwidth": '''
def attainable_flops(intensity, peak_flops, bandwidth):
    return min(peak_flops, intensity / bandwidth)
''',
        "ridge inverted: compares against bandwidth / peak": '''
def attainable_flops(intensity, peak_flops, bandwidth):
    if intensity >= bandwidth / peak_flops:
        return float(peak_flops)
    return intensity * bandwidth
''',
        "hard-codes the visible answers": '''
def attainable_flops(intensity, peak_flops, bandwidth):
    return 3.35e12 if intensity < 295 else 989e12
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
