"""The serving explorers of chapter 8 (`08_serving`): one per optimisation.

Each explorer is a controls dataclass (its sliders' knobs and their defaults, declared once:
the view, the callback and the chapter's ``interact`` cell read them), a view dataclass built
by ``x_view(controls)`` from library calls (plain numbers, testable without a browser; its
``table`` prints them), a ``draw_x(ax, view)`` that
draws it on a matplotlib Axes, and a ``show_x(**controls)`` callback that the notebook's
sliders call: it prints the table and shows the figure, and returns nothing (``interact``
would print a returned value's repr under the figure). No formula or experiment lives here:
the numbers come from ``helpers.serving``'s studies and ``helpers.serving.spec``.

- ``stall_view``: a batch of decodes meets one long prompt; the gap each decode waits for its
  next token, step by step, without and with chunked prefill (Sarathi-Serve;
  ``serving.prefill_stall_study``).
- ``prefix_view``: mean and p99 TTFT with and without a prefix cache, for a share of requests
  that start with the same system prompt (``serving.prefix_cache_study``).
- ``transfer_view``: a prompt's KV transfer time over a link, beside its prefill time and a
  decode step (DistServe, Splitwise; ``serving.kv_handoff_study``).
- ``spec_view``: speculative decoding's speedup against γ, and the best γ (Leviathan et al.).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers import serving
from helpers.serving import spec
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["StallControls", "StallView", "stall_view", "draw_stall", "show_stall",
           "PrefixControls", "PrefixView", "prefix_view", "draw_prefix", "show_prefix",
           "TransferControls", "TransferView", "transfer_view", "draw_transfer",
           "show_transfer", "SpecControls", "SpecView", "spec_view", "draw_spec",
           "show_spec"]  # fmt: skip


# ------------------------------------------------------------------- chunked prefill


@dataclass(frozen=True)
class StallControls:
    """The stall explorer's knobs and their defaults."""

    model: str = "Qwen2.5-7B"
    chip: str = "H100 SXM"
    decodes: int = 32
    prompt_tokens: int = 8192
    token_budget: int = 512


@dataclass(frozen=True)
class StallView:
    """Per policy, the seconds of every step that carried decodes (each decode waits one step
    for its next token), and the long prompt's TTFT; the inputs name the figure."""

    gaps: dict[str, np.ndarray]
    ttft: dict[str, float]
    model: str
    chip: str
    decodes: int
    prompt_tokens: int

    def table(self) -> str:
        lines = [f"{'policy':<22}{'max gap ms':>11}{'median gap ms':>15}"
                 f"{'long prompt TTFT ms':>21}"]
        for name, gaps in self.gaps.items():
            lines.append(f"{name:<22}{gaps.max() * 1e3:>11.1f}{np.median(gaps) * 1e3:>15.2f}"
                         f"{self.ttft[name] * 1e3:>21.1f}")  # fmt: skip
        return "\n".join(lines)


def stall_view(controls: StallControls = StallControls()) -> StallView:
    """``serving.prefill_stall_study``'s gaps and TTFTs, with the inputs that name them."""
    c = controls
    gaps, ttft = serving.prefill_stall_study(c.model, c.chip, c.decodes, c.prompt_tokens,
                                             c.token_budget)  # fmt: skip
    return StallView(gaps, ttft, c.model, c.chip, c.decodes, c.prompt_tokens)


def draw_stall(ax, view: StallView) -> None:
    """Each decode step's gap against its index, one line per policy, log y."""
    for name, gaps in view.gaps.items():
        ax.step(np.arange(len(gaps)), gaps * 1e3, where="post", label=name)
    ax.set(xlabel="decode step", ylabel="gap before the next token (ms)", yscale="log",
           title=f"{view.decodes} decodes meet a {view.prompt_tokens:,}-token prompt "
                 f"({view.model}, {view.chip})")  # fmt: skip
    ax.legend(fontsize=8)


def show_stall(**controls) -> None:
    """The sliders' callback (``StallControls``' knobs): the table, and each decode step's
    gap against its index."""
    try:
        view = stall_view(StallControls(**controls))
    except ValueError as error:  # e.g. a budget no larger than the batch
        print(error)
        return
    print(view.table())
    _show(draw_stall, view, (7.5, 3.5))


