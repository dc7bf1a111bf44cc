"""Chapter 4: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "04_timing"

MUTANTS = {
    "ch04_samples_needed": {
        "the same r on both sides (the fewest r, not the cheapest pair)": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    if a == b:
        return None
    r = max(4, math.floor((1.57 * (a_iqr + b_iqr) / abs(a - b)) ** 2) + 1)
    return r, r
""",
        "the fewest samples in all, not the least time": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 4
    while best is None or r_a + 4 < best[0]:
        room = gap - 1.57 * a_iqr / math.sqrt(r_a)
        if room > 0:
            r_b = max(4, math.floor((1.57 * b_iqr / room) ** 2) + 1)
            if best is None or r_a + r_b < best[0]:
                best = (r_a + r_b, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "the notch's √r forgotten (IQR / r)": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 4
    while best is None or r_a * a + 4 * b < best[0]:
        room = gap - 1.57 * a_iqr / r_a
        if room > 0:
            r_b = max(4, math.floor(1.57 * b_iqr / room) + 1)
            if best is None or r_a * a + r_b * b < best[0]:
                best = (r_a * a + r_b * b, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "no minimum of 4 samples": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 1
    while best is None or r_a * a + 1 * b < best[0]:
        room = gap - 1.57 * a_iqr / math.sqrt(r_a)
        if room > 0:
            r_b = max(1, math.floor((1.57 * b_iqr / room) ** 2) + 1)
            if best is None or r_a * a + r_b * b < best[0]:
                best = (r_a * a + r_b * b, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "the IQR of the pooled samples on both sides": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    a_iqr = b_iqr = timing.median_and_iqr(list(samples_a) + list(samples_b))[1]
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 4
    while best is None or r_a * a + 4 * b < best[0]:
        room = gap - 1.57 * a_iqr / math.sqrt(r_a)
        if room > 0:
            r_b = max(4, math.floor((1.57 * b_iqr / room) ** 2) + 1)
            if best is None or r_a * a + r_b * b < best[0]:
                best = (r_a * a + r_b * b, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "the costs swapped: a's samples at b's median": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 4
    while best is None or r_a * b + 4 * a < best[0]:
        room = gap - 1.57 * a_iqr / math.sqrt(r_a)
        if room > 0:
            r_b = max(4, math.floor((1.57 * b_iqr / room) ** 2) + 1)
            if best is None or r_a * b + r_b * a < best[0]:
                best = (r_a * b + r_b * a, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "the means, not the medians": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    a, b = sum(samples_a) / len(samples_a), sum(samples_b) / len(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    best = None
    r_a = 4
    while best is None or r_a * a + 4 * b < best[0]:
        room = gap - 1.57 * a_iqr / math.sqrt(r_a)
        if room > 0:
            r_b = max(4, math.floor((1.57 * b_iqr / room) ** 2) + 1)
            if best is None or r_a * a + r_b * b < best[0]:
                best = (r_a * a + r_b * b, r_a, r_b)
        r_a += 1
    return best[1], best[2]
""",
        "the continuous optimum, each side rounded up": """
import math

def samples_needed(samples_a, samples_b):
    (a, a_iqr), (b, b_iqr) = timing.median_and_iqr(samples_a), timing.median_and_iqr(samples_b)
    gap = abs(a - b)
    if gap == 0:
        return None
    # Lagrange: r_x in proportion to (IQR_x / median_x) ** (2 / 3), scaled to close the gap.
    wa, wb = (a_iqr / a) ** (2 / 3), (b_iqr / b) ** (2 / 3)
    if wa == 0 or wb == 0:
        return 4, 4
    s = (1.57 * (a_iqr / math.sqrt(wa) + b_iqr / math.sqrt(wb)) / gap) ** 2
    return max(4, math.ceil(s * wa)), max(4, math.ceil(s * wb))
""",
        "the visible answers hard-coded": """
def samples_needed(samples_a, samples_b):
    if len(samples_a) == 8:
        return (4, 4) if max(samples_b) < 1 else (132, 111)
    if len(samples_a) == 5:
        return 59, 12
    return None
""",
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
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    return "ok"
""",
        "labels by the roofline's bound, not by the roof beaten": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    peak *= max(1, threads / ceiling_threads)
    compute = flops.matmul_flops(m, k, n) / peak
    memory_s = memory.linear_bytes(m, k, n, dtype) / bandwidth
    if seconds * (1 + tolerance) >= max(compute, memory_s):
        return "ok"
    if compute >= memory_s:
        return "unknown" if peak_is_lower_bound else "compute"
    return "unknown" if bandwidth_is_lower_bound else "memory"
""",
        "no tolerance": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "tolerance as a share of the rate: rate × (1 − tolerance) > ceiling": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds * (1 - tolerance)
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds * (1 - tolerance)
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "weights only in the bytes": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.dtype_bytes(dtype) * k * n / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "bf16's 2 bytes whatever the dtype": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, "bf16") / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "checks the bandwidth only": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "bytes of the inputs only, the output left out": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.dtype_bytes(dtype) * (m * k + k * n) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "threads ignored: the peak as measured": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "the peak scaled by the thread ratio both ways, down for fewer threads": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= threads / ceiling_threads
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "a lower bound treated as a sound ceiling": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "memory"
    return "ok"
""",
        "a lower bound beaten: ok, the device can do better": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "ok" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "ok" if bandwidth_is_lower_bound else "memory"
    return "ok"
""",
        "the first ceiling beaten decides, though a lower bound settles nothing": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown" if peak_is_lower_bound else "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound or threads > ceiling_threads else "memory"
    return "ok"
""",
        "a lower bound beaten is skipped, but the bandwidth holds on any threads": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    if flop_per_s > (1 + tolerance) * peak and not peak_is_lower_bound:
        return "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "unknown" if bandwidth_is_lower_bound else "memory"
    if flop_per_s > (1 + tolerance) * peak:
        return "unknown"
    return "ok"
""",
        "any lower bound, whatever was beaten: unknown": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    flop_per_s = flops.matmul_flops(m, k, n) / seconds
    byte_per_s = memory.linear_bytes(m, k, n, dtype) / seconds
    peak *= max(1, threads / ceiling_threads)
    beaten = (flop_per_s > (1 + tolerance) * peak
              or byte_per_s > (1 + tolerance) * bandwidth)
    if beaten and (peak_is_lower_bound or bandwidth_is_lower_bound):
        return "unknown"
    if flop_per_s > (1 + tolerance) * peak:
        return "compute"
    if byte_per_s > (1 + tolerance) * bandwidth:
        return "memory"
    return "ok"
""",
        "hard-codes the visible answers": """
def roofline_verdict(m, k, n, dtype, seconds, peak, bandwidth, tolerance=0.1, *, threads=1,
                     ceiling_threads=1, peak_is_lower_bound=False,
                     bandwidth_is_lower_bound=False):
    if m == 4096:
        return "compute"
    if m == 768:
        return "unknown" if peak_is_lower_bound else "ok"
    if threads > ceiling_threads:
        return "unknown"
    return "memory" if seconds < 5e-6 else "ok"
""",
    },
    "ch04_timing_bias": {
        "zeros err either way on a CPU": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short" if on_gpu else "either")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "more threads than the work may use: faster": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long" if how["threads"] < cpu_threads else "too short")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "a single run errs either way, even when it is the first call": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1 and how["statistic"] == "median":
        ways.add("too long")
    if how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "a single run after warm-up is fine": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "MPS treated as synchronous, like the CPU": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if how["device"] == "cuda" and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "synchronize demanded on the CPU too": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "host threads counted on a GPU too": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "the first broken rule's direction only": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    if how["warmup_calls"] < 1:
        return "too long"
    if how["statistic"] == "single run":
        return "either"
    if on_gpu and not how["synchronized"]:
        return "too short"
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        return "too short"
    if how["data"] == "zeros":
        return "too short"
    if not on_gpu and how["threads"] != cpu_threads:
        return "too long"
    return "none"
''',
        "two broken rules always make either": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    broken = [how["warmup_calls"] < 1, on_gpu and not how["synchronized"],
              how["working_set_bytes"] < 2 * how["cache_bytes"], how["data"] == "zeros"]
    return ways.pop() if len(ways) == 1 and sum(broken) < 2 else "either"
''',
        "working set must only exceed the cache (factor 1)": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] <= how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "strictly more than 2x the cache": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["warmup_calls"] < 1:
        ways.add("too long")
    elif how["statistic"] == "single run":
        ways.add("either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] <= 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "no warm-up under a median: diluted away": '''
def timing_bias(how, cpu_threads):
    on_gpu = how["device"] in ("cuda", "mps")
    ways = set()
    if how["statistic"] == "single run":
        ways.add("too long" if how["warmup_calls"] < 1 else "either")
    if on_gpu and not how["synchronized"]:
        ways.add("too short")
    if how["working_set_bytes"] < 2 * how["cache_bytes"]:
        ways.add("too short")
    if how["data"] == "zeros":
        ways.add("too short")
    if not on_gpu and how["threads"] != cpu_threads:
        ways.add("too long")
    if not ways:
        return "none"
    return ways.pop() if len(ways) == 1 else "either"
''',
        "hard-codes the visible answers": '''
def timing_bias(how, cpu_threads):
    if how["device"] == "cuda" and not how["synchronized"]:
        return "too short"
    return "none"
''',
    },
}
