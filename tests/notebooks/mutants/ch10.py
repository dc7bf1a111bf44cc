"""Chapter 10: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "10_parallel"

_ATTENTION = '''
def megatron_attention(x, wq, wk, wv, wo, n_q_heads, n_kv_heads, ranks):
    head_dim, group = wq.shape[0] // n_q_heads, n_q_heads // n_kv_heads
    per_rank, tokens = n_q_heads // ranks, x.shape[0]
    partials, held = [], []
    for rank in range(ranks):
        heads = list(range(rank * per_rank, (rank + 1) * per_rank))
        out = torch.zeros(tokens, wo.shape[0], dtype=x.dtype)
        for h in heads:
            kv = {kv_head}
            q = x @ wq[h * head_dim:(h + 1) * head_dim].T
            k = x @ wk[kv * head_dim:(kv + 1) * head_dim].T
            v = x @ wv[kv * head_dim:(kv + 1) * head_dim].T
            scores = q @ k.T / {scale}
            {mask}
            out += scores.softmax(dim=-1) @ v @ {o_columns}.T
        partials.append(out)
        held.append({held})
    return {{"partials": partials, "kv_heads": held}}
'''

_ATTENTION_RIGHT = {
    "kv_head": "h // group",
    "scale": "head_dim**0.5",
    "mask": "scores = scores.masked_fill(torch.ones(tokens, tokens, dtype=torch.bool).triu(1), "
            "float('-inf'))",
    "o_columns": "wo[:, h * head_dim:(h + 1) * head_dim]",
    "held": "sorted({h // group for h in heads})",
}


def _attention(**wrong):
    return _ATTENTION.format(**(_ATTENTION_RIGHT | wrong))


_HOP = '''
def break_even_hop_latency(cfg, hw, net, context, batch, low, high, dtype="bf16"):
    message = sharding.allreduce_bytes(cfg, batch, dtype)

    def line(ranks):
        part = sharding.shard_config(cfg, ranks)
        chip = sum(t.seconds for t in roofline.decode_split(part, hw, batch, context,
                                                            dtype).values())
        if {no_reduce}:
            return chip, 0.0
        hops, reduces = {hops}, {reduces}
        return (chip + reduces * (net.base_latency + {transfer}), reduces * hops)

    (wide, wide_slope), (narrow, narrow_slope) = line(high), line(low)
    {clamp}
    return float((narrow - wide) / (wide_slope - narrow_slope))
'''

_HOP_RIGHT = {
    "no_reduce": "ranks == 1",
    "hops": "2 * (ranks - 1)",
    "reduces": "2 * cfg.layers",
    "transfer": "hops / ranks * message / net.bandwidth",
    "clamp": "if wide >= narrow:\n        return 0.0",
}


def _hop(**wrong):
    return _HOP.format(**(_HOP_RIGHT | wrong))


_MOE = '''
def moe_layer(x, router, gate, up, down, k):
    logits = x @ router.T
    top = logits.topk(k, dim=-1)
    weights = {weights}
    out = torch.zeros_like(x)
    rows = {{}}
    for expert in {experts}:
        token, slot = (top.indices == expert).nonzero(as_tuple=True)
        h = x[token]
        y = (torch.nn.functional.silu(h @ gate[expert].T) * (h @ up[expert].T)) @ down[expert].T
        out.index_add_(0, token, {scale} * y)
        rows[expert] = {count}
    return out, rows
'''

_MOE_RIGHT = {
    "weights": "top.values.softmax(dim=-1)",
    "experts": "top.indices.unique().tolist()",
    "scale": "weights[token, slot, None]",
    "count": "len(token)",
}


def _moe(**wrong):
    return _MOE.format(**(_MOE_RIGHT | wrong))


_CHIP = '''
def attention_per_chip(cfg, ranks, kv_dtype):
    bits = {bits}
    heads = cfg.n_q_heads // ranks
    if cfg.kv_lora_rank:
        width = {mla_width}
        per_key = {mla_flops}
    else:
        group = cfg.n_q_heads // cfg.n_kv_heads
        width = {gqa_width}
        per_key = {gqa_flops}
    kv_bytes = {kv_bytes}
    return {{"kv_bytes_per_token": kv_bytes, "intensity": {intensity}}}
'''

_CHIP_RIGHT = {
    "bits": '{"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}[kv_dtype]',
    "mla_width": "cfg.kv_lora_rank + cfg.qk_rope_head_dim",
    "mla_flops": "2 * heads * (width + cfg.kv_lora_rank)",
    "gqa_width": "2 * max(1, heads // group) * cfg.head_dim",
    "gqa_flops": "2 * heads * 2 * cfg.head_dim",
    "kv_bytes": "-(-cfg.layers * width * bits // 8)",
    "intensity": "cfg.layers * per_key / kv_bytes",
}


def _chip(**wrong):
    return _CHIP.format(**(_CHIP_RIGHT | wrong))


MUTANTS = {
    "ch10_megatron_attention": {
        "query head h reads key/value head h mod n_kv (interleaved groups)": _attention(
            kv_head="h % n_kv_heads"),
        "no causal mask: every token sees the whole sequence": _attention(mask="pass"),
        "scores scaled by 1/d_h, not 1/sqrt(d_h)": _attention(scale="head_dim"),
        "every rank keeps every key/value head": _attention(held="list(range(n_kv_heads))"),
        "each rank's partial divided by T (an all-reduce of the mean)": _attention(
            o_columns="(wo[:, h * head_dim:(h + 1) * head_dim] / ranks)"),
        "hard-codes the visible answers": '''
def megatron_attention(x, wq, wk, wv, wo, n_q_heads, n_kv_heads, ranks):
    partials = []
    for rank in range(2):
        out = torch.zeros(x.shape[0], wo.shape[0], dtype=x.dtype)
        for h in (2 * rank, 2 * rank + 1):
            q, k, v = x @ wq[2 * h:2 * h + 2].T, x @ wk[2 * rank:2 * rank + 2].T, \\
                x @ wv[2 * rank:2 * rank + 2].T
            scores = (q @ k.T / 2**0.5).masked_fill(
                torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1), float("-inf"))
            out += scores.softmax(dim=-1) @ v @ wo[:, 2 * h:2 * h + 2].T
        partials.append(out)
    return {"partials": partials, "kv_heads": [[0], [1]]}
''',
    },
    "ch10_break_even_hop_latency": {
        "the per-call latency, not the per-hop (2(T - 1) hops forgotten)": _hop(
            hops="1"),
        "one all-reduce a layer, not two": _hop(reduces="cfg.layers"),
        "the bandwidth term left out (the latency alone)": _hop(transfer="0.0"),
        "one chip pays the per-call latency too": _hop(no_reduce="False"),
        "a negative latency where the wider group never pays": _hop(clamp="pass"),
        "hard-codes the visible answers": '''
def break_even_hop_latency(cfg, hw, net, context, batch, low, high, dtype="bf16"):
    return 1.7179901028192374e-05
''',
    },
    "ch10_moe_layer": {
        "softmax over all E experts, the top k's weights not renormalized": _moe(
            weights="logits.softmax(dim=-1).gather(1, top.indices)"),
        "the k experts' outputs added, unweighted": _moe(scale="1.0"),
        "equal weights 1/k": _moe(scale="1.0 / k"),
        "every expert listed, the unused ones with 0 rows": _moe(
            experts="range(router.shape[0])"),
        "rows counted as the token slots over the experts that ran": _moe(
            count="round(x.shape[0] * k / len(top.indices.unique()))"),
        "hard-codes the visible answers": '''
def moe_layer(x, router, gate, up, down, k):
    out = torch.zeros_like(x)
    top = (x @ router.T).topk(2, dim=-1)
    weights = top.values.softmax(dim=-1)
    for t in range(min(4, x.shape[0])):
        for j in range(2):
            e = int(top.indices[t, j])
            h = torch.nn.functional.silu(gate[e] @ x[t]) * (up[e] @ x[t])
            out[t] += weights[t, j] * (down[e] @ h)
    rows = {}
    for e in top.indices.flatten().tolist():
        rows[e] = rows.get(e, 0) + 1
    return out, rows
''',
    },
    "ch10_attention_per_chip": {
        "MLA's latent split over the chips like the heads": _chip(
            mla_width="(cfg.kv_lora_rank + cfg.qk_rope_head_dim) / ranks",
            mla_flops="2 * heads * (cfg.kv_lora_rank + cfg.qk_rope_head_dim "
                      "+ cfg.kv_lora_rank)"),
        "the key/value heads divided by T even past n_kv": _chip(
            gqa_width="2 * cfg.n_kv_heads * cfg.head_dim // ranks"),
        "n_kv // T key/value heads a chip, none past T = n_kv": _chip(
            gqa_width="2 * (cfg.n_kv_heads // ranks) * cfg.head_dim",
            intensity="(cfg.layers * per_key / kv_bytes if kv_bytes else 0.0)"),
        "MLA's latent split over the chips, each chip's heads reading only its slice": _chip(
            mla_width="(cfg.kv_lora_rank + cfg.qk_rope_head_dim) // ranks",
            mla_flops="2 * heads * (width + cfg.kv_lora_rank // ranks)"),
        "the chip's bytes, but every head's FLOPs (not divided by T)": _chip(
            mla_flops="2 * cfg.n_q_heads * (width + cfg.kv_lora_rank)",
            gqa_flops="2 * cfg.n_q_heads * 2 * cfg.head_dim"),
        "the cache counted in bf16 whatever kv_dtype": _chip(bits="16"),
        "int4 counted as a byte a value": _chip(
            bits='{"bf16": 16, "fp8": 8, "int8": 8, "int4": 8}[kv_dtype]'),
        "the whole model's intensity, whatever T": _chip(
            mla_flops="2 * cfg.n_q_heads * (width + cfg.kv_lora_rank)",
            gqa_flops="2 * cfg.n_q_heads * 2 * cfg.head_dim * max(1, heads // group) "
                      "/ cfg.n_kv_heads"),
        "MLA's FLOPs in the expanded form": _chip(
            mla_flops="2 * heads * (cfg.head_dim + cfg.v_head_dim)"),
        "int4 rounded down": _chip(kv_bytes="int(cfg.layers * width * bits // 8)"),
        "the intensity over the exact bytes, not the rounded-up total": _chip(
            intensity="cfg.layers * per_key / (cfg.layers * width * bits / 8)"),
        "hard-codes the visible answers": '''
def attention_per_chip(cfg, ranks, kv_dtype):
    if cfg.kv_lora_rank:
        return {"kv_bytes_per_token": 15552, "intensity": 15.11111111111111}
    return {"kv_bytes_per_token": 20480, "intensity": 8.0}
''',
    },
}
