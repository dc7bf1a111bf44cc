"""Chapter 1 (`01_flops`): the hidden tests reject plausible wrong answers.

Each mutant is a whole answer cell as a learner might write it. It must run (no NameError:
the checkers, not a crash, must reject it) and fail the *hidden* tests on their own. The
hard-coded mutants pass the visible tests, which proves the hidden ones are what stop them.
"""

CHAPTER = "01_flops"

_MATMUL_TEMPLATE = """
def torch_matmul_flops(a_shape, b_shape):
    a, b = list(a_shape), list(b_shape)
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = {right_vector}
    (m, k), (k_b, n) = a[-2:], b[-2:]
    if {inner_check}:
        raise ValueError("inner sizes differ")
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    products = 1
    for x, y in zip(batch_a, batch_b):
        if {broadcast_check}:
            raise ValueError("batch dimensions do not broadcast")
        products *= {combine}
    return {result}
"""

_MATMUL_RIGHT = {
    "right_vector": "b + [1]",
    "inner_check": "k != k_b",
    "broadcast_check": "x != y and 1 not in (x, y)",
    "combine": "max(x, y)",
    "result": "2 * products * m * k * n",
}


def _matmul_mutant(**wrong):
    return _MATMUL_TEMPLATE.format(**(_MATMUL_RIGHT | wrong))


MATMUL = {
    "batch sizes multiplied, not broadcast": _matmul_mutant(combine="x * y"),
    "k - 1 additions counted exactly": _matmul_mutant(result="products * m * (2 * k - 1) * n"),
    "float instead of int": _matmul_mutant(result="2.0 * products * m * k * n"),
    "broadcasting never checked": _matmul_mutant(broadcast_check="False"),
    "inner sizes never checked": _matmul_mutant(inner_check="False"),
    "a vector on the right counts no FLOPs (as FlopCounterMode shows)": _matmul_mutant(
        result="0 if len(b_shape) == 1 else 2 * products * m * k * n"),
    "batch of the first operand only": """
def torch_matmul_flops(a_shape, b_shape):
    a, b = list(a_shape), list(b_shape)
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    (m, k), (k_b, n) = a[-2:], b[-2:]
    if k != k_b:
        raise ValueError("inner sizes differ")
    products = 1
    for x in a[:-2]:
        products *= x
    return 2 * products * m * k * n
""",
    "counted by FlopCounterMode on meta tensors": """
def torch_matmul_flops(a_shape, b_shape):
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            torch.empty(a_shape, device="meta") @ torch.empty(b_shape, device="meta")
    except RuntimeError as error:
        raise ValueError(str(error)) from None
    return counter.get_total_flops()
""",
    "hard-coded visible answers": """
def torch_matmul_flops(a_shape, b_shape):
    visible = {((3, 4), (4, 5)): 120,
               ((1, 28, 1024, 128), (1, 28, 128, 1024)): 7_516_192_768,
               ((1, 4, 7, 1, 128), (1, 4, 1, 128, 1025)): 7_347_200,
               ((4,), (2, 4, 5)): 80,
               ((3, 1, 2, 4), (1, 2, 4, 5)): 480,
               ((3, 4), (4,)): 24}
    if (tuple(a_shape), tuple(b_shape)) in (((2, 3, 4), (3, 4, 5)), ((3, 4), (5, 6))):
        raise ValueError("visible error case")
    return visible.get((tuple(a_shape), tuple(b_shape)), 0)
""",
}

_WIDTH_TEMPLATE = """
def intermediate_from_params(cfg, total):
    d = cfg.hidden
    q_width = cfg.n_q_heads * cfg.head_dim
    kv_width = {kv_heads} * cfg.head_dim
    attention = d * q_width + 2 * d * kv_width + q_width * d
    biases = ({biases}) if cfg.qkv_bias else 0
    norms = {norms}
    fixed = cfg.layers * (attention + biases + norms) + {final_norm}
    per_width = {matrices} * d * cfg.layers
    fits = []
    for tied in {ties}:
        embeddings = cfg.vocab * d * ({embedding_factor})
        {width}
        if {fits}:
            fits.append((width, tied))
    return {result}
"""
_WIDTH_RIGHT = {
    "kv_heads": "cfg.n_kv_heads",
    "biases": "q_width + 2 * kv_width",
    "norms": "2 * d",
    "final_norm": "d",
    "matrices": "3",
    "ties": "(True, False)",
    "embedding_factor": "1 if tied else 2",
    "width": "width, rest = divmod(total - fixed - embeddings, per_width)",
    "fits": "rest == 0 and width > 0",
    "result": "sorted(fits)",
}


