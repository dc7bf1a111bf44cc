"""Chapter 9: the hidden tests reject plausible wrong answers to every exercise.

Each mutant is a whole answer cell, a realistic mistake (plus one that hard-codes the visible
answers); it must run without crashing and be rejected by the checkers. The design problem's
hidden tests judge two fixed scenarios that no single configuration serves both, then one
drawn from each family with fixed seeds, so each of its mutants is a strategy that fails at
least one of them. The tests do not count an answer's simulations: under the grader it runs
in a process of its own, where the tests cannot see its calls.
"""

CHAPTER = "09_capstone"

_VERIFY = '''
def greedy_verify(logits, drafts, lengths, stop):
    choice = logits.argmax(dim=-1).tolist()
    out, accepted = [], 0
    for row, guesses, n in zip(choice, drafts.tolist(), lengths.tolist()):
        guesses = {guesses}
        kept = 0
        while kept < len(guesses) and {stands}:
            kept += 1
        tokens = {emitted}
        {cut}
        accepted += {count}
        out.append(tokens)
    return out, accepted
'''

_VERIFY_RIGHT = {
    "guesses": "guesses[:n]",
    "stands": "guesses[kept] == row[kept]",
    "emitted": "guesses[:kept] + [row[kept]]",
    "cut": "tokens = tokens[:tokens.index(stop) + 1] if stop in tokens else tokens",
    "count": "min(kept, len(tokens))",
}


def _verify(**wrong):
    return _VERIFY.format(**(_VERIFY_RIGHT | wrong))


_LOAD = '''
def batch_at_load(cfg, hw, context, rate, decode_steps, dtype="bf16"):
    cap = {cap}
    batch = 1
    while batch <= cap:
        step = latency.decode_step_time(cfg, hw, batch, context, dtype)
        needed = {needed}
        if needed <= batch:
            return {{"batch": {batch}, "tpot": {tpot}}}
        batch = needed
    return None
'''

_LOAD_RIGHT = {
    "cap": "memory.max_concurrent_sequences(cfg, hw.memory_bytes, context, dtype)",
    "needed": "int(np.ceil(rate * decode_steps * step))",
    "batch": "batch",
    "tpot": "step",
}


def _load(**wrong):
    return _LOAD.format(**(_LOAD_RIGHT | wrong))


_MATCH = '''
def flops_to_match(cfg, hw, prompt_tokens, output_tokens, batch, bandwidth_factor, dtype="bf16"):
    parts = [latency.prefill_time(cfg, hw, prompt_tokens, batch, dtype)]
    for context in range(prompt_tokens, prompt_tokens + {steps}):
        parts += {decode}
    target = sum(max(p.compute_seconds, p.memory_seconds / bandwidth_factor) for p in parts)

    def run(f):
        return sum({faster} for p in parts)

    if run(1.0) <= target:
        return 1.0
    if {impossible}:
        return None
    low, high = 1.0, 1e6
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (low, middle) if run(middle) <= target else (middle, high)
    return float(high)
'''

_MATCH_RIGHT = {
    "steps": "output_tokens - 1",
    "decode": "roofline.decode_split(cfg, hw, batch, context, dtype).values()",
    "faster": "max(p.compute_seconds / f, p.memory_seconds)",
    "impossible": "sum(p.memory_seconds for p in parts) > target * (1 + 1e-12)",
}


def _match(**wrong):
    return _MATCH.format(**(_MATCH_RIGHT | wrong))


def _fixed(max_batch, token_budget, disaggregate):
    return f'''
def choose_config(scenario):
    return {{"max_batch": {max_batch}, "token_budget": {token_budget},
            "disaggregate": {disaggregate}}}
'''


_CANDIDATES = '''
    candidates = [ServingConfig(b, t) for b in (16, 64, 256) for t in (None, 512, 2048)
                  if t is None or t > b] + [ServingConfig(b, None, True) for b in (16, 64, 256)]
'''

# Every candidate it keeps, up the ladder from the load until it misses: the reference
# search by hand. {keep}: which candidates it simulates; {refused}: what it catches.
_LADDER = '''
def choose_config(scenario):''' + _CANDIDATES + '''
    rungs = [scenario.rate * load for load in (1.0, 1.5, 2.0, 3.0)
             if max(serving.planner.offered_load(scenario, scenario.rate * load).values()) <= 1]
    steps = RooflineSteps(models.get(scenario.model), hardware.get(scenario.chip),
                          scenario.dtype)
    context = scenario.prompt_mean + scenario.output_mean / 2
    best, best_rate = candidates[0], -1.0
    for config in candidates:
        if not ({keep}):
            continue
        rate = 0.0
        for rung in rungs:
            try:
                attained = serving.serve_config(scenario, config, rung).attainment(
                    scenario.ttft_slo, scenario.tpot_slo)
            except {refused}:
                attained = 0.0
            if attained < scenario.share:
                break
            rate = rung
        if rate > best_rate:
            best, best_rate = config, rate
    return {{"max_batch": best.max_batch, "token_budget": best.token_budget,
             "disaggregate": best.disaggregate}}
'''

