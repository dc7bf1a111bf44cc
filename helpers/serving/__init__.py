"""Serving: one scheduler, a simulated engine and a real one (chapters 7-9).

The package follows the rooms of a serving system:

- ``trace``: requests and their arrivals (``Request``, ``poisson_trace``);
- ``kv``: KV cache memory (``KVMemory``: paged blocks as vLLM's PagedAttention, or a
  reservation per request as the systems before it), and the cost of moving a cache;
- ``scheduler``: the static, continuous and chunked policies, and the block manager that
  admits, grows, shares (prefix reuse) and preempts (by recompute) what each sequence holds;
- ``steps``: step-time models (the roofline, tables measured on a device), and wrappers that
  watch a run's steps (``WorstStall``, ``PhaseShare``);
- ``engine``: the simulated engine, the scheduler's steps on a virtual clock
  (``simulate``, ``simulate_disaggregated``), and one chip's roofline engine
  (``roofline_engine``: its step model and KV memory);
- ``metrics``: TTFT, TPOT, ITL, SLO attainment and goodput (``Result``);
- ``planner``: chapter 9's search over deployments;
- ``spec``: speculative decoding by rejection sampling;
- ``studies``: experiments the chapters report (the vLLM KV study and the paper beside it,
  a long prompt's stall, by hand on a linear step model too, a prefix cache's TTFT, a
  prompt's KV handoff);
- ``batching_studies``: chapter 7's scheduling experiments (static against continuous
  batching and their capacities, a static batch's padding, preemption);
- ``request_timing``: chapter 6's requests on the decoder (one alone, timed token by token;
  several on an engine that runs one pass at a time);
- ``optimisations``: chapter 8's experiments on chunked prefill, prefix caching and
  speculation at large batch, and ``disaggregation``: its pairs of chips at rising load
  (goodputs, the engines at one rate) and queueing, each one call returning a record
  (import their names from those modules);
- ``fidelity``: the simulator against the real engine (``--fidelity``);
- ``speed``: how fast the simulator runs (``python -m helpers.serving --speed``).

Metrics follow vLLM's benchmark: TTFT = first token − arrival; TPOT = (e2e − TTFT)/(n − 1)
for a request of n > 1 output tokens (NaN for n = 1); e2e = last token − arrival. Every
simulation is deterministic: the same trace gives the same result, and ``poisson_trace``
draws the same trace for the same seed. Every public name is importable from
``helpers.serving``.
"""

from helpers.serving.batching_studies import (
    PaddingCost,
    PolicyRun,
    PolicyStudy,
    PreemptionStudy,
    preemption_study,
    static_padding_cost,
    static_vs_continuous,
)
from helpers.serving.engine import roofline_engine, simulate, simulate_disaggregated
from helpers.serving.kv import KVMemory, kv_capacity_tokens, kv_transfer_seconds
from helpers.serving.metrics import Result, max_rate_under_slo
from helpers.serving.planner import (
    PLAN_BATCHES,
    PLAN_BUDGETS,
    PLAN_LOADS,
    SCENARIO_FAMILIES,
    BudgetSpent,
    Plan,
    PlanReport,
    Scenario,
    ServingConfig,
    SimulationBudget,
    config_goodput,
    config_report,
    draw_scenario,
    plan_candidates,
    plan_report,
    plan_serving,
    serve_config,
)
from helpers.serving.request_timing import (
    OneAtATime,
    OneRequest,
    one_request,
    serve_one_at_a_time,
)
from helpers.serving.scheduler import schedule_step
from helpers.serving.spec import (
    greedy_verify,
    random_draft_pair,
    spec_largest_batch,
    spec_monte_carlo,
    spec_tpot,
    verify_costs,
)
from helpers.serving.steps import (
    LinearSteps,
    PhaseShare,
    RooflineSteps,
    Step,
    TableSteps,
    WorstStall,
)
from helpers.serving.studies import (
    KVUsageComparison,
    chunked_prefill,
    kv_handoff_study,
    kv_usage_study,
    kv_usage_vs_paper,
    prefill_stall_study,
    prefix_cache_study,
)
from helpers.serving.trace import Request, check_trace, poisson_trace

__all__ = [
    "schedule_step",
    "Request",
    "poisson_trace",
    "check_trace",
    "Step",
    "RooflineSteps",
    "TableSteps",
    "LinearSteps",
    "WorstStall",
    "PhaseShare",
    "KVMemory",
    "kv_capacity_tokens",
    "kv_transfer_seconds",
    "Result",
    "simulate",
    "simulate_disaggregated",
    "roofline_engine",
    "prefill_stall_study",
    "chunked_prefill",
    "prefix_cache_study",
    "kv_handoff_study",
    "max_rate_under_slo",
    "kv_usage_study",
    "OneRequest",
    "one_request",
    "OneAtATime",
    "serve_one_at_a_time",
    "KVUsageComparison",
    "kv_usage_vs_paper",
    "PolicyRun",
    "PolicyStudy",
    "static_vs_continuous",
    "PaddingCost",
    "static_padding_cost",
    "PreemptionStudy",
    "preemption_study",
    "random_draft_pair",
    "spec_monte_carlo",
    "spec_tpot",
    "greedy_verify",
    "spec_largest_batch",
    "verify_costs",
    "Scenario",
    "ServingConfig",
    "SimulationBudget",
    "BudgetSpent",
    "PLAN_BATCHES",
    "PLAN_BUDGETS",
    "PLAN_LOADS",
    "plan_candidates",
    "serve_config",
    "config_goodput",
    "config_report",
    "Plan",
    "plan_serving",
    "PlanReport",
    "plan_report",
    "SCENARIO_FAMILIES",
    "draw_scenario",
]
