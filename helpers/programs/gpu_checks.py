"""The GPU reference's measuring checks (``helpers.programs.gpu_reference`` runs them): one per
chapter
4-7, each a ``measure_x(device, size)`` that returns the chapter's JSON record and a PNG writer
for it, at the real sizes on a GPU or toy ones (``size_for(tiny=True)``) for the CPU test.

- chapter 4 (``measure_timing``): the measured ceilings;
- chapter 5 (``measure_matmuls``): ``sweep_run.run_sweep``'s sweep, its results record
  (``helpers.measuring.sweep_record``) drawn on the measured rooflines;
- chapter 6 (``measure_latency``): prefill and decode times of random-weight decoders;
- chapter 7 (``measure_batching``): the decode batch sweep up to the memory's cap.

``measure_step`` runs one of them and writes ``NN_name.json`` and ``NN_name.png``, each
stamped with the device, torch version and date (``helpers.measuring.gpu_edition.stamp``).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.measuring import gpu_edition, machine

__all__ = ["Size", "size_for", "measure_timing", "measure_matmuls", "measure_latency",
           "measure_batching", "MEASURE", "measure_step"]  # fmt: skip


@dataclass(frozen=True)
class Size:
    """How large each step runs: the real sizes on a GPU, toy ones for the CPU test."""

    quick: bool
    tiny: bool
    gemms: tuple[tuple[int, int, int], ...] | None  # the ceilings' GEMMs (None: the default)
    stream_bytes: int | None  # the bandwidth stream's buffer (None: the default)
    scale: int | None  # the sweep's scale (None: automatic)
    max_tokens: int  # the sweep's largest m
    models: tuple[Any, ...]  # chapter 6's ModelConfigs
    prompts: tuple[int, ...]
    contexts: tuple[int, ...]
    batch_model: Any  # chapter 7's ModelConfig
    batch_context: int
    max_batch: int | None  # a cap below the memory's (None: the memory's)
    notebook_cells: int | None  # code cells of each chapter to run (None: all)
    run_time: float = 1.0  # chapters 6-7's min and max run times per point, times this


def _tiny_config(layers: int) -> Any:
    from helpers.counting import models

    return dataclasses.replace(models.get("Qwen2.5-0.5B"), name=f"tiny Qwen2.5 ({layers} layers)",
                               hidden=64, intermediate=128, layers=layers, head_dim=16,
                               n_q_heads=4, n_kv_heads=2, vocab=500)  # fmt: skip


def size_for(quick: bool = False, tiny: bool = False) -> Size:
    """The real sizes (chapter 6's and 7's GPU sizes), or with ``tiny`` toy ones."""
    from helpers.counting import models
    from helpers.measuring import sweep

    if tiny:
        return Size(quick=True, tiny=True, gemms=((256, 256, 256),), stream_bytes=32 * 2**20,
                    scale=64, max_tokens=2, models=(_tiny_config(1), _tiny_config(2)),
                    prompts=(8, 32), contexts=(8, 64), batch_model=_tiny_config(2),
                    batch_context=16, max_batch=4, notebook_cells=2, run_time=0.1)  # fmt: skip
    return Size(quick=quick, tiny=False, gemms=None, stream_bytes=None, scale=None,
                max_tokens=sweep.MAX_TOKENS,
                models=(models.get("Qwen2.5-0.5B"), models.get("Qwen2.5-7B")),
                prompts=(128, 512, 2048, 8192), contexts=(128, 4096, 16384, 32768),
                batch_model=models.get("Qwen2.5-0.5B"), batch_context=512, max_batch=None,
                notebook_cells=None)  # fmt: skip


def _dtype(device: str) -> str:
    """bf16 on a GPU, fp32 on a CPU (where CPU kernels are best), as chapters 6-7 choose."""
    return "fp32" if device == "cpu" else "bf16"


def _ceilings(device: str, dtypes: tuple[str, ...], size: Size, quick: bool) -> Any:
    from helpers.measuring import ceilings

    return ceilings.measure_ceilings(device, dtypes, quick=quick,
                                     shapes=list(size.gemms) if size.gemms else None,
                                     bandwidth_bytes=size.stream_bytes)  # fmt: skip


# ----- chapter 4 ------------------------------------------------------------------------------

def measure_timing(device: str, size: Size) -> dict[str, Any]:
    """Chapter 4's ceilings: fp32, bf16 and fp16 on a GPU (fp32 and bf16 on a CPU)."""
    dtypes = ("fp32", "bf16") if device == "cpu" else ("fp32", "bf16", "fp16")
    return {"ceilings": _ceilings(device, dtypes, size, quick=size.quick).to_dict()}


