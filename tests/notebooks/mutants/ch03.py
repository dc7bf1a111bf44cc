"""Chapter 3: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "03_roofline"

_BOUNDS_TEMPLATE = '''
def gemm_bounds(cfg, hw, new_tokens, batch=1, dtype="bf16", activation_dtype=None):
    b = {bytes_per_element}
    w = {weight_bytes}
    ridge = {ridge}
    bounds = {{}}
    for name, (k, n) in cfg.linear_shapes().items():
        m = {head_rows} if name == "lm_head" else {rows}
        intensity = {intensity}
        bounds[name] = "compute" if intensity {compare} ridge else "memory"
    return bounds
'''

_BOUNDS_RIGHT = {
    "bytes_per_element": "memory.dtype_bytes(activation_dtype or dtype)",
    "weight_bytes": "memory.dtype_bytes(dtype)",
    "ridge": "hw.peak(activation_dtype or dtype) / hw.bandwidth",
    "head_rows": "batch",
    "rows": "batch * new_tokens",
    "intensity": "2 * m * k * n / (b * (m * k + m * n) + w * k * n)",
    "compare": ">=",
}


def _bounds_mutant(**wrong):
    return _BOUNDS_TEMPLATE.format(**(_BOUNDS_RIGHT | wrong))


GEMM_BOUNDS = {
    "LM head over every token, as in training": _bounds_mutant(head_rows="batch * new_tokens"),
    "one LM-head row whatever the batch": _bounds_mutant(head_rows="1"),
    "activations ignored: weights-only bytes": _bounds_mutant(
        intensity="2 * m * k * n / (w * k * n)"),
    "2 bytes per element whatever the dtype": _bounds_mutant(bytes_per_element="2"),
    "bf16 ridge whatever the dtype": _bounds_mutant(ridge='hw.peak("bf16") / hw.bandwidth'),
    "the tie goes to memory (strict >)": _bounds_mutant(compare=">"),
    "batch ignored: one sequence's tokens": _bounds_mutant(rows="new_tokens", head_rows="1"),
    "new_tokens ignored: one row per sequence": _bounds_mutant(rows="batch"),
    "the weights at the activations' size": _bounds_mutant(
        weight_bytes="memory.dtype_bytes(activation_dtype or dtype)"),
    "activations at the weights' size too": _bounds_mutant(
        bytes_per_element="memory.dtype_bytes(dtype)"),
    "the ridge of the weights' dtype": _bounds_mutant(ridge="hw.peak(dtype) / hw.bandwidth"),
    "activation_dtype=None read as bf16, not dtype": _bounds_mutant(
        bytes_per_element='memory.dtype_bytes(activation_dtype or "bf16")',
        ridge='hw.peak(activation_dtype or "bf16") / hw.bandwidth'),
    "hard-codes the visible answers": '''
def gemm_bounds(cfg, hw, new_tokens, batch=1, dtype="bf16", activation_dtype=None):
    return {name: "memory" if name in ("k", "v") or (name == "lm_head" and new_tokens > 1)
            else "compute" for name in cfg.linear_shapes()}
''',
}

_STOPS_TEMPLATE = """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    if len(widths) == 1:
        return {one}
    knee = roofline.gemm_knee(k, {width}, hw.ridge({ridge_dtype}), {bytes_dtype})
    return {result}
"""
_STOPS_RIGHT = {
    "one": "1",
    "width": "min(widths)",
    "ridge_dtype": "dtype",
    "bytes_dtype": "dtype",
    "result": "knee",
}


def _stops_mutant(**wrong):
    return _STOPS_TEMPLATE.format(**(_STOPS_RIGHT | wrong))


_STOPS_SCAN = """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    def seconds(m, n):
        return max(flops.matmul_flops(m, k, n) / hw.peak(dtype),
                   memory.linear_bytes(m, k, n, dtype) / hw.bandwidth)

    for m in range(1, {cap}):
        if seconds(m, sum(widths)) >= {factor} * sum(seconds(m, n) for n in widths):
            return m
    return None