# -------------------------------------------------------------------- prefix caching


@dataclass(frozen=True)
class PrefixControls:
    """The prefix explorer's knobs and their defaults: the share of requests that start with
    the same system prompt, and its tokens."""

    shared_fraction: float = 0.5
    shared_prefix: int = 2048


@dataclass(frozen=True)
class PrefixView:
    """TTFT without and with a prefix cache, and the share of prompt tokens it served."""

    hit_rate: float
    ttft_mean: tuple[float, float]
    ttft_p99: tuple[float, float]
    shared_fraction: float
    shared_prefix: int

    def table(self) -> str:
        (m0, m1), (p0, p1) = self.ttft_mean, self.ttft_p99
        return (f"prompt tokens served from the cache: {self.hit_rate:.0%}\n"
                f"{'':<14}{'no cache':>10}{'cache':>10}\n"
                f"{'TTFT mean ms':<14}{m0 * 1e3:>10.1f}{m1 * 1e3:>10.1f}\n"
                f"{'TTFT p99 ms':<14}{p0 * 1e3:>10.1f}{p1 * 1e3:>10.1f}")  # fmt: skip


def prefix_view(controls: PrefixControls = PrefixControls(), **workload) -> PrefixView:
    """``serving.prefix_cache_study``'s hit rate and TTFTs, with the inputs that name them;
    ``workload`` (model, chip, rate, n) goes to the study, whose defaults it keeps."""
    c = controls
    study = serving.prefix_cache_study(c.shared_fraction, c.shared_prefix, **workload)
    return PrefixView(study["hit_rate"], study["ttft_mean"], study["ttft_p99"],
                      c.shared_fraction, c.shared_prefix)  # fmt: skip


def draw_prefix(ax, view: PrefixView) -> None:
    """Mean and p99 TTFT as bars, without and with the prefix cache."""
    x = np.arange(2)
    ax.bar(x - 0.2, np.array(view.ttft_mean) * 1e3, 0.4, label="mean")
    ax.bar(x + 0.2, np.array(view.ttft_p99) * 1e3, 0.4, label="p99")
    ax.set_xticks(x, ["no prefix cache", "prefix cache"])
    ax.set(ylabel="TTFT (ms)", title=f"{view.shared_fraction:.0%} of requests share "
           f"{view.shared_prefix:,} tokens: {view.hit_rate:.0%} of prompt tokens hit")
    ax.legend(fontsize=8)


def show_prefix(**controls) -> None:
    """The sliders' callback (``PrefixControls``' knobs): the table and a bar chart of the
    TTFTs."""
    view = prefix_view(PrefixControls(**controls))
    print(view.table())
    _show(draw_prefix, view, (6, 3))


# --------------------------------------------------------------------- disaggregation


@dataclass(frozen=True)
class TransferControls:
    """The transfer explorer's knobs and their defaults; ``decode_batch`` (the decode step
    the transfer is compared with) has no slider."""

    model: str = "Qwen2.5-7B"
    chip: str = "H100 SXM"
    prompt_tokens: int = 1024
    link_gb_per_s: float = 50.0
    decode_batch: int = 32


@dataclass(frozen=True)
class TransferView:
    """One prompt's KV handoff beside what the two engines spend on it."""

    kv_bytes: int
    transfer_s: float
    prefill_s: float
    decode_step_s: float
    model: str
    chip: str
    prompt_tokens: int
    link_gb_per_s: float
    decode_batch: int

    def table(self) -> str:
        return (f"KV cache to move: {self.kv_bytes / 1e6:,.1f} MB\n"
                f"transfer   {self.transfer_s * 1e3:9.2f} ms\n"
                f"prefill    {self.prefill_s * 1e3:9.2f} ms (transfer = "
                f"{self.transfer_s / self.prefill_s:.0%} of it)\n"
                f"decode step (batch {self.decode_batch}) {self.decode_step_s * 1e3:6.2f} ms "
                f"(transfer = "
                f"{self.transfer_s / self.decode_step_s:.1f} steps)")  # fmt: skip


