"""Chapter 2 (`02_bytes`): the hidden tests reject plausible wrong answers.

Each mutant is a whole answer cell, a mistake a learner could make. It must run (no
NameError or TypeError) and be rejected by the checkers of the *hidden* block alone, so
hard-coding the visible answers cannot pass.
"""

CHAPTER = "02_bytes"

WEIGHT_BYTES = {
    "bits, not bytes": '''
def weight_bytes(cfg, dtype):
    bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[dtype]
    return param_count(cfg) * bits
''',
    "int4 stored as a whole byte": '''
def weight_bytes(cfg, dtype):
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 1}[dtype]
    return param_count(cfg) * size
''',
    "half byte rounded down": '''
def weight_bytes(cfg, dtype):
    bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[dtype]
    return param_count(cfg) * bits // 8
''',
    "float, not int": '''
def weight_bytes(cfg, dtype):
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}[dtype]
    return param_count(cfg) * size
''',
    "fp8 taken for two bytes": '''
def weight_bytes(cfg, dtype):
    bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 16, "int8": 8, "int4": 4}[dtype]
    return (param_count(cfg) * bits + 7) // 8
''',
    "tied embeddings counted twice": '''
def weight_bytes(cfg, dtype):
    bits = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[dtype]
    params = param_count(cfg) + (cfg.vocab * cfg.hidden if cfg.tied_embeddings else 0)
    return (params * bits + 7) // 8
''',
    "visible answers hard-coded": '''
def weight_bytes(cfg, dtype):
    return 15_231_233_024 if dtype == "bf16" else 30_462_466_048
''',
}

KV_BYTES_PER_TOKEN = {
    "query heads for kv heads": '''
def kv_bytes_per_token(cfg, dtype):
    return int(2 * cfg.layers * cfg.n_q_heads * cfg.head_dim * memory.dtype_bytes(dtype))
''',
    "missing factor 2 for K and V": '''
def kv_bytes_per_token(cfg, dtype):
    return int(cfg.layers * cfg.n_kv_heads * cfg.head_dim * memory.dtype_bytes(dtype))
''',
    "bits, not bytes": '''
def kv_bytes_per_token(cfg, dtype):
    return 2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim * memory.DTYPE_BITS[dtype]
''',
    "forgot the layers": '''
def kv_bytes_per_token(cfg, dtype):
    return int(2 * cfg.n_kv_heads * cfg.head_dim * memory.dtype_bytes(dtype))
''',
    "head_dim taken as hidden / q heads": '''
def kv_bytes_per_token(cfg, dtype):
    head_dim = cfg.hidden // cfg.n_q_heads
    return int(2 * cfg.layers * cfg.n_kv_heads * head_dim * memory.dtype_bytes(dtype))
''',
    "bf16 assumed whatever the dtype": '''
def kv_bytes_per_token(cfg, dtype):
    return 2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim * 2
''',
    "visible answers hard-coded": '''
def kv_bytes_per_token(cfg, dtype):
    return 57_344 if cfg.n_kv_heads == 4 else 131_072
''',
}

KV_CACHE_BYTES = {
    "sliding window ignored": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    return batch * tokens * memory.kv_bytes_per_token(cfg, dtype)
''',
    "window applied to the whole batch": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    total = batch * tokens
    if cfg.sliding_window is not None:
        total = min(total, cfg.sliding_window)
    return total * memory.kv_bytes_per_token(cfg, dtype)
''',
    "batch forgotten": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    return kept * memory.kv_bytes_per_token(cfg, dtype)
''',
    "one token too many (the next one)": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    kept = tokens + 1
    if cfg.sliding_window is not None:
        kept = min(kept, cfg.sliding_window)
    return batch * kept * memory.kv_bytes_per_token(cfg, dtype)
''',
    "query heads for kv heads": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    kappa = int(2 * cfg.layers * cfg.n_q_heads * cfg.head_dim * memory.dtype_bytes(dtype))
    return batch * kept * kappa
''',
    "dtype ignored (bf16 always)": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    return batch * kept * memory.kv_bytes_per_token(cfg, "bf16")
''',
    "visible answers hard-coded": '''
def kv_cache_bytes(cfg, tokens, batch, dtype):
    return 6_710_886_400 if cfg.n_kv_heads == 40 else 8 * 1024 * 57_344
''',
}

