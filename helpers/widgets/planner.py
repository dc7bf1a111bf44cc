"""The serving planner of chapter 9 (`09_capstone`): a deployment in, a configuration out.

Model, chip, dtype, SLOs, load, and (chapter 10) chips per engine and the KV cache's dtype
in; the recommended configuration (batch cap, prefill chunk
budget, colocated or disaggregated) out, with its predicted TTFT, TPOT, throughput and memory
use. No search lives here: ``helpers.serving.plan_report`` searches (``plan_serving``) and
predicts (``config_report``); this module only builds the scenario from ``PlannerControls``
(the sliders' knobs and their defaults, declared once), keeps the library's record
(``serving.PlanReport``) in the view, prints the table and draws the bars (``draw_planner``
on any Axes; ``show_planner``, the sliders' callback). It plans at
steady state, as the chapter does (``Scenario``'s default trace length, warm-up dropped), on
a short goodput ladder; a search takes seconds, and ``plan_serving`` caches every one.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers import serving
from helpers.serving import Plan, PlanReport, Scenario, ServingConfig
from helpers.widgets.figures import new_figure, show_figure

__all__ = ["PLANNER_LOADS", "PlannerControls", "PlannerView", "planner_view", "draw_planner",
           "show_planner"]  # fmt: skip

PLANNER_LOADS = (1.0, 1.5, 2.0)  # goodput ladder, in multiples of the load


def _engines(s: Scenario) -> str:
    """The deployment in words: "2 x H100 SXM", or "2 engines of 2 x H100 SXM (TP=2)"."""
    if s.tp == 1:
        return f"{s.chips} x {s.chip}"
    return f"{s.chips} engines of {s.tp} x {s.chip} (TP={s.tp})"


@dataclass(frozen=True)
class PlannerControls:
    """The explorer's knobs and their defaults: the deployment (model, chip, the weights'
    dtype, chips per engine ``tp``, the KV cache's dtype), the SLOs in ms and the load. The
    cache's dtype is named, not implied: a cache in the weights' dtype is the default
    deployment (``Scenario`` stores it as None), and the dropdown shows the dtype used. The
    defaults are ``Scenario``'s, read from it (the SLOs converted to ms for the sliders)."""

    model: str = Scenario.model
    chip: str = Scenario.chip
    dtype: str = Scenario.dtype
    ttft_ms: float = Scenario.ttft_slo * 1e3
    tpot_ms: float = Scenario.tpot_slo * 1e3
    rate: float = Scenario.rate
    prompt_mean: int = int(Scenario.prompt_mean)
    output_mean: int = int(Scenario.output_mean)
    tp: int = Scenario.tp
    kv_dtype: str = Scenario.dtype  # the default deployment's cache: in the weights' dtype

    def scenario(self) -> Scenario:
        """The ``serving.Scenario`` these knobs describe (SLOs in seconds)."""
        return Scenario(self.model, self.chip, self.dtype, float(self.rate), self.prompt_mean,
                        self.output_mean, self.ttft_ms / 1e3, self.tpot_ms / 1e3, tp=self.tp,
                        kv_dtype=self.kv_dtype)  # fmt: skip


