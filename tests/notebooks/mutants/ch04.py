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
    "ch04_time_blocks": {
        "no warm-up": """
def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    calls = 0
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*input_sets[calls % len(input_sets)])
            calls += 1
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "warm-up of `warmup` calls, not rounds over every set": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "never synchronizes (times the launches)": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "synchronizes before the last clock read only": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "synchronizes before the first clock read only": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "times the first input set only (the cache serves it)": """
def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    for inputs in input_sets * warmup:
        fn(*inputs)
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*input_sets[0])
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "starts the cycle again in every block": """
def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    for inputs in input_sets * warmup:
        fn(*inputs)
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for i in range(number):
            fn(*input_sets[i % len(input_sets)])
        synchronize(device)
        samples.append((clock() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "block times, not divided by the calls": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = clock()
        for _ in range(number):
            fn(*next(inputs))
        synchronize(device)
        samples.append(clock() - start)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "each call timed on its own, and the mean": """
import itertools
import statistics

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        total = 0.0
        for _ in range(number):
            synchronize(device)
            start = clock()
            fn(*next(inputs))
            synchronize(device)
            total += clock() - start
        samples.append(total / number)
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [0, 0, 0]
    return float(statistics.mean(samples)), float(q[2] - q[0]), samples
""",
        "reads time.perf_counter, not the clock it is given": """
import itertools

def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    inputs = itertools.cycle(input_sets)
    for _ in range(warmup * len(input_sets)):
        fn(*next(inputs))
    samples = []
    for _ in range(blocks):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(number):
            fn(*next(inputs))
        synchronize(device)
        samples.append((time.perf_counter() - start) / number)
    median, iqr = timing.median_and_iqr(samples)
    return median, iqr, samples
""",
        "hard-codes the visible answers": """
def time_blocks(fn, input_sets, device, warmup=1, blocks=5, number=10,
                clock=time.perf_counter, synchronize=timing.synchronize):
    if len(input_sets) == 8:
        samples = [3.172439999999874e-05, 3.672439999999888e-05, 3.172439999999874e-05,
                   3.172439999999874e-05, 3.672439999999888e-05]
        return 3.172439999999874e-05, 5.000000000000142e-06, samples
    samples = [time.perf_counter() * 0 + 1e-4] * blocks
    return 1e-4, 0.0, samples
""",
    },
    "ch04_roofline_verdict": {
        "bandwidth first: a cache 'explains' every fast GEMV": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if memory.linear_bytes(m, k, n, dtype) / seconds > (1 + tolerance) * bandwidth:
        return "memory"
    if flops.matmul_flops(m, k, n) / seconds > (1 + tolerance) * peak:
        return "compute"
    return "ok"
""",
        "labels by the roofline's bound, not by the roof beaten": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    predicted = max(flops.matmul_flops(m, k, n) / peak,
                    memory.linear_bytes(m, k, n, dtype) / bandwidth)
    if seconds * (1 + tolerance) >= predicted:
        return "ok"
    compute = flops.matmul_flops(m, k, n) / peak
    return "compute" if compute >= memory.linear_bytes(m, k, n, dtype) / bandwidth else "memory"
""",
        "no tolerance": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if flops.matmul_flops(m, k, n) / seconds > peak:
        return "compute"
    if memory.linear_bytes(m, k, n, dtype) / seconds > bandwidth:
        return "memory"
    return "ok"
""",
        "tolerance as a share of the rate: rate × (1 − tolerance) > ceiling": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if flops.matmul_flops(m, k, n) / seconds * (1 - tolerance) > peak:
        return "compute"
    if memory.linear_bytes(m, k, n, dtype) / seconds * (1 - tolerance) > bandwidth:
        return "memory"
    return "ok"
""",
        "weights only in the bytes": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if flops.matmul_flops(m, k, n) / seconds > (1 + tolerance) * peak:
        return "compute"
    if memory.dtype_bytes(dtype) * k * n / seconds > (1 + tolerance) * bandwidth:
        return "memory"
    return "ok"
""",
        "bf16's 2 bytes whatever the dtype": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if flops.matmul_flops(m, k, n) / seconds > (1 + tolerance) * peak:
        return "compute"
    if memory.linear_bytes(m, k, n, "bf16") / seconds > (1 + tolerance) * bandwidth:
        return "memory"
    return "ok"
""",
        "checks the bandwidth only": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if memory.linear_bytes(m, k, n, dtype) / seconds > (1 + tolerance) * bandwidth:
        return "memory"
    return "ok"
""",
        "hard-codes the visible answers": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1):
    if m == 4096:
        return "compute"
    return "memory" if seconds < 5e-6 else "ok"
""",
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