def transfer_view(controls: TransferControls = TransferControls()) -> TransferView:
    """KV bytes and transfer time of a prompt over a link of ``link_gb_per_s`` GB/s, its
    prefill alone and a decode step of ``decode_batch`` sequences at that context
    (``serving.kv_handoff_study``)."""
    c = controls
    study = serving.kv_handoff_study(c.model, c.chip, c.prompt_tokens, c.link_gb_per_s * 1e9,
                                     c.decode_batch)  # fmt: skip
    return TransferView(study["kv_bytes"], study["transfer_s"], study["prefill_s"],
                        study["decode_step_s"], c.model, c.chip, c.prompt_tokens,
                        c.link_gb_per_s, c.decode_batch)  # fmt: skip


def draw_transfer(ax, view: TransferView) -> None:
    """The transfer, the prefill and a decode step as horizontal bars, log x."""
    labels = ["KV transfer", "prefill", f"decode step ({view.decode_batch})"]
    ax.barh(labels, np.array([view.transfer_s, view.prefill_s, view.decode_step_s]) * 1e3)
    ax.set(xscale="log", xlabel="milliseconds",
           title=f"{view.model}, {view.prompt_tokens:,} tokens, {view.chip}, "
                 f"{view.link_gb_per_s:g} GB/s link")  # fmt: skip


def show_transfer(**controls) -> None:
    """The sliders' callback (``TransferControls``' knobs): the table and the three times as
    bars."""
    try:
        view = transfer_view(TransferControls(**controls))
    except ValueError as error:  # e.g. a model whose weights do not fit in one chip
        print(error)
        return
    print(view.table())
    _show(draw_transfer, view, (6, 2.5))


# ---------------------------------------------------------------- speculative decoding


@dataclass(frozen=True)
class SpecControls:
    """The speculative-decoding explorer's knobs and their defaults: the acceptance rate
    ``alpha``, the draft's cost ``c`` per token against the target's, the largest γ."""

    alpha: float = 0.8
    c: float = 0.05
    max_gamma: int = 16


@dataclass(frozen=True)
class SpecView:
    """Speedup and expected tokens per target pass for γ = 0 … max, and the best γ."""

    gammas: np.ndarray
    speedup: np.ndarray
    tokens: np.ndarray
    best: int
    alpha: float
    c: float

    def table(self) -> str:
        g = self.best
        return (f"best gamma = {g}: {self.tokens[g]:.4f} tokens per target pass, "
                f"speedup {self.speedup[g]:.2f}x")


def spec_view(controls: SpecControls = SpecControls()) -> SpecView:
    """``serving.spec.spec_speedup`` and ``spec_expected_tokens`` over γ, ``spec_best_gamma``."""
    alpha, c, max_gamma = controls.alpha, controls.c, controls.max_gamma
    gammas = np.arange(max_gamma + 1)
    return SpecView(gammas, np.array([spec.spec_speedup(alpha, int(g), c) for g in gammas]),
                    np.array([spec.spec_expected_tokens(alpha, int(g)) for g in gammas]),
                    spec.spec_best_gamma(alpha, c, max_gamma), alpha, c)  # fmt: skip


def draw_spec(ax, view: SpecView) -> None:
    """Speedup and tokens per target pass against γ, the best γ marked."""
    ax.plot(view.gammas, view.speedup, marker=".", label="speedup")
    ax.plot(view.gammas, view.tokens, marker=".", ls=":", label="tokens per target pass")
    ax.axvline(view.best, color="gray", ls="--", label=f"best gamma = {view.best}")
    ax.set(xlabel="gamma (draft tokens per pass)", ylabel="x plain decoding",
           title=f"alpha = {view.alpha:g}, draft cost r = {view.c:g}")
    ax.legend(fontsize=8)


def show_spec(**controls) -> None:
    """The sliders' callback (``SpecControls``' knobs): speedup against γ, the best γ
    marked."""
    view = spec_view(SpecControls(**controls))
    print(view.table())
    _show(draw_spec, view, (6, 3))


def _show(draw, view, figsize: tuple[float, float]) -> None:
    """``draw(ax, view)`` in a new figure of ``figsize``, shown (``helpers.widgets.figures``)."""
    fig, ax = new_figure(figsize)
    draw(ax, view)
    show_figure(fig)