def plot_timing(data: dict[str, Any], ax: Any) -> None:
    """Each dtype's measured roofline, and its datasheet roof dashed where there is one."""
    from helpers.widgets import plots

    c = data["ceilings"]
    span = (0.1, 4000.0)
    for i, (dtype, peak) in enumerate(c["matmul_flops"].items()):
        plots.plot_roofline(ax, peak, c["bandwidth"], label=f"{dtype} measured",
                            color=f"C{i}", annotate=False, intensity_range=span)  # fmt: skip
        sheet = c.get("datasheet_flops", {}).get(dtype)
        if sheet and c.get("datasheet_bandwidth"):
            roof = len(ax.lines)  # the roof is the first line plot_roofline draws
            plots.plot_roofline(ax, sheet, c["datasheet_bandwidth"], color=f"C{i}",
                                label=f"{dtype} datasheet", annotate=False,
                                intensity_range=span)  # fmt: skip
            ax.lines[roof].set_linestyle("--")
    ax.legend(fontsize=7)


# ----- chapter 5 ------------------------------------------------------------------------------

def measure_matmuls(device: str, size: Size) -> dict[str, Any]:
    """Chapter 5's sweep (``sweep_run.run_sweep``) in fp32 and bf16 (full size, or ``size``'s
    scale and m): its results record, as ``helpers.programs.bench`` writes it."""
    from helpers.measuring import ceilings, sweep_run

    if size.gemms:  # the run measures its own ceilings; the tiny run keeps their GEMMs small
        os.environ[ceilings.GEMMS_ENV] = ",".join("x".join(map(str, g)) for g in size.gemms)
    return sweep_run.run_sweep(device, ("fp32", "bf16"), quick=size.quick, scale=size.scale,
                               max_tokens=size.max_tokens, progress=False).record()  # fmt: skip


def draw_matmuls(data: dict[str, Any], path: Path) -> None:
    """The sweep on its measured rooflines, as ``helpers.programs.bench`` draws it."""
    from helpers.measuring import sweep_record
    from helpers.programs import bench

    bench.save_roofline_png(sweep_record.record_points(data), sweep_record.record_ceilings(data),
                            str(path), subtitle=gpu_edition.stamp_line(data["stamp"]))  # fmt: skip
    _stamp_png(path, data["stamp"])


# ----- chapter 6 ------------------------------------------------------------------------------

