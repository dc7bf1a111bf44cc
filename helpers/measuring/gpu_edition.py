"""The GPU edition: what a real GPU measured for chapters 4-7, shown beside the reader's run.

``make gpu-reference`` (``helpers.programs.gpu_reference``) measures on a CUDA GPU and writes one
folder
per device, ``helpers/data/gpu/<device>/`` (``device_slug``: "NVIDIA H200" → ``nvidia_h200``):

- ``NN_name.json``: the chapter's measurements, with a ``"stamp"`` (``stamp``): the device,
  its name, torch's version, CUDA's, and the UTC date and time;
- ``NN_name.png``: the chapter's figure, titled with the stamp (also in the PNG's text);
- ``notebooks/NN_name.ipynb``: the chapter executed on that GPU (the stamp in its metadata);
- ``manifest.json``: every step of the run with its status, seconds and time limit.

Each chapter calls ``show_edition("NN_name")``: for every device folder holding the chapter's
JSON it prints "measured on an NVIDIA H200, torch …, on DATE", the headline figures read from
the file, and shows the PNG as an image output (which ``make book`` renders). Where no such
file exists it says so and shows nothing else: no GPU figure exists unless a GPU measured it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "CHAPTERS", "Edition", "device_slug", "stamp", "stamp_line", "editions",
           "summary_lines", "show_edition"]  # fmt: skip

ROOT = Path(__file__).resolve().parents[1] / "data" / "gpu"  # helpers/data/gpu
"""Where the GPU editions live: one folder per device."""
CHAPTERS = ("04_timing", "05_matmuls", "06_ttft_tpot", "07_batching")
NOTEBOOKS = "notebooks"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Edition:
    """One device's files for one chapter."""

    folder: Path
    data: dict[str, Any]
    png: Path | None
    notebook: Path | None

    @property
    def stamp(self) -> dict[str, str]:
        return self.data["stamp"]


