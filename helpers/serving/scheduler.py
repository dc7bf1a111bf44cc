"""The scheduler: who runs in the next step, and what KV memory each sequence holds.

The same code drives the simulated engine (``engine``, a virtual clock) and the real one
(``real``, the chapter 6 decoder on a wall clock), as vLLM separates its scheduler and block
manager from the model runner:

- ``BlockManager``: KV memory in blocks (paged, vLLM's PagedAttention) or in token slots
  reserved per request (the systems before it); admission, growth one token at a time,
  prefix reuse at block granularity, and the block table (block ids) of each sequence,
  which a real engine passes to its paged attention.
- ``Scheduler``: the policies (``"static"``, ``"continuous"``, ``"chunked"``), first come
  first served admission, and preemption by recompute when a decode finds no free block.
  Each step: ``admit`` (prompts and chunks for this step), ``grow`` (blocks for the decodes'
  new tokens, preempting the latest admitted if short), ``step`` (the ``Step`` a step-time
  model or a real forward runs), then ``complete`` (tokens out, at the time the step ended).

Also here: ``schedule_step``, one iteration worked on plain lists (chapter 7's exercise).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import accumulate, cycle, islice, repeat
from operator import add, mul

from helpers.counting._validate import non_negative_int, one_of, positive_int
from helpers.counting.memory import kv_blocks
from helpers.serving.kv import KVMemory
from helpers.serving.steps import Step
from helpers.serving.trace import Request

POLICIES = ("static", "continuous", "chunked")
ROLES = ("both", "prefill", "decode")


def check_policy(policy: str, max_batch: int, token_budget: int | None) -> None:
    """ValueError naming a policy, batch cap or token budget the scheduler cannot run."""
    one_of(policy, POLICIES, "policy")
    positive_int(max_batch, "max_batch")
    if token_budget is not None:
        positive_int(token_budget, "token_budget")
    if policy == "chunked" and token_budget is None:
        raise ValueError("policy 'chunked' needs a token_budget")
    if policy == "chunked" and token_budget <= max_batch:
        raise ValueError(
            f"token_budget={token_budget} must exceed max_batch={max_batch}: the decodes "
            "alone could fill it and prompts would never advance"
        )


def check_fits(trace: Sequence[Request], memory: KVMemory) -> None:
    """ValueError naming the first request that cannot fit in ``memory`` even alone."""
    for index, r in enumerate(trace):
        tokens = r.prompt + r.output - 1  # the last token is never fed back
        if memory.allocator == "reserve":
            need, what = memory.reserved(r), f"a {memory.reservation!r} reservation of"
            if memory.max_seq_len and r.prompt + r.output > memory.max_seq_len:
                raise ValueError(
                    f"request {index} is {r.prompt + r.output} tokens long, over "
                    f"max_seq_len={memory.max_seq_len}"
                )
        else:
            need = kv_blocks(tokens, memory.block_size) * memory.block_size
            what = "blocks for"
        if need > memory.capacity_tokens:
            raise ValueError(
                f"request {index} cannot fit in KV memory: it needs {what} {need} tokens, "
                f"the capacity is {memory.capacity_tokens}"
            )


# -------------------------------------------------------------------------- block manager


class BlockManager:
    """One engine's KV memory, counted in units: blocks of ``block_size`` tokens (paged) or
    token slots (reserve). ``free`` units are unallocated. Counts drive every decision; block
    ids are handed out only when an engine asks for a sequence's ``table`` (the simulator
    never does), from the ids no sequence holds, so a real engine's tables always fit.

    Prefix reuse (paged, ``prefix_caching``): the full blocks of a finished prefill's shared
    prefix become an entry that later requests with the same prefix id reuse; an entry no
    running sequence uses is evicted, least recently used first, when memory runs short.
    """

    def __init__(self, memory: KVMemory, trace: Sequence[Request]) -> None:
        self.memory, self.trace = memory, trace
        self.paged, self.block_size = memory.allocator == "paged", memory.block_size
        self.total = memory.blocks if self.paged else memory.capacity_tokens
        self.free = self.total
        n = len(trace)
        self.held = [0] * n  # units taken at admission (reserve: the whole slot)
        self.shared = [0] * n  # tokens of a shared prefix entry it reads, not its own
        self.uses_prefix = [False] * n
        self.prefix: dict[int, list[int]] = {}  # prefix id -> [blocks, users, last step used]
        self._tables: dict[int, list[int]] = {}
        self._ids: list[int] | None = None  # free block ids, made on the first ``table``

    def reusable(self, i: int, tokens: int) -> tuple[list[int] | None, int]:
        """The cached prefix entry request i can reuse and how many of its ``tokens`` it
        covers: whole blocks only, and never the last token (it must be computed to emit)."""
        r, b = self.trace[i], self.block_size
        if not (self.memory.prefix_caching and r.prefix_tokens):
            return None, 0
        entry = self.prefix.get(r.prefix_id)
        if entry is None:
            return None, 0
        return entry, min(entry[0] * b, r.prefix_tokens // b * b, tokens - 1) // b * b

    def need(self, i: int, tokens: int, reuse: int) -> int:
        """Units request i must take to be admitted with ``tokens`` to compute."""
        if not self.paged:
            return self.memory.reserved(self.trace[i])
        return kv_blocks(tokens, self.block_size) - reuse // self.block_size

    def take(self, i: int, units: int, entry: list[int] | None, reuse: int, step: int) -> None:
        """Admit request i: ``units`` of its own, and the prefix ``entry`` if it reuses one."""
        self.free -= units
        self.held[i] = units
        if entry is not None:
            entry[1] += 1
            entry[2] = step
            self.uses_prefix[i] = True
            self.shared[i] = reuse

    def release(self, i: int, tokens: int) -> None:
        """Free what request i holds; paged, that is the own blocks of its ``tokens``, taken
        at admission and then one at a time as it decoded."""
        b = self.block_size
        self.free += kv_blocks(tokens, b) - self.shared[i] // b if self.paged else self.held[i]
        self.held[i] = 0
        if self.uses_prefix[i]:
            self.uses_prefix[i] = False
            self.prefix[self.trace[i].prefix_id][1] -= 1
        if self._ids is not None and i in self._tables:
            self._ids.extend(self._tables.pop(i))

    def evict(self, need: int, keep: int | None = None) -> int:
        """Free idle cached prefixes, least recently used first, but not ``keep``, until
        ``need`` units are free; returns the tokens evicted."""
        if not self.prefix:  # no prefix cache: nothing to evict (asked each blocked step)
            return 0
        idle = sorted((entry[2], pid) for pid, entry in self.prefix.items()
                      if entry[1] == 0 and pid != keep)  # fmt: skip
        evicted = 0
        for _, pid in idle:
            if self.free >= need:
                break
            blocks = self.prefix.pop(pid)[0]
            self.free += blocks
            evicted += blocks * self.block_size
        return evicted

    def publish_prefix(self, i: int, step: int) -> None:
        """After request i's prefill, its shared prefix's full blocks become a cached entry
        (if none exists for its id): it now reads them as shared, not as its own."""
        r, b = self.trace[i], self.block_size
        if self.memory.prefix_caching and r.prefix_tokens >= b and r.prefix_id not in self.prefix:
            blocks = r.prefix_tokens // b
            self.prefix[r.prefix_id] = [blocks, 1, step]
            self.held[i] -= blocks
            self.shared[i] = blocks * b
            self.uses_prefix[i] = True

    def cached_prefix_blocks(self) -> int:
        return sum(entry[0] for entry in self.prefix.values())

    def table(self, i: int, tokens: int) -> list[int]:
        """Block ids holding request i's first ``tokens`` cached tokens (paged, no prefix
        cache: a real engine's block table). Grows the table to ⌈tokens / block_size⌉."""
        if not self.paged or self.memory.prefix_caching:
            raise ValueError("block tables need the paged allocator without prefix caching")
        if self._ids is None:
            self._ids = list(range(self.total - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        table = self._tables.setdefault(i, [])
        while len(table) * self.block_size < tokens:
            table.append(self._ids.pop())
        return table


# ------------------------------------------------------------------------------ scheduler


@dataclass
class Scheduled:
    """What ``Scheduler.admit`` chose for one step: ``chunks`` (request, new tokens, cached
    tokens before them), one per prompt or prompt chunk; every sequence in
    ``Scheduler.decoding`` decodes one token beside them."""

    chunks: list[tuple[int, int, int]]


_DECODES_ONLY = Scheduled([])  # shared: a step with no prompt chunks (nobody mutates it)


class Scheduler:
    """One engine's scheduler: admission, chunking, KV blocks and preemption.

    ``policy``: ``"static"`` (a batch is formed only when the engine is empty, and runs to
    its end), ``"continuous"`` (Orca: requests join at the next step, whole prompts, at most
    ``token_budget`` prompt tokens a step if given), ``"chunked"`` (Sarathi-Serve: the
    decodes, then prompt chunks up to ``token_budget`` tokens a step). ``role``: ``"both"``,
    ``"prefill"`` (each request leaves after its first token: ``handoff(i, t)`` returns when
    its cache has left, and its memory is freed then) or ``"decode"`` (requests arrive with
    their prompt's cache; one preempted here recomputes it, with the tokens it had, as a
    prefill on this engine). A decode that finds no free block preempts the latest-admitted
    sequence, which frees its blocks and later recomputes its cache (vLLM's default).

    Counters for ``Result``: ``preemptions``, ``prefix_hits`` (tokens reused),
    ``max_running``; time-weighted KV use ``busy``, ``token_time``, ``alloc_time``; ``emits``:
    per request, the (first, last) step ranges in which it emitted a token.
    """

    def __init__(self, trace: Sequence[Request], memory: KVMemory, policy: str,
                 max_batch: int, token_budget: int | None, role: str = "both",
                 handoff: Callable[[int, float], float] | None = None) -> None:  # fmt: skip
        check_policy(policy, max_batch, token_budget)
        one_of(role, ROLES, "role")
        self.trace, self.role, self.handoff = trace, role, handoff
        self.blocks = BlockManager(memory, trace)
        self.chunked, self.static = policy == "chunked", policy == "static"
        self.max_batch = max_batch
        self.budget = token_budget if token_budget is not None else math.inf
        n = len(trace)
        self.gen = [0] * n  # tokens generated so far
        self.target = [0] * n  # tokens to prefill: the prompt, + gen after a preemption
        self.done_tokens = [0] * n  # tokens of ``target`` in the cache
        self.start = [0] * n  # step at which it began decoding
        self.base = [0] * n  # cached tokens when it began decoding
        self.emits: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        b = memory.block_size
        self.ring = [0] * b  # decodes that need a new block at steps s ≡ phase (mod b)
        self.finishes: defaultdict[int, list[int]] = defaultdict(list)  # last step -> ids
        self.finish_steps: list[int] = []  # a heap of the keys of ``finishes`` (some stale)
        self.decoding: dict[int, None] = {}  # insertion order = admission order
        self.prefilling: deque[int] = deque()
        self.waiting: deque[int] = deque()
        self.releases: list[tuple[float, int]] = []  # prefill role: (time, i) freed then
        self.s = 0  # the step about to run
        self.batch = self.context = self.stored = 0  # decodes, their cached tokens, KV held
        self.done = 0
        self.busy = self.token_time = self.alloc_time = 0.0
        self.preemptions = self.prefix_hits = self.max_running = 0
        self.first_token = [math.nan] * n
        self.finish = [math.nan] * n

    # ------------------------------------------------------------------ bookkeeping

    def cached(self, i: int) -> int:
        """Tokens in decoding sequence i's cache before the current step."""
        return self.base[i] + self.s - self.start[i]

    def _join_decode(self, i: int, step: int) -> None:
        cached = self.trace[i].prompt + self.gen[i] - 1
        self.start[i], self.base[i] = step, cached
        self.batch += 1
        self.context += cached
        self.decoding[i] = None
        if self.blocks.paged:
            self.ring[(step - cached) % len(self.ring)] += 1
        last = step + self.trace[i].output - self.gen[i] - 1
        self.finishes[last].append(i)
        heapq.heappush(self.finish_steps, last)

    def _leave_decode(self, i: int, cached: int, last: int) -> None:
        self.batch -= 1
        self.context -= cached
        del self.decoding[i]
        if self.blocks.paged:
            self.ring[(self.start[i] - self.base[i]) % len(self.ring)] -= 1
        self.stored -= cached - self.blocks.shared[i]
        if last >= self.start[i]:
            self.emits[i].append((self.start[i], last))

    def _end_step(self, step: int, t: float) -> list[int]:
        """Retire the decodes whose last token came out of ``step``, at time t."""
        ended = self.finishes.pop(step, ())
        for i in ended:
            cached = self.base[i] + step - self.start[i] + 1
            self._leave_decode(i, cached, step)
            self.blocks.release(i, cached)
            self.finish[i] = t
            self.done += 1
        return list(ended)

    def arrive(self, i: int) -> None:
        """Request i joins the queue (first come, first served)."""
        self.waiting.append(i)

    def drain(self) -> None:
        """Free the caches still on the link when the last request left (prefill role)."""
        for _, i in self.releases:
            self.stored -= self.trace[i].prompt - self.blocks.shared[i]
            self.blocks.release(i, self.trace[i].prompt)
        self.releases.clear()

    def next_release(self) -> float:
        """When the next cache on the link frees its memory here (prefill role); inf if none."""
        return self.releases[0][0] if self.releases else math.inf

    # ------------------------------------------------------------------------ a step

    def admit(self, t: float) -> Scheduled | None:
        """Free the caches that left by ``t``, then choose this step's prompt chunks: first
        the prompts already started (chunked), then new requests from the head of the queue
        while the batch cap, the token budget and memory allow; the head waits for memory
        and nobody overtakes it. None if there is nothing to run (the engine is idle)."""
        if not (self.waiting or self.prefilling or self.releases):  # decodes only, or idle
            return _DECODES_ONLY if self.batch else None
        blocks, trace = self.blocks, self.trace
        while self.releases and self.releases[0][0] <= t:
            _, i = heapq.heappop(self.releases)
            self.stored -= trace[i].prompt - blocks.shared[i]
            blocks.release(i, trace[i].prompt)
        chunks: list[tuple[int, int, int]] = []
        room = self.budget - self.batch if self.chunked else self.budget
        for i in self.prefilling:  # chunked prefill: finish the prompts already started
            if room <= 0:
                break
            take = min(self.target[i] - self.done_tokens[i], room)
            chunks.append((i, take, self.done_tokens[i]))
            room -= take
        running = self.batch + len(self.prefilling)
        may_admit = not self.static or running == 0
        while self.waiting and may_admit and running < self.max_batch and room > 0:
            i = self.waiting[0]
            r = trace[i]
            arrives_prefilled = self.role == "decode" and self.gen[i] == 0
            tokens = r.prompt + self.gen[i] if not arrives_prefilled else r.prompt
            entry, reuse = blocks.reusable(i, tokens)
            if not arrives_prefilled and not self.chunked and chunks and tokens - reuse > room:
                break  # a whole prompt over the budget waits, unless it runs alone
            need = blocks.need(i, tokens, reuse)
            if need > blocks.free and blocks.paged:
                self.stored -= blocks.evict(need, keep=r.prefix_id if entry else None)
            if need > blocks.free:
                break
            self.waiting.popleft()
            blocks.take(i, need, entry, reuse, self.s)
            self.prefix_hits += reuse
            running += 1
            if arrives_prefilled:  # its prompt's cache came over the link
                self.gen[i] = 1
                self.stored += tokens
                self._join_decode(i, self.s)
                continue
            self.target[i], self.done_tokens[i] = tokens, reuse
            take = tokens - reuse if not self.chunked else min(tokens - reuse, room)
            chunks.append((i, take, reuse))
            self.prefilling.append(i)
            room -= take
        self.max_running = max(self.max_running, running)
        if not chunks:  # the queue waits (memory, the batch cap): the decodes run, if any
            return _DECODES_ONLY if self.batch else None
        return Scheduled(chunks)

    def grow(self) -> None:
        """Blocks for this step's decode tokens: each decode writes one KV entry, and those
        whose cache fills its blocks exactly need a fresh one. If too few are free, idle
        prefixes are evicted, then the latest-admitted decodes preempted (they recompute)."""
        blocks = self.blocks
        if not blocks.paged:
            return
        s, b = self.s, blocks.block_size
        demand = self.ring[s % b]
        if demand > blocks.free:
            self.stored -= blocks.evict(demand)
        while demand > blocks.free:  # preempt the latest admitted; it recomputes later
            victim = next(reversed(self.decoding))
            cached = self.cached(victim)
            if cached % b == 0:
                demand -= 1
            self._leave_decode(victim, cached, s - 1)
            last = self.start[victim] + self.trace[victim].output - self.gen[victim] - 1
            self.finishes[last].remove(victim)
            self.gen[victim] += s - self.start[victim]
            blocks.release(victim, cached)
            blocks.shared[victim] = 0
            self.waiting.appendleft(victim)
            self.preemptions += 1
        blocks.free -= demand

    def step(self, scheduled: Scheduled) -> Step:
        """The ``Step`` this schedule computes (what a step-time model times)."""
        chunks, target = scheduled.chunks, self.target
        completing = sum([before + take == target[i] for i, take, before in chunks])
        return Step(tuple([(take, before) for _, take, before in chunks]), self.batch,
                    self.context, self.batch + completing)  # fmt: skip

    def complete(self, scheduled: Scheduled, t: float, seconds: float) -> list[int]:
        """The step that ran for ``seconds`` ended at ``t``: its tokens are out. Returns the
        requests that emitted their first token in it (first ever, or after a recompute)."""
        blocks, target, done_tokens = self.blocks, self.target, self.done_tokens
        completing, computed = [], self.batch  # KV entries written: a decode one each
        for i, take, before in scheduled.chunks:
            if before + take == target[i]:
                completing.append(i)
            done_tokens[i] += take
            computed += take
        self.stored += computed
        self._account(seconds, self.stored, self._allocated())
        self.context += self.batch
        s = self.s
        self._end_step(s, t)
        for i in completing:
            self.prefilling.remove(i)
            r = self.trace[i]
            self.gen[i] += 1
            self.emits[i].append((s, s))
            if math.isnan(self.first_token[i]):
                self.first_token[i] = t
            blocks.publish_prefix(i, s)
            if self.gen[i] == r.output:
                self.stored -= self.target[i] - blocks.shared[i]
                blocks.release(i, self.target[i])
                self.finish[i] = t
                self.done += 1
            elif self.role == "prefill":
                heapq.heappush(self.releases, (self.handoff(i, t), i))
                self.finish[i] = t
                self.done += 1
            else:
                self._join_decode(i, s + 1)
        self.s += 1
        return completing

    def _allocated(self) -> int:
        blocks = self.blocks
        used = blocks.total - blocks.free
        return used * blocks.block_size if blocks.paged else used

    def _account(self, seconds: float, stored: float, allocated: float) -> None:
        self.busy += seconds
        self.token_time += seconds * stored
        self.alloc_time += seconds * allocated

    # ------------------------------------------------- decode stretches (the simulator)

    def stretch(self, limit: int) -> int:
        """Decode-only steps that can run with no scheduling event between them: through
        the step where someone finishes, at most ``limit``. (A shorter stretch is always
        safe: the next step carries on.)"""
        while not self.finishes.get(self.finish_steps[0]):
            heapq.heappop(self.finish_steps)
        return min(self.finish_steps[0] - self.s + 1, limit)

    def blocks_for(self, steps: int) -> list[int]:
        """Cumulative new blocks the decodes take over the next ``steps`` steps (paged)."""
        phase = self.s % len(self.ring)
        turn = self.ring[phase:] + self.ring[:phase]  # step s + k takes turn[k % b]
        return list(accumulate(islice(cycle(turn), steps)))

    def run_decodes(self, seconds: Sequence[float], taken: Sequence[int] | None,
                    t: float) -> None:  # fmt: skip
        """Commit a decode-only stretch of ``len(seconds)`` steps (each a step's seconds),
        ``taken`` the cumulative blocks it takes (paged; None under reservation), ending at
        ``t``: the same bookkeeping as that many ``grow``/``complete`` calls. Plain floats
        (a stretch is a few steps: numpy's cost per call outweighs its speed), summed as
        numpy sums an array (``_array_sum``), so the totals are those of the array code."""
        blocks = self.blocks
        bulk, stored, batch, allocated = len(seconds), self.stored, self.batch, self._allocated()
        self.busy += _array_sum(seconds)
        # Step k of the stretch (from 1) ends holding stored + k · batch tokens, and
        # allocated + its blocks taken so far; map(mul, …) is s · that, step by step.
        held = range(stored + batch, stored + (bulk + 1) * batch, batch)
        self.token_time += _array_sum(list(map(mul, seconds, held)))
        if blocks.paged:
            units = map(allocated.__add__, map(blocks.block_size.__mul__, taken))
            self.alloc_time += _array_sum(list(map(mul, seconds, units)))  # stops at bulk
            blocks.free -= taken[bulk - 1]
        else:
            self.alloc_time += _array_sum(list(map(mul, seconds, repeat(allocated))))
        self.stored += bulk * batch
        self.context += bulk * batch
        self.s += bulk - 1
        self._end_step(self.s, t)  # nothing to do unless the stretch reached a finish
        self.s += 1


def _array_sum(values: Sequence[float]) -> float:
    """``float(np.sum(values))`` bit for bit, on plain floats: numpy adds a float64 array
    pairwise (under 8 values in turn from 0.0; up to 128 in 8 interleaved running sums, then
    those sums pairwise and the tail in turn; above 128 the two halves, split at a multiple
    of 8, each so). Python's ``sum`` adds in another order (and from 3.12 compensates), so
    the last bit of a stretch's totals would move and with it the notebooks' figures."""
    n = len(values)
    if n < 8:
        return reduce(add, values, 0.0)
    if n > 128:
        half = n // 2 - n // 2 % 8
        return _array_sum(values[:half]) + _array_sum(values[half:])
    end = n - n % 8
    r0, r1, r2, r3, r4, r5, r6, r7 = values[:8]  # r_j: values[j] + values[j + 8] + …
    for i in range(8, end, 8):
        r0 += values[i]
        r1 += values[i + 1]
        r2 += values[i + 2]
        r3 += values[i + 3]
        r4 += values[i + 4]
        r5 += values[i + 5]
        r6 += values[i + 6]
        r7 += values[i + 7]
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    return reduce(add, values[end:], total) if end < n else total


# ------------------------------------------------------------------ one step by hand

def schedule_step(
    running: Sequence[tuple[int, int]],
    waiting: Sequence[tuple[int, int]],
    free_blocks: int,
    max_batch: int,
    block_size: int = 16,
) -> dict:
    """One iteration of a continuous-batching scheduler with paged KV memory (chapter 7),
    as Orca schedules and vLLM allocates.

    ``running``: (request id, tokens in its cache) of each sequence decoding, in the order
    they were admitted; ``waiting``: (request id, prompt length), first come first served.
    Every running sequence decodes one token, whose keys and values need a fresh block when
    its cache fills its blocks exactly (cached tokens a multiple of ``block_size``). If the
    decodes need more blocks than are free, the sequence admitted last is preempted, as
    ``Scheduler.grow`` picks (``serving.simulate`` admits first, then grows): it frees its blocks,
    and goes back to the queue to be recomputed later (vLLM's default), and so on until the
    others fit. A step that preempted admits nobody, since memory has just run short.
    Otherwise requests are admitted from the head of the queue, to be prefilled in this
    same step, while the batch (running + admitted) is below ``max_batch`` and the prompt's
    ⌈prompt / block_size⌉ blocks fit in what is left; the first that does not fit stops
    admission (the queue's order is kept). Returns the ids that decode, the ids preempted
    (latest first), the ids admitted, and the free blocks after the step.
    """
    non_negative_int(free_blocks, "free_blocks")
    positive_int(max_batch, "max_batch")
    positive_int(block_size, "block_size")
    decoding = list(running)
    need = sum(1 for _, cached in decoding if cached % block_size == 0)
    free, preempted = free_blocks, []
    while need > free:  # the latest admitted gives its blocks back and recomputes later
        request, cached = decoding.pop()
        free += kv_blocks(cached, block_size)
        need -= cached % block_size == 0
        preempted.append(request)
    free -= need
    admitted: list[int] = []
    for request, prompt in [] if preempted else waiting:
        if len(decoding) + len(admitted) >= max_batch:
            break
        blocks = kv_blocks(prompt, block_size)
        if blocks > free:
            break  # the head waits for memory; nobody overtakes it
        admitted.append(request)
        free -= blocks
    return {"decode": [request for request, _ in decoding], "preempted": preempted,
            "prefill": admitted, "free_blocks": free}  # fmt: skip
