"""The latency-breakdown explorer of chapter 6 (`06_ttft_tpot`): where a request's time goes.

``LatencyControls`` holds the sliders' knobs and defaults; ``latency_breakdown`` reads TTFT
and TPOT curves measured in the chapter at the controls' prompt and output lengths
(``helpers.counting.latency.interpolate`` and ``predict_e2e``: no formula lives here);
``draw_latency_breakdown`` draws the request as a bar, prefill then the decode steps, on a
matplotlib Axes; ``plot_latency_breakdown`` shows one breakdown in a new figure (the
chapter's default view); ``show_latency_breakdown`` is the ``interact`` callback. Neither
returns anything, so ``interact`` shows the figure and no repr under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from helpers.counting import latency
from helpers.counting._validate import positive_int
from helpers.serving.metrics import tpot_from
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["LatencyControls", "LatencyBreakdown", "latency_breakdown", "draw_latency_breakdown",
           "plot_latency_breakdown", "show_latency_breakdown"]  # fmt: skip

COLORS = {"prefill (TTFT)": "#4c72b0", "decode (n − 1 steps)": "#dd8452"}


@dataclass(frozen=True)
class LatencyControls:
    """The explorer's knobs and their defaults: the request's prompt and output tokens (the
    curves it reads are the chapter's data, not knobs)."""

    prompt_tokens: int = 1024
    output_tokens: int = 256


@dataclass(frozen=True)
class LatencyBreakdown:
    """One request's predicted seconds: TTFT, then n − 1 decode steps."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    decode_s: float
    outside: str = ""  # where the request leaves the measured curves, "" if nowhere

    @property
    def e2e_s(self) -> float:
        return self.ttft_s + self.decode_s

    @property
    def mean_tpot_s(self) -> float:
        """(e2e − TTFT)/(n − 1), NaN for one token (``serving.metrics.tpot_from``, the
        convention of vLLM's benchmark: a one-token output has no decode step)."""
        return float(tpot_from(self.decode_s, self.output_tokens))

    def segments(self) -> dict[str, float]:
        """The bar's segments in seconds, in drawing order (the figure's data)."""
        return {"prefill (TTFT)": self.ttft_s, "decode (n − 1 steps)": self.decode_s}

    def summary(self) -> str:
        share = self.ttft_s / self.e2e_s
        decode = (f" + {self.output_tokens - 1} × TPOT {self.mean_tpot_s * 1e3:,.2f} ms"
                  if self.output_tokens > 1 else " (one token: no decode step, no TPOT)")
        return (f"prompt {self.prompt_tokens:,}, output {self.output_tokens:,}: TTFT "
                f"{self.ttft_s * 1e3:,.1f} ms{decode} = {self.e2e_s:,.3f} s "
                f"(prefill {share:.0%} of it)"
                + (f"\nnot measured: {self.outside}" if self.outside else ""))  # fmt: skip


def latency_breakdown(
    ttft_curve: Mapping[int, float],
    tpot_curve: Mapping[int, float],
    controls: LatencyControls = LatencyControls(),
) -> LatencyBreakdown:
    """The request's breakdown read off the measured curves. Beyond a curve's ends
    ``interpolate`` holds its end value, which is no measurement: ``outside`` says where."""
    prompt_tokens, output_tokens = controls.prompt_tokens, controls.output_tokens
    positive_int(prompt_tokens, "prompt_tokens")
    positive_int(output_tokens, "output_tokens")
    ttft_s = latency.interpolate(ttft_curve, prompt_tokens)
    e2e_s = latency.predict_e2e(ttft_curve, tpot_curve, prompt_tokens, output_tokens)
    outside = []
    shortest, longest = min(ttft_curve), max(ttft_curve)
    if not shortest <= prompt_tokens <= longest:
        held = shortest if prompt_tokens < shortest else longest
        outside.append(f"TTFT held at its value for {held:,} prompt tokens (measured "
                       f"{shortest:,}–{longest:,})")
    last_context = prompt_tokens + output_tokens - 2  # the last decode step's cache
    if output_tokens > 1 and not (min(tpot_curve) <= prompt_tokens
                                  and last_context <= max(tpot_curve)):
        outside.append(f"TPOT held at its end values past contexts {min(tpot_curve):,}–"
                       f"{max(tpot_curve):,} (this request's steps see {prompt_tokens:,}–"
                       f"{last_context:,})")
    return LatencyBreakdown(prompt_tokens, output_tokens, ttft_s, e2e_s - ttft_s,
                            "; ".join(outside))  # fmt: skip


def draw_latency_breakdown(ax, breakdown: LatencyBreakdown) -> None:
    """One horizontal stacked bar, prefill then decode, labelled in ms."""
    left = 0.0
    for label, seconds in breakdown.segments().items():
        ax.barh([0], [seconds * 1e3], left=[left * 1e3], color=COLORS[label], label=label)
        if seconds > 0:
            ax.text((left + seconds / 2) * 1e3, 0, f"{seconds * 1e3:,.0f} ms", ha="center",
                    va="center", fontsize=9, color="white")  # fmt: skip
        left += seconds
    ax.set_yticks([])
    ax.set_xlabel("milliseconds since the request arrived")
    ax.set_title(breakdown.summary(), fontsize=9)
    ax.legend(loc="upper right", fontsize=8)


def plot_latency_breakdown(breakdown: LatencyBreakdown) -> None:
    """Draw ``breakdown`` in a new figure and show it (``helpers.widgets.figures``)."""
    fig, ax = new_figure((8, 1.8))
    draw_latency_breakdown(ax, breakdown)
    show_figure(fig)


def show_latency_breakdown(
    ttft_curve: Mapping[int, float], tpot_curve: Mapping[int, float], **controls
) -> None:
    """The ``interact`` callback (``LatencyControls``' knobs): the breakdown of
    ``latency_breakdown`` in a new figure. It returns nothing: ``interact`` would print a
    returned value's repr under the figure."""
    plot_latency_breakdown(latency_breakdown(ttft_curve, tpot_curve,
                                             LatencyControls(**controls)))  # fmt: skip