@dataclass(frozen=True)
class PlannerView:
    """The library's record of the scenario planned (``serving.plan_report``: the search's
    ``Plan``, with the chosen configuration, its goodput and every candidate's attainment,
    and the choice's report at the load; None when nothing meets the SLOs)."""

    planned: PlanReport

    @property
    def scenario(self) -> Scenario:
        return self.planned.scenario

    @property
    def plan(self) -> Plan:
        return self.planned.plan

    @property
    def report(self) -> dict[str, float] | None:
        return self.planned.report

    @property
    def best(self) -> ServingConfig | None:
        return self.plan.best

    @property
    def goodput(self) -> float:
        return self.plan.goodput

    @property
    def meeting(self) -> int:
        """Candidates that met the SLOs at the load."""
        return len(self.plan.goodputs)

    @property
    def tried(self) -> int:
        return len(self.plan.attainment)

    def table(self) -> str:
        s = self.scenario
        kv = "" if s.kv_dtype is None else f", KV cache {s.kv_dtype}"
        head = (f"{s.model} on {_engines(s)}, {s.dtype}{kv}; {s.rate:g} requests/s, prompts ~"
                f"{s.prompt_mean:g}, outputs ~{s.output_mean:g} tokens; SLO: TTFT <= "
                f"{s.ttft_slo * 1e3:g} ms and TPOT <= {s.tpot_slo * 1e3:g} ms for "
                f"{s.share:.0%}")  # fmt: skip
        if self.best is None or self.report is None:
            return (f"{head}\nno configuration of the {self.tried} tried meets the SLOs at this "
                    "load: lower the load, loosen an SLO, or use a bigger chip")  # fmt: skip
        r = self.report
        gib = 2**30
        return "\n".join([
            head,
            f"recommended: {self.best.label()} ({self.meeting} of {self.tried} candidates "
            "meet the SLOs)",
            f"  SLO attainment {r['attainment']:.1%} (standard error "
            f"{r['attainment_se']:.1%}); goodput {self.goodput:g} requests/s, "
            f"{self.plan.per_chip:g} per chip ({s.all_chips} chips)",
            f"  TTFT p90 {r['ttft_p90'] * 1e3:8.1f} ms",
            f"  TPOT p90 {r['tpot_p90'] * 1e3:8.2f} ms",
            f"  throughput {r['throughput']:,.0f} output tokens/s, peak batch {r['peak_batch']}",
            f"  memory per chip: weights {r['weight_bytes'] / gib:.1f} GiB + KV "
            f"{r['kv_bytes'] / gib:.1f} GiB (mean allocated) of "
            f"{r['memory_bytes'] / gib:.0f} GiB",
        ])  # fmt: skip


def planner_view(controls: PlannerControls = PlannerControls()) -> PlannerView:
    """Plan ``controls.scenario()`` at steady state on the ``PLANNER_LOADS`` ladder
    (``serving.plan_report``). ValueError for a model that does not fit ``tp`` chips in
    ``dtype``, a ``tp`` that does not split its heads, or a dtype the chip has no peak
    for."""
    return PlannerView(serving.plan_report(controls.scenario(), loads=PLANNER_LOADS))


def draw_planner(ax, view: PlannerView) -> None:
    """Each candidate's SLO attainment at the load as a bar (the view's plan), the
    recommended one coloured, the SLO share as a dashed line."""
    attainment = view.plan.attainment
    configs = list(attainment)
    colours = ["tab:blue" if c == view.best else "tab:gray" for c in configs]
    ax.barh([c.label() for c in configs], [attainment[c] for c in configs], color=colours)
    ax.axvline(view.scenario.share, color="tab:red", ls="--", label="SLO share")
    ax.invert_yaxis()
    s = view.scenario
    ax.set(xlim=(0, 1), xlabel="share of requests meeting both SLOs at this load",
           title=f"{s.model} on {_engines(s)}, {s.rate:g} requests/s")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=8, loc="lower right")


def show_planner(**controls) -> None:
    """The sliders' callback (``controls``: ``PlannerControls``' knobs): the table, and the
    candidates' attainment as bars. The figure is made outside pyplot
    (``helpers.widgets.figures``) and shown once; returns None, so ``interact`` prints no
    repr."""
    try:
        view = planner_view(PlannerControls(**controls))
    except (KeyError, ValueError) as error:  # a model that does not fit, a missing dtype
        print(error)
        return None
    print(view.table())
    fig, ax = new_figure((7.5, 0.28 * view.tried + 1.2))
    draw_planner(ax, view)
    fig.tight_layout()
    show_figure(fig)
    return None
