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
    "hard-coded visible answers": """
def torch_matmul_flops(a_shape, b_shape):
    visible = {((3, 4), (4, 5)): 120,
               ((1, 28, 1024, 128), (1, 28, 128, 1024)): 7_516_192_768,
               ((1, 4, 7, 1, 128), (1, 4, 1, 128, 1025)): 7_347_200}
    return visible.get((tuple(a_shape), tuple(b_shape)), 0)
""",
}

_PARAM_TEMPLATE = """
def param_count(cfg):
    d, f = cfg.hidden, cfg.intermediate
    q_width = cfg.n_q_heads * {head_dim}
    kv_width = {kv_heads} * {head_dim}
    attention = d * q_width + 2 * d * kv_width + q_width * d
    biases = ({biases}) if cfg.qkv_bias else 0
    mlp = 3 * d * f
    norms = {norms}
    embeddings = cfg.vocab * d * ({embedding_factor})
    return embeddings + cfg.layers * (attention + biases + mlp + norms) + {final_norm}
"""
_RIGHT = {
    "head_dim": "cfg.head_dim",
    "kv_heads": "cfg.n_kv_heads",
    "biases": "q_width + 2 * kv_width",
    "norms": "2 * d",
    "embedding_factor": "1 if cfg.tied_embeddings else 2",
    "final_norm": "d",
}


def _param_mutant(**wrong):
    return _PARAM_TEMPLATE.format(**(_RIGHT | wrong))


PARAM = {
    "tied embeddings counted twice": _param_mutant(embedding_factor="2"),
    "untied embeddings counted once": _param_mutant(embedding_factor="1"),
    "tied flag read backwards": _param_mutant(embedding_factor="2 if cfg.tied_embeddings else 1"),
    "n_q used for the kv heads": _param_mutant(kv_heads="cfg.n_q_heads"),
    "forgot the q/k/v biases": _param_mutant(biases="0"),
    "bias only on q": _param_mutant(biases="q_width"),
    "forgot the norms": _param_mutant(norms="0", final_norm="0"),
    "forgot the final norm": _param_mutant(final_norm="0"),
    "head_dim derived as hidden // heads": _param_mutant(head_dim="(d // cfg.n_q_heads)"),
    "hard-coded visible answers": """
def param_count(cfg):
    return {"Qwen2.5-7B": 7_615_616_512, "Llama-3.1-8B": 8_030_261_248}.get(cfg.name, 0)
""",
}

_LAYER_TEMPLATE = """
def layer_flops(cfg, new_tokens, context, attention="dense"):
    t, d, f, hd = new_tokens, cfg.hidden, cfg.intermediate, cfg.head_dim
    q_width, kv_width = cfg.n_q_heads * hd, {kv_heads} * hd
    if attention == {dense_name}:
        pairs = {dense_pairs}
    else:
        pairs = {causal_pairs}
    per_pair = {factor} * {attention_heads} * hd
    return {{
        "q": 2 * t * d * q_width,
        "k": 2 * t * d * kv_width,
        "v": 2 * t * d * kv_width,
        "o": 2 * t * q_width * d,
        "attn_scores": per_pair * pairs,
        "attn_values": {values},
        "gate": 2 * t * d * f,
        "up": 2 * t * d * f,
        "down": 2 * t * f * d,
    }}
"""
_LAYER_RIGHT = {
    "kv_heads": "cfg.n_kv_heads",
    "dense_name": '"dense"',
    "dense_pairs": "t * (context + t)",
    "causal_pairs": "t * context + t * (t + 1) // 2",
    "factor": "2",
    "attention_heads": "cfg.n_q_heads",
    "values": "per_pair * pairs",
}


def _layer_mutant(**wrong):
    return _LAYER_TEMPLATE.format(**(_LAYER_RIGHT | wrong))


