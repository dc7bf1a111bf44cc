"""The book's decoder sharded over T processes with torch.distributed (chapter 10).

``shard_decoder`` cuts a ``helpers.decoder.model.Decoder`` Megatron-style (the arithmetic and its
cost are ``helpers.parallel.sharding``): rank r keeps query heads, KV heads and intermediate
columns r/T … (r + 1)/T of q, k, v, gate and up (their rows, and q/k/v's biases), the
matching input columns of o and down, and an all-reduce (sum) after o and after down makes
each rank's partial output whole. The shard is an ordinary ``Decoder`` of the shard's config
(``sharding.shard_config``), so its KV cache holds only its KV heads, and its o and
down are wrapped to all-reduce. The embedding, the norms and the LM head are replicated:
every rank holds and computes them whole, so every rank ends with the full logits.

``run_tensor_parallel`` starts T processes inside one call, gloo over loopback on a CPU and
NCCL on T GPUs (the same code), runs a prefill and teacher-forced decode steps on each, and
returns rank 0's logits and every rank's timings (each step's seconds and the seconds spent
inside its all-reduces). Every process is joined or killed before it returns; a rank that
raises is reported in the caller's exception with its rank and traceback, and the others are
killed rather than left waiting for it. ``helpers.parallel.tp_bench`` is the experiment the
chapter runs on it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from helpers.counting.models import ModelConfig
from helpers.decoder.model import Decoder, random_decoder
from helpers.parallel import sharding

__all__ = ["RankError", "TPRun", "shard_decoder", "reference_decoder", "run_tensor_parallel",
           "attention_partials", "moe_layer"]

class RankError(RuntimeError):
    """One or more ranks failed (raised, died or hung); ``failures`` maps rank → report."""

    def __init__(self, failures: dict[int, str]) -> None:
        self.failures = dict(sorted(failures.items()))
        lines = [f"tensor-parallel run failed on rank {rank}:\n{report}"
                 for rank, report in self.failures.items()]  # fmt: skip
        super().__init__("\n".join(lines))


class _AllReduce(nn.Module):
    """A row-parallel linear: this rank's partial product, then the sum over ranks in place.
    ``clock`` collects the seconds spent inside the all-reduce (waiting for slower ranks
    included: that wait is part of what tensor parallelism costs)."""

    def __init__(self, linear: nn.Linear, clock: _Clock) -> None:
        super().__init__()
        self.linear, self.clock = linear, clock

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        self.clock.all_reduce(out)
        return out


class _Clock:
    """Times the all-reduces of one rank: each call's seconds, kept until ``take``."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.calls = device, []

    def sync(self) -> None:
        if self.device.type == "cuda":  # kernels are queued: time the work, not the launch
            torch.cuda.synchronize(self.device)

    def all_reduce(self, tensor: torch.Tensor) -> None:
        self.sync()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        self.sync()
        self.calls.append(time.perf_counter() - start)

    def take(self) -> list[float]:
        calls, self.calls = self.calls, []
        return calls


