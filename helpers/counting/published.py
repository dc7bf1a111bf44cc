"""Published GPU measurements beside the book's roofline (chapters 5, 6, 7, 9 and 10).

What others measured on real GPUs, each row read from its source (title, URL, software,
date, and the source's own words for the setup), held against the roofline the book teaches:
the same formulas, datasheet chips (``hardware``) and model configs (``models``).
``compare(row)`` gives the bound, the achieved share (published / bound) and the roof that
binds; ``table(kind)`` every row of a kind; ``reason(kind)`` why the share is what it is,
from the numbers; ``report(kind)`` all three, as a chapter prints them.

Every bound is **generous on purpose**, so that it is a true upper bound on the figure:
every chip's FLOP/s and bandwidth added up, chips talking for free (no all-reduce); the
datasheet's dense peak of the narrowest dtype the row computes in; the fewest bytes its
dtypes permit (weights, activations, embeddings and LM head at the weights' width, the KV
cache at its own, no quantization scales); compute and memory overlapping across a run (one
``bound_time`` over all its FLOPs and bytes, not a sum of per-step bounds), attention
skipping its masked half; a setup's cheapest point where it is a range (a decode over a
growing cache), and no work the figure leaves out of sight (an MLPerf sample's prompt).

A published figure above its bound would mean the book's formula or the row is wrong;
``tests/helpers/test_published.py`` checks that none is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from helpers.counting._validate import one_of
from helpers.counting.flops import forward_flops, matmul_flops
from helpers.counting.hardware import HardwareSpec
from helpers.counting.hardware import get as get_chip
from helpers.counting.memory import forward_bytes, kv_bytes_per_token, linear_bytes
from helpers.counting.models import PRESETS, ModelConfig
from helpers.counting.roofline import RooflineTime, bound_time

__all__ = ["Source", "Measurement", "Comparison", "SOURCES", "MODELS", "KINDS", "rows", "model",
           "source_of", "aggregate_chip", "gemm_work", "bandwidth_work", "decode_work",
           "throughput_work", "mlperf_work", "compare", "table", "shares", "reason", "report"]

KINDS = ("gemm", "bandwidth", "decode", "throughput", "mlperf", "tp")
"""A matmul's FLOP/s, a stream kernel's B/s, one stream's decode tokens/s, a batch's output
tokens/s, an MLPerf scenario's tokens/s, decode tokens/s at T-way TP."""


@dataclass(frozen=True)
class Source:
    """Where rows were read: ``title``, and the ``url`` of the file read, at its commit."""

    key: str
    title: str
    url: str


_MAMF_URL = ("https://github.com/stas00/ml-engineering/blob/"
             "744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/README.md")
_SWIGLU_URL = _MAMF_URL.replace("compute/accelerator", "training/performance")
_BABEL_URL = "https://github.com/ukri-bench/benchmark-BabelStream/blob/464294e/README.md"
_GPTFAST_URL = ("https://github.com/pytorch-labs/gpt-fast/blob/"
                "32971d3129541c5bfb4f715abc33d1c5f408d204/README.md")
_TRT_URL = ("https://github.com/NVIDIA/TensorRT-LLM/blob/"
            "138f96d45f90b9667426f7c47297d8c06bafac73/docs/source/performance.md")
_MLPERF = "https://github.com/mlcommons/inference_results_v{}/blob/{}/closed/"
SOURCES = {source.key: source for source in (
    Source("mamf", "Stas Bekman, Machine Learning Engineering: Maximum Achievable Matmul "
           "FLOPS comparison table (mamf-finder)", _MAMF_URL),
    Source("swiglu", "Stas Bekman, Machine Learning Engineering: SwiGLU-based MLP "
           "(swiglu-maf-bench.py, one MLP matmul by d_ff)", _SWIGLU_URL),
    Source("babelstream", "UKRI benchmark suite, BabelStream benchmark README: example "
           "performance data (Tursa, A100)", _BABEL_URL),
    Source("gpt-fast", "PyTorch Labs, gpt-fast README: Benchmarks and Tensor Parallelism",
           _GPTFAST_URL),
    Source("trtllm", "NVIDIA TensorRT-LLM, Performance of TensorRT-LLM (v0.6.1 tables)",
           _TRT_URL),
    Source("mlperf", "MLCommons, MLPerf Inference v4.1 results, closed division, NVIDIA",
           _MLPERF.format("4.1", "a2f5d66d") + "NVIDIA/"),
    Source("mlperf51", "MLCommons, MLPerf Inference v5.1 results, closed division, HPE",
           _MLPERF.format("5.1", "a634ab77") + "HPE/"),
)}  # fmt: skip