"""

FUSION = {
    "the widest matrix's crossing": _stops_mutant(width="max(widths)"),
    "the fused matmul's own crossing": _stops_mutant(width="sum(widths)"),
    "off by one: the last m at which fusion pays": _stops_mutant(
        result="None if knee is None else knee - 1"),
    "bf16 ridge whatever the dtype": _stops_mutant(ridge_dtype='"bf16"'),
    "bf16 bytes whatever the dtype": _stops_mutant(bytes_dtype='"bf16"'),
    "one width: its own crossing, as if fused with nothing": _stops_mutant(
        one="roofline.gemm_knee(k, widths[0], hw.ridge(dtype), dtype)"),
    "the separate matmuls' summed FLOPs over summed bytes reach the ridge": """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    if len(widths) == 1:
        return 1
    for m in range(1, 1 << 14):
        flop_count = sum(flops.matmul_flops(m, k, n) for n in widths)
        bytes_moved = sum(memory.linear_bytes(m, k, n, dtype) for n in widths)
        if flop_count >= hw.ridge(dtype) * bytes_moved:
            return m
    return None
""",
    "the tie goes to fusion (strictly past the ridge)": """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    if len(widths) == 1:
        return 1
    n, ridge = min(widths), hw.ridge(dtype)
    if 2 * k * n <= ridge * memory.dtype_bytes(dtype) * (k + n):
        return None
    m = 1
    while roofline.gemm_intensity(m, k, n, dtype) <= ridge:
        m += 1
    return m
""",
    "times compared exactly, rounding counted as a gain": _STOPS_SCAN.format(
        cap="1 << 14", factor="1"),
    "scan up to 4,096 rows, None past it": _STOPS_SCAN.format(cap="4097", factor="(1 - 1e-9)"),
    "the old exercise with a cutoff: stops once the speed-up is under 1%": """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    for m in range(1, 1 << 14):
        if roofline.fusion_speedup(m, k, widths, hw, dtype) < 1.01:
            return m
    return None
""",
    "hard-codes the visible answers": """
def fusion_stops_paying(k, widths, hw, dtype="bf16"):
    return 866 if len(widths) == 3 else 328
""",
}

_ROOFS_TEMPLATE = """
def roofs_from_times(seconds_a, chip_a, seconds_b, chip_b, dtype="bf16"):
    def same(x, y):
        return {same}

    speedup = {speedup}
    peaks = chip_b.peak({peak_dtype}) / chip_a.peak({peak_dtype})
    bandwidths = chip_b.bandwidth / chip_a.bandwidth
    if same(peaks, bandwidths):
        return None
    if same(speedup, peaks):
        return ("compute", "compute")
    if same(speedup, bandwidths):
        return ("memory", "memory")
    if peaks < speedup < bandwidths:
        return {low_ridge_b}
    if bandwidths < speedup < peaks:
        return {low_ridge_a}
    if speedup > max(peaks, bandwidths):
        return {faster}
    return {outside}
"""
_ROOFS_RIGHT = {
    "same": "abs(x / y - 1) < 0.02",
    "speedup": "seconds_a / seconds_b",
    "peak_dtype": "dtype",
    "low_ridge_b": '("memory", "compute")',
    "low_ridge_a": '("compute", "memory")',
    "faster": "None",
    "outside": "None",
}


def _roofs_mutant(**wrong):
    return _ROOFS_TEMPLATE.format(**(_ROOFS_RIGHT | wrong))


ROOFS = {
    "mixed cases swapped": _roofs_mutant(low_ridge_b='("compute", "memory")',
                                         low_ridge_a='("memory", "compute")'),
    "ratio of times upside down": _roofs_mutant(speedup="seconds_b / seconds_a"),
    "times compared exactly, no noise allowed": _roofs_mutant(same="x == y"),
    "bf16 peaks whatever the dtype": _roofs_mutant(peak_dtype='"bf16"'),
    "no roofline fits: answered anyway": _roofs_mutant(outside='("memory", "memory")'),
    "faster than both roofs: read as the faster roof": _roofs_mutant(
        faster='("memory", "memory") if bandwidths > peaks else ("compute", "compute")'),
    "only the bandwidths asked": """
def roofs_from_times(seconds_a, chip_a, seconds_b, chip_b, dtype="bf16"):
    ratio = (seconds_a / seconds_b) / (chip_b.bandwidth / chip_a.bandwidth)
    return ("memory", "memory") if abs(ratio - 1) < 0.02 else ("compute", "compute")
""",
    "only the peaks asked": """
def roofs_from_times(seconds_a, chip_a, seconds_b, chip_b, dtype="bf16"):
    ratio = (seconds_a / seconds_b) / (chip_b.peak(dtype) / chip_a.peak(dtype))
    return ("compute", "compute") if abs(ratio - 1) < 0.02 else ("memory", "memory")
""",
    "hard-codes the visible answers": """
def roofs_from_times(seconds_a, chip_a, seconds_b, chip_b, dtype="bf16"):
    return ("compute", "compute") if seconds_a > 0.01 else ("memory", "memory")