MAX_CONCURRENT_SEQUENCES = {
    "weights not subtracted": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    return int(memory_bytes // memory.kv_cache_bytes(cfg, context, 1, dtype))
''',
    "rounded up": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, dtype)
    if free <= 0:
        return 0
    return math.ceil(free / memory.kv_cache_bytes(cfg, context, 1, dtype))
''',
    "rounded to nearest": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, dtype)
    if free <= 0:
        return 0
    return round(free / memory.kv_cache_bytes(cfg, context, 1, dtype))
''',
    "negative when the weights do not fit": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, dtype)
    return int(free // memory.kv_cache_bytes(cfg, context, 1, dtype))
''',
    "sliding window ignored": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, dtype)
    if free <= 0:
        return 0
    return int(free // (memory.kv_bytes_per_token(cfg, dtype) * context))
''',
    "bf16 weights whatever the dtype": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, "bf16")
    if free <= 0:
        return 0
    return int(free // memory.kv_cache_bytes(cfg, context, 1, dtype))
''',
    "float, not int": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    free = memory_bytes - memory.weight_bytes(cfg, dtype)
    if free <= 0:
        return 0
    return free // memory.kv_cache_bytes(cfg, context, 1, dtype)
''',
    "visible answers hard-coded": '''
def max_concurrent_sequences(cfg, memory_bytes, context, dtype):
    return 2318 if context == 1024 else 65
''',
}

DECODE_READ_TIME = {
    "KV cache forgotten": '''
def decode_read_time(cfg, hw, context, dtype):
    return memory.weight_bytes(cfg, dtype) / hw.bandwidth
''',
    "compute time instead (2N / peak FLOP/s)": '''
def decode_read_time(cfg, hw, context, dtype):
    return 2 * param_count(cfg) / hw.peak("bf16")
''',
    "bits, not bytes": '''
def decode_read_time(cfg, hw, context, dtype):
    bits = memory.DTYPE_BITS[dtype]
    kv = 2 * cfg.layers * cfg.n_kv_heads * cfg.head_dim * context
    return (param_count(cfg) + kv) * bits / hw.bandwidth
''',
    "sliding window ignored": '''
def decode_read_time(cfg, hw, context, dtype):
    kv = memory.kv_bytes_per_token(cfg, dtype) * context
    return (memory.weight_bytes(cfg, dtype) + kv) / hw.bandwidth
''',
    "milliseconds, not seconds": '''
def decode_read_time(cfg, hw, context, dtype):
    bytes_read = memory.weight_bytes(cfg, dtype) + memory.kv_cache_bytes(cfg, context, 1, dtype)
    return bytes_read / hw.bandwidth * 1e3
''',
    "bf16 assumed whatever the dtype": '''
def decode_read_time(cfg, hw, context, dtype):
    bytes_read = memory.weight_bytes(cfg, "bf16") + memory.kv_cache_bytes(cfg, context, 1, "bf16")
    return bytes_read / hw.bandwidth
''',
    "visible answers hard-coded": '''
def decode_read_time(cfg, hw, context, dtype):
    if context == 1024:
        return (15_231_233_024 + 1024 * 57_344) / 3.35e12
    return (16_060_522_496 + 8192 * 131_072) / 4.8e12
''',
}

MUTANTS = {
    "ch02_weight_bytes": WEIGHT_BYTES,
    "ch02_kv_bytes_per_token": KV_BYTES_PER_TOKEN,
    "ch02_kv_cache_bytes": KV_CACHE_BYTES,
    "ch02_max_concurrent_sequences": MAX_CONCURRENT_SEQUENCES,
    "ch02_decode_read_time": DECODE_READ_TIME,
}
