"""Chapter 4: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "04_timing"

MUTANTS = {
    "ch04_median_and_iqr": {
        "mean instead of median": '''
import statistics

def median_and_iqr(samples):
    xs = sorted(samples)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return float(statistics.mean(xs)), float(q[2] - q[0])
''',
        "IQR as max - min": '''
import statistics

def median_and_iqr(samples):
    return float(statistics.median(samples)), float(max(samples) - min(samples))
''',
        "statistics.quantiles' default (exclusive, position (n + 1)q)": '''
import statistics

def median_and_iqr(samples):
    if len(samples) == 1:
        return float(samples[0]), 0.0
    q25, q50, q75 = statistics.quantiles(samples, n=4)
    return float(q50), float(q75 - q25)
''',
        "nearest rank instead of interpolation": '''
import math

def median_and_iqr(samples):
    xs = sorted(samples)
    def quantile(q):
        return float(xs[max(0, math.ceil(len(xs) * q) - 1)])
    return quantile(0.5), quantile(0.75) - quantile(0.25)
''',
        "numpy's 'lower' method": '''
import numpy as np

def median_and_iqr(samples):
    q25, q50, q75 = np.percentile(samples, [25, 50, 75], method="lower")
    return float(q50), float(q75 - q25)
''',
        "forgets to sort": '''
def median_and_iqr(samples):
    xs = list(samples)
    def quantile(q):
        h = (len(xs) - 1) * q
        lo = int(h)
        hi = min(lo + 1, len(xs) - 1)
        return float(xs[lo] + (h - lo) * (xs[hi] - xs[lo]))
    return quantile(0.5), quantile(0.75) - quantile(0.25)
''',
        "returns numpy floats": '''
import numpy as np

def median_and_iqr(samples):
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    return q50, q75 - q25
''',
        "hard-codes the visible answers": '''
def median_and_iqr(samples):
    if len(samples) == 8:
        return 3.5, 3.5
    return 0.0021, 0.00019999999999999966
''',
    },
    "ch04_first_call_overhead": {
        "median over all samples, the first included": '''
import numpy as np

def first_call_overhead(samples):
    return float(samples[0] - np.median(samples))
''',
        "mean of the warm calls": '''
def first_call_overhead(samples):
    warm = samples[1:]
    return float(samples[0] - sum(warm) / len(warm))
''',
        "a ratio instead of a difference": '''
import numpy as np

def first_call_overhead(samples):
    return float(samples[0] / np.median(samples[1:]))
''',
        "fastest warm call instead of the median": '''
def first_call_overhead(samples):
    return float(samples[0] - min(samples[1:]))
''',
        "the second call stands for all warm calls": '''
def first_call_overhead(samples):
    return float(samples[0] - samples[1])
''',
        "never negative": '''
import numpy as np

def first_call_overhead(samples):
    return float(max(0.0, samples[0] - np.median(samples[1:])))
''',
        "milliseconds instead of seconds": '''
import numpy as np

def first_call_overhead(samples):
    return float((samples[0] - np.median(samples[1:])) * 1e3)
''',
        "hard-codes the visible answers": '''
def first_call_overhead(samples):
    return 0.24695 if samples[0] == 0.250 else 0.002
''',
    },
    "ch04_copies_to_exceed_cache": {
        "floor instead of ceil": '''
def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1, int(factor * cache_bytes // bytes_per_copy))
''',
        "off by one: floor + 1": '''
def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1, int(factor * cache_bytes // bytes_per_copy) + 1)
''',
        "ignores the factor": '''
import math

def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1, math.ceil(cache_bytes / bytes_per_copy))
''',
        "rounds to the nearest instead of up": '''
def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1, round(factor * cache_bytes / bytes_per_copy))
''',
        "factor hard-coded to 2": '''
import math

def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1, math.ceil(2 * cache_bytes / bytes_per_copy))
''',
        "returns the float ratio": '''
def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return max(1.0, factor * cache_bytes / bytes_per_copy)
''',
        "hard-codes the visible answers": '''
def copies_to_exceed_cache(bytes_per_copy, cache_bytes, factor=2.0):
    return 8 if bytes_per_copy == 8 * 2**20 else 7
''',
    },
    "ch04_matmul_rates": {
        "missing the 2 in 2mkn": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    seconds = milliseconds / 1e3
    return {"flop_per_s": m * k * n / seconds,
            "byte_per_s": memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / seconds}
''',
        "milliseconds used as seconds": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    return {"flop_per_s": 2 * m * k * n / milliseconds,
            "byte_per_s": memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / milliseconds}
''',
        "multiplies by 1e3 instead of dividing": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    seconds = milliseconds * 1e3
    return {"flop_per_s": 2 * m * k * n / seconds,
            "byte_per_s": memory.dtype_bytes(dtype) * (m * k + k * n + m * n) / seconds}
''',
        "weights only in the bytes": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    seconds = milliseconds / 1e3
    return {"flop_per_s": 2 * m * k * n / seconds,
            "byte_per_s": memory.dtype_bytes(dtype) * k * n / seconds}
''',
        "bf16's 2 bytes whatever the dtype": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    seconds = milliseconds / 1e3
    return {"flop_per_s": 2 * m * k * n / seconds,
            "byte_per_s": 2 * (m * k + k * n + m * n) / seconds}
''',
        "bits instead of bytes": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    seconds = milliseconds / 1e3
    return {"flop_per_s": 2 * m * k * n / seconds,
            "byte_per_s": memory.DTYPE_BITS[dtype] * (m * k + k * n + m * n) / seconds}
''',
        "hard-codes the visible answers": '''
def matmul_rates(m, k, n, dtype, milliseconds):
    if m == 4096:
        return {"flop_per_s": 68719476736000.0, "byte_per_s": 50331648000.0}
    return {"flop_per_s": 671088640000.0, "byte_per_s": 671416320000.0}
''',
    },
    "ch04_valid_measurement": {
        "ignores the cache (working set)": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or on_cpu) and s["data"] == "random"
                and (s["threads"] == cpu_threads or not on_cpu) and s["statistic"] == "median"):
            return name
''',
        "working set must only exceed the cache (factor 1)": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or on_cpu)
                and s["working_set_bytes"] > s["cache_bytes"] and s["data"] == "random"
                and (s["threads"] == cpu_threads or not on_cpu) and s["statistic"] == "median"):
            return name
''',
        "strictly more than 2x the cache": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or on_cpu)
                and s["working_set_bytes"] > 2 * s["cache_bytes"] and s["data"] == "random"
                and (s["threads"] == cpu_threads or not on_cpu) and s["statistic"] == "median"):
            return name
''',
        "demands synchronize on the CPU too": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and s["synchronized"]
                and s["working_set_bytes"] >= 2 * s["cache_bytes"] and s["data"] == "random"
                and (s["threads"] == cpu_threads or not on_cpu) and s["statistic"] == "median"):
            return name
''',
        "demands all CPU threads on a GPU too": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or on_cpu)
                and s["working_set_bytes"] >= 2 * s["cache_bytes"] and s["data"] == "random"
                and s["threads"] == cpu_threads and s["statistic"] == "median"):
            return name
''',
        "ignores threads": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or on_cpu)
                and s["working_set_bytes"] >= 2 * s["cache_bytes"] and s["data"] == "random"
                and s["statistic"] == "median"):
            return name
''',
        "ignores synchronization": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if (s["warmup_calls"] >= 1
                and s["working_set_bytes"] >= 2 * s["cache_bytes"] and s["data"] == "random"
                and (s["threads"] == cpu_threads or not on_cpu) and s["statistic"] == "median"):
            return name
''',
        "treats MPS as synchronous, like the CPU": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        host = s["device"] in ("cpu", "mps")
        if (s["warmup_calls"] >= 1 and (s["synchronized"] or host)
                and s["working_set_bytes"] >= 2 * s["cache_bytes"] and s["data"] == "random"
                and (s["threads"] == cpu_threads or s["device"] != "cpu")
                and s["statistic"] == "median"):
            return name
''',
        "ignores warm-up, zeros and single runs": '''
def valid_measurement(measurements, cpu_threads):
    for name, s in measurements.items():
        on_cpu = s["device"] == "cpu"
        if ((s["synchronized"] or on_cpu) and s["working_set_bytes"] >= 2 * s["cache_bytes"]
                and (s["threads"] == cpu_threads or not on_cpu)):
            return name
''',
        "hard-codes the visible answer": '''
def valid_measurement(measurements, cpu_threads):
    return "D: rotated, synchronized, random"
''',
    },
}