def _free(device: str) -> None:

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure_latency(device: str, size: Size) -> dict[str, Any]:
    """TTFT per prompt length and TPOT per context for each of ``size.models``, with MFU and
    MBU against this device's measured ceilings: chapter 6 §4-5's experiments
    (``phase_times.ttft_against_prompt`` and ``tpot_against_context``, random weights, the
    bandwidth streamed again beside each decode timing), every MBU against the best stream
    of the whole run."""
    import torch

    from helpers.counting import flops, latency, memory
    from helpers.decoder import phase_times
    from helpers.decoder.model import random_decoder
    from helpers.measuring import ceilings

    dtype = _dtype(device)
    torch.set_grad_enabled(False)
    measured = _ceilings(device, (dtype,), size, quick=True)
    results, streams = [], []
    for cfg in size.models:
        model = random_decoder(cfg, device, machine.torch_dtype(dtype))
        prefill = phase_times.ttft_against_prompt(model, size.prompts, measured, dtype, device,
                                                  run_time=size.run_time)  # fmt: skip
        decode = phase_times.tpot_against_context(model, size.contexts, measured, dtype, device,
                                                  run_time=size.run_time,
                                                  stream_bytes=size.stream_bytes)  # fmt: skip
        streams += decode.streams
        prefill_rows = [{"prompt": r.prompt, "seconds": r.seconds,
                         "iqr_s": prefill.spread[r.prompt], "flops": r.flops, "mfu": r.mfu}
                        for r in prefill.rows]  # fmt: skip
        decode_rows = [{"context": r.context, "seconds": r.seconds,
                        "iqr_s": decode.spread[r.context], "bytes": r.bytes_moved}
                       for r in decode.rows]  # fmt: skip
        results.append({"name": cfg.name, "layers": cfg.layers, "params": flops.param_count(cfg),
                        "weights_bytes": memory.weight_bytes(cfg, dtype), "prefill": prefill_rows,
                        "decode": decode_rows, "cfg": dataclasses.asdict(cfg)})  # fmt: skip
        del model
        _free(device)
    # A ceiling is the best this device reached (chapter 4): every MBU against the best stream.
    measured = ceilings.with_best_bandwidth(measured, streams)
    hw = measured.as_hardware_spec()
    for entry, cfg in zip(results, size.models, strict=True):
        for row in entry["prefill"]:
            row["predicted_s"] = latency.ttft(cfg, hw, row["prompt"], dtype=dtype)
        for row in entry["decode"]:
            row["predicted_s"] = latency.tpot(cfg, hw, row["context"], dtype=dtype)
            row["mbu"] = latency.bandwidth_utilization(row["bytes"], row["seconds"],
                                                       measured.bandwidth)  # fmt: skip
    return {"dtype": dtype, "ceilings": measured.to_dict(), "models": results}


def plot_latency(data: dict[str, Any], axes: Any) -> None:
    """TTFT against prompt and TPOT against context, measured (solid) and roofline (dashed)."""
    left, right = axes
    for i, model in enumerate(data["models"]):
        for ax, rows, key in ((left, model["prefill"], "prompt"), (right, model["decode"],
                                                                  "context")):  # fmt: skip
            x = [r[key] for r in rows]
            ax.plot(x, [r["seconds"] * 1e3 for r in rows], "o-", color=f"C{i}",
                    label=f"{model['name']} measured")  # fmt: skip
            ax.plot(x, [r["predicted_s"] * 1e3 for r in rows], "--", color=f"C{i}",
                    label=f"{model['name']} roofline")  # fmt: skip
    left.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="TTFT (ms)")
    right.set(xscale="log", yscale="log", xlabel="context tokens", ylabel="TPOT (ms)")
    left.legend(fontsize=7)


# ----- chapter 7 ------------------------------------------------------------------------------

def _batches(cap: int) -> list[int]:
    """1, 4, 16, … below ``cap``, then ``cap`` itself."""
    out = [b for b in (4**i for i in range(32)) if b < cap]
    return [*out, cap]


