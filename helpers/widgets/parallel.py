"""The deployment explorer of chapter 10 (`10_parallel`): a model on T chips in one
tensor-parallel group, its KV cache in a dtype, a decode batch, and a chip price, to TPOT,
capacity and the cost of a token.

``DeploymentControls`` holds the knobs and their defaults; ``deployment`` reads every number
off the library (``tensor_parallel.tp_decode_step`` and its ``tp_chip_seconds`` and
``tp_step_seconds``, ``tensor_parallel.tp_max_sequences``, ``cost.token_costs``: no formula
lives here);
``draw_deployment`` draws TPOT against the degree T, the all-reduces' part stacked on the
chip's own, the chosen T marked; ``show_deployment`` is the ``interact`` callback, which
prints the view's table and draws it, and returns nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.counting import hardware, models
from helpers.counting._validate import positive_int
from helpers.parallel import cost
from helpers.parallel import sharding as tp
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["DeploymentControls", "Deployment", "deployment", "draw_deployment",
           "show_deployment", "MAX_RANKS", "KV_DTYPES", "CHIP_LINKS"]  # fmt: skip

MAX_RANKS = 8
KV_DTYPES = ("bf16", "fp8", "int8")
CHIP_LINKS = {"H100 SXM": "NVLink 4", "H200 SXM": "NVLink 4", "H100 PCIe": "PCIe Gen5 x16"}
"""The chips the explorer offers, each with the ``tensor_parallel.LINKS`` link that joins
them (docs/sources.md): NVLink 4 on H100 SXM and H200 SXM boards (900 GB/s in both
directions in each datasheet), PCIe Gen5 x16 between H100 PCIe cards (the optional NVLink
bridge left out). Other chips' links (NVLink 3 and 5, Infinity Fabric, ICI, PCIe Gen4) are
not modelled, so those chips are not offered."""


@dataclass(frozen=True)
class DeploymentControls:
    """The explorer's knobs and their defaults. The chips are joined by ``link`` (a
    ``tensor_parallel.LINKS`` name; None: the chip's own, ``CHIP_LINKS``); ``context`` and
    ``prompt_tokens`` have no slider."""

    model: str = "Llama-3.1-8B"
    chip: str = "H100 SXM"
    ranks: int = 2
    kv_dtype: str = "fp8"
    batch: int = 64
    price_per_chip_hour: float = 2.0
    context: int = 4096
    prompt_tokens: int = 2048
    link: str | None = None


@dataclass(frozen=True)
class Deployment:
    """One deployment's numbers; seconds and dollars. Per degree of ``degrees``:
    ``chip_s`` (weights and attention on one chip's share), ``allreduce_s`` and
    ``capacity`` (sequences of ``context`` tokens the T chips hold). At ``ranks``:
    ``input_cost`` and ``output_cost`` per million tokens (None where the batch does not
    fit, or T is not a degree the model splits into)."""

    model: str
    chip: str
    link: str
    ranks: int
    kv_dtype: str
    batch: int
    context: int
    prompt_tokens: int
    price_per_chip_hour: float
    degrees: tuple[int, ...]
    chip_s: tuple[float, ...]
    allreduce_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    capacity: tuple[int, ...]
    input_cost: float | None
    output_cost: float | None

    def rows(self) -> list[tuple[int, float, float, int, bool]]:
        """(T, TPOT ms, all-reduce share, capacity, batch fits) per degree."""
        return [(t, s * 1e3, a / s, cap, self.batch <= cap)
                for t, s, a, cap in zip(self.degrees, self.tpot_s, self.allreduce_s,
                                        self.capacity, strict=True)]  # fmt: skip

    def summary(self) -> str:
        head = (f"{self.model} on {self.ranks} × {self.chip} ({self.link}), KV {self.kv_dtype}, "
                f"batch {self.batch}, context {self.context:,}")  # fmt: skip
        if self.ranks not in self.degrees:
            return f"{head}: T = {self.ranks} does not divide the heads or the MLP width"
        cap = self.capacity[self.degrees.index(self.ranks)]
        if self.output_cost is None:
            return f"{head}: the batch does not fit (memory holds {cap:,} sequences)"
        return (f"{head}: holds {cap:,} sequences; at ${self.price_per_chip_hour:g} a chip-hour "
                f"${self.input_cost:.3f} per million input tokens, ${self.output_cost:.3f} "
                "per million output tokens")  # fmt: skip


def deployment(controls: DeploymentControls = DeploymentControls()) -> Deployment:
    """The explorer's numbers: bf16 weights and activations, the cache in ``kv_dtype``, the
    chips joined by ``link`` (ValueError for a chip whose link the library does not
    model)."""
    model, chip, ranks, batch = controls.model, controls.chip, controls.ranks, controls.batch
    kv_dtype, link, context = controls.kv_dtype, controls.link, controls.context
    price_per_chip_hour, prompt_tokens = controls.price_per_chip_hour, controls.prompt_tokens
    positive_int(ranks, "ranks")
    positive_int(batch, "batch")
    if link is None:
        if chip not in CHIP_LINKS:
            raise ValueError(f"no modelled link joins {chip!r} chips; the explorer's chips: "
                             f"{', '.join(CHIP_LINKS)}")  # fmt: skip
        link = CHIP_LINKS[chip]
    cfg, hw, net = models.get(model), hardware.get(chip), tp.link(link)
    found = tp.degrees(cfg, MAX_RANKS)
    parts = [tp.tp_decode_step(cfg, hw, net, t, batch, context, kv_dtype=kv_dtype)
             for t in found]  # fmt: skip
    capacity = tuple(tp.tp_max_sequences(cfg, hw, t, context, kv_dtype=kv_dtype) for t in found)
    costs = None
    if ranks in found and batch <= capacity[found.index(ranks)]:
        costs = cost.token_costs(cfg, hw, net, ranks, price_per_chip_hour, batch=batch,
                                 context=context, prompt_tokens=prompt_tokens,
                                 kv_dtype=kv_dtype)  # fmt: skip
    return Deployment(model, chip, link, ranks, kv_dtype, batch, context, prompt_tokens,
                      price_per_chip_hour, tuple(found),
                      tuple(tp.tp_chip_seconds(p) for p in parts),
                      tuple(p["all_reduce"] for p in parts),
                      tuple(tp.tp_step_seconds(p) for p in parts), capacity,
                      costs and costs["input"], costs and costs["output"])  # fmt: skip


def draw_deployment(ax, view: Deployment) -> None:
    """TPOT (ms) per degree T: one chip's share and the all-reduces stacked; degrees whose
    memory cannot hold the batch hatched; the chosen T outlined."""
    labels = [str(t) for t in view.degrees]
    chip_ms = [s * 1e3 for s in view.chip_s]
    reduce_ms = [s * 1e3 for s in view.allreduce_s]
    for i, (t, _, _, _, fits) in enumerate(view.rows()):
        edge = "black" if t == view.ranks else "none"
        hatch = None if fits else "//"
        ax.bar(labels[i], chip_ms[i], color="#4c72b0", edgecolor=edge, hatch=hatch,
               label="one chip's share" if i == 0 else None)  # fmt: skip
        ax.bar(labels[i], reduce_ms[i], bottom=chip_ms[i], color="#dd8452", edgecolor=edge,
               hatch=hatch, label="all-reduces" if i == 0 else None)  # fmt: skip
    ax.set_xlabel("chips in the tensor-parallel group, T")
    ax.set_ylabel("TPOT (ms)")
    ax.legend(fontsize=8)
    ax.margins(y=0.1)
    # a dollar sign would open mathtext
    ax.set_title(view.summary().replace("$", r"\$"), fontsize=8, wrap=True)


def show_deployment(**controls) -> None:
    """The ``interact`` callback (``controls``: ``DeploymentControls``' knobs): the table of
    ``deployment`` and its figure; returns None."""
    view = deployment(DeploymentControls(**controls))
    print(view.summary())
    for t, tpot_ms, share, cap, fits in view.rows():
        print(f"T = {t}: TPOT {tpot_ms:6.2f} ms ({share:4.0%} all-reduce), holds {cap:,} "
              f"sequences{'' if fits else ' (the batch does not fit)'}")
    fig, ax = new_figure((7, 3.6))
    draw_deployment(ax, view)
    show_figure(fig)