""",
}

_FREE_TEMPLATE = """
def free_batch(cfg, hw, context, slack, dtype="bf16"):
    peak, bandwidth = hw.peak({dtype}), hw.bandwidth

    def seconds(flop_count, bytes_moved):
        return {seconds}

    def step_seconds(batch):
        by_op = flops.forward_flops(cfg, 1, context=context, batch=batch).by_op
        moved = memory.forward_bytes(cfg, 1, context=context, batch=batch, dtype={dtype})
        attention_flops = by_op["attn_scores"] + by_op["attn_values"]
        weights_flops = sum(by_op.values()) - attention_flops
        weights_bytes = {weights_bytes}
        return {step}

    limit = {limit}
    low, high = 1, 2
    while step_seconds(high) <= limit:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if step_seconds(middle) <= limit:
            low = middle
        else:
            high = middle
    return {result}
"""
_FREE_RIGHT = {
    "dtype": "dtype",
    "seconds": "max(flop_count / peak, bytes_moved / bandwidth)",
    "weights_bytes": 'sum(moved.values()) - moved["attention"]',
    "step": 'seconds(weights_flops, weights_bytes) + seconds(attention_flops, moved["attention"])',
    "limit": "(1 + slack) * step_seconds(1)",
    "result": "low",
}


def _free_mutant(**wrong):
    return _FREE_TEMPLATE.format(**(_FREE_RIGHT | wrong))


# The weights alone, as the weight matrices hold them: no activation read or written.
_WEIGHTS_ONLY = ("memory.dtype_bytes(dtype) * (cfg.layers * sum(k * n for name, (k, n) in "
                 'cfg.linear_shapes().items() if name != "lm_head") + cfg.hidden * cfg.vocab)')
# One sequence's weight part, weights and activations, paid again by every sequence.
_PER_SEQUENCE = ('batch * (lambda one: sum(one.values()) - one["attention"])('
                 "memory.forward_bytes(cfg, 1, context=context, dtype=dtype))")

FREE = {
    "the aggregate model: one roofline over the whole step": _free_mutant(
        step="seconds(sum(by_op.values()), sum(moved.values()))"),
    "attention left out: the weight matmuls only": _free_mutant(
        step="seconds(weights_flops, weights_bytes)"),
    "activations left out: the weight part reads the weights only": _free_mutant(
        weights_bytes=_WEIGHTS_ONLY),
    "the weight part's bytes paid by every sequence": _free_mutant(weights_bytes=_PER_SEQUENCE),
    "off by one: the first batch past the slack": _free_mutant(result="high"),
    "slack in seconds, added to the step": _free_mutant(limit="step_seconds(1) + slack"),
    "slack times the step, not 1 + slack": _free_mutant(
        limit="max(slack, 1.0) * step_seconds(1)"),
    "dtype ignored: always bf16": _free_mutant(dtype='"bf16"'),
    "memory time only, as if never compute-bound": _free_mutant(
        seconds="bytes_moved / bandwidth"),
    "the roofline's two terms added": _free_mutant(
        seconds="flop_count / peak + bytes_moved / bandwidth"),
    "tries the batches one by one, up to a million": """
def free_batch(cfg, hw, context, slack, dtype="bf16"):
    peak, bandwidth = hw.peak(dtype), hw.bandwidth

    def seconds(flop_count, bytes_moved):
        return max(flop_count / peak, bytes_moved / bandwidth)

    def step_seconds(batch):
        by_op = flops.forward_flops(cfg, 1, context=context, batch=batch).by_op
        moved = memory.forward_bytes(cfg, 1, context=context, batch=batch, dtype=dtype)
        attention_flops = by_op["attn_scores"] + by_op["attn_values"]
        weights = seconds(sum(by_op.values()) - attention_flops,
                          sum(moved.values()) - moved["attention"])
        return weights + seconds(attention_flops, moved["attention"])

    limit = (1 + slack) * step_seconds(1)
    batch = 1
    while batch < 1_000_000 and step_seconds(batch + 1) <= limit:
        batch += 1
    return batch
""",
    "hard-codes the visible answers": """
def free_batch(cfg, hw, context, slack, dtype="bf16"):
    return 12 if context == 2048 else 4
""",
}

MUTANTS = {
    "ch03_fusion_stops_paying": FUSION,
    "ch03_roofs_from_times": ROOFS,
    "ch03_gemm_bounds": GEMM_BOUNDS,
    "ch03_free_batch": FREE,
}
