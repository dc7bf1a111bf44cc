"""Chapter 8: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic student mistake (plus one that hard-codes the
visible answers); it must run without crashing and be rejected by the checkers.
"""

CHAPTER = "08_serving"

_CHUNKS = '''
def chunk_schedule(decodes, prompts, token_budget):
    room = {room}
    chunks = []
    for prompt_tokens, done in prompts:
        if room <= 0:
            break
        take = min(prompt_tokens - done, room)
        chunks.append({chunk})
        room -= {spent}
    return chunks
'''

_CHUNKS_RIGHT = {"room": "token_budget - decodes", "chunk": "(take, done)", "spent": "take"}


def _chunks(**wrong):
    return _CHUNKS.format(**(_CHUNKS_RIGHT | wrong))


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
def spec_largest_batch(costs, alpha, gamma, c, max_batch):
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
    "draft": "gamma * c * plain",
    "verify": "pass_seconds(batch, gamma + 1)",
    "pays": "<",
}


def _largest(**wrong):
    return _LARGEST.format(**(_LARGEST_RIGHT | wrong))


MUTANTS = {
    "ch08_chunk_schedule": {
        "the decodes are not taken out of the budget": _chunks(room="token_budget"),
        "off by one: the budget minus the decodes minus one": _chunks(
            room="token_budget - decodes - 1"),
        "every prompt capped by the budget on its own": _chunks(spent="0"),
        "cached before counts the chunk itself": _chunks(chunk="(take, done + take)"),
        "one prompt per iteration": '''
def chunk_schedule(decodes, prompts, token_budget):
    room = token_budget - decodes
    if room <= 0 or not prompts:
        return []
    prompt_tokens, done = prompts[0]
    return [(min(prompt_tokens - done, room), done)]
''',
        "a prompt that does not fit is skipped for the next one": '''
def chunk_schedule(decodes, prompts, token_budget):
    room = token_budget - decodes
    chunks = []
    for prompt_tokens, done in prompts:
        if room <= 0:
            break
        if prompt_tokens - done > room and chunks:
            continue
        take = min(prompt_tokens - done, room)
        chunks.append((take, done))
        room -= take
    return chunks
''',
        "hard-codes the visible answers": '''
def chunk_schedule(decodes, prompts, token_budget):
    known = {
        (1, ((8, 0),), 4): [(3, 0)],
        (1, ((8, 3),), 4): [(3, 3)],
        (1, ((8, 6),), 4): [(2, 6)],
        (2, ((5, 3), (10, 0), (7, 0)), 8): [(2, 3), (4, 0)],
    }
    return list(known.get((decodes, tuple(map(tuple, prompts)), token_budget), []))
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
    whole = prompt_tokens * 57344 / (link["lanes"] * link["bandwidth"])
    if prefill_seconds:
        return float(whole / 28)
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
            draft="gamma * c * pass_seconds(batch, gamma + 1)"),
        "a tie counts as paying": _largest(pays="<="),
        "the first batch where it stops paying": '''
def spec_largest_batch(costs, alpha, gamma, c, max_batch):
    def pass_seconds(batch, queries):
        linear = max(queries * batch * costs["linear_flops"] / costs["peak"],
                     costs["weight_bytes"] / costs["bandwidth"])
        attention = max(queries * batch * costs["attention_flops"] / costs["peak"],
                        batch * costs["kv_bytes"] / costs["bandwidth"])
        return linear + attention

    tokens = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    for batch in range(1, max_batch + 1):
        plain = pass_seconds(batch, 1)
        if (gamma * c * plain + pass_seconds(batch, gamma + 1)) / tokens >= plain:
            return batch
    return max_batch
''',
        "hard-codes the visible answers": '''
def spec_largest_batch(costs, alpha, gamma, c, max_batch):
    if costs["kv_bytes"] == 0:
        return min(74, max_batch)
    return 161 if costs["kv_bytes"] < 1e8 else max_batch
''',
    },
}