def measure_batching(device: str, size: Size) -> dict[str, Any]:
    """Chapter 7 §2's decode batch sweep, batch ×4 from 1 up to the memory cap: the largest
    batch whose KV cache (context + 1 slots a sequence) and logits (two copies) fit in 90% of
    the memory left beside the weights and the benchmark's buffers. A batch that still runs
    out of memory ends the sweep, recorded."""
    import torch

    from helpers.counting import memory, roofline
    from helpers.decoder.batch_sweep import decode_batch_sweep
    from helpers.decoder.model import random_decoder

    dtype, cfg, context = _dtype(device), size.batch_model, size.batch_context
    torch.set_grad_enabled(False)
    measured = _ceilings(device, (dtype,), size, quick=True)
    hw = measured.as_hardware_spec()
    model = random_decoder(cfg, device, machine.torch_dtype(dtype))
    per_sequence = (memory.kv_bytes_per_token(cfg, dtype) * (context + 1)
                    + 2 * cfg.vocab * memory.dtype_bytes(dtype))  # fmt: skip
    free = machine.device_memory_bytes(device)
    cap = max(1, int(0.9 * free // per_sequence))
    rule = (f"90% of {free / 2**30:,.1f} GiB free / {per_sequence / 2**20:,.2f} MiB a sequence "
            f"(KV of {context + 1} tokens and two rows of logits)")  # fmt: skip
    if size.max_batch and size.max_batch < cap:
        cap, rule = size.max_batch, f"{rule}, capped at {size.max_batch} for this size"

    sweep = decode_batch_sweep(model, _batches(cap), context, hw, dtype, device,
                               min_run_time=0.05 * size.run_time,
                               max_run_time=0.2 * size.run_time, stop_when_out_of_memory=True)
    rows = [{"batch": b, "seconds": sweep.step_seconds[b], "iqr_s": sweep.step_iqr[b],
             "predicted_s": sweep.predicted[b]} for b in sweep.batches]
    return {"model": cfg.name, "dtype": dtype, "context": context, "cap": cap, "cap_rule": rule,
            "stopped": sweep.stopped, "rows": rows, "ceilings": measured.to_dict(),
            "critical_batch": roofline.critical_batch_split(cfg, hw, dtype),
            "knee": sweep.knee if len(rows) > 1 else float("nan")}  # fmt: skip


def plot_batching(data: dict[str, Any], axes: Any) -> None:
    """TPOT against batch, and throughput against TPOT (chapter 7 §2's two panels)."""
    left, right = axes
    rows = data["rows"]
    batches = [r["batch"] for r in rows]
    tpot_ms = [r["seconds"] * 1e3 for r in rows]
    rates = [r["batch"] / r["seconds"] for r in rows]
    left.plot(batches, tpot_ms, "o-", label="measured")
    left.plot(batches, [r["predicted_s"] * 1e3 for r in rows], "--", label="roofline")
    left.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="decode step = TPOT (ms)")
    left.legend(fontsize=7)
    right.plot(tpot_ms, rates, "o-")
    for b, x, y in zip(batches, tpot_ms, rates, strict=True):
        right.annotate(f"B={b}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    right.set(xscale="log", yscale="log", xlabel="TPOT per request (ms)",
              ylabel="aggregate tokens/s")  # fmt: skip


def _stamp_png(path: Path, found: dict[str, str]) -> None:
    """Put the stamp in the PNG's text ("Description"), where an image viewer shows it."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Description", json.dumps(found))
    with Image.open(path) as image:
        image.load()
        image.save(path, pnginfo=info)


def _figure(draw: Callable[..., None], panels: int, title: str) -> Callable[..., None]:
    """A PNG writer for ``draw``: ``panels`` axes, titled with ``title`` and the stamp."""

    def write(data: dict[str, Any], path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5))
        draw(data, axes)
        for ax in [axes] if panels == 1 else axes:
            ax.grid(True, which="both", alpha=0.3)
        fig.suptitle(f"{title}\n{gpu_edition.stamp_line(data['stamp'])}", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        _stamp_png(path, data["stamp"])

    return write


MEASURE: dict[str, tuple[str, Callable[..., dict[str, Any]], Callable[..., None]]] = {
    "ceilings": ("04_timing", measure_timing,
                 _figure(plot_timing, 1, "Chapter 4: the measured ceilings")),
    "sweep": ("05_matmuls", measure_matmuls, draw_matmuls),
    "latency": ("06_ttft_tpot", measure_latency,
                _figure(plot_latency, 2, "Chapter 6: TTFT and TPOT, random weights")),
    "batching": ("07_batching", measure_batching,
                 _figure(plot_batching, 2, "Chapter 7: the decode batch sweep")),
}  # fmt: skip
"""Step name → (chapter, measuring function, PNG writer)."""


def measure_step(name: str, device: str, out: Path, size: Size) -> Path:
    """Run one measuring step here and write its chapter's JSON and PNG; returns the JSON."""
    chapter, measure, draw = MEASURE[name]
    found = gpu_edition.stamp(device)
    data = {**measure(device, size), "quick": size.quick, "tiny": size.tiny, "stamp": found}
    json_path = out / f"{chapter}.json"
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    draw(data, out / f"{chapter}.png")
    print(f"wrote {json_path} and {chapter}.png")
    return json_path