def device_slug(name: str) -> str:
    """"NVIDIA H200" → ``nvidia_h200``: lower case, anything but letters and digits turned
    into single underscores (a device's folder name)."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if not slug:
        raise ValueError(f"device name {name!r} has no letters or digits")
    return slug


def stamp(device: str) -> dict[str, str]:
    """What every file of an edition carries: ``device`` (e.g. ``cuda``), ``device_name``,
    ``torch_version``, ``cuda_version`` (empty off CUDA) and ``date`` (UTC, ISO 8601)."""
    import datetime

    import torch

    from helpers.measuring import machine

    return {
        "device": device,
        "device_name": machine.device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _article(name: str) -> str:
    """"an NVIDIA H200", "a Tesla T4": an initialism is read letter by letter."""
    word = name.split()[0] if name.split() else name
    if word.isupper() and len(word) > 1:
        return "an" if word[0] in "AEFHILMNORSX" else "a"
    return "an" if word[:1].lower() in "aeiou" else "a"


def stamp_line(found: dict[str, str]) -> str:
    """"measured on an NVIDIA H200, torch 2.11.0+cu130, on 2026-12-01"."""
    name = found["device_name"]
    return (f"measured on {_article(name)} {name}, torch {found['torch_version']}, on "
            f"{found['date'][:10]}")  # fmt: skip


def editions(chapter: str, root: Path | str | None = None) -> list[Edition]:
    """Every device's edition of ``chapter`` under ``root`` (default ``ROOT``), by folder
    name; an unreadable file raises ``ValueError`` naming it."""
    if chapter not in CHAPTERS:
        raise ValueError(f"no GPU edition for chapter {chapter!r}: one of {', '.join(CHAPTERS)}")
    base = Path(root) if root is not None else ROOT
    found = []
    for folder in sorted(p for p in base.glob("*") if p.is_dir()) if base.is_dir() else []:
        path = folder / f"{chapter}.json"
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
            stamp_line(data["stamp"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is not a GPU edition file (no readable stamp): "
                             f"{error}") from None  # fmt: skip
        png = folder / f"{chapter}.png"
        notebook = folder / NOTEBOOKS / f"{chapter}.ipynb"
        found.append(Edition(folder, data, png if png.is_file() else None,
                             notebook if notebook.is_file() else None))  # fmt: skip
    return found


def _si(value: float, unit: str) -> str:
    """1.234e12, "FLOP/s" → "1.23 TFLOP/s"; a GPU's rates in T, a CPU's in G."""
    prefix, scale = ("T", 1e12) if value >= 1e12 else ("G", 1e9)
    return f"{value / scale:.3g} {prefix}{unit}"


def _ceiling_lines(c: dict[str, Any]) -> list[str]:
    lines = []
    for dtype, peak in c["matmul_flops"].items():
        line = (f"{dtype} matmul ceiling {_si(peak, 'FLOP/s')} (best GEMM "
                f"{'×'.join(map(str, c['matmul_shape'][dtype]))}, m×k×n)")  # fmt: skip
        sheet = c.get("datasheet_flops", {}).get(dtype)
        if sheet:
            line += f", {peak / sheet:.0%} of the datasheet's {_si(sheet, 'FLOP/s')}"
        lines.append(line + f"; ridge {peak / c['bandwidth']:.0f} FLOP/B")
    line = f"read bandwidth {_si(c['bandwidth'], 'B/s')}"
    if c.get("datasheet_bandwidth"):
        line += (f", {c['bandwidth'] / c['datasheet_bandwidth']:.0%} of the datasheet's "
                 f"{_si(c['datasheet_bandwidth'], 'B/s')}")  # fmt: skip
    return [*lines, line]


def _lines_timing(data: dict[str, Any]) -> list[str]:
    return _ceiling_lines(data["ceilings"])


def _lines_matmuls(data: dict[str, Any]) -> list[str]:
    lines = _ceiling_lines(data["ceilings"])
    for dtype, entry in data["summary"].items():
        parts = []
        if "decode_bandwidth_fraction" in entry:
            parts.append(f"decode (m = 1) at {entry['decode_bandwidth_fraction']:.0%} of the "
                         "bandwidth ceiling")  # fmt: skip
        if "prefill_flops_fraction" in entry:
            parts.append(f"prefill (m ≥ 1024) at {entry['prefill_flops_fraction']:.0%} of the "
                         "matmul ceiling")  # fmt: skip
        lines.append(f"{dtype}: " + "; ".join(parts))
    scales = {s for by_m in data["scales"].values() for by in by_m.values() for s in by.values()}
    lines.append(f"{len(data['points'])} points, Qwen2.5-7B's layer shapes, largest scale "
                 f"{max(scales, default=1)} (1 = the real size)")  # fmt: skip
    return lines


def _lines_latency(data: dict[str, Any]) -> list[str]:
    c, dtype = data["ceilings"], data["dtype"]
    lines = [f"{dtype}, random weights; ceilings {_si(c['matmul_flops'][dtype], 'FLOP/s')}, "
             f"{_si(c['bandwidth'], 'B/s')}"]  # fmt: skip
    for model in data["models"]:
        first, last = model["prefill"][0], model["prefill"][-1]
        lines.append(f"{model['name']}: TTFT {first['seconds'] * 1e3:.1f} ms at {first['prompt']} "
                     f"tokens → {last['seconds'] * 1e3:.1f} ms at {last['prompt']} (MFU "
                     f"{first['mfu']:.0%} → {last['mfu']:.0%})")  # fmt: skip
        first, last = model["decode"][0], model["decode"][-1]
        lines.append(f"{' ' * len(model['name'])}  TPOT {first['seconds'] * 1e3:.2f} ms at context "
                     f"{first['context']} → {last['seconds'] * 1e3:.2f} ms at {last['context']} "
                     f"(MBU {first['mbu']:.0%} → {last['mbu']:.0%})")  # fmt: skip
    return lines


def _lines_batching(data: dict[str, Any]) -> list[str]:
    rows = data["rows"]
    best = max(rows, key=lambda r: r["batch"] / r["seconds"])
    lines = [f"{data['model']}, {data['dtype']}, context {data['context']}; memory cap "
             f"B = {data['cap']:,} ({data['cap_rule']})"]  # fmt: skip
    for r in rows:
        lines.append(f"B = {r['batch']:>6,}: TPOT {r['seconds'] * 1e3:8.2f} ms, "
                     f"{r['batch'] / r['seconds']:>10,.0f} tokens/s, roofline "
                     f"{r['predicted_s'] * 1e3:.2f} ms")  # fmt: skip
    lines.append(f"highest throughput {best['batch'] / best['seconds']:,.0f} tokens/s at "
                 f"B = {best['batch']:,}; measured knee {data['knee']:.0f}, split roofline's "
                 f"B* = {data['critical_batch']}")  # fmt: skip
    if data.get("stopped"):
        lines.append(data["stopped"])
    return lines


_SUMMARIES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "04_timing": _lines_timing,
    "05_matmuls": _lines_matmuls,
    "06_ttft_tpot": _lines_latency,
    "07_batching": _lines_batching,
}


def summary_lines(chapter: str, data: dict[str, Any]) -> list[str]:
    """The headline figures of one chapter's edition file, as text lines."""
    return _SUMMARIES[chapter](data)


def _shown(path: Path) -> str:
    """A path as the reader's checkout names it (relative to the repository when inside)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def show_edition(chapter: str, root: Path | str | None = None) -> None:
    """Print each device's edition of ``chapter`` (``editions``: stamp, headline figures,
    where the executed notebook is) and display its PNG; or say, in a reader's words, that
    none exists (``make gpu-reference`` measures one: ``helpers.programs.gpu_reference``)."""
    found = editions(chapter, root)
    if not found:  # a reader's note: the maintainers' command is in the README (GPU notes)
        print("No GPU edition of this chapter has been measured yet: it shows only your own "
              "run.")  # fmt: skip
        return
    from IPython.display import Image, display

    for edition in found:
        print(f"GPU edition, {stamp_line(edition.stamp)} ({_shown(edition.folder)}):")
        for line in summary_lines(chapter, edition.data):
            print(f"  {line}")
        if edition.notebook:
            print(f"  the whole chapter as it ran there: {_shown(edition.notebook)}")
        if edition.png:
            display(Image(filename=str(edition.png)))
