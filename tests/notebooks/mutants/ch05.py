"""Chapter 5: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "05_matmuls"

# read_knee and best_fix: each mutant changes one piece of the model answer's cell.
_KNEE_CAUSE = '''if decode_share < 0.99 * prefill_share:
        cause = "decode"
    elif prefill_share < 0.99 * decode_share:
        cause = "prefill"
    else:
        cause = "neither"'''
_KNEE_TEMPLATE = """
def read_knee(k, n, dtype, seconds, peak, bandwidth):
    decode_m, prefill_m = {ends}
    byte_per_s = {byte_rate}
    flop_per_s = {flop_rate}
    decode_share, prefill_share = byte_per_s / bandwidth, flop_per_s / peak
    {cause}
    return {{"predicted": roofline.gemm_knee(k, n, peak / bandwidth, dtype),
            "measured": roofline.gemm_knee(k, n, {measured_ridge}, dtype),
            "cause": cause}}
"""
_KNEE_RIGHT = {
    "ends": "min(seconds), max(seconds)",
    "byte_rate": "memory.linear_bytes(decode_m, k, n, dtype) / seconds[decode_m]",
    "flop_rate": "2 * prefill_m * k * n / seconds[prefill_m]",
    "cause": _KNEE_CAUSE,
    "measured_ridge": "flop_per_s / byte_per_s",
}


def _knee_mutant(**wrong):
    return _KNEE_TEMPLATE.format(**(_KNEE_RIGHT | wrong))


_FIX_TEMPLATE = """
def best_fix(shapes, m, seconds, peak, bandwidth, dtype="bf16"):
    floors, bounds, groups = {{}}, {{}}, {{}}
    for name, (k, n) in shapes.items():
        roof = roofline.matmul_time(m, k, n, peak, bandwidth, dtype)
        floors[name], bounds[name] = roof.seconds, roof.bound
        groups.setdefault((k, n), []).append(name)
    total = sum(seconds.values())
    kn = {pick}
    saved = {saved}
    return {{"names": {names}, "roof": {roof}, "speedup": {speedup}}}