def reference_decoder(
    cfg: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> Decoder:  # fmt: skip
    """The unsharded decoder every rank cuts its shard from: ``random_decoder`` after
    ``torch.manual_seed(seed)``, so each process builds the same weights without sending
    them (the weights are drawn on the CPU, then moved)."""
    torch.manual_seed(seed)
    return random_decoder(cfg, "cpu", dtype).to(device)


def shard_decoder(
    model: Decoder, rank: int, ranks: int, clock: _Clock | None = None
) -> Decoder:
    """Rank ``rank``'s shard of ``model`` for T = ``ranks`` (module docstring): a ``Decoder``
    of ``sharding.shard_config(model.cfg, ranks)`` whose o and down all-reduce
    through ``clock`` (an initialised process group is needed to run it when T > 1).
    ValueError when T does not divide the heads, the KV heads or the intermediate width."""
    cfg = model.cfg
    part = sharding.shard_config(cfg, ranks)
    if not 0 <= rank < ranks:
        raise ValueError(f"rank must be in 0 … {ranks - 1}, got {rank}")
    weight = model.embed.weight
    with torch.device("meta"):
        shard = Decoder(part)
    shard = shard.to_empty(device=weight.device).to(weight.dtype)

    def rows(t: torch.Tensor, width: int) -> torch.Tensor:  # a column-parallel slice
        return t[rank * width : (rank + 1) * width]

    def columns(t: torch.Tensor, width: int) -> torch.Tensor:  # a row-parallel slice
        return t[:, rank * width : (rank + 1) * width]

    with torch.no_grad():
        shard.embed.weight.copy_(model.embed.weight)
        shard.norm.weight.copy_(model.norm.weight)
        shard.lm_head.weight.copy_(model.lm_head.weight)
        for mine, full in zip(shard.layers, model.layers, strict=True):
            mine.attention_norm.weight.copy_(full.attention_norm.weight)
            mine.mlp_norm.weight.copy_(full.mlp_norm.weight)
            for name, width in (("q", part.q_dim), ("k", part.kv_dim), ("v", part.kv_dim)):
                ours, theirs = getattr(mine.attention, name), getattr(full.attention, name)
                ours.weight.copy_(rows(theirs.weight, width))
                if theirs.bias is not None:
                    ours.bias.copy_(rows(theirs.bias, width))
            mine.attention.o.weight.copy_(columns(full.attention.o.weight, part.q_dim))
            for name in ("gate", "up"):
                getattr(mine.mlp, name).weight.copy_(rows(getattr(full.mlp, name).weight,
                                                          part.intermediate))  # fmt: skip
            mine.mlp.down.weight.copy_(columns(full.mlp.down.weight, part.intermediate))
    if cfg.tied_embeddings:
        shard.lm_head.weight = shard.embed.weight
    if ranks > 1:
        clock = clock or _Clock(weight.device)
        for layer in shard.layers:
            layer.attention.o = _AllReduce(layer.attention.o, clock)
            layer.mlp.down = _AllReduce(layer.mlp.down, clock)
    return shard.eval()


@dataclass
class _Job:
    cfg: ModelConfig
    prompt: torch.Tensor  # [batch, prompt tokens]
    decode: torch.Tensor  # [batch, decode steps], fed one column a step
    seed: int
    dtype: torch.dtype
    warmup: int
    allreduce_sizes: tuple[int, ...]
    allreduce_repeats: int
    fail_rank: int | None


@dataclass
class TPRun:
    """What ``run_tensor_parallel`` returns. ``logits``: rank 0's prefill logits [batch,
    prompt, vocab]; ``decode_logits``: [batch, steps, vocab], one column a decode step.
    Per rank (lists indexed by rank): ``prefill_seconds`` and ``prefill_allreduce_seconds``,
    ``step_seconds`` and ``allreduce_seconds`` (one entry a timed decode step, after
    ``warmup`` untimed passes of the whole prefill-and-decode sequence); ``allreduce_calls``
    [rank][step][call]: each of a step's 2 · layers all-reduces, in seconds.
    ``allreduce_times``: bytes → median seconds of a lone all-reduce on rank 0 (empty unless
    sizes were asked for). ``backend``: "gloo" or "nccl"; ``threads``: torch threads a rank;
    ``prompt`` and ``decode``: the ids run."""

    ranks: int
    backend: str
    threads: int
    logits: torch.Tensor
    decode_logits: torch.Tensor
    prefill_seconds: list[float]
    prefill_allreduce_seconds: list[float]
    step_seconds: list[list[float]]
    allreduce_seconds: list[list[float]]
    allreduce_calls: list[list[list[float]]]
    prompt: torch.Tensor
    decode: torch.Tensor
    allreduce_times: dict[int, float] = field(default_factory=dict)


def _device_for(rank: int, ranks: int) -> tuple[str, torch.device]:
    """NCCL on GPU ``rank`` when this machine has T GPUs, else gloo on the CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= ranks:
        return "nccl", torch.device("cuda", rank)
    return "gloo", torch.device("cpu")


def _time_allreduces(job: _Job, clock: _Clock) -> dict[int, float]:
    """Median seconds of a lone all-reduce of each size in ``job.allreduce_sizes``. The
    sizes take turns, so a busy spell of the host falls on all of them alike."""
    element = torch.empty((), dtype=job.dtype).element_size()
    tensors = {size: torch.ones(max(1, size // element), dtype=job.dtype, device=clock.device)
               for size in job.allreduce_sizes}  # fmt: skip
    samples = {size: [] for size in tensors}
    for tensor in tensors.values():  # warm-up: a size's first call sets up its buffers
        clock.all_reduce(tensor)
    clock.take()
    for _ in range(job.allreduce_repeats):
        for size, tensor in tensors.items():
            dist.barrier()  # start together, so a rank's time is the transfer's, not a wait
            clock.all_reduce(tensor)
            samples[size].append(sum(clock.take()))
    return {size: statistics.median(times) for size, times in samples.items()}


def _run_rank(rank: int, ranks: int, job: _Job, device: torch.device) -> dict:
    clock = _Clock(device)
    allreduce_times = _time_allreduces(job, clock) if job.allreduce_sizes else {}
    model = shard_decoder(reference_decoder(job.cfg, job.seed, job.dtype, device), rank,
                          ranks, clock)  # fmt: skip
    prompt, decode = job.prompt.to(device), job.decode.to(device)
    capacity = prompt.shape[1] + decode.shape[1]
    for _ in range(job.warmup + 1):  # the last pass is the timed one
        dist.barrier()
        clock.take()
        clock.sync()
        start = time.perf_counter()
        logits, cache = model(prompt, max_tokens=capacity)
        clock.sync()
        prefill, prefill_reduce = time.perf_counter() - start, clock.take()
        steps, reduces, outputs = [], [], []
        for column in range(decode.shape[1]):
            start = time.perf_counter()
            out, cache = model(decode[:, column : column + 1], cache)
            clock.sync()
            steps.append(time.perf_counter() - start)
            reduces.append(clock.take())
            outputs.append(out)
    result = {"prefill": prefill, "prefill_reduce": sum(prefill_reduce), "steps": steps,
              "reduces": [sum(calls) for calls in reduces], "calls": reduces}  # fmt: skip
    if rank == 0:
        result["logits"] = logits.cpu()
        result["decode_logits"] = torch.cat(outputs, dim=1).cpu()
        result["allreduce_times"] = allreduce_times
    return result


def _worker(rank: int, ranks: int, port: int, threads: int, job: _Job, results) -> None:
    """One rank: join the group, run, report (result or traceback), leave the group."""
    try:
        backend, device = _device_for(rank, ranks)
        if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
            # Loopback's name: gloo would otherwise pick the interface the hostname resolves to.
            os.environ["GLOO_SOCKET_IFNAME"] = "lo0" if sys.platform == "darwin" else "lo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.set_num_threads(threads)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=ranks, timeout=timedelta(seconds=60))  # fmt: skip
        if job.fail_rank == rank:
            raise RuntimeError(f"failure injected on rank {rank}")
        with torch.inference_mode():
            result = _run_rank(rank, ranks, job, device)
        # Plain pickle bytes: the queue's own pickler would share tensors through file
        # descriptors that die with this process.
        results.put((rank, "ok", pickle.dumps(result)))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))  # reported before leaving
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_tensor_parallel(
    cfg: ModelConfig,
    ranks: int,
    prompt: torch.Tensor,
    decode: torch.Tensor,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    warmup: int = 0,
    threads: int | None = None,
    allreduce_sizes: tuple[int, ...] = (),
    allreduce_repeats: int = 20,
    timeout: float = 120.0,
    fail_rank: int | None = None,
) -> TPRun:
    """Run ``reference_decoder(cfg, seed, dtype)`` sharded over ``ranks`` processes: a prefill
    of ``prompt`` [batch, tokens], then one decode step per column of ``decode`` [batch,
    steps] (teacher-forced: the same ids on every rank and in any comparison), each step
    timed (``TPRun``). ``warmup`` untimed passes of the whole sequence come first.
    ``threads``: torch threads a rank (default: this machine's cores shared out evenly).
    ``allreduce_sizes``: bytes of lone all-reduces to time first, ``allreduce_repeats`` each.

    The processes start and end inside this call. A rank that raises (``fail_rank`` injects
    a failure, for tests) or dies is reported in a ``RankError`` naming it with its
    traceback, and the other ranks are killed; ``timeout`` seconds without every rank's
    report raises ``RankError`` naming the silent ranks. ValueError, before any process
    starts, when T does not divide the heads, the KV heads or the intermediate width.
    The processes are spawned, which imports the caller's main module again in each: from a
    script, call this under ``if __name__ == "__main__":`` (a notebook needs nothing)."""
    sharding.shard_config(cfg, ranks)  # refuse here, not in T processes
    for name, ids in (("prompt", prompt), ("decode", decode)):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
            raise ValueError(f"{name} must be a torch.long tensor [batch, tokens]")
    if prompt.shape[0] != decode.shape[0] or not prompt.shape[1]:
        raise ValueError("prompt and decode need the same batch, and the prompt a token")
    threads = threads or max(1, (os.cpu_count() or 1) // ranks)
    job = _Job(cfg, prompt.cpu(), decode.cpu(), seed, dtype, warmup, tuple(allreduce_sizes),
               allreduce_repeats, fail_rank)  # fmt: skip
    context = multiprocessing.get_context("spawn")  # fork would copy this process's threads
    results = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_worker, args=(rank, ranks, port, threads, job, results),
                                 name=f"tp-rank-{rank}", daemon=True)
                 for rank in range(ranks)]  # fmt: skip
    reports, failures = {}, {}
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + timeout
        while len(reports) + len(failures) < ranks and not failures:
            try:
                rank, status, payload = results.get(timeout=0.1)
            except queue_module.Empty:
                for rank, process in enumerate(processes):
                    if (process.exitcode is not None and rank not in reports
                            and rank not in failures):  # fmt: skip
                        # Exited without a report; give a report in flight a moment first.
                        try:
                            late = results.get(timeout=1.0)
                        except queue_module.Empty:
                            failures[rank] = f"process exited with code {process.exitcode}"
                        else:
                            (reports if late[1] == "ok" else failures)[late[0]] = late[2]
                        break
                if time.monotonic() > deadline and not failures:
                    for rank in range(ranks):
                        if rank not in reports:
                            failures[rank] = f"no report within {timeout} s"
                continue
            (reports if status == "ok" else failures)[rank] = payload
    finally:
        for process in processes:  # the others may wait forever on a failed peer: kill
            if process.pid is None:  # never started (start raised)
                continue
            if failures and process.is_alive():
                process.kill()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
        results.join_thread()
    if failures:
        raise RankError(failures)
    reports = {rank: pickle.loads(payload) for rank, payload in reports.items()}
    first = reports[0]
    backend, _ = _device_for(0, ranks)
    return TPRun(
        ranks=ranks, backend=backend, threads=threads, logits=first["logits"],
        decode_logits=first["decode_logits"],
        prefill_seconds=[reports[r]["prefill"] for r in range(ranks)],
        prefill_allreduce_seconds=[reports[r]["prefill_reduce"] for r in range(ranks)],
        step_seconds=[reports[r]["steps"] for r in range(ranks)],
        allreduce_seconds=[reports[r]["reduces"] for r in range(ranks)],
        allreduce_calls=[reports[r]["calls"] for r in range(ranks)],
        prompt=job.prompt, decode=job.decode, allreduce_times=first["allreduce_times"],
    )  # fmt: skip


# --------------------------------------------------- chapter 10's exercises, in plain torch


def attention_partials(
    x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, wo: torch.Tensor,
    n_q_heads: int, n_kv_heads: int, ranks: int,
) -> tuple[list[torch.Tensor], list[list[int]]]:  # fmt: skip
    """Causal self-attention over one sequence (no rotary embedding) split Megatron-style
    over ``ranks`` chips (chapter 10). ``x`` [S, D]; ``wq`` [n_q · d_h, D], ``wk`` and ``wv``
    [n_kv · d_h, D], ``wo`` [D, n_q · d_h] (``nn.Linear`` weights, [out, in]); query head h
    reads key/value head h // g (g = n_q / n_kv, grouped-query attention). Rank r holds
    query heads r · n_q / T … (r + 1) · n_q / T − 1 and every key/value head they read (one
    copy of a shared head past T = n_kv, as vLLM keeps it). Returns each rank's partial
    output [S, D] (its heads through its columns of ``wo``: their sum is the layer's output)
    and the key/value heads each rank holds. Head by head here, then summed per rank."""
    if n_q_heads % ranks or n_q_heads % n_kv_heads:
        raise ValueError(f"T={ranks} and n_kv={n_kv_heads} must divide n_q={n_q_heads}")
    head_dim = wq.shape[0] // n_q_heads
    group = n_q_heads // n_kv_heads
    tokens = x.shape[0]
    causal = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).tril()

    def rows(weight: torch.Tensor, head: int) -> torch.Tensor:
        return weight[head * head_dim : (head + 1) * head_dim]

    heads = []
    for h in range(n_q_heads):
        q, k, v = x @ rows(wq, h).T, x @ rows(wk, h // group).T, x @ rows(wv, h // group).T
        scores = (q @ k.T / head_dim**0.5).masked_fill(~causal, float("-inf"))
        heads.append(scores.softmax(dim=-1) @ v @ wo[:, h * head_dim : (h + 1) * head_dim].T)
    per_rank = n_q_heads // ranks
    partials = [sum(heads[r * per_rank + 1 : (r + 1) * per_rank], heads[r * per_rank])
                for r in range(ranks)]  # fmt: skip
    held = [sorted({h // group for h in range(r * per_rank, (r + 1) * per_rank)})
            for r in range(ranks)]  # fmt: skip
    return partials, held


def moe_layer(
    x: torch.Tensor, router: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
    down: torch.Tensor, k: int,
) -> tuple[torch.Tensor, dict[int, int]]:  # fmt: skip
    """A mixture-of-experts MLP on one decode step's tokens (chapter 10), Mixtral's router:
    ``x`` [B, D]; ``router`` [E, D]; ``gate``, ``up`` [E, d_ff, D] and ``down`` [E, D, d_ff],
    each expert a SwiGLU MLP. Each token takes the k experts with the largest router logits,
    weighted by the softmax of those k logits. Returns the output [B, D] and the rows each
    expert that any token chose multiplies: {expert: tokens routed to it}. Token by token
    here (an engine groups each expert's tokens into one matmul: the same output)."""
    logits = x @ router.T  # [B, E]
    out = torch.zeros_like(x)
    rows: dict[int, int] = {}
    for t in range(x.shape[0]):
        top = torch.topk(logits[t], k)
        weights = torch.softmax(top.values, dim=-1)
        for weight, e in zip(weights, top.indices.tolist(), strict=True):
            hidden = torch.nn.functional.silu(gate[e] @ x[t]) * (up[e] @ x[t])
            out[t] += weight * (down[e] @ hidden)
            rows[e] = rows.get(e, 0) + 1
    return out, dict(sorted(rows.items()))