# Models the presets lack, from their published config.json: huggingface.co could not be
# reached, so the values are those of copies of the files in public repositories, which agree.
_LLAMA2 = {"model_type": "llama", "hidden_act": "silu", "num_attention_heads": 32,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "vocab_size": 32000,
           "tie_word_embeddings": False}  # fmt: skip
MODELS = {cfg.name: cfg for cfg in (
    dataclasses.replace(ModelConfig.from_hf_config(
        {**_LLAMA2, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_key_value_heads": 32}, name="Llama-2-7B"),
        source="Hugging Face config.json of meta-llama/Llama-2-7b-hf"),
    dataclasses.replace(ModelConfig.from_hf_config(
        {**_LLAMA2, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
         "num_attention_heads": 64, "num_key_value_heads": 8}, name="Llama-2-70B"),
        source="Hugging Face config.json of meta-llama/Llama-2-70b-hf"),
)}  # fmt: skip
"""Llama-2-7B and Llama-2-70B (MLPerf's and TensorRT-LLM's models), beside the presets."""


def model(name: str) -> ModelConfig:
    """A row's model: a ``helpers.counting.models`` preset, else one of ``MODELS``."""
    if (cfg := PRESETS.get(name) or MODELS.get(name)) is None:
        raise ValueError(f"unknown model {name!r}")
    return cfg


@dataclass(frozen=True)
class Measurement:
    """One published figure (``figure`` in ``unit``) and what it measured.

    ``chip`` names a ``helpers.counting.hardware`` spec, ``chips`` how many ran it (the figure is
    for all of them together unless ``per_chip``). ``shape`` is a GEMM's (m, k, n):
    [m×k]·[k×n]. ``prompt`` and ``output``: tokens in and out per sequence (a decode row's
    ``prompt`` is the context its steps start from); ``batch``: sequences run together (a
    batched GEMM's products, a stream kernel's arrays).
    ``dtype`` (the weights') and ``kv_dtype`` (the KV cache's; None: ``dtype``): storage;
    ``compute_dtype``: the dtype whose datasheet peak the matmuls run at (bf16 for weight-only
    int8, widened before the multiply). ``ttft_limit``/``tpot_limit`` (s): MLPerf's limits.
    ``quote``: the source's own words for the setup; ``date``: when the figure was
    published (the commit that added it, or the results' release); ``path``: the file
    within the source's URL, where each row has its own."""

    kind: str
    label: str
    chip: str
    chips: int
    figure: float
    unit: str
    software: str
    date: str
    source: str
    quote: str
    model: str | None = None
    dtype: str = "bf16"
    kv_dtype: str | None = None
    compute_dtype: str = "bf16"
    batch: int = 1
    prompt: int | None = None
    output: int | None = None
    shape: tuple[int, int, int] | None = None
    scenario: str | None = None
    ttft_limit: float | None = None
    tpot_limit: float | None = None
    per_chip: bool = False
    path: str = ""

    def __post_init__(self) -> None:
        one_of(self.kind, KINDS, "kind")
        if self.source not in SOURCES:
            raise ValueError(f"{self.label}: unknown source {self.source!r}")
        if not self.figure > 0 or self.chips < 1:
            raise ValueError(f"{self.label}: figure must be positive, chips at least 1")


# --- chapter 5: GEMM throughput (mamf-finder, by shape) and HBM bandwidth (BabelStream).
_MAMF_Q = ("Reporting a mean of 100 iterations after 50 warmup iterations for each shape. "
           "Best Shape MxNxK {shape}")
_BABEL_Q = ("Running kernels 100 times / Precision: double / Array size: 268.4 MB (=0.3 GB) "
            "/ Using CUDA device NVIDIA A100-SXM4-80GB [...] Function    MBytes/sec [...] "
            "{kernel}        {mbs}")
_ARRAY = 2**25 * 8  # BabelStream 5.0's default array: 2**25 doubles, "268.4 MB"
_GEMMS = (
    # chip, dtype, MAMF TFLOP/s, M, N, K as the table prints them, torch, date added
    ("H100 SXM", "bf16", 794.5, 2048, 2048, 13312, "2.7.0+cu126", "2025-01-05"),
    ("A100 80GB SXM", "bf16", 271.2, 1024, 10240, 5120, "2.6.0+cu126", "2025-01-04"),
    ("B200", "bf16", 1745.0, 1792, 16128, 3072, "2.7.1+cu128", "2025-07-07"),
    ("H100 SXM", "fp8", 1402.6, 1024, 9216, 14336, "2.7.0+cu126", "2025-01-05"),
    ("H200 SXM", "fp8", 1453.4, 1280, 4096, 12032, "2.7.1+cu128", "2025-07-08"),
)
# One shape by d_ff (swiglu-maf-bench.py: torch.bmm of b=4 [4096 x d_ff] x [d_ff x 4096] in
# fp16, 50 warm-ups, 100 timed), "on H100": the SXM, the faster (generous) of the two.
_SWIGLU_Q = ("Let's run it on H100 with `h = 4096`: [...] d_ff  tflops mlp_params [...] "
             "{d_ff}  {tflops} [...] batch_size = 2**2 [...] torch.bmm(A, B, out=C)")
_SWIGLUS = ((10922, "272.73"), (10944, "398.38"), (11008, "395.01"))

# --- chapters 6 and 10: gpt-fast, batch 1, an 8xA100-80GB power-limited to 330 W. The
# README does not say SXM or PCIe: the rows are held against the A100 80GB SXM, the faster
# memory of the two (generous: on another A100 the bound would only be lower).
_GPTFAST_Q = ("Benchmarks run on an 8xA100-80GB, power limited to 330W with a hybrid cube "
              "mesh topology. Note that all benchmarks are run at *batch size=1* [...] they "
              "are run with a very small prompt length (just 5 tokens).")
_GPTFAST_SW = "gpt-fast (PyTorch nightly, torch.compile; the README names no version)"
_DECODES = (("Llama-3.1-8B", "Base", "bf16", 93.89), ("Llama-3.1-8B", "8-bit", "int8", 137.64),
            ("Llama-3.1-70B", "8-bit", "int8", 18.04))  # model, technique, weights, tokens/s
_TP = (("Llama-3.1-8B", ((1, 93.83), (2, 149.10), (4, 217.21), (8, 276.01))),
       ("Llama-3.1-70B", ((2, 16.03), (4, 37.45), (8, 58.78))))

# --- chapter 7: TensorRT-LLM v0.6.1, static batches (gptSessionBenchmark). Its methodology
# names an "H100-HBM3-80GB system" (the SXM); its A100 is not named: the 80GB SXM, as above.
# The fp8 KV cache is the H100 build commands'; fewer bytes is the generous side anyway.
_TRT_Q = ("The below tables provide reference data at large batch sizes, representing high "
          "throughput offline tasks. This data has been updated for v0.6.1, unless "
          "specified. ### {gpus} [...] For the GPT-J, Llama2-7b, and Llama2-70b benchmarks "
          "were ran using a single-setting engine build")
_TRT_FP8 = " [...] --enable_fp8 \\ --fp8_kv_cache"  # the H100 build commands
_TRT_SW = "TensorRT-LLM v0.6.1 (gptSessionBenchmark)"
_TRT_DATE = "2023-12-19"  # on main by then: TensorRT-LLM issue #703 quotes its GPT-J rows
_THROUGHPUTS = (
    # chip, chips, model, dtype, batch, input, output, figure, unit per chip?
    ("H100 SXM", 1, "Llama-2-7B", "fp8", 768, 128, 128, 19_694, True),
    ("H100 SXM", 1, "Llama-2-7B", "fp8", 112, 128, 2048, 6_818, True),
    ("H100 SXM", 1, "Llama-2-7B", "fp8", 80, 2048, 128, 2_244, True),
    ("H100 SXM", 1, "Llama-2-7B", "fp8", 48, 2048, 2048, 2_740, True),
    ("H100 SXM", 2, "Llama-2-70B", "fp8", 1024, 128, 128, 2_657, True),
    ("A100 80GB SXM", 1, "Llama-2-7B", "fp16", 384, 128, 128, 5_586, False),
    ("A100 80GB SXM", 1, "Llama-2-7B", "fp16", 60, 128, 2048, 1_928, False),
)

# --- chapter 9: MLPerf Inference, 8 GPUs, TensorRT-LLM. The quote joins the submission's
# code README (its weights' format) and each run's mlperf_log_summary.txt. v5.1's harness
# README untars an FP4 checkpoint (4 bits a weight: int4's width here); the H200 has no FP4
# peak in the table, so its matmuls are bounded at the fp8 peak, the highest it has.
_MLPERF_Q = ("{code} [...] Scenario : {scenario} [...] {metric}: {figure} [...] "
             "ttft_latency (ns): {ttft} / tpot_latency (ns): {tpot}")
_V41 = ("mlperf", "2024-08-28", "TensorRT 10.2.0, CUDA 12.4, TensorRT-LLM", "fp8",
        "quantize.py --dtype float16 --qformat fp8 --kv_cache_dtype fp8")
_V51 = ("mlperf51", "2025-09-04", "TensorRT 10.11, CUDA 12.9, TensorRT-LLM", "int4",
        "tar -xzf /opt/fp4-quantized-modelopt/llama3_1-8b-instruct-hf-torch-fp4.tar.gz")
_H100X8, _H200X8 = "DGX-H100_H100-SXM-80GBx8_TRT", "H200-SXM-141GBx8_TRT"
_HPE, _70B = "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "Llama-2-70B"
_MLPERFS = (
    # round, system folder, chip, model, benchmark, scenario, tokens/s, TTFT and TPOT (ns)
    (_V41, _H100X8, "H100 SXM", _70B, "llama2-70b-99.9", "Offline", 24524.9, 2e9, 2e8),
    (_V41, _H100X8, "H100 SXM", _70B, "llama2-70b-99.9", "Server", 21605.79, 2e9, 2e8),
    (_V41, _H200X8, "H200 SXM", _70B, "llama2-70b-99", "Offline", 31302.7, 2e9, 2e8),
    (_V41, _H200X8, "H200 SXM", _70B, "llama2-70b-99", "Server", 29228.22, 2e9, 2e8),
    (_V51, _HPE, "H200 SXM", "Llama-3.1-8B", "llama3.1-8b", "Offline", 66036.8, 2e9, 1e8),
    (_V51, _HPE, "H200 SXM", "Llama-3.1-8B", "llama3.1-8b", "Server", 64914.57, 2e9, 1e8),
    (_V51, _HPE, "H200 SXM", "Llama-3.1-8B", "llama3.1-8b", "Interactive", 53475.21, 5e8, 3e7),
)  # fmt: skip


def _all_rows() -> tuple[Measurement, ...]:
    out = [Measurement(
        kind="gemm", label=f"{dtype} matmul {m}x{n}x{k} (MxNxK)", chip=chip, chips=1,
        figure=tflops, unit="TFLOP/s", software=f"torch {torch}", date=date, source="mamf",
        quote=_MAMF_Q.format(shape=f"{m}x{n}x{k}"), dtype=dtype, compute_dtype=dtype,
        shape=(m, k, n)) for chip, dtype, tflops, m, n, k, torch, date in _GEMMS]
    out += [Measurement(
        kind="gemm", label=f"fp16 bmm 4 x [4096x{d_ff}]x[{d_ff}x4096]", chip="H100 SXM",
        chips=1, figure=float(tflops), unit="TFLOP/s", date="2024-03-27", source="swiglu",
        software="swiglu-maf-bench.py, torch.bmm (torch version not stated)", batch=4,
        quote=_SWIGLU_Q.format(d_ff=d_ff, tflops=tflops), dtype="fp16",
        compute_dtype="fp16", shape=(4096, d_ff, 4096)) for d_ff, tflops in _SWIGLUS]
    out += [Measurement(
        kind="bandwidth", label=f"BabelStream {kernel} ({arrays} arrays of 2**25 doubles)",
        chip="A100 80GB SXM", chips=1, figure=float(mbs), unit="MB/s", date="2024-12-16",
        software="BabelStream 5.0, CUDA (driver 12030)", source="babelstream", batch=arrays,
        quote=_BABEL_Q.format(kernel=kernel, mbs=mbs))
        for kernel, mbs, arrays in (("Copy", "1709360.800", 2), ("Triad", "1724827.354", 3))]
    gpt_fast = {"chip": "A100 80GB SXM", "unit": "tokens/s", "software": _GPTFAST_SW,
                "date": "2024-09-13", "source": "gpt-fast", "quote": _GPTFAST_Q,
                "kv_dtype": "bf16", "prompt": 5}  # fmt: skip
    for name, technique, dtype, tps in _DECODES:
        out.append(Measurement(kind="decode", label=f"{name} {technique}, batch 1", chips=1,
                               figure=tps, model=name, dtype=dtype, **gpt_fast))
    for name, series in _TP:
        out += [Measurement(kind="tp", label=f"{name} bf16, TP={ranks}", chips=ranks,
                            figure=tps, model=name, **gpt_fast) for ranks, tps in series]
    for chip, chips, name, dtype, batch, s, n, tps, per_chip in _THROUGHPUTS:
        out.append(Measurement(
            kind="throughput", label=f"{name} {dtype}, batch {batch}, {s}/{n}, TP={chips}",
            chip=chip, chips=chips, figure=tps,
            unit="output tokens/s per GPU" if per_chip else "output tokens/s",
            software=_TRT_SW, date=_TRT_DATE, source="trtllm",
            quote=_TRT_Q.format(gpus="H100 GPUs (FP8)" if dtype == "fp8" else
                                "A100 GPUs (FP16)") + (_TRT_FP8 if dtype == "fp8" else ""),
            model=name, dtype=dtype, kv_dtype=dtype, compute_dtype=dtype, batch=batch,
            prompt=s, output=n, per_chip=per_chip))
    for rnd, system, chip, name, bench, scenario, tps, ttft, tpot in _MLPERFS:
        (key, date, software, dtype, code), offline = rnd, scenario == "Offline"
        out.append(Measurement(
            kind="mlperf", label=f"{bench} {scenario}", chip=chip, chips=8, figure=tps,
            unit="tokens/s", software=software, date=date, source=key, quote=_MLPERF_Q.format(
                code=code, scenario="Offline" if offline else "Server", figure=tps,
                metric="Tokens per second" if offline else "Completed tokens per second",
                ttft=int(ttft), tpot=int(tpot)), model=name, dtype=dtype,
            kv_dtype="fp8", compute_dtype="fp8", scenario=scenario, ttft_limit=ttft / 1e9,
            tpot_limit=tpot / 1e9,
            path=f"results/{system}/{bench}/{scenario}/performance/run_1/mlperf_log_summary.txt"))
    return tuple(out)


_ROWS = _all_rows()


def rows(kind: str | None = None) -> tuple[Measurement, ...]:
    """The published rows, all of them or those of one ``kind``."""
    return _ROWS if kind is None else tuple(
        row for row in _ROWS if row.kind == one_of(kind, KINDS, "kind"))


def source_of(row: Measurement) -> Source:
    """The ``Source`` a row was read from, its URL naming the row's own file if it has one."""
    source = SOURCES[row.source]
    return dataclasses.replace(source, url=source.url + row.path) if row.path else source


@dataclass(frozen=True)
class Comparison:
    """A row against its roofline: ``bound`` (in the row's unit), ``share`` = figure / bound,
    ``binds`` (``"compute"`` or ``"memory"``). ``work``: the ``RooflineTime`` of the work the
    bound counts on ``chip`` (the row's chips as one), yielding ``units`` of the figure
    (tokens; 1 for a rate). ``phases``: a batched run's prefill and decode, bounded apart."""

    row: Measurement
    bound: float
    share: float
    binds: str
    work: RooflineTime
    units: float
    chip: HardwareSpec
    phases: tuple[RooflineTime, RooflineTime] | None = None

    @property
    def measured_seconds(self) -> float:
        """The time the published figure implies for the same work."""
        return self.work.seconds / self.share

    @property
    def sequential_share(self) -> float | None:
        """The share against a tighter bound with prefill and decode one after the other,
        as a static batch runs them (None for a row without phases)."""
        return None if self.phases is None else (
            self.share * sum(p.seconds for p in self.phases) / self.work.seconds)


def aggregate_chip(name: str, chips: int) -> HardwareSpec:
    """``chips`` of a chip as one: every peak and the bandwidth added up, memory too
    (generous: no link between them costs anything)."""
    hw = get_chip(name)
    if chips == 1:
        return hw
    return dataclasses.replace(
        hw, name=f"{chips}x {hw.name}", bandwidth=hw.bandwidth * chips,
        memory_bytes=hw.memory_bytes * chips, visible_memory_bytes=None,
        peak_flops={d: p * chips for d, p in hw.peak_flops.items()})


def _timed(flops: float, moved: float, hw: HardwareSpec, dtype: str) -> RooflineTime:
    return bound_time(flops, moved, hw.peak(dtype), hw.bandwidth)


# A function a kind (tp rows are decode's on T chips): the work the bound counts for ``row``
# on ``hw``: (RooflineTime, figure's units it yields, scale to the unit, phases or None).


def gemm_work(row: Measurement, hw: HardwareSpec):
    """``batch`` products [m×k]·[k×n]: 2mkn FLOPs over b(mk + kn + mn) bytes each."""
    m, k, n = row.shape
    work = _timed(row.batch * matmul_flops(m, k, n),
                  row.batch * linear_bytes(m, k, n, row.compute_dtype), hw, row.compute_dtype)
    return work, work.flops, 1e-12, None  # FLOP/s -> TFLOP/s


def bandwidth_work(row: Measurement, hw: HardwareSpec):
    """One pass of the kernel: ``batch`` arrays read or written once. Triad's FLOPs (2 per
    24 bytes) are left out: leaving work out only raises the bound."""
    moved = row.batch * _ARRAY
    work = bound_time(0, moved, max(hw.peak_flops.values()), hw.bandwidth)
    return work, moved, 1e-6, None  # B/s -> MB/s (BabelStream's MBytes/sec: 10**6 B/s)


def decode_work(row: Measurement, hw: HardwareSpec):
    """One decode step of one sequence at the prompt's context (the cheapest step of the
    run: the cache only grows), LM head on its token."""
    cfg = model(row.model)
    flops = forward_flops(cfg, 1, context=row.prompt, logits="last").total
    moved = sum(forward_bytes(cfg, 1, context=row.prompt, dtype=row.dtype,
                              logits="last", kv_dtype=row.kv_dtype).values())  # fmt: skip
    return _timed(flops, moved, hw, row.compute_dtype), 1.0, 1.0, None


def throughput_work(row: Measurement, hw: HardwareSpec):
    """A static batch: one prefill of ``batch`` prompts (causal: masked blocks skipped),
    then ``output`` − 1 decode steps of the batch at contexts S … S + n − 2, each reading
    the weights once for the batch and each sequence's own cache. A step's FLOPs and bytes
    are affine in the context, so the steps' sum is their count times the mean of the first
    and the last. The bound is one ``bound_time`` over the run (prefill's compute may hide
    decode's memory traffic); ``phases`` bounds each phase apart."""
    cfg, b, s, n = model(row.model), row.batch, row.prompt, row.output

    def step(context: int) -> tuple[int, int]:
        f = forward_flops(cfg, 1, context=context, batch=b, logits="last").total
        m = forward_bytes(cfg, 1, context=context, batch=b, dtype=row.dtype,
                          logits="last", kv_dtype=row.kv_dtype)  # fmt: skip
        return f, sum(m.values())

    prefill = (forward_flops(cfg, s, batch=b, attention="causal", logits="last").total,
               sum(forward_bytes(cfg, s, batch=b, dtype=row.dtype, logits="last",
                                 kv_dtype=row.kv_dtype).values()))  # fmt: skip
    (f0, m0), (f1, m1) = (step(s), step(s + n - 2)) if n > 1 else ((0, 0), (0, 0))
    decode = ((n - 1) * (f0 + f1) // 2, (n - 1) * (m0 + m1) // 2)
    work = _timed(prefill[0] + decode[0], prefill[1] + decode[1], hw, row.compute_dtype)
    phases = tuple(_timed(f, m, hw, row.compute_dtype) for f, m in (prefill, decode) if f)
    return work, float(b * n), 1.0, phases if len(phases) == 2 else None


def mlperf_work(row: Measurement, hw: HardwareSpec):
    """One output token: one token's pass through every weight with an empty cache (it
    attends only to itself: fewer FLOPs than any real step), and the bytes only it must
    move, its own K and V written once (the weights, shared by the batch, and the cache
    reads are left out). The prompts are left out too (the dataset's input lengths are not
    among the published figures): the bound counts decode work alone."""
    cfg = model(row.model)
    flops = forward_flops(cfg, 1, logits="last").total
    work = _timed(flops, kv_bytes_per_token(cfg, row.kv_dtype), hw, row.compute_dtype)
    return work, 1.0, 1.0, None


_WORK = {"gemm": gemm_work, "bandwidth": bandwidth_work, "decode": decode_work,
         "tp": decode_work, "throughput": throughput_work, "mlperf": mlperf_work}


def compare(row: Measurement) -> Comparison:
    """``row`` against its roofline on the aggregate of its chips (``aggregate_chip``)."""
    hw = aggregate_chip(row.chip, row.chips)
    work, units, scale, phases = _WORK[row.kind](row, hw)
    bound = units / work.seconds * scale
    if row.per_chip:
        bound /= row.chips
    return Comparison(row, bound, row.figure / bound, work.bound, work, units, hw, phases)


def table(kind: str | None = None) -> list[Comparison]:
    """``compare`` of every row of ``kind`` (all rows for None), in the table's order."""
    return [compare(row) for row in rows(kind)]


def shares(kind: str | None = None) -> tuple[float, float]:
    """The lowest and highest achieved share among a kind's rows."""
    values = [c.share for c in table(kind)]
    return min(values), max(values)


# Why not more: each kind's reason, its numbers read from the table.
def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"


def _copy_share() -> tuple[float, str]:  # BabelStream's Copy: its share, and on which chip
    (copy,) = [c for c in table("bandwidth") if c.row.label.startswith("BabelStream Copy")]
    return copy.share, copy.chip.name


def _gemm_reason(cs: list[Comparison]) -> str:
    ridge = max(c.chip.ridge(c.row.compute_dtype) for c in cs)
    least = min(c.work.flops / c.work.bytes_moved for c in cs)
    best = {d: [c.share for c in cs if c.row.source == "mamf" and c.row.compute_dtype == d]
            for d in ("bf16", "fp8")}  # fmt: skip
    sweep = {c.row.shape[1]: c.share for c in cs if c.row.source == "swiglu"}
    low, high = min(sweep), min(d for d in sweep if d > min(sweep))
    return (
        f"Every shape sits far right of its ridge (intensity at least {least:,.0f} FLOP/B, "
        f"ridges at most {ridge:,.0f}): the bound is the dense peak, and no memory traffic "
        f"explains the gap. At the best shape a search found, GEMMs reach {_span(best['bf16'])} "
        f"of the bf16 peak and {_span(best['fp8'])} of the fp8 one: clocks below boost under the "
        "power limit, tiles that do not divide the matrix, a last wave of tiles that leaves some "
        "of the GPU's cores idle, and writing the output cost time the roofline does not count. "
        f"Shape matters as much: on an H100 (SXM assumed: the source says no more), d_ff = {low} "
        f"(8/3 of 4096) reaches {sweep[low]:.0%} and d_ff = {high} reaches {sweep[high]:.0%}, "
        f"{sweep[high] / sweep[low] - 1:.0%} faster for {high - low} more columns. No model built "
        "from these GEMMs beats the share its shapes allow.")


def _bandwidth_reason(cs: list[Comparison]) -> str:
    parts = ", ".join(f"{c.row.label.split()[1]} {c.row.figure / 1e3:,.0f} GB/s "
                      f"({c.share:.0%})" for c in cs)  # fmt: skip
    return (
        f"A streaming kernel, arrays far larger than the cache: {parts} of the datasheet's "
        f"{cs[0].chip.bandwidth / 1e9:,.0f} GB/s. The datasheet counts the pins' transfer "
        "rate; DRAM refresh, row switches and turning the bus between reads and writes take "
        "a share that no kernel recovers. This is the practical memory roof: a decode that "
        "reaches it is as fast as memory allows.")


def _decode_reason(cs: list[Comparison]) -> str:
    copy, _ = _copy_share()
    lines = [f"{c.row.label}: bound {c.work.seconds * 1e3:.2f} ms a token for "
             f"{c.work.bytes_moved / 1e9:.1f} GB, measured {c.measured_seconds * 1e3:.2f} ms "
             f"({c.share:.0%}, {c.share / copy:.0%} of the copy kernel's share)"
             for c in cs]  # fmt: skip
    bf16 = [c.share for c in cs if c.row.dtype == "bf16"]
    int8 = [c.share for c in cs if c.row.dtype == "int8"]
    return (
        "One sequence reads every weight once per token, so the memory roof binds and the "
        "bound is the bytes over the datasheet bandwidth. " + "; ".join(lines) + ". "
        f"A copy kernel reaches {copy:.0%} of that bandwidth on this chip (chapter 5), so "
        "part of the gap is the memory itself; the rest is the engine: matrix-vector "
        "products too thin to stream at full rate, attention and norms between them, the "
        "cache growing from the 5-token prompt, a GPU power-limited to 330 W (gpt-fast's "
        "torch.compile with CUDA graphs has already removed most launch cost). "
        f"Weight-only int8 halves the bytes but adds a dequantize: its share ({_span(int8)}) "
        f"is below bf16's ({_span(bf16)}), though its tokens/s are higher.")


def _throughput_reason(cs: list[Comparison]) -> str:
    copy, copy_chip = _copy_share()
    gemm = {(c.row.chip, c.row.dtype): c.share for c in table("gemm") if c.row.source == "mamf"}
    lines = [f"{c.row.label} ({c.chip.name}): {c.share:.0%} of a {c.binds}-bound {c.bound:,.0f},"
             f" {c.sequential_share:.0%} with the phases in sequence" for c in cs]
    heavy = [c for c in cs if c.phases[1].seconds >= 0.9 * sum(p.seconds for p in c.phases)]
    # the phases bind different roofs: only there does running them in sequence cost anything
    mixed = [c for c in cs if c not in heavy and c.phases[0].bound != c.phases[1].bound]
    chips = {c.chip.name for c in heavy}
    return (
        "Static batches: the bound counts every prompt's prefill and each decode step (the "
        "weights read once for the batch, each sequence's own cache), with prefill's compute "
        "free to hide decode's memory traffic. " + "; ".join(lines) + ". Runs that are nearly "
        f"all decode are memory-bound and reach {_span([c.share for c in heavy])}" + (f"; on "
        f"the {copy_chip} {_span([c.share for c in heavy if c.chip.name == copy_chip])}, near "
        f"the {copy:.0%} a copy kernel reaches there (chapter 5)" if copy_chip in chips else "")
        + f"; no copy share at hand for the {' or '.join(sorted(chips - {copy_chip}))}" * bool(
        chips - {copy_chip}) + (". Where the prefill weighs too and the phases bind different "
        f"roofs, the shares are lower ({_span([c.share for c in mixed])}): a static batch runs "
        "its prefill, then its decode, so neither hides the other; bounded so, the same runs "
        f"reach {_span([c.sequential_share for c in mixed])}; continuous batching (chapter 7) "
        "lets an engine overlap them" if mixed else "") + "".join(f". {c.row.label} is "
        f"{c.binds}-bound in both phases, so their order costs it nothing; part of its gap is "
        f"{c.row.dtype} GEMMs short of their peak (the best on an {c.row.chip} reaches "
        f"{gemm[c.row.chip, c.row.dtype]:.0%} of it, chapter 5)" + f" and TP={c.row.chips}'s "
        "all-reduces, which the bound does not count" * (c.row.chips > 1) for c in cs if c not in
        heavy + mixed) + ". The rest is attention over each sequence's cache, launches, sampling.")


def _mlperf_reason(cs: list[Comparison]) -> str:
    lines = [f"{c.row.label}: {c.row.figure:,.0f} tokens/s of {c.bound:,.0f} "
             f"({c.share:.0%}; {c.row.figure / c.row.chips:,.0f} per GPU)" for c in cs]
    offline = {(c.row.model, c.row.chip): c for c in cs if c.row.scenario == "Offline"}
    kept = [f"{c.row.label} on {c.row.chip} keeps {c.row.figure / base.row.figure:.0%} of "
            f"Offline's throughput under TTFT <= {c.row.ttft_limit:g} s and TPOT <= "
            f"{c.row.tpot_limit * 1e3:g} ms" for c in cs if c.row.scenario != "Offline"
            for base in [offline[c.row.model, c.row.chip]]]  # fmt: skip
    return (
        "The bound counts only each output token's pass through the weights, at the fp8 "
        "peak of all 8 GPUs, with no prompt, cache or communication: " + "; ".join(lines)
        + ". So these shares understate the engine: the prompts' prefill (left out because "
        "the datasets' lengths are not among the published figures), every step's KV-cache "
        "reads, all-reduces where a system splits the model and the engine's losses take the rest. "
        "What the rows do say is the price of latency limits (at the 99th percentile, "
        "requests arriving one at a time): " + "; ".join(kept) + ". The tighter the limits, "
        "the smaller the batch an engine may run, the trade chapter 9's planner makes.")


def _tp_reason(cs: list[Comparison]) -> str:
    out = []
    for name in dict.fromkeys(c.row.model for c in cs):
        series = [c for c in cs if c.row.model == name]
        base, cfg = series[0], model(name)
        reduces, t0 = 2 * cfg.layers, base.row.chips
        # gpt-fast's apply_tp splits only the layers: every GPU reads the whole LM head, whose
        # time dividing by T would not shorten. One GPU's read of it, at one chip's bandwidth:
        head = linear_bytes(1, *cfg.linear_shapes()["lm_head"], "bf16") * t0 / base.chip.bandwidth
        points = ", ".join(f"T={c.row.chips} {c.share:.0%}" for c in series)
        extra = []
        for c in series[1:]:  # the time beyond the smallest T's time scaled by T_0 / T
            added = c.measured_seconds - base.measured_seconds * t0 / c.row.chips
            whole = head * (1 - t0 / c.row.chips)  # the head T does not divide
            each = (f" ({whole * 1e3:.2f} ms the whole LM head; past it, "
                    f"{(added - whole) / reduces * 1e6:.0f} us a call)" if added > 0 else "")
            extra.append(f"T={c.row.chips} {added * 1e3:+.2f} ms{each}")
        what = ("the T=1 time holds no all-reduce, so one all-reduce costs at most a call's share, "
                "if thinner slices only lose speed" if t0 == 1 else f"the T={t0} time "
                f"already holds T={t0}'s all-reduces: a call's share is not one all-reduce's cost")
        out.append(f"{name}: {points}. Against its own T={t0} time scaled by {t0}/T, a token takes "
                   + ", ".join(extra) + f", {reduces} all-reduce calls a token; {what}.")
    return (
        "The bound splits the bytes over T chips' bandwidth and charges nothing for the "
        "all-reduces, two a layer for each token, and splits the LM head too, which "
        "gpt-fast leaves whole on every GPU. " + " ".join(out) + " What T does not divide "
        "is what tensor parallelism adds: all-reduces whose latency no chip count shortens, "
        "and slices of every matrix that get thinner and stream less well; chapter 10's "
        "TPOT(T) adds the all-reduces, not the slices' loss. The source ran A100s in a 'hybrid "
        "cube mesh', batch 1; where a time is below its ideal (a minus sign), T chips did "
        "better than scaling alone, and the source does not say why.")


def reason(kind: str) -> str:
    """Why a kind's rows reach the share they do, with their numbers in it."""
    one_of(kind, KINDS, "kind")
    return globals()[f"_{kind}_reason"](table(kind))


def report(*kinds: str) -> str:
    """The rows of ``kinds``, each with its source, software and date, its bound, share
    and binding roof, then the reason for the gap: what a chapter prints."""
    out = []
    for kind in kinds:
        low, high = shares(kind)
        out.append(f"== {kind}: published figures reach {low:.0%}-{high:.0%} of the roofline")
        for c in table(kind):
            r = c.row
            count = f"{r.chips}x " if r.chips > 1 else ""
            out.append(f"  {r.label}, {count}{r.chip}: {r.figure:,} {r.unit}; bound "
                       f"{c.bound:,.{0 if c.bound >= 100 else 1}f} ({c.binds}); "
                       f"share {c.share:.1%}")  # fmt: skip
            out.append(f"      {SOURCES[r.source].title}; {r.software}; {r.date}")
        out.append("  Why: " + reason(kind))
    return "\n".join(out)

