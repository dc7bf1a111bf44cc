"""Chapter 10: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "10_parallel"

_MLP = '''
def megatron_mlp(x, gate, up, down, ranks):
    width = gate.shape[0] // ranks
    partials = []
    for rank in range(ranks):
        block = {block}
        hidden = torch.nn.functional.silu(x @ gate[block].T) * (x @ up[block].T)
        partials.append({partial})
    return partials
'''

_MLP_RIGHT = {"block": "slice(rank * width, (rank + 1) * width)",
              "partial": "hidden @ down[:, block].T"}


def _mlp(**wrong):
    return _MLP.format(**(_MLP_RIGHT | wrong))


_TOUCHED = '''
def experts_touched(cfg, tokens, load=None):
    e, k = cfg.n_experts, cfg.experts_per_token
    chances = {chances}
    experts = float({experts})
    per_expert = {per_expert}
    return {{"experts": experts, "tokens_per_expert": {rows},
            "expert_bytes": experts * per_expert}}
'''

_TOUCHED_RIGHT = {
    "chances": "[k / e] * e if load is None else list(load)",
    "experts": "sum(1 - (1 - p) ** tokens for p in chances)",
    "per_expert": "3 * cfg.hidden * cfg.expert_intermediate * 2",
    "rows": "tokens * k / experts",
}


def _touched(**wrong):
    return _TOUCHED.format(**(_TOUCHED_RIGHT | wrong))


_KV = '''
def kv_and_intensity(cfg, kv_dtype):
    bits = {{"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}}[kv_dtype]
    if cfg.kv_lora_rank:
        width = {mla_width}
        per_key = {mla_flops}
    else:
        width = 2 * cfg.n_kv_heads * cfg.head_dim
        per_key = {dense_flops}
    kv_bytes = {kv_bytes}
    return {{"kv_bytes_per_token": kv_bytes, "intensity": cfg.layers * per_key / kv_bytes}}
'''

_KV_RIGHT = {
    "mla_width": "cfg.kv_lora_rank + cfg.qk_rope_head_dim",
    "mla_flops": "2 * cfg.n_q_heads * (width + cfg.kv_lora_rank)",
    "dense_flops": "2 * cfg.n_q_heads * 2 * cfg.head_dim",
    "kv_bytes": "-(-cfg.layers * width * bits // 8)",
}


def _kv(**wrong):
    return _KV.format(**(_KV_RIGHT | wrong))


_CHEAP = '''
def cheapest_deployment(cfg, hw, net, context, tpot_slo, price_per_chip_hour, kv_dtype):
    best = None
    for ranks in tensor_parallel.degrees(cfg, 8):
        cap = {cap}

        def tpot(batch, ranks=ranks):
            return tensor_parallel.tp_tpot(cfg, hw, net, ranks, context, batch,
                                           kv_dtype=kv_dtype)

        if cap < 1 or {too_slow}:
            continue
        low, high = 1, cap
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if {meets} else (low, middle - 1)
        dollars = {chips} * price_per_chip_hour / 3600 / (low / tpot(low)) * 1e6
        if best is None or {better}:
            best = {{"ranks": ranks, "batch": low, "dollars_per_million": dollars}}
    return best
'''

_CHEAP_RIGHT = {
    "cap": "tensor_parallel.tp_max_sequences(cfg, hw, ranks, context, kv_dtype=kv_dtype)",
    "too_slow": "tpot(1) > tpot_slo",
    "meets": "tpot(middle) <= tpot_slo",
    "chips": "ranks",
    "better": 'dollars < best["dollars_per_million"]',
}


def _cheap(**wrong):
    return _CHEAP.format(**(_CHEAP_RIGHT | wrong))


MUTANTS = {
    "ch10_megatron_mlp": {
        "interleaved columns, not contiguous blocks": _mlp(block="slice(rank, None, ranks)"),
        "averages the partials (an all-reduce of the mean)": _mlp(
            partial="hidden @ down[:, block].T / ranks"),
        "down whole on every rank (its rows, not its columns, split)": _mlp(
            partial="hidden @ down[:, :width].T"),
        "every rank computes the whole layer": _mlp(
            block="slice(None)", partial="hidden @ down.T"),
        "hard-codes the visible answers": '''
def megatron_mlp(x, gate, up, down, ranks):
    width = gate.shape[0] // 2
    out = []
    for rank in range(2):
        block = slice(rank * width, (rank + 1) * width)
        hidden = torch.nn.functional.silu(x @ gate[block].T) * (x @ up[block].T)
        out.append(hidden @ down[:, block].T)
    return out
''',
    },
    "ch10_experts_touched": {
        "min(E, Bk): every token a new expert": _touched(
            experts="min(e, tokens * k)"),
        "uniform whatever the load": _touched(chances="[k / e] * e"),
        "the union bound, B·p, capped at 1": _touched(
            experts="sum(min(1.0, tokens * p) for p in chances)"),
        "rows per expert without k": _touched(rows="tokens / experts"),
        "an expert is two matrices": _touched(
            per_expert="2 * cfg.hidden * cfg.expert_intermediate * 2"),
        "hard-codes the visible answers": '''
def experts_touched(cfg, tokens, load=None):
    experts = 3.5 if load is None else sum(1 - (1 - p) ** 3 for p in load)
    b = 3 * 4096 * 14336 * 2
    return {"experts": experts, "tokens_per_expert": tokens * 2 / experts,
            "expert_bytes": experts * b}
''',
    },
    "ch10_kv_and_intensity": {
        "MLA caches a latent per head": _kv(
            mla_width="cfg.n_q_heads * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)"),
        "MLA caches the latent twice (as K and V)": _kv(
            mla_width="2 * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)"),
        "MLA's FLOPs in the expanded form": _kv(
            mla_flops="2 * cfg.n_q_heads * (cfg.head_dim + cfg.v_head_dim)"),
        "FLOPs follow the KV heads": _kv(dense_flops="2 * cfg.n_kv_heads * 2 * cfg.head_dim"),
        "int4 rounded down": _kv(kv_bytes="cfg.layers * width * bits // 8"),
        "hard-codes the visible answers": '''
def kv_and_intensity(cfg, kv_dtype):
    if cfg.kv_lora_rank:
        return {"kv_bytes_per_token": 70272, "intensity": 278528 / 1152}
    return {"kv_bytes_per_token": 131072, "intensity": 4.0}
''',
    },
    "ch10_cheapest_deployment": {
        "the price of one chip, whatever T": _cheap(chips="1"),
        "no memory cap (batch by the target only)": _cheap(cap="4096"),
        "no TPOT target (batch by memory only)": _cheap(too_slow="False", meets="True"),
        "the fastest degree, not the cheapest": _cheap(
            better='tpot(low) < best["tpot"]').replace(
            '"dollars_per_million": dollars}', '"dollars_per_million": dollars, '
            '"tpot": tpot(low)}').replace("    return best\n",
                                           "    best and best.pop('tpot')\n    return best\n"),
        "hard-codes the visible answers": '''
def cheapest_deployment(cfg, hw, net, context, tpot_slo, price_per_chip_hour, kv_dtype):
    return {"ranks": 8, "batch": 342, "dollars_per_million": 0.38948848825657284}
''',
    },
}