def _width_mutant(**wrong):
    return _WIDTH_TEMPLATE.format(**(_WIDTH_RIGHT | wrong))


WIDTH = {
    "the config's own tie believed": _width_mutant(ties="(cfg.tied_embeddings,)"),
    "tied LM head counted twice": _width_mutant(embedding_factor="2"),
    "untied LM head forgotten": _width_mutant(embedding_factor="1"),
    "forgot the q/k/v biases": _width_mutant(biases="0"),
    "n_q used for the kv widths": _width_mutant(kv_heads="cfg.n_q_heads"),
    "two MLP matrices, not SwiGLU's three": _width_mutant(matrices="2"),
    "forgot the norms": _width_mutant(norms="0", final_norm="0"),
    "forgot the final norm": _width_mutant(final_norm="0"),
    "rounds to the nearest width": _width_mutant(
        width="width, rest = round((total - fixed - embeddings) / per_width), 0"),
    "floor division: no check that the width is whole": _width_mutant(fits="width > 0"),
    "float division: exact only for small totals": _width_mutant(
        width="width = (total - fixed - embeddings) / per_width\n"
              "        rest, width = width - int(width), int(width)"),
    "a width of 0 accepted": _width_mutant(fits="rest == 0 and width >= 0"),
    "the first fit only": _width_mutant(result="sorted(fits)[:1]"),
    "tied first, not the smallest width first": _width_mutant(result="fits"),
    "hard-coded visible answers": """
def intermediate_from_params(cfg, total):
    return {7_615_616_512: [(18_944, False)], 1_235_814_400: [(5_520, False), (8_192, True)],
            999_812_736: [(6_912, True)],
            903_168_000_001_912_712_704: [(3_000_000_000_000_001, False)]}.get(total, [])
""",
}

# Closed forms, as the brief asks: a loop over a billion tokens would only run out of time.
_WINDOW_TEMPLATE = """
def window_attention_flops(cfg, new_tokens, context):
    window = {window}
    growing = new_tokens if window is None else {growing}
    pairs = {series}
    if window is not None:
        pairs += (new_tokens - growing) * {cap}
    return {per_key} * pairs
"""
_WINDOW_RIGHT = {
    "window": "cfg.sliding_window",
    "growing": "max(0, min(new_tokens, window - context))",
    "series": "growing * context + growing * (growing + 1) // 2",
    "cap": "window",
    "per_key": "flops.attention_flops_per_key(cfg)",
}


def _window_mutant(**wrong):
    return _WINDOW_TEMPLATE.format(**(_WINDOW_RIGHT | wrong))


WINDOW = {
    "window ignored: plain causal": _window_mutant(window="None"),
    "off by one: the window and the token itself": _window_mutant(
        growing="max(0, min(new_tokens, window + 1 - context))", cap="(window + 1)"),
    "off by one: the window counted without the token itself": _window_mutant(
        growing="max(0, min(new_tokens, window - 1 - context))", cap="(window - 1)"),
    "the series without the token itself: 0 + 1 + … + (n - 1)": _window_mutant(
        series="growing * context + growing * (growing - 1) // 2"),
    "no clamp: a cache already past the window makes `growing` negative": _window_mutant(
        growing="min(new_tokens, window - context)"),
    "the series halved in floats (exact only for small counts)": _window_mutant(
        series="growing * context + int(growing * (growing + 1) / 2)"),
    "dense rectangle: every new token sees context + new_tokens keys, capped": """
def window_attention_flops(cfg, new_tokens, context):
    keys = context + new_tokens
    if cfg.sliding_window is not None:
        keys = min(keys, cfg.sliding_window)
    return flops.attention_flops_per_key(cfg) * new_tokens * keys
""",
    "the window clips the cache only": """
def window_attention_flops(cfg, new_tokens, context):
    window = cfg.sliding_window
    cached = context if window is None else min(context, window)
    pairs = new_tokens * cached + new_tokens * (new_tokens + 1) // 2
    return flops.attention_flops_per_key(cfg) * pairs
""",
    "attention follows the kv heads": _window_mutant(
        per_key="4 * cfg.layers * cfg.n_kv_heads * cfg.head_dim"),
    "hard-coded visible answers": """
def window_attention_flops(cfg, new_tokens, context):
    visible = {("Mistral-7B-v0.1", 1, 8191): 2_147_483_648,
               ("Mistral-7B-v0.1", 8, 4092): 17_176_723_456,
               ("Qwen2.5-7B", 10, 0): 22_077_440,
               ("Mistral-7B-v0.1", 10**9, 0): 2_147_479_251_027_230_720,
               ("Qwen2.5-7B", 10**9, 0): 200_704_000_200_704_000_000_000,
               ("Mistral-7B-v0.1", 100, 0): 2_647_654_400,
               ("Qwen2.5-7B", 1, 1024): 411_443_200}
    return visible.get((cfg.name, new_tokens, context), 0)
""",
}