MUTANTS = {
    "ch09_greedy_verify": {
        "padding compared as drafts (every row of drafts, not its length)": _verify(
            guesses="guesses"),
        "each guess checked against the next row (off by one)": _verify(
            stands="guesses[kept] == row[kept + 1]"),
        "the bonus read from the last row, not the row after the sequence's own drafts":
            _verify(emitted="guesses[:kept] + [row[kept] if kept < n else row[-1]]"),
        "the bonus token emitted after a mismatch too": _verify(
            emitted="guesses[:kept] + [row[kept]] + ([row[n]] if kept < n else [])"),
        "the bonus token in place of the target's token at a mismatch": _verify(
            emitted="guesses[:kept] + [row[n]]"),
        "no bonus token when every guess stands": _verify(
            emitted="guesses[:kept] + ([row[kept]] if kept < n else [])"),
        "the stop token ignored": _verify(cut="pass"),
        "the target's token emitted after a stop token among the accepted drafts": _verify(
            cut="tokens = (tokens[:tokens.index(stop) + 1] + tokens[-1:] "
                "if stop in tokens[:-1] else tokens)"),
        "the stop token itself not emitted": _verify(
            cut="tokens = tokens[:tokens.index(stop)] if stop in tokens else tokens"),
        "the accepted count includes the target's token": _verify(count="len(tokens)"),
        "the accepted count taken before the stop token cuts the drafts": _verify(
            count="kept"),
        "hard-codes the visible answers": '''
def greedy_verify(logits, drafts, lengths, stop):
    return [[2, 4, 0], [3]], 2
''',
    },
    "ch09_batch_at_load": {
        "a request stays in the batch one step, not decode_steps": _load(
            needed="int(np.ceil(rate * step))"),
        "Little's law at batch 1's step, no fixed point": _load(
            needed="max(batch, int(np.ceil(rate * decode_steps * latency.decode_step_time("
                   "cfg, hw, 1, context, dtype))))"),
        "no memory cap: any batch keeps up if it is large enough": _load(cap="1 << 20"),
        "the memory cap at a bf16 cache whatever the dtype": _load(
            cap="memory.max_concurrent_sequences(cfg, hw.memory_bytes, context)"),
        "the largest batch that keeps up: the memory's": _load(
            batch="cap", tpot="latency.decode_step_time(cfg, hw, cap, context, dtype)"),
        "TPOT as the server's seconds per token, the step over the batch": _load(
            tpot="step / batch"),
        "the batch rounded down (one sequence short of keeping up)": _load(
            needed="max(1, int(rate * decode_steps * step))"),
        "hard-codes the visible answers": '''
def batch_at_load(cfg, hw, context, rate, decode_steps, dtype="bf16"):
    if rate >= 80:
        return None
    return {"batch": 25, "tpot": 0.006530674168358209}
''',
    },
    "ch09_flops_to_match": {
        "Amdahl on the phases' labels: FLOPs speed the prefill, bandwidth the decode": '''
def flops_to_match(cfg, hw, prompt_tokens, output_tokens, batch, bandwidth_factor, dtype="bf16"):
    prefill = latency.prefill_time(cfg, hw, prompt_tokens, batch, dtype).seconds
    decode = sum(part.seconds for context in range(prompt_tokens, prompt_tokens + output_tokens - 1)
                 for part in roofline.decode_split(cfg, hw, batch, context, dtype).values())
    room = prefill - decode * (1 - 1 / bandwidth_factor)  # prefill / f must equal this
    if room <= 0:
        return None
    return max(1.0, float(prefill / room))
''',
        "no switching: a compute-bound part gains the whole factor": _match(
            faster="(p.compute_seconds / f if p.compute_seconds > p.memory_seconds "
                   "else p.memory_seconds)"),
        "never None: the bisection's top when nothing matches": _match(impossible="False"),
        "one decode step too many (the first token is the prefill's)": _match(
            steps="output_tokens"),
        "each step one token of context late (the first at prompt_tokens + 1)": _match(
            decode="roofline.decode_split(cfg, hw, batch, context + 1, dtype).values()"),
        # The chapter's setup does not import flops: this answer does.
        "one roofline over each whole decode step (the aggregate model)": "\nfrom helpers."
        "counting import flops\n" + _match(
            decode="[roofline.roofline_time(flops.forward_flops(cfg, 1, context=context, "
                   "batch=batch, logits='last').total, sum(memory.forward_bytes(cfg, 1, "
                   "context=context, batch=batch, dtype=dtype, logits='last').values()), hw, "
                   "dtype)]"),
        "the run's bandwidth speedup taken for the FLOPs factor": '''
def flops_to_match(cfg, hw, prompt_tokens, output_tokens, batch, bandwidth_factor, dtype="bf16"):
    parts = [latency.prefill_time(cfg, hw, prompt_tokens, batch, dtype)]
    for context in range(prompt_tokens, prompt_tokens + output_tokens - 1):
        parts += roofline.decode_split(cfg, hw, batch, context, dtype).values()
    before = sum(p.seconds for p in parts)
    after = sum(max(p.compute_seconds, p.memory_seconds / bandwidth_factor) for p in parts)
    return float(before / after)
''',
        "hard-codes the visible answers": '''
def flops_to_match(cfg, hw, prompt_tokens, output_tokens, batch, bandwidth_factor, dtype="bf16"):
    return None if batch == 1 else 4.578730928279072
''',
    },
    "ch09_choose_config": {
        "exhaustive: every candidate up the ladder until it misses (the reference search)":
            _LADDER.format(keep="True", refused="ValueError"),
        "exhaustive, every exception swallowed (the budget's refusal too)":
            _LADDER.format(keep="True", refused="BaseException"),
        "pruned only by the caps too small for the load's batch, then every ladder":
            _LADDER.format(refused="ValueError", keep=(
                "config.max_batch >= scenario.rate / (1 if config.disaggregate else "
                "scenario.chips) * (scenario.output_mean - 1) * steps(Step((), "
                "config.max_batch, round(config.max_batch * context), config.max_batch))")),
        "the biggest batch, whole prompts, colocated": _fixed(256, None, False),
        "whole prompts at a moderate batch": _fixed(64, None, False),
        "always disaggregate": _fixed(256, None, True),
        "a small batch cap with chunks": _fixed(16, 512, False),
        "large chunks at a large batch": _fixed(256, 2048, False),
        "the configuration best on average, always": _fixed(64, 512, False),
        "a large batch with chunks of 512, always": _fixed(256, 512, False),
        "hard-codes the visible answers": _fixed(64, None, True),
        "picks by throughput: the most output tokens/s at the highest rate served": '''
def choose_config(scenario):''' + _CANDIDATES + '''
    for load in (3.0, 2.0, 1.5, 1.0):
        results = {}
        for config in candidates:
            try:
                results[config] = serving.serve_config(scenario, config, load * scenario.rate)
            except ValueError:
                pass
        if results:
            break
    best = max(results, key=lambda config: results[config].throughput)
    return {"max_batch": best.max_batch, "token_budget": best.token_budget,
            "disaggregate": best.disaggregate}
''',
        "ignores the prefill stalls: the largest cap whose decode step meets TPOT": '''
def choose_config(scenario):
    steps = RooflineSteps(models.get(scenario.model), hardware.get(scenario.chip),
                          scenario.dtype)
    context = scenario.prompt_mean + scenario.output_mean / 2
    meets = [b for b in (16, 64, 256)
             if steps(Step((), b, round(b * context), b)) <= scenario.tpot_slo]
    return {"max_batch": max(meets, default=16), "token_budget": None, "disaggregate": False}
''',
        "ignores the memory cap: splits when one chip's decode step could hold the load": '''
def choose_config(scenario):
    steps = RooflineSteps(models.get(scenario.model), hardware.get(scenario.chip),
                          scenario.dtype)
    context = scenario.prompt_mean + scenario.output_mean / 2
    decodes = scenario.output_mean - 1
    batch = 1  # Little's law on the one decode chip, as if every sequence fit in its memory
    while batch < 4096 and batch < scenario.rate * decodes * steps(
            Step((), batch, round(batch * context), batch)):
        batch += 1
    step = steps(Step((), batch, round(batch * context), batch))
    if step <= scenario.tpot_slo:  # prefill moved out of the way, decode within the SLO
        return {"max_batch": 256, "token_budget": None, "disaggregate": True}
    return {"max_batch": 256, "token_budget": 512, "disaggregate": False}
''',
        "no search: split the pair when the TPOT SLO is under 1.3x a batch-32 step, "
        "else the largest batch with chunks of 512": '''
def choose_config(scenario):
    steps = RooflineSteps(models.get(scenario.model), hardware.get(scenario.chip),
                          scenario.dtype)
    context = scenario.prompt_mean + scenario.output_mean / 2
    ratio = scenario.tpot_slo / steps(Step((), 32, round(32 * context), 32))
    if ratio < 1.3:
        return {"max_batch": 256, "token_budget": None, "disaggregate": True}
    return {"max_batch": 256, "token_budget": 512, "disaggregate": False}
''',
    },
}
