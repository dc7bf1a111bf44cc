"""The chapter 9 serving planner explorer: it plans with helpers.serving and only draws."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from helpers import serving  # noqa: E402
from helpers.widgets import planner  # noqa: E402


def test_view_is_the_reference_search_at_steady_state():
    view = planner.planner_view(planner.PlannerControls(tpot_ms=10.0, rate=40.0))
    scenario = serving.Scenario(rate=40.0)
    assert scenario.requests == serving.planner.STEADY_REQUESTS
    assert view.scenario == scenario
    plan = serving.plan_serving(scenario, loads=planner.PLANNER_LOADS)
    assert view.best == plan.best and view.goodput == plan.goodput
    assert view.report == serving.config_report(scenario, plan.best)
    assert (view.meeting, view.tried) == (len(plan.goodputs), len(serving.plan_candidates()))
    text = view.table()
    assert f"recommended: {plan.best.label()}" in text
    for what in ("TTFT p90", "TPOT p90", "throughput", "memory per chip"):
        assert what in text


def test_infeasible_and_invalid_inputs_are_said_not_raised(capsys):
    view = planner.planner_view(planner.PlannerControls(ttft_ms=0.1, rate=40.0))
    assert view.best is None and "no configuration" in view.table()
    assert planner.show_planner(chip="A100 80GB SXM", dtype="fp8") is None
    assert "fp8" in capsys.readouterr().out
    assert planner.show_planner(model="Llama-3.1-70B", chip="L4") is None
    assert "does not fit" in capsys.readouterr().out


def test_callback_draws_and_returns_none(capsys):
    plt.close("all")
    assert planner.show_planner(tpot_ms=15.0, rate=32.0, prompt_mean=512) is None
    assert "recommended" in capsys.readouterr().out
    assert not plt.get_fignums()  # drawn outside pyplot


def test_draw_planner_marks_the_recommended_candidate():
    view = planner.planner_view(planner.PlannerControls(rate=40.0))
    fig, ax = plt.subplots()
    planner.draw_planner(ax, view)
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels == [c.label() for c in serving.plan_candidates()]
    widths = [bar.get_width() for bar in ax.patches]
    plan = serving.plan_serving(view.scenario, loads=planner.PLANNER_LOADS)
    assert widths == [plan.attainment[c] for c in serving.plan_candidates()]
    for label, bar in zip(labels, ax.patches, strict=True):
        colour = "tab:blue" if label == view.best.label() else "tab:gray"
        assert bar.get_facecolor() == matplotlib.colors.to_rgba(colour), label
    plt.close(fig)