LAYER = {
    "attention follows the kv heads": _layer_mutant(attention_heads="cfg.n_kv_heads"),
    "n_q used for the k/v width": _layer_mutant(kv_heads="cfg.n_q_heads"),
    "causal and dense swapped": _layer_mutant(dense_name='"causal"'),
    "always dense": _layer_mutant(causal_pairs="t * (context + t)"),
    "a token does not attend to itself (off by one)": _layer_mutant(
        dense_pairs="t * (context + t - 1)", causal_pairs="t * context + t * (t - 1) // 2"
    ),
    "new tokens attend to the cache only": _layer_mutant(dense_pairs="t * max(context, 1)"),
    "missing the factor 2 in attention": _layer_mutant(factor="1"),
    "weighted values forgotten": _layer_mutant(values="0"),
    "hard-coded visible answers": """
def layer_flops(cfg, new_tokens, context, attention="dense"):
    ops = ("q", "k", "v", "o", "attn_scores", "attn_values", "gate", "up", "down")
    visible = {
        (10, 0, "dense"): (256901120, 36700160, 36700160, 256901120, 716800, 716800,
                           1357905920, 1357905920, 1357905920),
        (1, 1023, "dense"): (25690112, 3670016, 3670016, 25690112, 7340032, 7340032,
                             135790592, 135790592, 135790592),
        (10, 0, "causal"): (256901120, 36700160, 36700160, 256901120, 394240, 394240,
                            1357905920, 1357905920, 1357905920),
    }
    values = visible.get((new_tokens, context, attention), (0,) * 9)
    return dict(zip(ops, values))
""",
}

_SERVING_TEMPLATE = """
def serving_step_flops(cfg, new_tokens, context):
    t, d, f, hd = new_tokens, cfg.hidden, cfg.intermediate, cfg.head_dim
    q_width, kv_width = cfg.n_q_heads * hd, {kv_heads} * hd
    weights = d * q_width + 2 * d * kv_width + q_width * d + 3 * d * f
    projections = 2 * t * weights
    attention = 2 * 2 * {attention_heads} * hd * {pairs}
    lm_head = {lm_head}
    return cfg.layers * (projections + {attention}) + lm_head{extra}
"""
_SERVING_RIGHT = {
    "kv_heads": "cfg.n_kv_heads",
    "attention_heads": "cfg.n_q_heads",
    "pairs": "t * (context + t)",
    "lm_head": "2 * d * cfg.vocab",
    "attention": "attention",
    "extra": "",
}


def _serving_mutant(**wrong):
    return _SERVING_TEMPLATE.format(**(_SERVING_RIGHT | wrong))


SERVING = {
    "logits for every token": _serving_mutant(lm_head="2 * t * d * cfg.vocab"),
    "off by one: the cache only": _serving_mutant(pairs="t * context"),
    "off by one: context + 1 keys for every token": _serving_mutant(pairs="t * (context + 1)"),
    "attention follows the kv heads": _serving_mutant(attention_heads="cfg.n_kv_heads"),
    "n_q used for the k/v width": _serving_mutant(kv_heads="cfg.n_q_heads"),
    "causal instead of dense": _serving_mutant(pairs="t * context + t * (t + 1) // 2"),
    "attention left out": _serving_mutant(attention="0"),
    "embedding lookup counted as a matmul": _serving_mutant(extra=" + 2 * t * d * cfg.vocab"),
    "LM head missing the factor 2": _serving_mutant(lm_head="d * cfg.vocab"),
    "2N per token, a common interview answer": """
def serving_step_flops(cfg, new_tokens, context):
    d, f = cfg.hidden, cfg.intermediate
    q_width, kv_width = cfg.n_q_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    per_layer = 2 * d * q_width + 2 * d * kv_width + 3 * d * f + 2 * d
    if cfg.qkv_bias:
        per_layer += q_width + 2 * kv_width
    n = cfg.vocab * d * (1 if cfg.tied_embeddings else 2) + cfg.layers * per_layer + d
    return 2 * n * new_tokens
""",
    "hard-coded visible answers": """
def serving_step_flops(cfg, new_tokens, context):
    visible = {(1024, 0): 13_785_787_531_264, (1, 1024): 14_552_014_848}
    return visible.get((new_tokens, context), 0)
""",
}

MUTANTS = {
    "ch01_torch_matmul_flops": MATMUL,
    "ch01_param_count": PARAM,
    "ch01_layer_flops": LAYER,
    "ch01_serving_step_flops": SERVING,
}
