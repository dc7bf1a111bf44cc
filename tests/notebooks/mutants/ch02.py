"""Chapter 2 (`02_bytes`): the hidden tests reject plausible wrong answers.

Each mutant is a whole answer cell, a mistake a learner could make. It must run (no
NameError or TypeError) and be rejected by the checkers of the *hidden* block alone, so
hard-coding the visible answers cannot pass.
"""

CHAPTER = "02_bytes"

INT4_CHECKPOINT_BYTES = {
    "N/2: every parameter in int4, no scales": '''
def int4_checkpoint_bytes(cfg, group_size):
    return (param_count(cfg) * 4 + 7) // 8
''',
    "scales and zero points forgotten": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    quantized = sum(k * n for k, n in shapes.values())
    per_layer = sum(-(-k * n // 2) for k, n in shapes.values())
    return cfg.layers * per_layer + 2 * (param_count(cfg) - cfg.layers * quantized)
''',
    "LM head quantized like the layers": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    head = shapes.pop("lm_head")
    def packed(k, n):
        groups = n * -(-k // group_size)
        return -(-k * n // 2) + 2 * groups + -(-groups // 2)
    per_layer = sum(packed(k, n) for k, n in shapes.values())
    quantized = cfg.layers * sum(k * n for k, n in shapes.values())
    if not cfg.tied_embeddings:  # the head is its own matrix: quantize it too
        quantized += head[0] * head[1]
        per_layer_total = cfg.layers * per_layer + packed(*head)
    else:
        per_layer_total = cfg.layers * per_layer
    return per_layer_total + 2 * (param_count(cfg) - quantized)
''',
    "zero points forgotten": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    per_layer = quantized = 0
    for k, n in shapes.values():
        per_layer += -(-k * n // 2) + 2 * n * -(-k // group_size)
        quantized += k * n
    return cfg.layers * per_layer + 2 * (param_count(cfg) - cfg.layers * quantized)
''',
    "groups counted over the whole matrix, not per column": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    per_layer = quantized = 0
    for k, n in shapes.values():
        groups = -(-k * n // group_size)
        per_layer += -(-k * n // 2) + 2 * groups + -(-groups // 2)
        quantized += k * n
    return cfg.layers * per_layer + 2 * (param_count(cfg) - cfg.layers * quantized)
''',
    "groups rounded down": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    per_layer = quantized = 0
    for k, n in shapes.values():
        groups = n * (k // group_size)
        per_layer += -(-k * n // 2) + 2 * groups + -(-groups // 2)
        quantized += k * n
    return cfg.layers * per_layer + 2 * (param_count(cfg) - cfg.layers * quantized)
''',
    "tied embeddings counted twice": '''
def int4_checkpoint_bytes(cfg, group_size):
    shapes = cfg.linear_shapes()
    del shapes["lm_head"]
    per_layer = quantized = 0
    for k, n in shapes.values():
        groups = n * -(-k // group_size)
        per_layer += -(-k * n // 2) + 2 * groups + -(-groups // 2)
        quantized += k * n
    rest = param_count(cfg) - cfg.layers * quantized
    if cfg.tied_embeddings:
        rest += cfg.vocab * cfg.hidden
    return cfg.layers * per_layer + 2 * rest
''',
    "visible answers hard-coded": '''
def int4_checkpoint_bytes(cfg, group_size):
    return 5_570_747_392 if cfg.n_kv_heads == 4 else 5_727_854_592
''',
}

CONFIG_CACHE_BYTES = {
    "layer_types ignored: every layer slides": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kept = tokens if window is None else min(tokens, window)
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * config["num_hidden_layers"] * kept * 2 * kv_heads * head_dim * size
''',
    "windows ignored: every layer keeps all": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * config["num_hidden_layers"] * tokens * 2 * kv_heads * head_dim * size
''',
    "head_dim always hidden_size / heads": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    kept = sum(min(tokens, window) if kind == "sliding_attention" else tokens for kind in kinds)
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * kept * 2 * kv_heads * head_dim * size
''',
    "no num_key_value_heads read as one (MQA)": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or 1
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    kept = sum(min(tokens, window) if kind == "sliding_attention" else tokens for kind in kinds)
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * kept * 2 * kv_heads * head_dim * size
''',
    "use_sliding_window ignored": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    kept = sum(min(tokens, window) if kind == "sliding_attention" else tokens for kind in kinds)
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * kept * 2 * kv_heads * head_dim * size
''',
    "keys only (no factor 2)": '''
def config_cache_bytes(config, tokens, batch, dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    kept = sum(min(tokens, window) if kind == "sliding_attention" else tokens for kind in kinds)
    size = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}[dtype]
    return batch * kept * kv_heads * head_dim * size
''',
    "visible answers hard-coded": '''
def config_cache_bytes(config, tokens, batch, dtype):
    if config.get("layer_types"):
        return 27_721_728  # gpt-oss-20b, 1000 tokens, batch 1, bf16
    return 2 * 4096 * 131_072  # Mistral-7B-v0.1, batch 2, the window's 4096 tokens
''',
}

LONGEST_CONTEXT = {
    "one kappa for every layer at every length (the window ignored)": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kappa = (config["num_hidden_layers"] * 2 * kv_heads * head_dim
             * memory.dtype_bytes(kv_dtype))
    free = memory_bytes - weights
    if free <= 0:
        return 0
    return min(max_context, int(free // (users * kappa)))
''',
    "a window on any layer caps every layer's cache": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kappa = (config["num_hidden_layers"] * 2 * kv_heads * head_dim
             * memory.dtype_bytes(kv_dtype))
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is not None and window * users * kappa <= free:
        return max_context
    return min(max_context, int(free // (users * kappa)))
''',
    "past the window only the full layers counted, the window's bytes forgotten": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    return min(max_context, int(free // (full * per_layer)))
''',
    "the tokens past the window returned, not the context": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    return min(max_context, int((free - window * len(kinds) * per_layer) // (full * per_layer)))
''',
    "use_sliding_window ignored": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    rest = free - window * len(kinds) * per_layer
    return min(max_context, window + int(rest // (full * per_layer)))
''',
    "strictly less than the free memory (< for <=)": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights - 1  # the caches must stay under the memory
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    rest = free - window * len(kinds) * per_layer
    return min(max_context, window + int(rest // (full * per_layer)))
''',
    "an int4 value taken as a whole byte": '''
import math


def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    size = math.ceil(memory.dtype_bytes(kv_dtype))  # whole bytes per value
    per_layer = users * 2 * kv_heads * head_dim * size
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    rest = free - window * len(kinds) * per_layer
    return min(max_context, window + int(rest // (full * per_layer)))
''',
    "negative when the weights do not fit": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights
    if window is None or window * len(kinds) * per_layer > free:
        return min(max_context, int(free // (len(kinds) * per_layer)))
    if full == 0:
        return max_context
    rest = free - window * len(kinds) * per_layer
    return min(max_context, window + int(rest // (full * per_layer)))
''',
    "not capped at the model's limit": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    kinds = config.get("layer_types") or (
        ["full_attention" if window is None else "sliding_attention"]
        * config["num_hidden_layers"])
    full = kinds.count("full_attention")
    per_layer = users * 2 * kv_heads * head_dim * memory.dtype_bytes(kv_dtype)
    free = memory_bytes - weights
    if free <= 0:
        return 0
    if window is None or window * len(kinds) * per_layer > free:
        return int(free // (len(kinds) * per_layer))
    if full == 0:
        return max_context
    rest = free - window * len(kinds) * per_layer
    return window + int(rest // (full * per_layer))
''',
    "visible answers hard-coded": '''
def longest_context(config, memory_bytes, weights, users, max_context, kv_dtype):
    return 45_711 if config.get("layer_types") else 8325  # gpt-oss-20b; Llama-3.1-8B
''',
}

KV_COUNT_MISTAKE = {
    "the window left out of the right count too": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * tokens * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 8 * right,
              "query heads": batch * tokens * cfg.n_q_heads * per_head,
              "keys only": right // 2, "window ignored": right,
              "batch forgotten": tokens * cfg.n_kv_heads * per_head}
    return next((label for label, count in counts.items() if count == claimed), "unknown")
''',
    "query heads taken as n_q times the count": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 8 * right, "query heads": cfg.n_q_heads * right,
              "keys only": right // 2,
              "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    return next((label for label, count in counts.items() if count == claimed), "unknown")
''',
    "the last match wins, not the first": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 8 * right,
              "query heads": batch * kept * cfg.n_q_heads * per_head,
              "keys only": right // 2,
              "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    found = [label for label, count in counts.items() if count == claimed]
    return found[-1] if found else "unknown"
''',
    "the nearest count, never unknown": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 8 * right,
              "query heads": batch * kept * cfg.n_q_heads * per_head,
              "keys only": right // 2,
              "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    return min(counts, key=lambda label: abs(counts[label] - claimed))
''',
    "bits for bytes as 16 times": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 16 * right,
              "query heads": batch * kept * cfg.n_q_heads * per_head,
              "keys only": right // 2,
              "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    return next((label for label, count in counts.items() if count == claimed), "unknown")
''',
    "window ignored checked right after correct": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "bits for bytes": 8 * right,
              "query heads": batch * kept * cfg.n_q_heads * per_head,
              "keys only": right // 2,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    return next((label for label, count in counts.items() if count == claimed), "unknown")
''',
    "window ignored checked before query heads": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    kept = tokens if cfg.sliding_window is None else min(tokens, cfg.sliding_window)
    per_head = 2 * cfg.layers * cfg.head_dim * 2
    right = batch * kept * cfg.n_kv_heads * per_head
    counts = {"correct": right, "bits for bytes": 8 * right,
              "window ignored": batch * tokens * cfg.n_kv_heads * per_head,
              "query heads": batch * kept * cfg.n_q_heads * per_head,
              "keys only": right // 2,
              "batch forgotten": kept * cfg.n_kv_heads * per_head}
    return next((label for label, count in counts.items() if count == claimed), "unknown")
''',
    "visible answers hard-coded": '''
def kv_count_mistake(cfg, tokens, batch, claimed):
    return "correct" if claimed == 8 * 1024 * 57_344 else "query heads"
''',
}

MUTANTS = {
    "ch02_int4_checkpoint_bytes": INT4_CHECKPOINT_BYTES,
    "ch02_config_cache_bytes": CONFIG_CACHE_BYTES,
    "ch02_longest_context": LONGEST_CONTEXT,
    "ch02_kv_count_mistake": KV_COUNT_MISTAKE,
}
