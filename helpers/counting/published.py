"""Published GPU measurements beside the book's roofline (chapters 5, 6, 7, 9 and 10).

What others measured on real GPUs, each row read from its source (title, URL, software,
date, and the source's own words for the setup), held against the roofline the book teaches:
the same formulas, datasheet chips (``hardware``) and model configs (``models``).
``compare(row)`` gives the bound, the achieved share (published / bound) and the roof that
binds; ``table(kind)`` every row of a kind. Why each kind's share is what it is, read from
these numbers, is ``helpers.counting.published_report``'s.

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
           "throughput_work", "mlperf_work", "compare", "table", "shares"]

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
