"""Chapter 8: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "08_serving"

_PREFILL = '''
def chunked_prefill(prompt_tokens, decodes, context, token_budget, cost):
    chunk = {chunk}
    done, steps, ttft, worst = 0, 0, 0.0, 0.0
    while done < prompt_tokens:
        new = min(chunk, prompt_tokens - done)
        decode_keys = {decode_keys}
        chunk_keys = {chunk_keys}
        seconds = (cost["fixed"] + cost["per_token"] * ({tokens})
                   + cost["per_key"] * (decode_keys + chunk_keys))
        ttft += {counted}
        worst = {worst}
        done += new
        steps += 1
    return {{"steps": steps, "ttft": ttft, "worst_gap": worst}}
'''

_PREFILL_RIGHT = {
    "chunk": "token_budget - decodes",
    "decode_keys": "decodes * (context + steps + 1)",
    "chunk_keys": "new * done + new * (new + 1) // 2",
    "tokens": "decodes + new",
    "counted": "seconds",
    "worst": "max(worst, seconds)",
}


def _prefill(**wrong):
    return _PREFILL.format(**(_PREFILL_RIGHT | wrong))


_HITS = '''
def prefix_hit_blocks(prompts, block_size):
    cached = set()
    hits = []
    for prompt in prompts:
        tokens = tuple(prompt)
        usable = {usable}
        count = 0
        while count < usable and {key} in cached:
            count += 1
        hits.append({hit})
        for end in range(block_size, len(tokens) + 1, block_size):
            cached.add({stored})
    return hits
'''

_HITS_RIGHT = {
    "usable": "(len(tokens) - 1) // block_size",
    "key": "tokens[:(count + 1) * block_size]",
    "hit": "count",
    "stored": "tokens[:end]",
}


def _hits(**wrong):
    return _HITS.format(**(_HITS_RIGHT | wrong))


_TRANSFER = '''
def kv_transfer_seconds(cfg, prompt_tokens, link, dtype="bf16", prefill_seconds=0.0):
    kept = {kept}
    layer_bytes = kept * {per_layer_token}
    message = layer_bytes / ({lanes}link["bandwidth"]) + {latency}
    layer_compute = prefill_seconds / cfg.layers
    link_free = 0.0
    for layer in range(1, cfg.layers + 1):
        start = {start}
        link_free = start + message
    return float({result})
'''

_TRANSFER_RIGHT = {
    "kept": "prompt_tokens if cfg.sliding_window is None else min(prompt_tokens, "
            "cfg.sliding_window)",
    "per_layer_token": "2 * cfg.n_kv_heads * cfg.head_dim * memory.dtype_bytes(dtype)",
    "lanes": 'link["lanes"] * ',
    "latency": 'link["latency"]',
    "start": "max(layer * layer_compute, link_free)",
    "result": "link_free - prefill_seconds",
}


def _transfer(**wrong):
    return _TRANSFER.format(**(_TRANSFER_RIGHT | wrong))


_LARGEST = '''
def spec_largest_batch(costs, alpha, gamma, r, max_batch):
    def pass_seconds(batch, queries):
        linear = max(queries * batch * costs["linear_flops"] / costs["peak"],
                     costs["weight_bytes"] / costs["bandwidth"])
        attention = max(queries * batch * costs["attention_flops"] / costs["peak"],
                        {kv_read} * costs["kv_bytes"] / costs["bandwidth"])
        return {total}

    tokens = gamma + 1 if alpha == 1 else {tokens}
    largest = 0
    for batch in range(1, max_batch + 1):
        plain = pass_seconds(batch, 1)
        if ({draft} + {verify}) / tokens {pays} plain:
            largest = batch
    return largest
'''

_LARGEST_RIGHT = {
    "kv_read": "batch",
    "total": "linear + attention",
    "tokens": "(1 - alpha ** (gamma + 1)) / (1 - alpha)",
    "draft": "gamma * r * plain",
    "verify": "pass_seconds(batch, gamma + 1)",
    "pays": "<",
}


def _largest(**wrong):
    return _LARGEST.format(**(_LARGEST_RIGHT | wrong))


MUTANTS = {
    "ch08_chunked_prefill": {
        "the decodes are not taken out of the budget": _prefill(chunk="token_budget"),
        "no re-read: a chunk attends only to itself": _prefill(
            chunk_keys="new * (new + 1) // 2"),
        "a chunk attends to the whole prompt (not causal)": _prefill(
            chunk_keys="new * prompt_tokens"),
        "each chunk token sees all of its chunk (square, not causal)": _prefill(
            chunk_keys="new * done + new * new"),
        "the decodes' caches never grow": _prefill(decode_keys="decodes * (context + 1)"),
        "a decode attends to its cache but not to itself": _prefill(
            decode_keys="decodes * (context + steps)"),
        "the decodes' tokens left out of the linear layers": _prefill(tokens="new"),
        "TTFT counts only the prompt's share of each step": _prefill(
            counted="cost['per_token'] * new + cost['per_key'] * chunk_keys + cost['fixed']"),
        "the worst gap is the last step": _prefill(worst="seconds"),
        "hard-codes the visible answers": '''
def chunked_prefill(prompt_tokens, decodes, context, token_budget, cost):
    return {"steps": 3, "ttft": 5.57, "worst_gap": 2.0}
''',
    },
    "ch08_prefix_hit_blocks": {
        "the whole prompt may hit: no token left to compute": _hits(
            usable="len(tokens) // block_size"),
        "blocks matched by their own tokens, wherever they sit": _hits(
            key="tokens[count * block_size:(count + 1) * block_size]",
            stored="tokens[end - block_size:end]"),
        "blocks matched by position and tokens, not by what comes before": _hits(
            key="(count, tokens[count * block_size:(count + 1) * block_size])",
            stored="(end // block_size - 1, tokens[end - block_size:end])"),
        "counts tokens, not blocks": _hits(hit="count * block_size"),
        "counts every cached block, not only the leading run": '''
def prefix_hit_blocks(prompts, block_size):
    cached = set()
    hits = []
    for prompt in prompts:
        tokens = tuple(prompt)
        usable = (len(tokens) - 1) // block_size
        hits.append(sum(tokens[:(j + 1) * block_size] in cached
                        or (j, tokens[j * block_size:(j + 1) * block_size]) in cached
                        for j in range(usable)))
        for end in range(block_size, len(tokens) + 1, block_size):
            cached.add(tokens[:end])
            cached.add((end // block_size - 1, tokens[end - block_size:end]))
    return hits
''',
        "only the first prompt (the system prompt) is cached": '''
def prefix_hit_blocks(prompts, block_size):
    cached = set()
    hits = []
    for index, prompt in enumerate(prompts):
        tokens = tuple(prompt)
        usable = (len(tokens) - 1) // block_size
        count = 0
        while count < usable and tokens[:(count + 1) * block_size] in cached:
            count += 1
        hits.append(count)
        if index == 0:
            for end in range(block_size, len(tokens) + 1, block_size):
                cached.add(tokens[:end])
    return hits
''',
        "a prompt's blocks cached before it looks them up": '''
def prefix_hit_blocks(prompts, block_size):
    cached = set()
    hits = []
    for prompt in prompts:
        tokens = tuple(prompt)
        for end in range(block_size, len(tokens) + 1, block_size):
            cached.add(tokens[:end])
        usable = (len(tokens) - 1) // block_size
        count = 0
        while count < usable and tokens[:(count + 1) * block_size] in cached:
            count += 1
        hits.append(count)
    return hits
''',
        "only the reused run is kept: blocks computed after a miss are not cached": '''
def prefix_hit_blocks(prompts, block_size):
    cached = set()
    hits = []
    for prompt in prompts:
        tokens = tuple(prompt)
        usable = (len(tokens) - 1) // block_size
        count = 0
        while count < usable and tokens[:(count + 1) * block_size] in cached:
            count += 1
        hits.append(count)
        if count == 0:  # a prompt that shares nothing starts a new prefix
            for end in range(block_size, len(tokens) + 1, block_size):
                cached.add(tokens[:end])
    return hits
''',
        "hard-codes the visible answers": '''
def prefix_hit_blocks(prompts, block_size):
    if len(prompts) == 4:
        return [0, 4, 2, 0]
    return [0] + [3] * (len(prompts) - 1)
''',
    },
    "ch08_kv_transfer_seconds": {
        "query heads instead of kv heads": _transfer(
            per_layer_token="2 * cfg.n_q_heads * cfg.head_dim * memory.dtype_bytes(dtype)"),
        "keys only: the 2 for K and V missing": _transfer(
            per_layer_token="cfg.n_kv_heads * cfg.head_dim * memory.dtype_bytes(dtype)"),
        "the sliding window ignored": _transfer(kept="prompt_tokens"),
        "one latency for the whole transfer, not one a message": _transfer(
            latency='link["latency"] / cfg.layers'),
        "the lanes ignored: one link's bandwidth": _transfer(lanes=""),
        "bf16 whatever the dtype": _transfer(
            per_layer_token="2 * cfg.n_kv_heads * cfg.head_dim * 2"),
        "no overlap: the whole transfer after the prefill": _transfer(
            start="link_free", result="link_free"),
        "perfect overlap: the whole transfer hides behind the whole prefill": _transfer(
            start="link_free", result="max(0.0, link_free - prefill_seconds)"),
        "only the last layer is ever exposed": _transfer(result="message"),
        "hard-codes the visible answers": '''
def kv_transfer_seconds(cfg, prompt_tokens, link, dtype="bf16", prefill_seconds=0.0):
    if prefill_seconds:
        return 2.76904905e-3
    whole = prompt_tokens * 57344 / (link["lanes"] * link["bandwidth"])
    return float(whole + 28 * link["latency"])
''',
    },
    "ch08_spec_largest_batch": {
        "each query re-reads its sequence's cache": _largest(kv_read="queries * batch"),
        "one roofline for the whole step, not part by part": _largest(
            total="max(queries * batch * (costs['linear_flops'] + costs['attention_flops'])"
                  " / costs['peak'], (costs['weight_bytes'] + batch * costs['kv_bytes'])"
                  " / costs['bandwidth'])"),
        "the draft steps cost nothing": _largest(draft="0.0"),
        "no bonus token: 1 + alpha + ... + alpha^(gamma - 1)": _largest(
            tokens="(1 - alpha ** gamma) / (1 - alpha)"),
        "verification priced as one plain step (the batch-1 assumption)": _largest(
            verify="plain"),
        "a draft step priced at the verification pass": _largest(
            draft="gamma * r * pass_seconds(batch, gamma + 1)"),
        "a tie counts as paying": _largest(pays="<="),
        "the first batch where it stops paying": '''
def spec_largest_batch(costs, alpha, gamma, r, max_batch):
    def pass_seconds(batch, queries):
        linear = max(queries * batch * costs["linear_flops"] / costs["peak"],
                     costs["weight_bytes"] / costs["bandwidth"])
        attention = max(queries * batch * costs["attention_flops"] / costs["peak"],
                        batch * costs["kv_bytes"] / costs["bandwidth"])
        return linear + attention

    tokens = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    for batch in range(1, max_batch + 1):
        plain = pass_seconds(batch, 1)
        if (gamma * r * plain + pass_seconds(batch, gamma + 1)) / tokens >= plain:
            return batch
    return max_batch
''',
        "hard-codes the visible answers": '''
def spec_largest_batch(costs, alpha, gamma, r, max_batch):
    if costs["kv_bytes"] == 0:
        return min(74, max_batch)
    return 162 if costs["kv_bytes"] < 1e8 else max_batch
''',
    },
}