"""
_FIX_RIGHT = {
    "pick": "max(groups, key=lambda kn: sum(seconds[n] - floors[n] for n in groups[kn]))",
    "saved": "sum(seconds[name] - floors[name] for name in groups[kn])",
    "names": "tuple(groups[kn])",
    "roof": "bounds[groups[kn][0]]",
    "speedup": "total / (total - saved)",
}
_LAYER_BOUND = ('("compute" if sum(2 * m * k * n for k, n in shapes.values()) / peak'
                " >= sum(memory.linear_bytes(m, k, n, dtype) for k, n in shapes.values())"
                ' / bandwidth else "memory")')


def _fix_mutant(**wrong):
    return _FIX_TEMPLATE.format(**(_FIX_RIGHT | wrong))


MUTANTS = {
    "ch05_carried_time": {
        "the ratio of roofline times, whatever the bounds": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    timed_s = roofline.matmul_time(m, *timed, peak, bandwidth, dtype).seconds
    real_s = roofline.matmul_time(m, *real, peak, bandwidth, dtype).seconds
    return float(median_s * real_s / timed_s)
''',
        "the share applied to both ceilings": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    share = roofline.matmul_time(m, *timed, peak, bandwidth, dtype).seconds / median_s
    return float(roofline.matmul_time(m, *real, peak * share, bandwidth * share, dtype).seconds)
''',
        "the share applied to the ceiling that binds the real shape": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    share = roofline.matmul_time(m, *timed, peak, bandwidth, dtype).seconds / median_s
    if roofline.matmul_time(m, *real, peak, bandwidth, dtype).bound == "compute":
        peak = peak * share
    else:
        bandwidth = bandwidth * share
    return float(roofline.matmul_time(m, *real, peak, bandwidth, dtype).seconds)
''',
        "the real shape's roofline alone, at the full ceilings": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    return float(roofline.matmul_time(m, *real, peak, bandwidth, dtype).seconds)
''',
        "the share upside down": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    roof = roofline.matmul_time(m, *timed, peak, bandwidth, dtype)
    share = median_s / roof.seconds
    if roof.bound == "compute":
        peak = peak * share
    else:
        bandwidth = bandwidth * share
    return float(roofline.matmul_time(m, *real, peak, bandwidth, dtype).seconds)
''',
        "the shortfall carried over in seconds, not as a share": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    slack = median_s - roofline.matmul_time(m, *timed, peak, bandwidth, dtype).seconds
    return float(roofline.matmul_time(m, *real, peak, bandwidth, dtype).seconds + slack)
''',
        "the bytes ratio whatever the bound": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    b = 2 if dtype in ("bf16", "fp16") else 4 if dtype == "fp32" else 1
    k, n = timed
    rk, rn = real
    return float(median_s * b * (m * rk + rk * rn + m * rn) / (b * (m * k + k * n + m * n)))
''',
        "the FLOPs ratio whatever the bound": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    return float(median_s * real[0] * real[1] / (timed[0] * timed[1]))
''',
        "the compute and memory times added on the real shape": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    roof = roofline.matmul_time(m, *timed, peak, bandwidth, dtype)
    share = roof.seconds / median_s
    k, n = real
    compute = 2 * m * k * n / peak
    memory_s = roofline.matmul_time(m, k, n, 1e30, bandwidth, dtype).seconds
    if roof.bound == "compute":
        return float(compute / share + memory_s)
    return float(compute + memory_s / share)
''',
        "hard-codes the visible answers": '''
def carried_time(m, timed, real, median_s, peak, bandwidth, dtype="bf16"):
    return 1.6 if dtype == "fp32" else 6.4e-5
''',
    },
    "ch05_cache_from_copies": {
        "the output counted in a set's bytes": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k + m * n))
        smallest = max(smallest, (copies - 1) * per_set // 2 + 1)
        top = copies * per_set // 2
        largest = top if largest is None else min(largest, top)
    return None if smallest > largest else (smallest, largest)
''',
        "the weight only": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (n * k))
        smallest = max(smallest, (copies - 1) * per_set // 2 + 1)
        top = copies * per_set // 2
        largest = top if largest is None else min(largest, top)
    return None if smallest > largest else (smallest, largest)
''',
        "factor 1: the sets exceed the cache once": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        smallest = max(smallest, (copies - 1) * per_set + 1)
        top = copies * per_set
        largest = top if largest is None else min(largest, top)
    return None if smallest > largest else (smallest, largest)
''',
        "floor, not ceiling: copies = 2C // bytes": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        smallest = max(smallest, copies * per_set // 2)
        top = (copies + 1) * per_set // 2 - 1
        largest = top if largest is None else min(largest, top)
    return None if smallest > largest else (smallest, largest)
''',
        "the bounds' ends the wrong way round": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        smallest = max(smallest, (copies - 1) * per_set // 2)
        top = copies * per_set // 2 - 1
        largest = top if largest is None else min(largest, top)
    return None if smallest > largest else (smallest, largest)
''',
        "one-copy rows skipped (they say nothing)": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        if copies == 1:
            continue
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        smallest = max(smallest, (copies - 1) * per_set // 2 + 1)
        top = copies * per_set // 2
        largest = top if largest is None else min(largest, top)
    return None if largest is None or smallest > largest else (smallest, largest)
''',
        "any row's range, not all of them": '''
def cache_from_copies(rows):
    smallest, largest = None, 0
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        low = (copies - 1) * per_set // 2 + 1
        smallest = low if smallest is None else min(smallest, low)
        largest = max(largest, copies * per_set // 2)
    return None if smallest > largest else (smallest, largest)
''',
        "never None": '''
def cache_from_copies(rows):
    smallest, largest = 1, None
    for m, k, n, dtype, copies in rows:
        per_set = int(memory.dtype_bytes(dtype) * (m * k + n * k))
        smallest = max(smallest, (copies - 1) * per_set // 2 + 1)
        top = copies * per_set // 2
        largest = top if largest is None else min(largest, top)
    return (smallest, largest)
''',
        "hard-codes the visible answer": '''
def cache_from_copies(rows):
    return (33_094_657, 36_771_840)
''',
    },
    "ch05_read_knee": {
        "first and last entries instead of the smallest and largest m": _knee_mutant(
            ends="list(seconds)[0], list(seconds)[-1]"),
        "the best rates anywhere in the sweep": _knee_mutant(
            byte_rate="max(memory.linear_bytes(m, k, n, dtype) / s for m, s in seconds.items())",
            flop_rate="max(2 * m * k * n / s for m, s in seconds.items())"),
        "weights only in the bytes": _knee_mutant(
            byte_rate="memory.dtype_bytes(dtype) * k * n / seconds[decode_m]"),
        "cause the wrong way round": _knee_mutant(
            cause=_KNEE_CAUSE.replace('"decode"', '"swap"').replace('"prefill"', '"decode"')
            .replace('"swap"', '"prefill"')),
        "cause read from the knees, not the shares": _knee_mutant(cause='''
    predicted = roofline.gemm_knee(k, n, peak / bandwidth, dtype)
    measured = roofline.gemm_knee(k, n, flop_per_s / byte_per_s, dtype)
    if predicted is None or measured is None or measured == predicted:
        cause = "neither"
    else:
        cause = "decode" if measured > predicted else "prefill"'''),
        "no 1% band: any difference names a cause": _knee_mutant(
            cause='cause = "decode" if decode_share < prefill_share else "prefill"'),
        "measured ridge inverted": _knee_mutant(measured_ridge="byte_per_s / flop_per_s"),
        "hard-codes the visible answers": """
def read_knee(k, n, dtype, seconds, peak, bandwidth):
    if dtype == "fp32":
        return {"predicted": 17, "measured": 25, "cause": "decode"}
    return {"predicted": 392, "measured": 215, "cause": "prefill"}
""",
    },
    "ch05_best_fix": {
        "per matmul, not per shape: the one name that loses the most": _fix_mutant(
            pick="shapes[max(shapes, key=lambda name: seconds[name] - floors[name])]"),
        "the shape furthest below its roof (lowest share)": _fix_mutant(
            pick="min(groups, key=lambda kn: min(floors[n] / seconds[n] for n in groups[kn]))"),
        "the slowest shape": _fix_mutant(
            pick="max(groups, key=lambda kn: sum(seconds[n] for n in groups[kn]))"),
        "the fix serves only one matmul of its shape": _fix_mutant(
            saved="seconds[groups[kn][0]] - floors[groups[kn][0]]"),
        "speedup as the share of time saved": _fix_mutant(speedup="1 + saved / total"),
        "names sorted, not in the layer's order": _fix_mutant(names="tuple(sorted(groups[kn]))"),
        "roof: the whole layer's bound": _fix_mutant(roof=_LAYER_BOUND),
        "the time lost as a ratio, summed": _fix_mutant(
            pick="max(groups, key=lambda kn: sum(seconds[n] / floors[n] - 1 for n in groups[kn]))"),
        "a list of names": _fix_mutant(names="list(groups[kn])"),
        "hard-codes the visible answers": """
def best_fix(shapes, m, seconds, peak, bandwidth, dtype="bf16"):
    return {"names": ("gate", "up"), "roof": "memory", "speedup": 1.2854417707025618}
""",
    },
}