_CROSSOVER_TEMPLATE = """
def attention_crossover(cfg, layer_types=None):
    d, hd, window = cfg.hidden, cfg.head_dim, cfg.sliding_window
    q_width, kv_width = cfg.n_q_heads * hd, cfg.n_kv_heads * hd
    per_layer = d * q_width + 2 * d * kv_width + q_width * d + 3 * d * cfg.intermediate
    rest = {rest}
    per_key = 4 * {heads} * hd
    kinds = {kinds}
    sliding = list(kinds).count("sliding_attention")
    full = cfg.layers - sliding
    keys = {keys}
    if {inside}:
        return {result}
    if {no_full}:
        return None
    keys = {past}
    return {result}
"""
_CROSSOVER_RIGHT = {
    "rest": "2 * (cfg.layers * per_layer + d * cfg.vocab)",
    "heads": "cfg.n_q_heads",
    "kinds": ("layer_types or ['full_attention' if window is None else 'sliding_attention']"
              " * cfg.layers"),
    "keys": "max(1, -(-rest // (cfg.layers * per_key)))",
    "inside": "not sliding or keys <= window",
    "no_full": "not full",
    "past": "-(-(rest - sliding * window * per_key) // (full * per_key))",
    "result": "keys - 1",
}


def _crossover_mutant(**wrong):
    return _CROSSOVER_TEMPLATE.format(**(_CROSSOVER_RIGHT | wrong))


_TWO_N = ("2 * (cfg.layers * (per_layer + 2 * d + (q_width + 2 * kv_width if cfg.qkv_bias else 0))"
          " + cfg.vocab * d * (1 if cfg.tied_embeddings else 2) + d)")
CROSSOVER = {
    "2N per token as the rest, a common interview answer": _crossover_mutant(rest=_TWO_N),
    "LM head left out": _crossover_mutant(rest="2 * cfg.layers * per_layer"),
    "attention follows the kv heads": _crossover_mutant(heads="cfg.n_kv_heads"),
    "off by one: the new token does not attend to itself": _crossover_mutant(result="keys"),
    "a tie does not count (strictly more)": _crossover_mutant(
        keys="rest // (cfg.layers * per_key) + 1",
        past="(rest - sliding * window * per_key) // (full * per_key) + 1"),
    "window ignored": _crossover_mutant(inside="True"),
    "off by one at the window: needs a key to spare": _crossover_mutant(
        inside="not sliding or keys < window"),
    "layer_types ignored: the window slides every layer": _crossover_mutant(
        kinds="['full_attention' if window is None else 'sliding_attention'] * cfg.layers"),
    "any sliding layer caps attention for good": _crossover_mutant(no_full="True"),
    "past the window only the full layers count": _crossover_mutant(
        past="-(-rest // (full * per_key))"),
    "sliding layers always at the window, even before it fills": _crossover_mutant(
        inside="not sliding"),
    "a sliding layer sees w - 1 keys past the window": _crossover_mutant(
        past="-(-(rest - sliding * (window - 1) * per_key) // (full * per_key))"),
    "hard-coded visible answers": """
def attention_crossover(cfg, layer_types=None):
    if cfg.name == "Gemma-3-1B":
        return 119_223
    return None if cfg.sliding_window == 4096 else {"Qwen2.5-3B": 20_926}.get(cfg.name)
""",
}

MUTANTS = {
    "ch01_torch_matmul_flops": MATMUL,
    "ch01_intermediate_from_params": WIDTH,
    "ch01_window_attention_flops": WINDOW,
    "ch01_attention_crossover": CROSSOVER,
}
