"""What a token costs: dollars per million input and output tokens (chapter 10).

A chip rented by the hour costs the same whether it prefills or decodes, so a token's price
is the hour's price over the tokens the chips turn out in that hour: chips · price / 3600
per second of serving, over tokens per second. The price is the caller's to give: rental
quotes for one chip model span several times over between providers and contracts
(``docs/sources.md``), so no figure here is a default. Every formula is linear in it, so
ratios such as output over input cost do not depend on it.

Input tokens are prefilled: many at once in one compute-bound pass. Output tokens are
decoded: one a sequence per memory-bound step. At the same chips and price an output token
therefore costs many input tokens, which is why providers list output tokens several times
dearer. Throughputs come from the roofline (``helpers.parallel.sharding``), so these are the
floor a real server, below the roofline, stays above.
"""

from __future__ import annotations

from helpers.counting._validate import positive_int
from helpers.counting.hardware import HardwareSpec
from helpers.counting.models import ModelConfig
from helpers.counting.roofline import first_batch
from helpers.parallel.sharding import Link, degrees, tp_max_sequences, tp_tpot, tp_ttft

__all__ = ["dollars_per_million", "token_costs", "cheapest_degree"]


def _price(price_per_chip_hour: float) -> float:
    if isinstance(price_per_chip_hour, bool) or not price_per_chip_hour > 0:
        raise ValueError(f"price_per_chip_hour must be positive, got {price_per_chip_hour!r}")
    return float(price_per_chip_hour)


def dollars_per_million(
    price_per_chip_hour: float, chips: int, tokens_per_second: float
) -> float:
    """Dollars per million tokens from ``chips`` chips at ``price_per_chip_hour`` turning out
    ``tokens_per_second`` together: chips · price / 3600 / tokens_per_second · 10⁶."""
    positive_int(chips, "chips")
    if not tokens_per_second > 0:
        raise ValueError(f"tokens_per_second must be positive, got {tokens_per_second!r}")
    return chips * _price(price_per_chip_hour) / 3600 / tokens_per_second * 1e6


def token_costs(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, ranks: int, price_per_chip_hour: float,
    *, batch: int, context: int, prompt_tokens: int, dtype: str = "bf16",
    kv_dtype: str | None = None,
) -> dict[str, float]:  # fmt: skip
    """Dollars per million input and output tokens on ``ranks`` chips in one tensor-parallel
    group. ``"input"``: prefilling one prompt of ``prompt_tokens`` at a time
    (``sharding.tp_ttft``), prompt tokens over its seconds; ``"output"``: decoding
    ``batch`` sequences at ``context`` cached tokens, B tokens a step
    (``sharding.tp_tpot``). ``"ratio"``: output over input."""
    prefill = tp_ttft(cfg, hw, net, ranks, prompt_tokens, dtype=dtype)
    step = tp_tpot(cfg, hw, net, ranks, context, batch, dtype, kv_dtype=kv_dtype)
    costs = {"input": dollars_per_million(price_per_chip_hour, ranks, prompt_tokens / prefill),
             "output": dollars_per_million(price_per_chip_hour, ranks, batch / step)}
    return costs | {"ratio": costs["output"] / costs["input"]}


def cheapest_degree(
    cfg: ModelConfig, hw: HardwareSpec, net: Link, context: int, tpot_slo: float,
    price_per_chip_hour: float, max_ranks: int = 8, dtype: str = "bf16", *,
    kv_dtype: str | None = None,
) -> dict | None:  # fmt: skip
    """The tensor-parallel degree and batch that decode at the least cost per output token
    with every sequence's TPOT within ``tpot_slo`` (chapter 10).

    For each T of ``sharding.degrees(cfg, max_ranks)``: the largest batch that both
    fits in the T chips' memory (``tp_max_sequences``, sequences of ``context`` tokens) and
    keeps ``tp_tpot`` at or below the SLO (TPOT grows with the batch); its cost is
    ``dollars_per_million(price, T, B / TPOT)``. Returns the cheapest as a dict ``ranks``,
    ``batch``, ``tpot`` (seconds) and ``dollars_per_million``, the smaller T on a tie, or
    None when no T meets the SLO with a sequence that fits."""
    positive_int(context, "context")
    if not tpot_slo > 0:
        raise ValueError(f"tpot_slo must be positive, got {tpot_slo!r}")
    _price(price_per_chip_hour)
    best = None
    for ranks in degrees(cfg, max_ranks):
        cap = tp_max_sequences(cfg, hw, ranks, context, dtype, kv_dtype=kv_dtype)

        def tpot(batch: int, ranks: int = ranks) -> float:
            return tp_tpot(cfg, hw, net, ranks, context, batch, dtype, kv_dtype=kv_dtype)

        if cap < 1 or tpot(1) > tpot_slo:
            continue
        over = first_batch(lambda batch: tpot(batch) > tpot_slo, cap)  # TPOT grows with B
        largest = cap if over is None else over - 1
        step = tpot(largest)
        price = dollars_per_million(price_per_chip_hour, ranks, largest / step)
        if best is None or price < best["dollars_per_million"]:
            best = {"ranks": ranks, "batch": largest, "tpot": step, "dollars_per_million": price}
    return best
